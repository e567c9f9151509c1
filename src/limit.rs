//! One rate limit: at most `max` requests in any window of a given length.

use std::time::Duration;

use crate::error::ConfigError;

/// At most [`max`](Limit::max) requests in any window of length
/// [`window`](Limit::window).
///
/// Windows are counted in whole microseconds, the resolution of every store
/// (Redis `TIME` included).
///
/// ```
/// use std::time::Duration;
/// use tower_sliding_window::{ConfigError, Limit};
///
/// let five_per_30s = Limit::new(5, Duration::from_secs(30))?;
/// assert_eq!(five_per_30s.max(), 5);
/// assert_eq!(Limit::new(0, Duration::from_secs(1)), Err(ConfigError::ZeroLimit));
/// # Ok::<(), ConfigError>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Limit {
    max: u32,
    window_micros: u64,
}

impl Limit {
    /// The longest window accepted: one hundred years. Longer windows would
    /// make timestamps overflow long before they mattered.
    pub const MAX_WINDOW: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

    /// A limit of `max` requests in any window of length `window`.
    ///
    /// # Errors
    ///
    /// [`ConfigError`] if `max` is zero, `window` is zero, longer than
    /// [`Limit::MAX_WINDOW`], or not a whole number of microseconds.
    pub fn new(max: u32, window: Duration) -> Result<Self, ConfigError> {
        if max == 0 {
            return Err(ConfigError::ZeroLimit);
        }
        if window.is_zero() {
            return Err(ConfigError::ZeroWindow);
        }
        if window > Self::MAX_WINDOW {
            return Err(ConfigError::WindowTooLong(window));
        }
        if !window.subsec_nanos().is_multiple_of(1_000) {
            return Err(ConfigError::WindowNotWholeMicros(window));
        }
        Ok(Self {
            max,
            window_micros: window.as_micros() as u64,
        })
    }

    /// `max` requests per second.
    ///
    /// # Panics
    ///
    /// If `max` is zero. Use [`Limit::new`] for values that are not literals.
    pub fn per_second(max: u32) -> Self {
        Self::literal(max, Duration::from_secs(1))
    }

    /// `max` requests per minute.
    ///
    /// # Panics
    ///
    /// If `max` is zero. Use [`Limit::new`] for values that are not literals.
    pub fn per_minute(max: u32) -> Self {
        Self::literal(max, Duration::from_secs(60))
    }

    /// `max` requests per hour.
    ///
    /// # Panics
    ///
    /// If `max` is zero. Use [`Limit::new`] for values that are not literals.
    pub fn per_hour(max: u32) -> Self {
        Self::literal(max, Duration::from_secs(3600))
    }

    fn literal(max: u32, window: Duration) -> Self {
        match Self::new(max, window) {
            Ok(limit) => limit,
            Err(err) => panic!("invalid rate limit: {err}"),
        }
    }

    /// The number of requests allowed in one window.
    pub fn max(&self) -> u32 {
        self.max
    }

    /// The window's length.
    pub fn window(&self) -> Duration {
        Duration::from_micros(self.window_micros)
    }

    pub(crate) fn window_micros(&self) -> u64 {
        self.window_micros
    }

    /// The window in its largest whole unit: `60s`, `500ms` or `1500us`; the
    /// limit's name in `RateLimit` headers.
    pub fn window_name(&self) -> String {
        let micros = self.window_micros;
        if micros.is_multiple_of(1_000_000) {
            format!("{}s", micros / 1_000_000)
        } else if micros.is_multiple_of(1_000) {
            format!("{}ms", micros / 1_000)
        } else {
            format!("{micros}us")
        }
    }
}
