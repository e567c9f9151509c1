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

/// The decisions' outcomes, in the order `MetricKeys` keeps their keys.
#[cfg(any(feature = "metrics", feature = "tracing"))]
const OUTCOMES: [&str; 5] = ["allowed", "rejected", "store_full", "fail_open", "fallback"];

/// A policy's metric keys, built the first time they are needed: with the
/// policy's label in them, a decision counts without allocating one (the
/// `counter!` macro would allocate the label and the list of labels on every
/// call, recorder or not).
#[cfg(feature = "metrics")]
pub(crate) struct MetricKeys {
    decisions: [metrics::Key; OUTCOMES.len()],
    store_errors: metrics::Key,
}

#[cfg(feature = "metrics")]
impl MetricKeys {
    pub(crate) fn new(label: &str) -> Self {
        let policy = || metrics::Label::new("policy", label.to_owned());
        Self {
            decisions: OUTCOMES.map(|outcome| {
                metrics::Key::from_parts(
                    "tower_sliding_window_decisions_total",
                    vec![policy(), metrics::Label::new("outcome", outcome)],
                )
            }),
            store_errors: metrics::Key::from_parts(
                "tower_sliding_window_store_errors_total",
                vec![policy()],
            ),
        }
    }
}

/// Adds one to the counter under `key`, in whichever recorder is installed.
#[cfg(feature = "metrics")]
fn count(key: &metrics::Key) {
    static METADATA: metrics::Metadata<'static> =
        metrics::Metadata::new(module_path!(), metrics::Level::INFO, Some(module_path!()));
    metrics::with_recorder(|recorder| recorder.register_counter(key, &METADATA)).increment(1);
}

/// A decision was made (by the limits or a rule standing in for them).
pub(crate) fn decided(policy: &Policy, decision: &Decision) {
    let index = match (decision.origin(), decision.is_allowed()) {
        (Origin::StoreFull, _) => 2,
        (Origin::FailOpen, _) => 3,
        (Origin::Fallback, _) => 4,
        (_, true) => 0,
        (_, false) => 1,
    };
    #[cfg(feature = "metrics")]
    count(&policy.metric_keys().decisions[index]);
    #[cfg(feature = "tracing")]
    if !decision.is_allowed() {
        tracing::debug!(
            policy = policy.label(),
            outcome = OUTCOMES[index],
            limit = %decision.limit().window_name(),
            retry_after_ms = decision.retry_after().as_millis() as u64,
            "request refused by rate limit"
        );
    }
    #[cfg(not(any(feature = "metrics", feature = "tracing")))]
    let _ = (policy, index);
}

/// The store failed and the request is answered `503`.
pub(crate) fn unavailable(policy: &Policy, err: &StoreError) {
    #[cfg(feature = "metrics")]
    count(&policy.metric_keys().store_errors);
    #[cfg(feature = "tracing")]
    tracing::error!(policy = policy.label(), error = %err, "rate-limit store failed; answering 503");
    #[cfg(not(feature = "tracing"))]
    let _ = err;
    #[cfg(not(any(feature = "metrics", feature = "tracing")))]
    let _ = policy;
}

/// A store failed; its failure policy answers instead.
#[cfg(feature = "redis")]
pub(crate) fn store_failed(err: &StoreError, failure: crate::store::FailurePolicy) {
    #[cfg(feature = "tracing")]
    tracing::warn!(error = %err, ?failure, "rate-limit store failed");
    #[cfg(not(feature = "tracing"))]
    let _ = (err, failure);
}
