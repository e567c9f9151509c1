//! What the store does when Redis cannot answer in time.

use std::time::Duration;

use super::scripts::Ask;
use super::{ClientClock, RedisStore};
use crate::algorithm::{Decision, Origin};
use crate::clock::Clock;
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
    /// again, decisions go back to it and the local windows are dropped.
    Fallback,
}

/// The store's local time, for its fallback store and its deny cache: the
/// client clock if one was given, else the process's monotonic clock.
#[derive(Clone)]
pub(super) struct LocalClock(pub(super) Option<ClientClock>);

impl Clock for LocalClock {
    fn now(&self) -> Duration {
        Duration::from_micros(self.now_micros())
    }

    fn now_micros(&self) -> u64 {
        local_micros(self.0.as_ref())
    }
}

pub(super) fn local_micros(client_clock: Option<&ClientClock>) -> u64 {
    match client_clock {
        Some(clock) => clock(),
        None => crate::clock::SystemClock.now_micros(),
    }
}

impl RedisStore {
    /// The fallback store of this outage, and `policy`'s share bound to it.
    fn fallback(&self, policy: &Policy) -> (MemoryStore<LocalClock>, MemoryBinding<String>) {
        let fallback = self
            .instance
            .outage
            .fallback(|| MemoryStore::with_clock(LocalClock(self.clock.clone())));
        let share = policy.shared_by(self.live_instances());
        let binding = fallback.bind::<String>(&share);
        (fallback, binding)
    }

    /// Frees a slot a fallback store gave the key `name`: in the store and
    /// under the share that gave it, whatever the outage and the fleet's
    /// size since.
    pub(super) fn release_fallback(&self, name: String, admitted: &Decision) {
        let gave = self.instance.fallback_held.lock().remove(&admitted.lease);
        if let Some((fallback, binding)) = gave {
            fallback.release_bound(name, &binding, admitted);
        }
    }

    /// Answers for a failed or late call that asked `ask` of the key
    /// `name` under `policy`, by the failure policy. The fallback store
    /// judges the request at its cost, as Redis would have, against this
    /// instance's share of the limits; what it admits is not counted in
    /// Redis, and never settled.
    pub(super) fn on_failure(
        &self,
        name: String,
        policy: &Policy,
        err: StoreError,
        ask: Ask,
    ) -> Result<Decision, StoreError> {
        crate::observe::store_failed(&err, self.failure);
        self.instance
            .failed
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        match self.failure {
            FailurePolicy::FailOpen => {
                Ok(policy.stand_in(Decision::allow(policy.first_limit(), Duration::ZERO)))
            }
            FailurePolicy::FailClosed => Err(err),
            FailurePolicy::Fallback => {
                let (fallback, binding) = self.fallback(policy);
                let decision = match ask {
                    Ask::Record(cost) => fallback.decide_cost_bound_now(name, &binding, cost),
                    Ask::Free => fallback.decide_cost_bound_now(name, &binding, 0),
                    Ask::Peek | Ask::Settle { .. } => fallback.peek_bound_now(&name, &binding),
                };
                if decision.holds_slot() {
                    let gave = (fallback, binding);
                    self.instance
                        .fallback_held
                        .lock()
                        .insert(decision.lease, gave);
                }
                // A request costing more than the share stays too costly.
                Ok(match decision.origin {
                    Origin::TooCostly => decision,
                    _ => decision.with_origin(Origin::Fallback),
                })
            }
        }
    }
}
