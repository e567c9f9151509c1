//! The state layouts the memory store keeps keys in, and the table that
//! chooses one from what a policy's tenants share: its algorithm, its
//! number of limits, whether a penalty is kept beside the state and
//! whether its counts fit 16 bits. The table also writes the dispatch.
//!
//! A store keeps one map per layout and key type, made the first time a
//! policy needs it, so the number of maps is bounded whatever the number
//! of policies; an entry holds its key, its policy and its state. The
//! table keeps the layouts that earn their place in the store bench: the
//! counter and fixed window of one or two limits packed into eight bytes
//! a limit (or, for counts too wide to pack, the counter's slots inline),
//! the token bucket's one or two arrival times inline, and the log with
//! its few newest stamps beside the key; every other policy takes the
//! algorithm's own state.

use std::hash::Hash;
use std::sync::Arc;

use super::buckets::Buckets;
use super::cap::KeyCap;
use super::compact_log::CompactLog;
use super::packed::{CounterSlot, FixedSlot, Packed, PackedSlot, WideCounter};
use super::penalty::Penalized;
use super::shards::Shards;
use crate::algorithm::{
    Algorithm, Decision, FixedWindow, One, Settlement, SlidingCounter, TokenBucket, Units,
};
use crate::policy::Policy;

/// One key's state under one policy, as a shard keeps it. The policy is
/// passed to every call, so that one map serves every policy its layout
/// fits.
pub(super) trait EntryState: Clone + Default + Send + Sync + 'static {
    /// Whether the state is read against its shard's anchor (see
    /// [`packed`](super::packed)).
    const ANCHORED: bool = false;

    /// Moves the state from anchor `from` to anchor `to`; false if it
    /// cannot be kept there.
    fn rebase(&mut self, _from: u64, _to: u64, _policy: &Policy) -> bool {
        true
    }

    /// Judges and records a request of `cost` units (from 1 to every
    /// limit's `max`) at `now` (µs), within the reach of `anchor`.
    fn decide(&mut self, now: u64, cost: impl Units, policy: &Policy, anchor: u64) -> Decision;

    /// Settles a request the state counted.
    fn settle(&mut self, settled: &Settlement, policy: &Policy, anchor: u64);

    /// From when (µs) the state judges as a fresh one would.
    fn idle_from(&self, policy: &Policy, anchor: u64) -> u64;

    /// Gives back memory the state no longer needs, at a shard's sweep.
    fn shed(&mut self, _policy: &Policy) {}
}

/// The algorithms' own states, their windows whole: for the policies no
/// packed layout serves.
macro_rules! whole_state {
    ($($state:ty),*) => {$(
        impl EntryState for $state {
            fn decide(&mut self, now: u64, cost: impl Units, policy: &Policy, _: u64) -> Decision {
                self.decide_micros(now, policy.limits(), cost)
            }

            fn settle(&mut self, settled: &Settlement, policy: &Policy, _: u64) {
                self.settle_micros(settled, policy.limits());
            }

            fn idle_from(&self, policy: &Policy, _: u64) -> u64 {
                self.idle_from_micros(policy.limits())
            }
        }
    )*};
}

whole_state!(SlidingCounter, FixedWindow, TokenBucket);

impl EntryState for CompactLog {
    fn decide(&mut self, now: u64, cost: impl Units, policy: &Policy, _: u64) -> Decision {
        // A stamp outside the policy's longest window is never read again.
        self.decide_micros(
            now,
            policy.limits(),
            policy.log_capacity(),
            policy.longest_window_micros(),
            cost,
        )
    }

    fn settle(&mut self, settled: &Settlement, policy: &Policy, _: u64) {
        let (capacity, longest) = (policy.log_capacity(), policy.longest_window_micros());
        self.settle(settled, capacity, longest);
    }

    fn idle_from(&self, policy: &Policy, _: u64) -> u64 {
        self.idle_from_micros(policy.longest_window_micros())
    }

    fn shed(&mut self, policy: &Policy) {
        self.shed(policy.longest_window_micros());
    }
}

/// Writes [`Layout`], an enum with one variant per `Variant(State)` row,
/// its choice (the first row whose condition holds, else the `_` row), and
/// `each!`, the dispatch over it.
macro_rules! layouts {
    (
        |$policy:ident|
        $( $variant:ident($state:ty) if $when:expr, )*
        _ => $last:ident($last_state:ty) $(,)?
    ) => {
        /// The keys of one layout in a store, under every policy the
        /// layout serves.
        pub(super) enum Layout<K> {
            $( $variant(Arc<Shards<K, $state>>), )*
            $last(Arc<Shards<K, $last_state>>),
        }

        impl<K> Clone for Layout<K> {
            fn clone(&self) -> Self {
                match self {
                    $( Self::$variant(map) => Self::$variant(Arc::clone(map)), )*
                    Self::$last(map) => Self::$last(Arc::clone(map)),
                }
            }
        }

        /// Runs `$body` with `$map` bound to the layout's map, whichever it is.
        macro_rules! each {
            ($layout:expr, |$map:ident| $body:expr) => {
                match $layout {
                    $( Layout::$variant($map) => $body, )*
                    Layout::$last($map) => $body,
                }
            };
        }

        impl<K: Hash + Eq + Send + Sync + 'static> Layout<K> {
            /// How many layouts there are.
            pub(super) const COUNT: usize = [$(stringify!($variant),)* stringify!($last)].len();

            /// The layout serving `policy`, as an index below [`COUNT`](Self::COUNT).
            pub(super) fn index_of($policy: &Policy) -> usize {
                let mut index = 0;
                $(
                    if $when {
                        return index;
                    }
                    index += 1;
                )*
                index
            }

            /// An empty map of the layout at `index`, under the store's cap.
            pub(super) fn new(index: usize, cap: &Arc<KeyCap>) -> Self {
                let mut at = 0;
                $(
                    if index == at {
                        return Self::$variant(Arc::new(Shards::new(Arc::clone(cap))));
                    }
                    at += 1;
                )*
                debug_assert_eq!(index, at);
                Self::$last(Arc::new(Shards::new(Arc::clone(cap))))
            }
        }
    };
}

layouts! {
    |policy|
    // A penalty's end beside the algorithm's state; rare enough for one
    // layout per algorithm.
    PenalizedCounter(Penalized<SlidingCounter>) if has_penalty(policy, Algorithm::SlidingCounter),
    PenalizedFixed(Penalized<FixedWindow>) if has_penalty(policy, Algorithm::FixedWindow),
    PenalizedLog(Penalized<CompactLog>) if has_penalty(policy, Algorithm::SlidingLog),
    PenalizedBucket(Penalized<TokenBucket>) if has_penalty(policy, Algorithm::TokenBucket),
    Counter1(Packed<CounterSlot, 1>) if is(policy, Algorithm::SlidingCounter, 1) && CounterSlot::fits(policy),
    Counter2(Packed<CounterSlot, 2>) if is(policy, Algorithm::SlidingCounter, 2) && CounterSlot::fits(policy),
    WideCounter1(WideCounter<1>) if is(policy, Algorithm::SlidingCounter, 1),
    WideCounter2(WideCounter<2>) if is(policy, Algorithm::SlidingCounter, 2),
    Counter(SlidingCounter) if policy.algorithm() == Algorithm::SlidingCounter,
    Fixed1(Packed<FixedSlot, 1>) if is(policy, Algorithm::FixedWindow, 1),
    Fixed2(Packed<FixedSlot, 2>) if is(policy, Algorithm::FixedWindow, 2),
    Fixed(FixedWindow) if policy.algorithm() == Algorithm::FixedWindow,
    Bucket1(Buckets<1>) if is(policy, Algorithm::TokenBucket, 1),
    Bucket2(Buckets<2>) if is(policy, Algorithm::TokenBucket, 2),
    Bucket(TokenBucket) if policy.algorithm() == Algorithm::TokenBucket,
    _ => Log(CompactLog),
}

/// Whether `policy` is judged by `algorithm` over `limits` limits.
fn is(policy: &Policy, algorithm: Algorithm, limits: usize) -> bool {
    policy.algorithm() == algorithm && policy.limits().len() == limits
}

fn has_penalty(policy: &Policy, algorithm: Algorithm) -> bool {
    policy.penalty_micros() > 0 && policy.algorithm() == algorithm
}

impl<K: Hash + Eq + Send + Sync + 'static> Layout<K> {
    /// Judges and records a request of `cost` units for `key` under
    /// `policy`, at the time `clock` gives; a new key that finds the store
    /// full goes to `full` (see [`Shards::decide`]).
    #[inline]
    pub(super) fn decide(
        &self,
        key: K,
        policy: &Policy,
        clock: impl FnOnce() -> u64,
        cost: u32,
        full: impl FnOnce(K, u64) -> Decision,
    ) -> Decision {
        if cost == 1 {
            return self.decide_one(key, policy, clock, full);
        }
        each!(self, |map| if policy.judges_cost(cost) {
            map.decide(key, policy, clock, cost, full)
        } else {
            map.unjudged_cost(&key, policy, clock(), cost)
        })
    }

    /// Judges and records a request of one unit for `key` under `policy`,
    /// at the time `clock` gives.
    #[inline]
    pub(super) fn decide_one(
        &self,
        key: K,
        policy: &Policy,
        clock: impl FnOnce() -> u64,
        full: impl FnOnce(K, u64) -> Decision,
    ) -> Decision {
        each!(self, |map| map.decide(key, policy, clock, One, full))
    }

    /// The refusal of a new key that found the store full at `now`.
    pub(super) fn no_room(&self, policy: &Policy, now: u64) -> Decision {
        each!(self, |map| map.no_room(policy, now))
    }

    /// Settles a request for `key` that the map counted.
    pub(super) fn settle(&self, key: K, policy: &Policy, settled: &Settlement) {
        each!(self, |map| map.settle(key, policy, settled))
    }

    /// Judges a request for `key` at `now`, recording nothing.
    pub(super) fn peek(&self, key: &K, policy: &Policy, now: u64) -> Decision {
        each!(self, |map| map.peek(key, policy, now))
    }

    /// The keys held, live or not yet swept.
    pub(super) fn len(&self) -> usize {
        each!(self, |map| map.len())
    }

    /// Drops the keys idle at `now`.
    pub(super) fn sweep_all(&self, now: u64) {
        each!(self, |map| map.sweep_all(now))
    }
}
