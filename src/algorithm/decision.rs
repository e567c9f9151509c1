//! What a store answers for one request.

use std::time::Duration;

use crate::clock::micros;
use crate::limit::Limit;

/// The verdict on one request, with what a client needs to know about it.
///
/// The layer turns it into the response's status and rate-limit headers and
/// puts a copy in the request's extensions, where handlers can read it.
#[derive(Clone, Copy)]
pub struct Decision {
    pub(crate) allowed: bool,
    pub(crate) limit_index: u16,
    pub(crate) limit: Limit,
    pub(crate) quota: Quota,
    pub(crate) retry_after_micros: u64,
    pub(crate) at_micros: u64,
    pub(crate) origin: Origin,
    /// Judged by a layer in shadow mode, which lets every request through.
    pub(crate) shadow: bool,
    /// The in-flight slot the request holds until it ends; 0 for none.
    pub(crate) lease: u64,
    /// The chunk of local quota it was admitted from, by the number the
    /// Redis store gave that chunk for its key; 0 for none.
    #[cfg_attr(not(feature = "redis"), allow(dead_code))]
    pub(crate) chunk: u16,
}

/// The `limit_index` of a decision no limit made: an in-flight refusal, or
/// an admission under a policy that only caps requests in flight.
const NO_LIMIT: u16 = u16::MAX;

/// A request's settling: it was judged at `at` (the store's time its
/// decision gives) and counted for `cost` units, and its response says it
/// used `used`; `now` is the store's time of settling.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Settlement {
    pub(crate) at: u64,
    pub(crate) now: u64,
    pub(crate) cost: u32,
    pub(crate) used: u32,
}

/// The deciding limit's remaining quota and time until it grows: known, or
/// kept as the counts it follows from and worked out only when asked.
///
/// Most accepted requests never have these read (headers off, or a caller
/// that only asks whether it passed), and for the counters they cost a
/// division or two: so the
/// stores hand over the inputs and [`Decision`]'s accessors do the arithmetic.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Quota {
    Known {
        remaining: u32,
        replenish_micros: u64,
    },
    /// A sliding counter's counts once the request is counted, `elapsed`
    /// microseconds into the current fixed window.
    Sliding {
        previous: u32,
        current: u32,
        elapsed: u64,
    },
    /// A fixed window's count once the request is counted.
    Fixed { count: u32 },
    /// How far a token bucket's arrival time lies ahead of the decision,
    /// once the request is taken: `micros` and `rem` `max`-ths of one.
    Bucket { micros: u64, rem: u32 },
}

impl Quota {
    /// Remaining quota and time until it grows, under `limit`, at `at`.
    pub(crate) fn resolve(self, limit: &Limit, at: u64) -> (u32, u64) {
        match self {
            Self::Known {
                remaining,
                replenish_micros,
            } => (remaining, replenish_micros),
            Self::Sliding {
                previous,
                current,
                elapsed,
            } => super::counter::quota(previous, current, elapsed, limit),
            Self::Fixed { count } => super::fixed::quota(count, at, limit),
            Self::Bucket { micros, rem } => super::bucket::quota(micros, rem, limit),
        }
    }
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
    /// The key was refused earlier and is serving the policy's penalty.
    Penalty,
    /// The request costs more units than a limit's `max`: no wait would
    /// let it pass, so the refusal names no time to retry at.
    TooCostly,
    /// The key already has as many requests in flight as the policy's
    /// [cap](crate::Policy::with_in_flight) allows. No store knows when one
    /// ends, so the refusal names a short, fixed time to retry at.
    InFlight,
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
            quota: Quota::Known {
                remaining: if allowed { limit.max() } else { 0 },
                replenish_micros: retry_after_micros,
            },
            retry_after_micros,
            at_micros,
            origin,
            shadow: false,
            lease: 0,
            chunk: 0,
        }
    }

    /// The refusal of a request whose key has as many requests in flight as
    /// its policy's cap, at `at_micros`; `limit` stands in for the cap.
    pub(crate) fn in_flight_full(limit: Limit, at_micros: u64) -> Self {
        let retry = micros(super::leases::RETRY_AFTER);
        let mut refusal = Self::substitute(false, limit, retry, at_micros, Origin::InFlight);
        refusal.limit_index = NO_LIMIT;
        refusal
    }

    /// The admission of a request under a policy that only caps requests
    /// in flight, at `at_micros`, leaving `free` slots; `limit` stands in
    /// for the cap.
    pub(crate) fn slot_only(limit: Limit, free: u32, at_micros: u64) -> Self {
        let mut admission = Self::substitute(true, limit, 0, at_micros, Origin::Limits);
        admission.limit_index = NO_LIMIT;
        admission.quota = Quota::Known {
            remaining: free,
            replenish_micros: 0,
        };
        admission
    }

    /// The same decision, naming no limit: a stand-in (a failure
    /// policy's, a full store's) under a policy that only caps requests in
    /// flight.
    pub(crate) fn naming_no_limit(mut self) -> Self {
        self.limit_index = NO_LIMIT;
        self
    }

    /// The same decision, holding the in-flight slot `lease`.
    pub(crate) fn holding(mut self, lease: u64) -> Self {
        self.lease = lease;
        self
    }

    /// Whether the request holds an in-flight slot, to be released when
    /// it ends ([`Store::release_bound`](crate::Store::release_bound)).
    pub fn holds_slot(&self) -> bool {
        self.lease != 0
    }

    /// The refusal of a request of `cost` units, more than one of `limits`
    /// holds (the first such), at `at_micros`.
    pub(crate) fn too_costly(limits: &[Limit], cost: u32, at_micros: u64) -> Self {
        let index = limits
            .iter()
            .position(|limit| cost > limit.max())
            .unwrap_or(0);
        let mut refusal = Self::substitute(false, limits[index], 0, at_micros, Origin::TooCostly);
        refusal.limit_index = index as u16;
        refusal
    }

    /// This judgement of a request of no cost, which records nothing and
    /// always passes: by the limits' own rule, so that it can be settled.
    pub(crate) fn costing_nothing(mut self) -> Self {
        self.allowed = true;
        self.retry_after_micros = 0;
        self.origin = Origin::Limits;
        self
    }

    /// A refusal during a penalty that ends `wait` µs after `at_micros`.
    pub(crate) fn in_penalty(limit: Limit, wait: u64, at_micros: u64) -> Self {
        Self::substitute(false, limit, wait, at_micros, Origin::Penalty)
    }

    /// This refusal, which starts a penalty of `penalty` µs: the client
    /// must wait all of it.
    pub(crate) fn starting_penalty(mut self, penalty: u64) -> Self {
        self.retry_after_micros = penalty;
        self.quota = Quota::Known {
            remaining: 0,
            replenish_micros: penalty,
        };
        self
    }

    /// This refusal `elapsed` µs later, while it still stands: the same
    /// deciding limit, with that much less to wait.
    #[cfg(feature = "redis")]
    pub(crate) fn refusal_later(mut self, elapsed: u64) -> Self {
        let wait = self.retry_after_micros.saturating_sub(elapsed);
        self.retry_after_micros = wait;
        self.at_micros = self.at_micros.saturating_add(elapsed);
        self.quota = Quota::Known {
            remaining: 0,
            replenish_micros: wait,
        };
        self
    }

    /// Whether this is a refusal that waiting out its
    /// [`retry_after`](Decision::retry_after) can turn into an admission:
    /// not one for a cost above a limit's `max`, nor one by a store too
    /// full to track a new key, which would come back the same.
    /// A refusal for requests in flight is waited on: a slot may free.
    pub fn wait_helps(&self) -> bool {
        !self.allowed && !matches!(self.origin, Origin::TooCostly | Origin::StoreFull)
    }

    /// Whether settling the request this decision let through for `cost`
    /// units at `used` changes anything: the limits counted it (not a
    /// failure policy, nor a refusal, nor a policy with no limit to count
    /// in) and it used another amount. A store
    /// answers any other settling with the decision as it is, unread.
    pub fn needs_settling(&self, cost: u32, used: u32) -> bool {
        self.allowed
            && self.origin == Origin::Limits
            && cost != used
            && self.limit_index != NO_LIMIT
    }

    /// This acceptance of a request of `cost` units, settled at `used`:
    /// the deciding limit's quota as the settling leaves it.
    pub(crate) fn settled(mut self, cost: u32, used: u32) -> Self {
        let max = self.limit.max();
        let remaining = if used < cost {
            self.remaining().saturating_add(cost - used).min(max)
        } else {
            self.remaining().saturating_sub(used - cost)
        };
        // A charge past a full quota has no known time to grow by one yet:
        // at the latest, once a window has passed.
        let replenish_micros = match self.replenish_micros() {
            _ if remaining == max => 0,
            0 => self.limit.window_micros(),
            known => known,
        };
        self.quota = Quota::Known {
            remaining,
            replenish_micros,
        };
        self
    }

    pub(crate) fn replenish_micros(&self) -> u64 {
        self.quota.resolve(&self.limit, self.at_micros).1
    }

    /// An acceptance reporting `limit` with all its quota left, at the
    /// store's time `at`, that stands in for the limits: of
    /// [`Origin::FailOpen`] (another with [`with_origin`](Decision::with_origin)),
    /// so that it is never settled against a key's counts.
    pub fn allow(limit: Limit, at: Duration) -> Self {
        Self::substitute(true, limit, 0, micros(at), Origin::FailOpen)
    }

    /// A refusal by `limit`, at the store's time `at`, to be retried
    /// after `retry_after`: what a store answers when it refuses for a
    /// reason of its own, such as no room for a new key (say so with
    /// [`with_origin`](Decision::with_origin)).
    pub fn refuse(limit: Limit, retry_after: Duration, at: Duration) -> Self {
        let retry_after = micros(retry_after);
        Self::substitute(false, limit, retry_after, micros(at), Origin::Limits)
    }

    /// The same verdict, from `origin`: a fallback store's decision is
    /// reported as [`Origin::Fallback`], a fail-open admission as
    /// [`Origin::FailOpen`]. Only a decision of [`Origin::Limits`] is
    /// ever settled.
    pub fn with_origin(mut self, origin: Origin) -> Self {
        self.origin = origin;
        self
    }

    /// Whether the request may go on to the inner service.
    pub fn is_allowed(&self) -> bool {
        self.allowed
    }

    /// The limit that decided: the one that refused with the longest wait, or,
    /// when accepted, the one with the least quota left. `None` when no
    /// limit decided: a refusal for requests in flight
    /// ([`Origin::InFlight`]), or any decision under a policy that only
    /// caps them ([`Policy::in_flight_only`](crate::Policy::in_flight_only)).
    pub fn limit(&self) -> Option<Limit> {
        (self.limit_index != NO_LIMIT).then_some(self.limit)
    }

    /// What events and messages call the deciding limit: its window, or
    /// `in-flight` for the cap.
    #[cfg(feature = "tracing")]
    pub(crate) fn limit_name(&self) -> String {
        match self.limit() {
            Some(limit) => limit.window_name(),
            None => "in-flight".to_owned(),
        }
    }

    /// The position of [`limit`](Decision::limit) in the policy's list;
    /// `None` when no limit decided.
    pub fn limit_index(&self) -> Option<usize> {
        (self.limit_index != NO_LIMIT).then_some(usize::from(self.limit_index))
    }

    /// Units (requests, unless the layer has a
    /// [`cost`](crate::SlidingWindowLayer::cost)) the deciding limit would
    /// still accept right now, after this request.
    pub fn remaining(&self) -> u32 {
        self.quota.resolve(&self.limit, self.at_micros).0
    }

    /// How long until this request (all its units) would be accepted; zero
    /// when it was, and when no wait would do ([`Origin::TooCostly`]).
    pub fn retry_after(&self) -> Duration {
        Duration::from_micros(self.retry_after_micros)
    }

    /// How long until the deciding limit has at least one more request of
    /// quota than [`remaining`](Decision::remaining); zero when it is already
    /// full.
    pub fn replenish_after(&self) -> Duration {
        Duration::from_micros(self.replenish_micros())
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

    /// Whether a layer in shadow mode judged the request: it was let
    /// through whatever the verdict, so a decision that is not
    /// [allowed](Decision::is_allowed) is one enforcement would have refused.
    pub fn is_shadow(&self) -> bool {
        self.shadow
    }
}

/// Decisions are equal when everything they tell is, however their quota
/// is held.
impl PartialEq for Decision {
    fn eq(&self, other: &Self) -> bool {
        self.allowed == other.allowed
            && self.limit_index == other.limit_index
            && self.limit == other.limit
            && self.retry_after_micros == other.retry_after_micros
            && self.at_micros == other.at_micros
            && self.origin == other.origin
            && self.shadow == other.shadow
            && self.quota.resolve(&self.limit, self.at_micros)
                == other.quota.resolve(&other.limit, other.at_micros)
    }
}

impl Eq for Decision {}

impl std::fmt::Debug for Decision {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (remaining, replenish_micros) = self.quota.resolve(&self.limit, self.at_micros);
        f.debug_struct("Decision")
            .field("allowed", &self.allowed)
            .field("limit_index", &self.limit_index)
            .field("limit", &self.limit)
            .field("remaining", &remaining)
            .field("retry_after_micros", &self.retry_after_micros)
            .field("replenish_micros", &replenish_micros)
            .field("at_micros", &self.at_micros)
            .field("origin", &self.origin)
            .field("shadow", &self.shadow)
            .finish()
    }
}
