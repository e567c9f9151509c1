//! The guard: what answers a request when Redis does not judge it. A
//! refusal Redis gave that still stands (the deny cache), and the failure
//! policy when a call fails or is too slow, with the windows `Fallback`
//! judges by during an outage.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use parking_lot::Mutex;

use super::client::ClientClock;
use super::deny_cache::DenyCache;
use super::scripts::Ask;
use crate::algorithm::{Decision, Origin};
use crate::clock::Clock;
use crate::observe::DenyCacheEvents;
use crate::policy::Policy;
use crate::store::{MemoryBinding, MemoryStore, Store, StoreError};

/// The rule a [`RedisStore`](super::RedisStore) applies when a call fails or
/// exceeds its timeout. A call that times out is answered alone; once
/// a node is found down (its connection refused or dropped, or silent to
/// every call for the longer of the timeout and the heartbeat), the rule
/// answers every call for that node at once, with no timeout to wait,
/// until the heartbeat's probe finds it again. Whatever the rule, an HTTP layer never returns an
/// error and never panics (under
/// [`refuse_with_error`](crate::SlidingWindowLayer::refuse_with_error),
/// `FailClosed` fails the call with the [`StoreError`]); the
/// [`Origin`](crate::Origin) of the decision says which rule answered.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum FailurePolicy {
    /// Let the request through unjudged (the industry default: the limiter
    /// never takes the service down with it). An attacker who can knock the
    /// store over is then unlimited — see SECURITY.md.
    #[default]
    FailOpen,
    /// Refuse the request with `503 Service Unavailable` (gRPC
    /// `UNAVAILABLE`), or in error mode fail it with the [`StoreError`].
    FailClosed,
    /// Judge the request with a local [`MemoryStore`](crate::MemoryStore),
    /// against every limit's `max` divided by the
    /// [live instances](super::RedisStore::live_instances) (rounded up, at
    /// least 1), so that a fleet whose traffic is spread evenly admits
    /// about one limit in all until Redis is back. A request costing more
    /// than a divided `max` is refused as too costly. When Redis answers
    /// again, decisions go back to it, and the local windows are dropped.
    Fallback,
}

/// The store's local time, for its fallback store and its deny cache: the
/// client clock if one was given, else the process's monotonic clock.
#[derive(Clone)]
struct LocalClock(Option<ClientClock>);

impl Clock for LocalClock {
    fn now(&self) -> Duration {
        Duration::from_micros(self.now_micros())
    }

    fn now_micros(&self) -> u64 {
        match &self.0 {
            Some(clock) => clock(),
            None => crate::clock::SystemClock.now_micros(),
        }
    }
}

/// What answers for Redis in one store and its clones.
pub(super) struct Guard {
    failure: FailurePolicy,
    clock: LocalClock,
    /// Refusals still standing, by key name; `None` when turned off.
    denied: Option<DenyCache>,
    /// `Fallback`'s windows, for the outage they were made in (by how
    /// many had ended before): the calls that timed out before a node was
    /// known to be down were judged in them too.
    fallback: Mutex<Option<(u64, MemoryStore<LocalClock>)>>,
    /// The slots fallback windows gave, by lease id, with the windows and
    /// the share that gave each.
    fallback_held: Mutex<HashMap<u64, FallbackSlot>>,
    /// Whether `fallback` holds windows: read after every call Redis
    /// answers, to drop them once their outage is over.
    holds_fallback: AtomicBool,
    /// Requests answered by the failure policy since the last summary,
    /// and when the next summary is due.
    failed: AtomicU64,
    summary_turn: AtomicU64,
}

/// Where a fallback slot is to be released.
type FallbackSlot = (MemoryStore<LocalClock>, MemoryBinding<String>);

impl Guard {
    pub(super) fn new(
        failure: FailurePolicy,
        clock: Option<ClientClock>,
        deny_cache: usize,
        longest_refusal: u64,
    ) -> Self {
        Self {
            failure,
            clock: LocalClock(clock),
            denied: (deny_cache > 0).then(|| DenyCache::new(deny_cache, longest_refusal)),
            fallback: Mutex::default(),
            fallback_held: Mutex::default(),
            holds_fallback: AtomicBool::new(false),
            failed: AtomicU64::new(0),
            summary_turn: AtomicU64::new(0),
        }
    }

    /// Now on the store's local clock.
    pub(super) fn now(&self) -> u64 {
        self.clock.now_micros()
    }

    /// How many keys the deny cache holds.
    pub(super) fn denied_keys(&self) -> usize {
        self.denied.as_ref().map_or(0, DenyCache::len)
    }

    /// The refusal that still stands for `name`, asked at local time `sent`
    /// for `ask`, if the cache holds one. A request of no cost is never
    /// refused by the windows, so no remembered refusal answers it.
    pub(super) fn refusal(&self, name: &str, sent: u64, ask: Ask) -> Option<Decision> {
        let denied = self.denied.as_ref().filter(|_| ask != Ask::Free)?;
        denied.refusal(name, sent, ask.cost())
    }

    /// Forgets `name`'s refusal: a settling changed what it waits for.
    pub(super) fn forget(&self, name: &str) {
        if let Some(denied) = &self.denied {
            denied.forget(name);
        }
    }

    /// Remembers Redis's refusal of `name` under `policy`, asked
    /// for at local time `sent` for `ask`, in the form Redis would give it
    /// until it runs out.
    pub(super) fn remember(
        &self,
        name: String,
        decision: Decision,
        sent: u64,
        policy: &Policy,
        events: &DenyCacheEvents,
        ask: Ask,
    ) {
        let Some(denied) = &self.denied else { return };
        let penalised = decision.origin == Origin::Limits && policy.penalty_micros() > 0;
        let standing = match decision.origin {
            // Redis answers the rest of a penalty as a penalty's.
            Origin::Limits if penalised => {
                if !ask.records() {
                    // A peek is told the penalty a recorded refusal would
                    // start, but starts none in Redis: a request may pass
                    // before that wait is up.
                    return;
                }
                // It counts from the time asked: on a client clock, when
                // the call left, not the later time a clock that stepped
                // back was judged at.
                let asked = if self.clock.0.is_some() {
                    sent
                } else {
                    decision.at_micros
                };
                Decision::in_penalty(policy.first_limit(), decision.retry_after_micros, asked)
            }
            // A refusal of several units leaves room for fewer, sooner.
            Origin::Limits if ask.cost() > 1 => return,
            // A slot may free at any moment: no wait is known to stand.
            Origin::InFlight => return,
            _ => decision,
        };
        // A client clock is the one the script judged by, so the refusal
        // stands from the time Redis judged it at, a penalty from the time
        // asked; the server's clock can only be placed by when the call
        // left.
        let from = if self.clock.0.is_some() && !penalised {
            decision.at_micros
        } else {
            sent
        };
        crate::observe::denied(events, &standing);
        denied.remember(name, standing, from);
    }

    /// Answers for a failed or late call that asked `ask` of the key
    /// `name` under `policy`, by the failure policy, with `live` instances
    /// in the fleet, `outage` outages having ended. The fallback windows judge the request at its cost,
    /// as Redis would have, against this instance's share of the limits;
    /// what they admit is not counted in Redis, and never settled.
    pub(super) fn on_failure(
        &self,
        name: String,
        policy: &Policy,
        ask: Ask,
        err: StoreError,
        live: usize,
        outage: u64,
    ) -> Result<Decision, StoreError> {
        crate::observe::store_failed(&err, self.failure);
        self.failed.fetch_add(1, Ordering::Relaxed);
        crate::observe::failures_summed_up(&self.failed, &self.summary_turn);
        match self.failure {
            FailurePolicy::FailOpen => {
                Ok(policy.stand_in(Decision::allow(policy.first_limit(), Duration::ZERO)))
            }
            FailurePolicy::FailClosed => Err(err),
            FailurePolicy::Fallback => {
                let fallback = self.fallback(outage);
                let binding = fallback.bind::<String>(&policy.shared_by(live));
                let decision = match ask {
                    Ask::Record(cost) | Ask::Chunk { cost, .. } => {
                        fallback.decide_cost_bound_now(name, &binding, cost)
                    }
                    Ask::Free => fallback.decide_cost_bound_now(name, &binding, 0),
                    Ask::Peek | Ask::Settle { .. } => fallback.peek_bound_now(&name, &binding),
                };
                if decision.holds_slot() {
                    let gave = (fallback, binding);
                    self.fallback_held.lock().insert(decision.lease, gave);
                }
                // A request costing more than the share stays too costly.
                Ok(match decision.origin {
                    Origin::TooCostly => decision,
                    _ => decision.with_origin(Origin::Fallback),
                })
            }
        }
    }

    /// The fallback windows of the outage after `ended` had ended, made
    /// at its first use.
    fn fallback(&self, ended: u64) -> MemoryStore<LocalClock> {
        let mut fallback = self.fallback.lock();
        match &*fallback {
            Some((made_in, windows)) if *made_in >= ended => windows.clone(),
            _ => {
                let windows = MemoryStore::with_clock(self.clock.clone());
                *fallback = Some((ended, windows.clone()));
                self.holds_fallback.store(true, Ordering::Relaxed);
                windows
            }
        }
    }

    /// Drops the fallback windows of an outage over: `ended` have ended.
    pub(super) fn outage_ended(&self, ended: u64) {
        if self.failed.load(Ordering::Relaxed) > 0 {
            // Failures that stopped are summed up too, once a turn is due.
            crate::observe::failures_summed_up(&self.failed, &self.summary_turn);
        }
        if !self.holds_fallback.load(Ordering::Relaxed) {
            return;
        }
        let mut fallback = self.fallback.lock();
        if fallback
            .as_ref()
            .is_some_and(|(made_in, _)| *made_in < ended)
        {
            *fallback = None;
            self.holds_fallback.store(false, Ordering::Relaxed);
        }
    }

    /// Frees a slot fallback windows gave the key `name`: in the windows
    /// and under the share that gave it, whatever the outage and the
    /// fleet's size since.
    pub(super) fn release_fallback(&self, name: String, admitted: &Decision) {
        let gave = self.fallback_held.lock().remove(&admitted.lease);
        if let Some((fallback, binding)) = gave {
            fallback.release_bound(name, &binding, admitted);
        }
    }
}
