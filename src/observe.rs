//! Events for operators, through `tracing` when the feature is on.

#[cfg(feature = "redis")]
use crate::store::StoreError;

/// A store failed; its failure policy answers instead.
#[cfg(feature = "redis")]
pub(crate) fn store_failed(err: &StoreError, policy: crate::store::FailurePolicy) {
    #[cfg(feature = "tracing")]
    tracing::warn!(error = %err, ?policy, "rate-limit store failed");
    #[cfg(not(feature = "tracing"))]
    let _ = (err, policy);
}
