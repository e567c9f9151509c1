//! The state layouts the memory store keeps keys in, chosen per policy in
//! one table that also writes the dispatch over them.
//!
//! Each policy's keys live in one map of one layout, so an entry holds a
//! key and its state and nothing else: no policy, no tag. The table keeps
//! the layouts that earn their place in the store bench: the counter and
//! fixed window of one or two limits packed into eight bytes a limit (or,
//! for counts too wide to pack, the counter's slots inline), and the log
//! with its few newest stamps beside the key; every other policy takes the
//! algorithm's own state.

use std::hash::Hash;
use std::sync::Arc;

use super::compact_log::{CompactLog, FEW_BESIDE_LARGER_KEYS, FEW_BESIDE_SMALL_KEYS};
use super::packed::{CounterSlot, FixedSlot, Packed, PackedSlot, WideCounter};
use super::penalty::Penalized;
use super::shards::Shards;
use super::window_base::WindowBase;
use crate::algorithm::{log, Algorithm, Decision, FixedWindow, Settlement, SlidingCounter};
use crate::algorithm::{One, Units};
use crate::limit::Limit;
use crate::policy::Policy;

/// What a layout needs to know of the policy its map serves.
#[derive(Clone, Debug)]
pub(super) struct Shape {
    algorithm: Algorithm,
    limits: Box<[Limit]>,
    largest_max: u32,
    smallest_max: u32,
    penalty_micros: u64,
    /// The most stamps a log keeps for one key.
    log_capacity: u32,
    longest_window_micros: u64,
}

impl Shape {
    pub(super) fn of(policy: &Policy) -> Self {
        Self {
            algorithm: policy.algorithm(),
            limits: policy.limits().into(),
            largest_max: policy.largest_max(),
            smallest_max: policy.limits().iter().map(Limit::max).min().unwrap_or(1),
            penalty_micros: policy.penalty_micros(),
            log_capacity: log::capacity_for(policy.limits()),
            longest_window_micros: policy.longest_window_micros(),
        }
    }

    pub(super) fn limits(&self) -> &[Limit] {
        &self.limits
    }

    pub(super) fn largest_max(&self) -> u32 {
        self.largest_max
    }

    /// Whether a request of `cost` units is one the states judge: from 1
    /// to every limit's `max`.
    pub(super) fn judges_cost(&self, cost: u32) -> bool {
        cost.wrapping_sub(1) < self.smallest_max
    }

    /// How long a refusal shuts a key out, µs; 0 for no penalty.
    pub(super) fn penalty_micros(&self) -> u64 {
        self.penalty_micros
    }

    pub(super) fn log_capacity(&self) -> u32 {
        self.log_capacity
    }

    pub(super) fn longest_window_micros(&self) -> u64 {
        self.longest_window_micros
    }

    /// Whether the policy is judged by `algorithm` over `limits` limits.
    fn is(&self, algorithm: Algorithm, limits: usize) -> bool {
        self.algorithm == algorithm && self.limits.len() == limits
    }
}

/// One key's state under one policy, as a shard keeps it.
pub(super) trait EntryState: Clone + Default + Send + Sync + 'static {
    /// What a shard's states are read against: `()` for states that hold
    /// their windows whole, a [`WindowBase`] for packed ones.
    type Base: Base;

    /// A type of no size whose alignment the shard's entry takes on.
    type EntryAlign: Default + Send + Sync + 'static;

    /// A base for a shard's states around `now`.
    fn base_around(_now: u64, _shape: &Shape) -> Self::Base {
        Self::Base::default()
    }

    /// Moves the state from base `from` to base `to`; false if it cannot be
    /// kept (a window about 2³¹ windows ahead of `to`'s time, after a clock
    /// thrown back that far).
    fn rebase(&mut self, _from: &Self::Base, _to: &Self::Base, _shape: &Shape) -> bool {
        true
    }

    /// Judges and records a request of `cost` units (from 1 to every
    /// limit's `max`) at `now` (µs), at a time `base` covers.
    fn decide(&mut self, now: u64, cost: impl Units, shape: &Shape, base: &Self::Base) -> Decision;

    /// Settles a request the state counted, at a time `base` covers.
    fn settle(&mut self, settled: &Settlement, shape: &Shape, base: &Self::Base);

    /// From when (µs) the state judges as a fresh one would.
    fn idle_from(&self, shape: &Shape, base: &Self::Base) -> u64;

    /// Gives back memory the state no longer needs, at a shard's sweep.
    fn shed(&mut self, _shape: &Shape) {}
}

/// The context a shard's states are stored against.
pub(super) trait Base: Copy + Default + Send + Sync + 'static {
    /// Whether states can be judged at `now` without a rebase.
    fn covers(&self, now: u64) -> bool;
}

impl Base for () {
    fn covers(&self, _now: u64) -> bool {
        true
    }
}

impl<const N: usize> Base for WindowBase<N> {
    fn covers(&self, now: u64) -> bool {
        WindowBase::covers(self, now)
    }
}

/// The algorithms' own states, their windows whole: for the policies no
/// packed layout serves.
macro_rules! whole_state {
    ($($state:ty),*) => {$(
        impl EntryState for $state {
            type Base = ();
            type EntryAlign = ();

            fn decide(&mut self, now: u64, cost: impl Units, shape: &Shape, _: &()) -> Decision {
                self.decide_micros(now, shape.limits(), cost)
            }

            fn settle(&mut self, settled: &Settlement, shape: &Shape, _: &()) {
                self.settle_micros(settled, shape.limits());
            }

            fn idle_from(&self, shape: &Shape, _: &()) -> u64 {
                self.idle_from_micros(shape.limits())
            }
        }
    )*};
}

whole_state!(SlidingCounter, FixedWindow);

/// Writes [`Layout`], an enum with one variant per `Variant(State)` row,
/// its choice (the first row whose condition holds, else the `_` row), and
/// `each!`, the dispatch over it.
macro_rules! layouts {
    (
        |$shape:ident, $key_bytes:ident|
        $( $variant:ident($state:ty) if $when:expr, )*
        _ => $last:ident($last_state:ty) $(,)?
    ) => {
        /// One policy's keys in a store, in the layout chosen for the
        /// policy (and the key type's size).
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
            /// An empty map for `shape`'s policy, holding at most `max_keys`.
            pub(super) fn new($shape: Shape, max_keys: usize) -> Self {
                let $key_bytes = size_of::<K>();
                $(
                    if $when {
                        return Self::$variant(Arc::new(Shards::new($shape, max_keys)));
                    }
                )*
                Self::$last(Arc::new(Shards::new($shape, max_keys)))
            }
        }
    };
}

layouts! {
    |shape, key_bytes|
    // A penalty's end beside the algorithm's state; rare enough for one
    // layout per algorithm.
    PenalizedCounter(Penalized<SlidingCounter>) if shape.penalty_micros > 0 && shape.algorithm == Algorithm::SlidingCounter,
    PenalizedFixed(Penalized<FixedWindow>) if shape.penalty_micros > 0 && shape.algorithm == Algorithm::FixedWindow,
    PenalizedLog(Penalized<CompactLog<FEW_BESIDE_SMALL_KEYS>>) if shape.penalty_micros > 0,
    Counter1(Packed<CounterSlot, 1>) if shape.is(Algorithm::SlidingCounter, 1) && CounterSlot::fits(&shape),
    Counter2(Packed<CounterSlot, 2>) if shape.is(Algorithm::SlidingCounter, 2) && CounterSlot::fits(&shape),
    WideCounter1(WideCounter<1>) if shape.is(Algorithm::SlidingCounter, 1),
    WideCounter2(WideCounter<2>) if shape.is(Algorithm::SlidingCounter, 2),
    Counter(SlidingCounter) if shape.algorithm == Algorithm::SlidingCounter,
    Fixed1(Packed<FixedSlot, 1>) if shape.is(Algorithm::FixedWindow, 1),
    Fixed2(Packed<FixedSlot, 2>) if shape.is(Algorithm::FixedWindow, 2),
    Fixed(FixedWindow) if shape.algorithm == Algorithm::FixedWindow,
    // A key of 9 to 24 bytes (an IP address, a `String`) fills a cache
    // line with four stamps beside it; smaller and larger keys take two.
    LogBesideLargerKey(CompactLog<FEW_BESIDE_LARGER_KEYS>) if key_bytes > 8 && key_bytes <= 24,
    _ => Log(CompactLog<FEW_BESIDE_SMALL_KEYS>),
}

impl<K: Hash + Eq + Send + Sync + 'static> Layout<K> {
    /// Judges and records a request of `cost` units for `key`, at the time `clock` gives.
    #[inline]
    pub(super) fn decide(&self, key: K, clock: impl FnOnce() -> u64, cost: u32) -> Decision {
        if cost == 1 {
            return self.decide_one(key, clock);
        }
        each!(self, |map| if map.judges_cost(cost) {
            map.decide(key, clock, cost)
        } else {
            map.unjudged_cost(&key, clock(), cost)
        })
    }

    /// Judges and records a request of one unit for `key`, at the time `clock` gives.
    #[inline]
    pub(super) fn decide_one(&self, key: K, clock: impl FnOnce() -> u64) -> Decision {
        each!(self, |map| map.decide(key, clock, One))
    }

    /// Settles a request for `key` that the map counted.
    pub(super) fn settle(&self, key: K, settled: &Settlement) {
        each!(self, |map| map.settle(key, settled))
    }

    /// Judges a request for `key` at `now`, recording nothing.
    pub(super) fn peek(&self, key: &K, now: u64) -> Decision {
        each!(self, |map| map.peek(key, now))
    }

    /// The keys held, live or not yet swept.
    pub(super) fn len(&self) -> usize {
        each!(self, |map| map.len())
    }

    /// Whether a binding outside the store still holds this map.
    pub(super) fn is_bound(&self) -> bool {
        each!(self, |map| Arc::strong_count(map) > 1)
    }

    /// Drops the keys idle at `now`; whether any is left.
    pub(super) fn sweep_all(&self, now: u64) -> bool {
        each!(self, |map| map.sweep_all(now))
    }
}

impl<const FEW: usize> EntryState for CompactLog<FEW>
where
    Self: super::compact_log::EntryLine,
{
    type Base = ();
    type EntryAlign = <Self as super::compact_log::EntryLine>::Align;

    fn decide(&mut self, now: u64, cost: impl Units, shape: &Shape, _: &()) -> Decision {
        // A map serves one policy: a stamp outside its longest window is
        // never read again.
        self.decide_micros(
            now,
            shape.limits(),
            shape.log_capacity(),
            shape.longest_window_micros(),
            cost,
        )
    }

    fn settle(&mut self, settled: &Settlement, shape: &Shape, _: &()) {
        self.settle(settled, shape.log_capacity(), shape.longest_window_micros());
    }

    fn idle_from(&self, shape: &Shape, _: &()) -> u64 {
        self.idle_from_micros(shape.longest_window_micros())
    }

    fn shed(&mut self, shape: &Shape) {
        self.shed(shape.longest_window_micros());
    }
}
