//! What a store reports when it cannot decide.

use std::error::Error;
use std::fmt;

/// A store could not judge a request (unreachable server, timeout, protocol
/// error). The layer answers it with `503 Service Unavailable`; remote stores
/// can be told to fail open or fall back instead. Its
/// [`kind`](StoreError::kind) says what went wrong, for code that acts on it.
#[derive(Debug)]
pub struct StoreError {
    kind: StoreErrorKind,
    message: String,
    source: Option<Box<dyn Error + Send + Sync>>,
}

/// What kind of failure a [`StoreError`] reports.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum StoreErrorKind {
    /// The store did not answer in time.
    Timeout,
    /// The store could not be reached, or the connection to it broke.
    Connection,
    /// The store answered with something that is not what was asked for:
    /// an unexpected reply, or a key's state that does not read back.
    Malformed,
    /// The store refused the credentials: a missing or wrong password
    /// (Redis `NOAUTH`, `WRONGPASS`), or a user without the permissions
    /// asked for. A configuration error, not an outage: it lasts until the
    /// configuration changes.
    Authentication,
    /// The TLS handshake failed: the server's certificate is not trusted
    /// or not for its name, or the server wanted a client certificate.
    Tls,
    /// The store's configuration cannot work: a bad URL, TLS asked of a
    /// build without it, certificates that do not read.
    Config,
    /// Any other failure.
    #[default]
    Other,
}

impl StoreError {
    /// An error of kind [`Other`](StoreErrorKind::Other) described by
    /// `message`, caused by `source` if given; see
    /// [`with_kind`](StoreError::with_kind).
    pub fn new(message: impl Into<String>, source: Option<Box<dyn Error + Send + Sync>>) -> Self {
        Self {
            kind: StoreErrorKind::Other,
            message: message.into(),
            source,
        }
    }

    /// The same error, of `kind`.
    pub fn with_kind(mut self, kind: StoreErrorKind) -> Self {
        self.kind = kind;
        self
    }

    /// What kind of failure this is.
    pub fn kind(&self) -> StoreErrorKind {
        self.kind
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
