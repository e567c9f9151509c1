//! Where stores read the time: the system's monotonic clock, or a manual
//! clock that tests move by hand.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// A source of time, measured from a zero of the clock's choosing.
///
/// Fixed windows (the counter's and the fixed window's) are aligned to that
/// zero, so every process sharing state must share the zero: a shared store
/// uses its server's clock unless told otherwise.
pub trait Clock: Clone + Send + Sync + 'static {
    /// Time elapsed since the clock's zero.
    fn now(&self) -> Duration;

    /// [`now`](Clock::now) in whole microseconds, the stores' unit.
    fn now_micros(&self) -> u64 {
        micros(self.now())
    }
}

/// Whole microseconds in `d`, saturating far beyond any real window.
pub(crate) fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

/// The process's monotonic clock, with its zero at the first time any
/// `SystemClock` is read.
///
/// It reads the CPU's time-stamp counter through `quanta` where that is
/// reliable (about three times cheaper than `std::time::Instant::now`, which matters
/// on a path every request takes) and the operating system's monotonic clock
/// otherwise. Monotonic time never steps back when the wall clock is
/// adjusted, so a change of system time can neither reopen nor stretch a
/// window.
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

impl SystemClock {
    /// Nanoseconds since the zero: raw counter readings are subtracted and
    /// scaled in one step, cheaper than going through `Instant` and
    /// `Duration` on every request.
    fn nanos() -> u64 {
        static SOURCE: OnceLock<(quanta::Clock, u64)> = OnceLock::new();
        let (clock, zero) = SOURCE.get_or_init(|| {
            let clock = quanta::Clock::new();
            let zero = clock.raw();
            (clock, zero)
        });
        clock.delta_as_nanos(*zero, clock.raw())
    }
}

impl Clock for SystemClock {
    fn now(&self) -> Duration {
        Duration::from_nanos(Self::nanos())
    }

    fn now_micros(&self) -> u64 {
        Self::nanos() / 1_000
    }
}

/// Wall-clock time since the Unix epoch: a zero every machine shares, for
/// state that several processes judge together (see
/// [`CasStore`](crate::CasStore)).
///
/// Unlike [`SystemClock`] it follows the system's clock when that is set,
/// back or forth; stores judge a clock that stepped back at the newest
/// time a key's state records, so a step back reopens no window.
#[derive(Clone, Copy, Debug, Default)]
pub struct UnixClock;

impl Clock for UnixClock {
    fn now(&self) -> Duration {
        // A system clock set before 1970 reads as the epoch itself.
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
    }
}

/// tokio's clock, with its zero when the `TokioClock` was made (clones
/// share it): the time tokio's timers sleep on.
///
/// For tests under tokio's paused time (`#[tokio::test(start_paused =
/// true)]`), where a store on this clock and a layer that
/// [waits](crate::SlidingWindowLayer::wait_up_to) on tokio's timer see the
/// same time, and `tokio::time::advance` moves both. Outside paused time it
/// reads the monotonic clock, as [`SystemClock`] does, only more slowly.
/// Its zero is its own, so state it stamps cannot be shared with another
/// process.
#[derive(Clone, Copy, Debug)]
pub struct TokioClock {
    zero: tokio::time::Instant,
}

impl TokioClock {
    /// A clock at zero now.
    pub fn new() -> Self {
        Self {
            zero: tokio::time::Instant::now(),
        }
    }
}

impl Default for TokioClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for TokioClock {
    fn now(&self) -> Duration {
        tokio::time::Instant::now().saturating_duration_since(self.zero)
    }
}

/// A clock that only moves when told to; clones share one time.
///
/// It starts at zero. Tests hand a clone to a store and keep one to call
/// [`advance`](ManualClock::advance) or [`set`](ManualClock::set), so a
/// thirty-second scenario runs in microseconds without sleeping.
///
/// ```
/// use std::time::Duration;
/// use tower_sliding_window::{Clock, ManualClock};
///
/// let clock = ManualClock::new();
/// let store_side = clock.clone();
/// clock.advance(Duration::from_secs(5));
/// assert_eq!(store_side.now(), Duration::from_secs(5));
/// ```
#[derive(Clone, Debug, Default)]
pub struct ManualClock {
    micros: Arc<AtomicU64>,
}

impl ManualClock {
    /// A clock at zero.
    pub fn new() -> Self {
        Self::default()
    }

    /// Moves the clock forward by `d` (truncated to whole microseconds).
    pub fn advance(&self, d: Duration) {
        let step = micros(d);
        // fetch_update never fails with a closure that always returns Some.
        let _ = self
            .micros
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |now| {
                Some(now.saturating_add(step))
            });
    }

    /// Puts the clock at `d` since zero, forwards or backwards.
    pub fn set(&self, d: Duration) {
        self.micros.store(micros(d), Ordering::Release);
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Duration {
        Duration::from_micros(self.now_micros())
    }

    fn now_micros(&self) -> u64 {
        self.micros.load(Ordering::Acquire)
    }
}
