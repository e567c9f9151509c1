//! One rate limit: at most `max` requests in any window of a given length.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use crate::error::ConfigError;

/// At most [`max`](Limit::max) requests in any window of length
/// [`window`](Limit::window).
///
/// Windows are counted in whole microseconds, the resolution of every store
/// (Redis `TIME` included).
///
/// A limit parses from the text a configuration file would hold,
/// `MAX/WINDOW`: `"10/s"`, `"100/min"`, `"5/30s"`, `"1000/h"`, `"20/day"`.
/// The window is a unit, or a whole number and a unit, with units `us`,
/// `ms`, `s` (`sec`, `second`), `m` (`min`, `minute`), `h` (`hour`) and
/// `d` (`day`), in lower case.
/// [`Display`](fmt::Display) prints a form that parses back to the same limit.
///
/// ```
/// use std::time::Duration;
/// use tower_sliding_window::{ConfigError, Limit};
///
/// let five_per_30s = Limit::new(5, Duration::from_secs(30))?;
/// assert_eq!(five_per_30s.max(), 5);
/// assert_eq!(Limit::new(0, Duration::from_secs(1)), Err(ConfigError::ZeroLimit));
/// assert_eq!("5/30s".parse::<Limit>()?, five_per_30s);
/// assert_eq!(five_per_30s.to_string(), "5/30s");
/// assert!("5 per 30s".parse::<Limit>().is_err());
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

    /// The same `max` over a window `micros` longer: what a log under
    /// local quota is judged by in Redis (docs/design.md, "Local quota").
    #[cfg(feature = "redis")]
    pub(crate) fn widened(self, micros: u64) -> Self {
        Self {
            window_micros: self.window_micros.saturating_add(micros),
            ..self
        }
    }

    /// The same window holding `max`, at least one.
    #[cfg(feature = "redis")]
    pub(crate) fn with_max(self, max: u32) -> Self {
        Self {
            max: max.max(1),
            ..self
        }
    }

    /// The window in its largest whole unit: `60s`, `500ms` or `1500us`; the
    /// limit's name in `RateLimit` headers.
    pub fn window_name(&self) -> String {
        duration_name(self.window_micros)
    }
}

/// `micros` in its largest whole unit: `60s`, `500ms` or `1500us`.
pub(crate) fn duration_name(micros: u64) -> String {
    if micros.is_multiple_of(1_000_000) {
        format!("{}s", micros / 1_000_000)
    } else if micros.is_multiple_of(1_000) {
        format!("{}ms", micros / 1_000)
    } else {
        format!("{micros}us")
    }
}

/// Window units a limit's text may name, in microseconds.
const UNITS: &[(&[&str], u64)] = &[
    (&["us"], 1),
    (&["ms"], 1_000),
    (&["s", "sec", "second", "seconds"], 1_000_000),
    (&["m", "min", "minute", "minutes"], 60_000_000),
    (&["h", "hour", "hours"], 3_600_000_000),
    (&["d", "day", "days"], 86_400_000_000),
];

impl FromStr for Limit {
    type Err = ConfigError;

    fn from_str(text: &str) -> Result<Self, ConfigError> {
        let bad = |why: &str| {
            ConfigError::Parse(format!(
                "{text:?} is not a limit ({why}); expected MAX/WINDOW such as \"10/s\", \"100/min\", \"5/30s\" or \"1000/h\", with units us, ms, s or sec, m or min, h or hour, d or day"
            ))
        };
        let (max, window) = text.trim().split_once('/').ok_or_else(|| bad("no '/'"))?;
        let max: u32 = max
            .trim()
            .parse()
            .map_err(|_| bad("the count is not a whole number"))?;
        let window = window.trim();
        let digits = window.len()
            - window
                .trim_start_matches(|c: char| c.is_ascii_digit())
                .len();
        let (count, unit) = window.split_at(digits);
        let count: u64 = match count {
            "" => 1,
            count => count
                .parse()
                .map_err(|_| bad("the window's length is too large"))?,
        };
        let unit = unit.trim();
        let (_, micros) = UNITS
            .iter()
            .find(|(names, _)| names.contains(&unit))
            .ok_or_else(|| bad("unknown window unit"))?;
        let micros = count
            .checked_mul(*micros)
            .ok_or_else(|| bad("the window is too long"))?;
        Self::new(max, Duration::from_micros(micros))
    }
}

/// `MAX/WINDOW`, the window in its largest whole unit (`10/1s`,
/// `100/60s`), as policy signatures spell it and [`FromStr`] reads it.
impl fmt::Display for Limit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.max, self.window_name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_usual_forms_parse() {
        let parse = |text: &str| text.parse::<Limit>().unwrap();
        assert_eq!(parse("10/s"), Limit::per_second(10));
        assert_eq!(parse("100/min"), Limit::per_minute(100));
        assert_eq!(parse("100/m"), Limit::per_minute(100));
        assert_eq!(parse(" 1000 / h "), Limit::per_hour(1000));
        assert_eq!(
            parse("5/30s"),
            Limit::new(5, Duration::from_secs(30)).unwrap()
        );
        assert_eq!(parse("20/d"), parse("20/day"));
        assert_eq!(parse("20/2day").window(), Duration::from_secs(2 * 86_400));
        assert_eq!(parse("3/250ms").window(), Duration::from_millis(250));
        assert_eq!(parse("3/1500us").window(), Duration::from_micros(1500));
    }

    #[test]
    fn what_does_not_parse_says_what_was_expected() {
        for text in [
            "",
            "10",
            "10/",
            "/s",
            "ten/s",
            "10/fortnight",
            "-1/s",
            "10/s/s",
            "1.5/s",
            "10/99999999999999999999s",
        ] {
            match text.parse::<Limit>() {
                Err(ConfigError::Parse(message)) => {
                    assert!(message.contains("MAX/WINDOW"), "{text:?}: {message}")
                }
                other => panic!("{text:?} gave {other:?}"),
            }
        }
        // Well formed, but no limit: the constructor's own errors.
        assert_eq!("0/s".parse::<Limit>(), Err(ConfigError::ZeroLimit));
        assert_eq!("5/0s".parse::<Limit>(), Err(ConfigError::ZeroWindow));
        assert!(matches!(
            "5/36501d".parse::<Limit>(),
            Err(ConfigError::WindowTooLong(_))
        ));
    }

    #[test]
    fn what_displays_parses_back() {
        for text in [
            "10/s", "100/min", "5/30s", "1000/h", "7/d", "3/250ms", "9/1500us", "1/90m",
        ] {
            let limit: Limit = text.parse().unwrap();
            let shown = limit.to_string();
            assert_eq!(
                shown.parse::<Limit>().unwrap(),
                limit,
                "{text} shown as {shown}"
            );
        }
        assert_eq!(Limit::per_minute(100).to_string(), "100/60s");
        assert_eq!(Limit::per_second(10).to_string(), "10/1s");
        assert_eq!("10/second".parse::<Limit>().unwrap(), Limit::per_second(10));
    }
}
