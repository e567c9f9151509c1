//! What the store does when Redis cannot answer in time.

use std::time::Duration;

use super::scripts::Ask;
use super::{ClientClock, RedisStore};
use crate::algorithm::{Decision, Origin};
use crate::clock::Clock;
use crate::policy::Policy;
use crate::store::StoreError;

/// The rule a [`RedisStore`](super::RedisStore) applies when a call fails or
/// exceeds its timeout. Whatever the rule, an HTTP layer never returns an
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
    /// Judge the request with a local [`MemoryStore`](crate::MemoryStore), so
    /// each instance still enforces the limit on its own share of traffic
    /// until the server is back.
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
    /// Answers for a failed or late call that asked `ask` of the key
    /// `name` under `policy`, by the failure policy. The fallback store
    /// judges the request at its cost, as Redis would have; what it admits
    /// is not counted in Redis, and never settled.
    pub(super) fn on_failure(
        &self,
        name: String,
        policy: &Policy,
        err: StoreError,
        ask: Ask,
    ) -> Result<Decision, StoreError> {
        crate::observe::store_failed(&err, self.failure);
        match self.failure {
            FailurePolicy::FailOpen => Ok(Decision::allow(policy.limits()[0], Duration::ZERO)),
            FailurePolicy::FailClosed => Err(err),
            FailurePolicy::Fallback => {
                let binding = self.fallback.bind::<String>(policy);
                let decision = match ask {
                    Ask::Record(cost) => self.fallback.decide_cost_bound_now(name, &binding, cost),
                    Ask::Peek | Ask::Settle { .. } => self.fallback.peek_bound_now(&name, &binding),
                };
                Ok(decision.with_origin(Origin::Fallback))
            }
        }
    }
}
