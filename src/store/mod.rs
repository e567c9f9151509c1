//! Stores keep each key's state and judge requests against it atomically.
//!
//! The layer asks a [`Store`] for a [`Decision`](crate::Decision) once per
//! request. A store owns its concurrency (no two concurrent requests for one
//! key may both read a stale count) and its persistence; the algorithms
//! themselves live in [`crate::core`].

mod by_policy;
mod error;
mod memory;
#[cfg(feature = "redis")]
mod redis;
mod sharded;
mod typed_any;

use std::future::Future;

pub(crate) use self::by_policy::PolicyMaps;
pub use self::error::StoreError;
pub use self::memory::MemoryStore;
#[cfg(feature = "redis")]
pub use self::redis::{FailurePolicy, RedisStore};
use crate::decision::Decision;
use crate::policy::Policy;

/// Judges and records one request for `key` under every limit of a policy,
/// in one atomic step.
///
/// Implementations must make the check and the record indivisible per key
/// (one lock, one CAS loop or one server-side script), keep the windows of
/// different policies apart even for equal keys, and never panic: failures
/// come back as [`StoreError`], and the layer answers them under its
/// documented policy.
pub trait Store<K>: Clone + Send + Sync + 'static {
    /// The pending decision. It is polled once as soon as the request
    /// arrives, so a store that can answer at once (like [`MemoryStore`])
    /// costs no more than a function call; box it if it is not `Unpin`.
    type Future: Future<Output = Result<Decision, StoreError>> + Send + Unpin + 'static;

    /// Judges a request for `key` under `policy`, recording it if accepted.
    fn decide(&self, key: K, policy: &Policy) -> Self::Future;

    /// Judges a request as [`decide`](Store::decide) would, remaining quota
    /// included, but records nothing: for layers that count only some
    /// responses ([`SlidingWindowLayer::count_only`](crate::SlidingWindowLayer::count_only)).
    fn peek(&self, key: K, policy: &Policy) -> Self::Future;
}
