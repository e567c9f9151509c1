//! What kind of failure a Redis error is, and whether it shows the server
//! is there.

use crate::store::{StoreError, StoreErrorKind};

/// A [`StoreError`] for a Redis error, of the kind its cause says.
pub(super) fn error(context: String, source: redis::RedisError) -> StoreError {
    let kind = kind_of(&source);
    StoreError::new(context, Some(Box::new(source))).with_kind(kind)
}

fn kind_of(source: &redis::RedisError) -> StoreErrorKind {
    use redis::{ErrorKind, ServerErrorKind};
    if matches!(
        source.kind(),
        ErrorKind::AuthenticationFailed | ErrorKind::Server(ServerErrorKind::NoPerm)
    ) || matches!(source.code(), Some("NOAUTH" | "WRONGPASS"))
    {
        StoreErrorKind::Authentication
    } else if is_tls_failure(source) {
        StoreErrorKind::Tls
    } else if source.kind() == ErrorKind::InvalidClientConfig {
        StoreErrorKind::Config
    } else if source.is_timeout() {
        StoreErrorKind::Timeout
    } else if source.is_io_error()
        || source.is_connection_refusal()
        || source.is_connection_dropped()
    {
        flattened_cause(source).unwrap_or(StoreErrorKind::Connection)
    } else if matches!(
        source.kind(),
        ErrorKind::Parse | ErrorKind::UnexpectedReturnType
    ) {
        StoreErrorKind::Malformed
    } else {
        StoreErrorKind::Other
    }
}

/// What an I/O error's text names as its cause, if it is not the
/// connection's: a cluster's first connections report any node's failure,
/// a refused password or certificate included, as one I/O error, and a TLS
/// alert the server sends after the handshake (a client certificate it
/// required) reaches us as text too.
fn flattened_cause(source: &redis::RedisError) -> Option<StoreErrorKind> {
    let text = source.to_string().to_lowercase();
    let says = |words: &[&str]| words.iter().any(|word| text.contains(word));
    if says(&["noauth", "wrongpass", "password authentication failed"]) {
        Some(StoreErrorKind::Authentication)
    } else if says(&["certificate", "fatal alert", "handshake"]) {
        Some(StoreErrorKind::Tls)
    } else {
        None
    }
}

/// Whether a rustls error is behind `source`: the TLS handshake failed.
/// The I/O error that carries it hides it from `source()`, so each I/O
/// error met is opened too.
fn is_tls_failure(source: &redis::RedisError) -> bool {
    #[cfg(feature = "redis-tls")]
    {
        let mut next: Option<&(dyn std::error::Error + 'static)> = Some(source);
        while let Some(err) = next {
            let inner = err
                .downcast_ref::<std::io::Error>()
                .and_then(std::io::Error::get_ref);
            if err.is::<rustls::Error>() || inner.is_some_and(|e| e.is::<rustls::Error>()) {
                return true;
            }
            next = err.source();
        }
    }
    let _ = source;
    false
}

/// Whether a failure shows the server is there: an error reply it sent
/// (with a code such as `WRONGTYPE`), or credentials or a handshake it
/// refused.
pub(super) fn said_by_server(err: &StoreError) -> bool {
    matches!(
        err.kind(),
        StoreErrorKind::Authentication | StoreErrorKind::Tls
    ) || std::error::Error::source(err)
        .and_then(|source| source.downcast_ref::<redis::RedisError>())
        .is_some_and(|source| source.code().is_some())
}
