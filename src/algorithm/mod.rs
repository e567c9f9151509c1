//! The sans-IO algorithms: each one plain state over explicit timestamps.
//!
//! Nothing here reads a clock, takes a lock, touches a map or knows of
//! policies, stores or HTTP: a caller hands a state the time and the limits
//! and gets a [`Decision`] back. That split is what lets the in-memory
//! store, the Redis scripts and the tests agree decision for decision.
//!
//! ```
//! use std::time::Duration;
//! use tower_sliding_window::algorithm::SlidingLog;
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

pub(crate) mod bucket;
pub(crate) mod counter;
mod decision;
pub(crate) mod fixed;
pub(crate) mod leases;
pub(crate) mod log;
mod per_limit;
pub(crate) mod refusal;

pub use self::bucket::TokenBucket;
pub use self::counter::SlidingCounter;
pub(crate) use self::decision::Settlement;
pub use self::decision::{Decision, Origin};
pub use self::fixed::FixedWindow;
pub use self::log::SlidingLog;

/// The most limits judged together with no heap allocation; a
/// [`Policy`](crate::Policy) holds at most this many.
pub(crate) const INLINE_LIMITS: usize = 8;

/// How requests are counted against a window.
///
/// See the crate docs' "Choosing an algorithm" for when each fits.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Algorithm {
    /// Two counts per key and limit, the previous window's weighted by how
    /// much of it still overlaps the sliding window. Approximate: it assumes
    /// the previous window's requests were spread evenly.
    #[default]
    SlidingCounter,
    /// One timestamp per accepted request, or unit of a request's cost (at
    /// most the largest limit per key).
    /// Exact: no closed interval of one window's length ever holds more than
    /// the limit.
    SlidingLog,
    /// One count per fixed block of the clock. Cheapest, but a burst that
    /// straddles two blocks gets up to twice the limit through.
    FixedWindow,
    /// A bucket of `max` tokens per limit, refilled one every `W / max`
    /// (GCRA: one arrival time per key and limit). Exact, and allows
    /// bursts on purpose: a full bucket at once, then one token at a
    /// time, so one window's length can see up to twice the limit.
    TokenBucket,
}

impl Algorithm {
    /// The letter that names the algorithm in a policy's signature, a
    /// Redis script's arguments and a key state's bytes.
    pub(crate) fn letter(self) -> &'static str {
        match self {
            Self::SlidingCounter => "c",
            Self::SlidingLog => "l",
            Self::FixedWindow => "f",
            Self::TokenBucket => "b",
        }
    }
}
