//! What a remote store does when its server cannot answer in time.

/// The rule a [`RedisStore`](super::RedisStore) applies when a call fails or
/// exceeds its timeout. Whatever the rule, the service never returns an
/// error and never panics; the [`Origin`](crate::Origin) of the decision
/// says which rule answered.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum FailurePolicy {
    /// Let the request through unjudged (the industry default: the limiter
    /// never takes the service down with it). An attacker who can knock the
    /// store over is then unlimited — see SECURITY.md.
    #[default]
    FailOpen,
    /// Refuse the request with `503 Service Unavailable` (gRPC `UNAVAILABLE`).
    FailClosed,
    /// Judge the request with a local [`MemoryStore`](crate::MemoryStore), so
    /// each instance still enforces the limit on its own share of traffic
    /// until the server is back.
    Fallback,
}
