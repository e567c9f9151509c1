//! The sans-IO core: each algorithm as plain state over explicit timestamps.
//!
//! Nothing here reads a clock, takes a lock or touches a map. A store keeps
//! one [`KeyState`] per key and policy, hands it the time, and gets a
//! [`Decision`] back; that split is what lets the in-memory store, the Redis
//! scripts and the tests agree decision for decision.
//!
//! ```
//! use std::time::Duration;
//! use tower_sliding_window::core::SlidingLog;
//! use tower_sliding_window::Limit;
//!
//! let limits = [Limit::new(5, Duration::from_secs(30))?];
//! let mut log = SlidingLog::new();
//! for _ in 0..5 {
//!     assert!(log.decide(Duration::ZERO, &limits).is_allowed());
//! }
//! let refused = log.decide(Duration::from_secs(25), &limits);
//! assert!(!refused.is_allowed());
//! // The request from 0 s still counts at exactly 30 s; one microsecond later it does not.
//! assert_eq!(refused.retry_after(), Duration::from_micros(5_000_001));
//! # Ok::<(), tower_sliding_window::ConfigError>(())
//! ```

mod compact_log;
pub(crate) mod counter;
pub(crate) mod fixed;
pub(crate) mod log;
pub(crate) mod refusal;
mod slots;
mod window_base;

use std::time::Duration;

use self::compact_log::EntryLine;
pub(crate) use self::compact_log::{CompactLog, FEW_BESIDE_LARGER_KEYS, FEW_BESIDE_SMALL_KEYS};
pub use self::counter::SlidingCounter;
pub(crate) use self::counter::{CompactCounter, PackedCounter};
pub use self::fixed::FixedWindow;
pub(crate) use self::fixed::PackedFixed;
pub use self::log::SlidingLog;
use self::log::KEEP_EVERY_STAMP;
pub(crate) use self::log::MAX_SLOTS;
pub(crate) use self::window_base::WindowBase;
use crate::clock::micros;
use crate::decision::Decision;
use crate::policy::{Algorithm, Policy};

/// The state one key holds under one policy, whichever its algorithm.
#[derive(Clone, Debug)]
pub enum KeyState {
    /// State of [`Algorithm::SlidingLog`].
    Log(SlidingLog),
    /// State of [`Algorithm::SlidingCounter`].
    Counter(SlidingCounter),
    /// State of [`Algorithm::FixedWindow`].
    Fixed(FixedWindow),
}

impl KeyState {
    /// A fresh state for `policy`: no request seen yet.
    pub fn new(policy: &Policy) -> Self {
        match policy.algorithm() {
            Algorithm::SlidingLog => Self::Log(SlidingLog::new()),
            Algorithm::SlidingCounter => Self::Counter(SlidingCounter::new()),
            Algorithm::FixedWindow => Self::Fixed(FixedWindow::new()),
        }
    }

    /// Judges one request arriving at `now` against every limit of `policy`,
    /// and records it if all accept.
    pub fn decide(&mut self, now: Duration, policy: &Policy) -> Decision {
        self.decide_micros(micros(now), policy)
    }

    pub(crate) fn decide_micros(&mut self, now: u64, policy: &Policy) -> Decision {
        let limits = policy.limits();
        match self {
            // The next call may bring another policy, with longer windows.
            Self::Log(log) => {
                log.decide_micros(now, limits, policy.largest_max(), KEEP_EVERY_STAMP)
            }
            Self::Counter(counter) => counter.decide_micros(now, limits),
            Self::Fixed(fixed) => fixed.decide_micros(now, limits),
        }
    }
}

/// One algorithm's state for one key, as a store keeps it: stores hold a
/// map per algorithm, so no entry pays for another algorithm's layout.
pub(crate) trait AlgorithmState: Clone + Default + Send + Sync + 'static {
    /// What a shard's states are read against: `()` for states that hold
    /// their windows whole, a [`WindowBase`] for packed ones.
    type Base: Base;

    /// A type of no size whose alignment a store's entry for this state
    /// takes on: `()` for none beyond its fields'.
    type EntryAlign: Default + Send + Sync + 'static;

    /// A base for a shard's states around `now`.
    fn base_around(_now: u64, _policy: &Policy) -> Self::Base {
        Self::Base::default()
    }

    /// Moves the state from base `from` to base `to`; false if it cannot be
    /// kept: a window about 2³¹ windows ahead of `to`'s time, after a clock
    /// thrown back that far.
    fn rebase(&mut self, _from: &Self::Base, _to: &Self::Base, _policy: &Policy) -> bool {
        true
    }

    /// Judges and records a request at `now` (µs) under `policy`, at a time
    /// `base` covers.
    fn decide(&mut self, now: u64, policy: &Policy, base: &Self::Base) -> Decision;

    /// From when (µs) the state judges as a fresh one would.
    fn idle_from(&self, policy: &Policy, base: &Self::Base) -> u64;

    /// Gives back memory the state no longer needs, at a store's sweep.
    fn shed(&mut self, _policy: &Policy) {}
}

/// The context a shard's states are stored against.
pub(crate) trait Base: Copy + Default + Send + Sync + 'static {
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

impl<const FEW: usize> AlgorithmState for CompactLog<FEW>
where
    Self: EntryLine,
{
    type Base = ();
    type EntryAlign = <Self as EntryLine>::Align;

    fn decide(&mut self, now: u64, policy: &Policy, _: &()) -> Decision {
        // A store keeps a map per policy: a stamp outside this policy's
        // longest window is never read again.
        self.decide_micros(
            now,
            policy.limits(),
            policy.log_capacity(),
            policy.longest_window_micros(),
        )
    }

    fn idle_from(&self, policy: &Policy, _: &()) -> u64 {
        self.idle_from_micros(policy.longest_window_micros())
    }

    fn shed(&mut self, policy: &Policy) {
        self.shed(policy.limits().len(), policy.longest_window_micros());
    }
}

impl AlgorithmState for SlidingCounter {
    type Base = ();
    type EntryAlign = ();

    fn decide(&mut self, now: u64, policy: &Policy, _: &()) -> Decision {
        self.decide_micros(now, policy.limits())
    }

    fn idle_from(&self, policy: &Policy, _: &()) -> u64 {
        self.idle_from_micros(policy.limits())
    }
}

impl<const N: usize> AlgorithmState for CompactCounter<N> {
    type Base = ();
    type EntryAlign = ();

    fn decide(&mut self, now: u64, policy: &Policy, _: &()) -> Decision {
        self.decide_micros(now, policy.limits())
    }

    fn idle_from(&self, policy: &Policy, _: &()) -> u64 {
        self.idle_from_micros(policy.limits())
    }
}

impl AlgorithmState for FixedWindow {
    type Base = ();
    type EntryAlign = ();

    fn decide(&mut self, now: u64, policy: &Policy, _: &()) -> Decision {
        self.decide_micros(now, policy.limits())
    }

    fn idle_from(&self, policy: &Policy, _: &()) -> u64 {
        self.idle_from_micros(policy.limits())
    }
}
