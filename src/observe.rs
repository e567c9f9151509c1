//! Events for operators: `tracing` events (feature `tracing`) and `metrics`
//! counters (feature `metrics`), labelled by policy, never by a client's key.
//!
//! Counters:
//! * `tower_sliding_window_decisions_total{policy, outcome}` with `outcome`
//!   one of `allowed`, `rejected`, `store_full`, `fail_open`, `fallback`;
//! * `tower_sliding_window_store_errors_total{policy}` for requests answered
//!   `503` because the store failed.

use crate::decision::{Decision, Origin};
use crate::policy::Policy;
use crate::store::StoreError;

/// A decision was made (by the limits or a rule standing in for them).
pub(crate) fn decided(policy: &Policy, decision: &Decision) {
    let outcome = match (decision.origin(), decision.is_allowed()) {
        (Origin::StoreFull, _) => "store_full",
        (Origin::FailOpen, _) => "fail_open",
        (Origin::Fallback, _) => "fallback",
        (_, true) => "allowed",
        (_, false) => "rejected",
    };
    #[cfg(feature = "metrics")]
    metrics::counter!(
        "tower_sliding_window_decisions_total",
        "policy" => policy.label().to_owned(),
        "outcome" => outcome,
    )
    .increment(1);
    #[cfg(feature = "tracing")]
    if !decision.is_allowed() {
        tracing::debug!(
            policy = policy.label(),
            outcome,
            limit = %decision.limit().window_name(),
            retry_after_ms = decision.retry_after().as_millis() as u64,
            "request refused by rate limit"
        );
    }
    #[cfg(not(any(feature = "metrics", feature = "tracing")))]
    let _ = (policy, outcome);
}

/// The store failed and the request is answered `503`.
pub(crate) fn unavailable(policy: &Policy, err: &StoreError) {
    #[cfg(feature = "metrics")]
    metrics::counter!(
        "tower_sliding_window_store_errors_total",
        "policy" => policy.label().to_owned(),
    )
    .increment(1);
    #[cfg(feature = "tracing")]
    tracing::error!(policy = policy.label(), error = %err, "rate-limit store failed; answering 503");
    #[cfg(not(any(feature = "metrics", feature = "tracing")))]
    let _ = (policy, err);
}

/// A store failed; its failure policy answers instead.
#[cfg(feature = "redis")]
pub(crate) fn store_failed(err: &StoreError, failure: crate::store::FailurePolicy) {
    #[cfg(feature = "tracing")]
    tracing::warn!(error = %err, ?failure, "rate-limit store failed");
    #[cfg(not(feature = "tracing"))]
    let _ = (err, failure);
}
