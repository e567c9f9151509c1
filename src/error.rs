//! Errors reported when a limit, policy or store is configured wrongly.

use std::fmt;

/// A limit, policy or store was configured with values that cannot work.
///
/// Returned when the layer is built, never on a request path; the message
/// says which value is wrong and what would be accepted instead.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ConfigError {
    /// A limit of zero requests would reject everything.
    ZeroLimit,
    /// A window of zero length contains no time to count in.
    ZeroWindow,
    /// The window is not a whole number of microseconds, the unit every store counts in.
    WindowNotWholeMicros(std::time::Duration),
    /// The window is longer than [`crate::Limit::MAX_WINDOW`].
    WindowTooLong(std::time::Duration),
    /// A policy needs at least one limit.
    NoLimits,
    /// A policy holds more limits than [`crate::Policy::MAX_LIMITS`].
    TooManyLimits(usize),
    /// A store setting is out of range; the text names it.
    Store(String),
    /// A limit's text could not be read; the text says what was expected.
    Parse(String),
    /// A key extractor was given something it cannot use (a header name, a
    /// network, a prefix length); the text names it.
    Extractor(String),
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::ZeroLimit => f.write_str("a limit must allow at least one request per window"),
            Self::ZeroWindow => f.write_str("a window must be longer than zero"),
            Self::WindowNotWholeMicros(w) => write!(
                f,
                "window {w:?} is not a whole number of microseconds (the stores' time unit)"
            ),
            Self::WindowTooLong(w) => write!(
                f,
                "window {w:?} is longer than the supported maximum of {:?}",
                crate::Limit::MAX_WINDOW
            ),
            Self::NoLimits => f.write_str("a policy needs at least one limit"),
            Self::TooManyLimits(n) => write!(
                f,
                "a policy holds at most {} limits, {n} were given",
                crate::Policy::MAX_LIMITS
            ),
            Self::Parse(msg) => f.write_str(msg),
            Self::Store(msg) => write!(f, "store configuration: {msg}"),
            Self::Extractor(msg) => write!(f, "key extractor configuration: {msg}"),
        }
    }
}

impl std::error::Error for ConfigError {}
