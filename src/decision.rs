//! What a store answers for one request.

use std::time::Duration;

use crate::limit::Limit;

/// The verdict on one request, with what a client needs to know about it.
///
/// The layer turns it into the response's status and rate-limit headers and
/// puts a copy in the request's extensions, where handlers can read it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Decision {
    pub(crate) allowed: bool,
    pub(crate) limit_index: u16,
    pub(crate) limit: Limit,
    pub(crate) remaining: u32,
    pub(crate) retry_after_micros: u64,
    pub(crate) replenish_micros: u64,
    pub(crate) at_micros: u64,
    pub(crate) origin: Origin,
}

/// Where a decision came from: the limits themselves, or a rule that stood
/// in for them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Origin {
    /// The policy's limits, judged by the store.
    #[default]
    Limits,
    /// The store was full of live keys and could not track a new one, so it
    /// refused the request (see [`MemoryStore`](crate::MemoryStore)).
    StoreFull,
    /// The store failed and its failure policy let the request through unjudged.
    FailOpen,
    /// The store failed and a local fallback store judged the request.
    Fallback,
}

impl Decision {
    /// A verdict that stands in for the limits, such as a fail-open admission.
    pub(crate) fn substitute(
        allowed: bool,
        limit: Limit,
        retry_after_micros: u64,
        at_micros: u64,
        origin: Origin,
    ) -> Self {
        Self {
            allowed,
            limit_index: 0,
            limit,
            remaining: if allowed { limit.max() } else { 0 },
            retry_after_micros,
            replenish_micros: retry_after_micros,
            at_micros,
            origin,
        }
    }

    /// Whether the request may go on to the inner service.
    pub fn is_allowed(&self) -> bool {
        self.allowed
    }

    /// The limit that decided: the one that refused with the longest wait, or,
    /// when accepted, the one with the least quota left.
    pub fn limit(&self) -> Limit {
        self.limit
    }

    /// The position of [`limit`](Decision::limit) in the policy's list.
    pub fn limit_index(&self) -> usize {
        usize::from(self.limit_index)
    }

    /// Requests the deciding limit would still accept right now, after this one.
    pub fn remaining(&self) -> u32 {
        self.remaining
    }

    /// How long until a request would be accepted; zero when this one was.
    pub fn retry_after(&self) -> Duration {
        Duration::from_micros(self.retry_after_micros)
    }

    /// How long until the deciding limit has at least one more request of
    /// quota than [`remaining`](Decision::remaining); zero when it is already
    /// full.
    pub fn replenish_after(&self) -> Duration {
        Duration::from_micros(self.replenish_micros)
    }

    /// The store's time the request was judged at, since its clock's zero:
    /// the clock's reading, or the newest time already recorded for the key
    /// if the clock stepped back. Zero when no store judged (fail-open).
    pub fn decided_at(&self) -> Duration {
        Duration::from_micros(self.at_micros)
    }

    /// Whether the limits decided, or a rule standing in for them.
    pub fn origin(&self) -> Origin {
        self.origin
    }
}
