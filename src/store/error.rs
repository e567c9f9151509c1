//! What a store reports when it cannot decide.

use std::error::Error;
use std::fmt;

/// A store could not judge a request (unreachable server, timeout, protocol
/// error). The layer answers it with `503 Service Unavailable`; remote stores
/// can be told to fail open or fall back instead.
#[derive(Debug)]
pub struct StoreError {
    message: String,
    source: Option<Box<dyn Error + Send + Sync>>,
}

impl StoreError {
    /// An error described by `message`, caused by `source` if given.
    pub fn new(message: impl Into<String>, source: Option<Box<dyn Error + Send + Sync>>) -> Self {
        Self {
            message: message.into(),
            source,
        }
    }
}

impl fmt::Display for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.source {
            Some(source) => write!(f, "{}: {source}", self.message),
            None => f.write_str(&self.message),
        }
    }
}

impl Error for StoreError {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        self.source
            .as_deref()
            .map(|source| source as &(dyn Error + 'static))
    }
}
