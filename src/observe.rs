//! Events for operators: `tracing` events (feature `tracing`) and `metrics`
//! counters (feature `metrics`), labelled by policy, never by a client's key.
//!
//! The `policy` label is a bounded set: a policy's [name](crate::Policy::named);
//! for an unnamed one, its signature where it is a layer's own policy, and
//! `unnamed` where a plan chose it (or where the Redis deny cache counts
//! it), since limits built per tenant would otherwise make a series per
//! tenant. Name the policies plans choose to tell them apart, from a
//! bounded set: a name is a label value.
//!
//! Counters:
//! * `tower_sliding_window_decisions_total{policy, outcome}` with `outcome`
//!   one of `allowed`, `rejected`, `store_full`, `fail_open`, `fallback`,
//!   `penalty` for refusals while a key serves a penalty, `too_costly` for
//!   requests costing more than a limit holds, and
//!   `shadow_rejected` for requests a layer in shadow mode let through
//!   that enforcement would have refused;
//! * `tower_sliding_window_store_errors_total{policy}` for requests the
//!   store failed to judge (answered `503`, or let through in shadow mode);
//! * `tower_sliding_window_store_failures_total{kind}` for each call the
//!   Redis store could not make, whatever its failure policy answered, by
//!   the [kind](crate::StoreErrorKind) of failure: `timeout`, `connection`,
//!   `authentication`, `tls`, `config`, `malformed` or `other`;
//! * `tower_sliding_window_denied_locally_total{policy}` for refusals the
//!   Redis store's deny cache answered without a call (they count among the
//!   decisions too).
//!
//! Gauge: `tower_sliding_window_live_instances{prefix}`, the instances
//! sharing a Redis prefix at this instance's last heartbeat.
//!
//! Histogram: `tower_sliding_window_wait_seconds{policy}`, how long each
//! request a layer made [wait](crate::SlidingWindowLayer::wait_up_to) slept
//! before its last judgement (requests that did not wait are not in it).

use crate::algorithm::{Decision, Origin};
#[cfg(feature = "redis")]
use crate::policy::Policy;
use crate::store::StoreError;

/// What events call an unnamed policy that a plan chose.
pub(crate) const UNNAMED: &str = "unnamed";

/// The decisions' outcomes, in the order `MetricKeys` keeps their keys.
#[cfg(any(feature = "metrics", feature = "tracing"))]
const OUTCOMES: [&str; 9] = [
    "allowed",
    "rejected",
    "store_full",
    "fail_open",
    "fallback",
    "shadow_rejected",
    "penalty",
    "too_costly",
    "in_flight",
];

/// What events name a policy by: its label and, with `metrics`, its metric
/// keys, built once for a layer's own policy and for every unnamed policy
/// a plan chooses, and per request for a named one a plan chooses. With
/// the label in them, a decision counts without allocating one (the
/// `counter!` macro would allocate the label and the list of labels on
/// every call).
#[derive(Debug)]
pub(crate) struct PolicyEvents {
    #[cfg(feature = "tracing")]
    label: Box<str>,
    #[cfg(feature = "metrics")]
    decisions: [metrics::Key; OUTCOMES.len()],
    #[cfg(feature = "metrics")]
    store_errors: metrics::Key,
    #[cfg(feature = "metrics")]
    waits: metrics::Key,
}

impl PolicyEvents {
    /// The events of a policy labelled `label`.
    pub(crate) fn new(label: &str) -> Self {
        #[cfg(feature = "metrics")]
        let policy_label = || metrics::Label::new("policy", label.to_owned());
        #[cfg(not(any(feature = "metrics", feature = "tracing")))]
        let _ = label;
        Self {
            #[cfg(feature = "tracing")]
            label: label.into(),
            #[cfg(feature = "metrics")]
            decisions: OUTCOMES.map(|outcome| {
                metrics::Key::from_parts(
                    "tower_sliding_window_decisions_total",
                    vec![policy_label(), metrics::Label::new("outcome", outcome)],
                )
            }),
            #[cfg(feature = "metrics")]
            store_errors: metrics::Key::from_parts(
                "tower_sliding_window_store_errors_total",
                vec![policy_label()],
            ),
            #[cfg(feature = "metrics")]
            waits: metrics::Key::from_parts(
                "tower_sliding_window_wait_seconds",
                vec![policy_label()],
            ),
        }
    }
}

#[cfg(feature = "metrics")]
static METADATA: metrics::Metadata<'static> =
    metrics::Metadata::new(module_path!(), metrics::Level::INFO, Some(module_path!()));

/// Adds one to the counter under `key`, in whichever recorder is installed.
#[cfg(feature = "metrics")]
fn count(key: &metrics::Key) {
    metrics::with_recorder(|recorder| recorder.register_counter(key, &METADATA)).increment(1);
}

/// A request waited `waited` in all for its turn before its last judgement.
pub(crate) fn waited(policy: &PolicyEvents, waited: std::time::Duration) {
    #[cfg(feature = "metrics")]
    metrics::with_recorder(|recorder| recorder.register_histogram(&policy.waits, &METADATA))
        .record(waited.as_secs_f64());
    #[cfg(feature = "tracing")]
    tracing::debug!(policy = &*policy.label, waited = ?waited, "request waited for its turn");
    #[cfg(not(any(feature = "metrics", feature = "tracing")))]
    let _ = (policy, waited);
}

/// A decision was made (by the limits or a rule standing in for them).
pub(crate) fn decided(policy: &PolicyEvents, decision: &Decision) {
    let index = match (decision.origin(), decision.is_allowed()) {
        // Let through in shadow mode: enforcement would have refused it.
        (_, false) if decision.is_shadow() => 5,
        (Origin::StoreFull, _) => 2,
        (Origin::FailOpen, _) => 3,
        (Origin::Fallback, _) => 4,
        (Origin::Penalty, _) => 6,
        (Origin::TooCostly, _) => 7,
        (Origin::InFlight, _) => 8,
        (_, true) => 0,
        (_, false) => 1,
    };
    #[cfg(feature = "metrics")]
    count(&policy.decisions[index]);
    #[cfg(feature = "tracing")]
    if !decision.is_allowed() && decision.is_shadow() {
        tracing::debug!(
            policy = &*policy.label,
            outcome = OUTCOMES[index],
            limit = %decision.limit_name(),
            "request let through in shadow mode; enforcement would refuse it"
        );
    } else if !decision.is_allowed() {
        tracing::debug!(
            policy = &*policy.label,
            outcome = OUTCOMES[index],
            limit = %decision.limit_name(),
            retry_after_ms = decision.retry_after().as_millis() as u64,
            "request refused by rate limit"
        );
    }
    #[cfg(not(any(feature = "metrics", feature = "tracing")))]
    let _ = (policy, index);
}

/// The store failed and the request is answered `503`.
pub(crate) fn unavailable(policy: &PolicyEvents, err: &StoreError) {
    #[cfg(feature = "metrics")]
    count(&policy.store_errors);
    #[cfg(feature = "tracing")]
    tracing::error!(policy = &*policy.label, error = %err, "rate-limit store failed; answering 503");
    #[cfg(not(feature = "tracing"))]
    let _ = err;
    #[cfg(not(any(feature = "metrics", feature = "tracing")))]
    let _ = policy;
}

/// What the Redis store's deny cache reports for one policy, built with its
/// binding.
#[cfg(feature = "redis")]
#[derive(Debug)]
pub(crate) struct DenyCacheEvents {
    #[cfg(feature = "tracing")]
    label: Box<str>,
    #[cfg(feature = "metrics")]
    answered: metrics::Key,
}

#[cfg(feature = "redis")]
impl DenyCacheEvents {
    /// The events of `policy`, labelled by its name, else `unnamed`: a
    /// store cannot tell a layer's own policy from a plan's choice.
    pub(crate) fn new(policy: &Policy) -> Self {
        let label = policy.name().unwrap_or(UNNAMED);
        #[cfg(not(any(feature = "metrics", feature = "tracing")))]
        let _ = label;
        Self {
            #[cfg(feature = "tracing")]
            label: label.into(),
            #[cfg(feature = "metrics")]
            answered: metrics::Key::from_parts(
                "tower_sliding_window_denied_locally_total",
                vec![metrics::Label::new("policy", label.to_owned())],
            ),
        }
    }
}

/// Redis refused a key, which the deny cache now answers until its wait is up.
#[cfg(feature = "redis")]
pub(crate) fn denied(events: &DenyCacheEvents, decision: &Decision) {
    #[cfg(feature = "tracing")]
    tracing::trace!(
        policy = &*events.label,
        retry_after_ms = decision.retry_after().as_millis() as u64,
        "refused key answered locally until its wait is up"
    );
    #[cfg(not(feature = "tracing"))]
    let _ = (events, decision);
}

/// The deny cache answered a refusal without calling Redis.
#[cfg(feature = "redis")]
pub(crate) fn denied_locally(events: &DenyCacheEvents) {
    #[cfg(feature = "metrics")]
    count(&events.answered);
    #[cfg(not(feature = "metrics"))]
    let _ = events;
}

/// A request's settling failed: its reservation stands. Said at most once
/// per [`LOUD_INTERVAL`]: a store that fails, fails every request.
pub(crate) fn settle_failed(err: &StoreError) {
    #[cfg(feature = "tracing")]
    if loud_turn(&turns::SETTLE) {
        tracing::warn!(error = %err, "rate-limit settling failed; the reservation stands");
    }
    #[cfg(not(feature = "tracing"))]
    let _ = err;
}

/// A store could not release or renew an in-flight slot: one not
/// released comes back when its lease ends. Said at most once per
/// [`LOUD_INTERVAL`].
#[cfg(feature = "redis")]
pub(crate) fn slot_call_failed(err: &StoreError) {
    #[cfg(feature = "tracing")]
    if loud_turn(&turns::SLOT) {
        tracing::warn!(error = %err, "releasing or renewing an in-flight slot failed; a slot not released frees when its lease ends");
    }
    #[cfg(not(feature = "tracing"))]
    let _ = err;
}

/// Unspent local quota could not be given back to Redis: it counts as
/// spent until its window ends. Said at most once per [`LOUD_INTERVAL`].
#[cfg(feature = "redis")]
pub(crate) fn quota_not_returned(err: &StoreError) {
    #[cfg(feature = "tracing")]
    if loud_turn(&turns::QUOTA) {
        tracing::warn!(error = %err, "giving unspent local quota back to Redis failed; it counts as spent until its window ends");
    }
    #[cfg(not(feature = "tracing"))]
    let _ = err;
}

/// A store failed; its failure policy answers instead. Counted by the
/// failure's kind, and said at most once per [`LOUD_INTERVAL`], since a
/// failure that lasts meets every request: a failure of configuration
/// (credentials, TLS) as an error event, any other as a warning. An
/// outage's start and end are said by [`node_down`] and [`node_up`], and
/// the requests answered meanwhile by [`failures_summed_up`].
#[cfg(feature = "redis")]
pub(crate) fn store_failed(err: &StoreError, failure: crate::store::FailurePolicy) {
    #[cfg(feature = "metrics")]
    metrics::counter!("tower_sliding_window_store_failures_total", "kind" => kind_label(err.kind()))
        .increment(1);
    #[cfg(feature = "tracing")]
    if is_configuration(err.kind()) {
        if loud_turn(&turns::CONFIGURATION) {
            tracing::error!(error = %err, kind = kind_label(err.kind()), ?failure,
                "rate-limit store refuses this configuration; the failure policy answers every request until it is fixed");
        }
    } else if loud_turn(&turns::FAILURE) {
        tracing::warn!(error = %err, ?failure, "rate-limit store failed; the failure policy answers");
    }
    #[cfg(not(feature = "tracing"))]
    let _ = (err, failure);
}

/// How many requests the failure policy answered (`failed`, then reset)
/// since this was last said, at most once a turn (`turn`, every 10 s):
/// never a line per request.
#[cfg(feature = "redis")]
pub(crate) fn failures_summed_up(
    failed: &std::sync::atomic::AtomicU64,
    turn: &std::sync::atomic::AtomicU64,
) {
    #[cfg(feature = "tracing")]
    if loud_turn(turn) {
        let requests = failed.swap(0, std::sync::atomic::Ordering::Relaxed);
        tracing::warn!(
            requests,
            "rate-limit store: requests answered by the failure policy since the last such line"
        );
    }
    #[cfg(not(feature = "tracing"))]
    let _ = (failed, turn);
}

/// A Redis node was found out of reach: its keys are answered by the
/// failure policy until a probe finds it.
#[cfg(feature = "redis")]
pub(crate) fn node_down(node: &str) {
    #[cfg(feature = "tracing")]
    tracing::warn!(
        node,
        "rate-limit store: Redis unreachable; answering by the failure policy"
    );
    #[cfg(not(feature = "tracing"))]
    let _ = node;
}

/// A Redis node answered a probe again.
#[cfg(feature = "redis")]
pub(crate) fn node_up(node: &str) {
    #[cfg(feature = "tracing")]
    tracing::info!(node, "rate-limit store: Redis answers again");
    #[cfg(not(feature = "tracing"))]
    let _ = node;
}

/// The live instances a heartbeat counted, as a gauge by prefix.
#[cfg(feature = "redis")]
pub(crate) fn live_instances(prefix: &str, live: usize) {
    #[cfg(feature = "metrics")]
    metrics::gauge!("tower_sliding_window_live_instances", "prefix" => prefix.to_owned())
        .set(live as f64);
    #[cfg(not(feature = "metrics"))]
    let _ = (prefix, live);
}

/// A heartbeat got an answer other than a count. Said at most once per
/// [`LOUD_INTERVAL`].
#[cfg(feature = "redis")]
pub(crate) fn heartbeat_failed(err: &StoreError) {
    #[cfg(feature = "tracing")]
    if loud_turn(&turns::HEARTBEAT) {
        tracing::warn!(error = %err, "rate-limit store: heartbeat failed");
    }
    #[cfg(not(feature = "tracing"))]
    let _ = err;
}

/// How often at most each kind of failure event is said.
#[cfg(feature = "tracing")]
const LOUD_INTERVAL: std::time::Duration = std::time::Duration::from_secs(10);

#[cfg(all(feature = "redis", feature = "tracing"))]
fn is_configuration(kind: crate::store::StoreErrorKind) -> bool {
    use crate::store::StoreErrorKind::{Authentication, Config, Tls};
    matches!(kind, Authentication | Config | Tls)
}

/// Microseconds of this process's time at which each kind of event may be
/// said again: kinds take turns of their own, so that a flood of one never
/// hides another.
#[cfg(feature = "tracing")]
mod turns {
    use std::sync::atomic::AtomicU64;

    pub(super) static SETTLE: AtomicU64 = AtomicU64::new(0);
    #[cfg(feature = "redis")]
    pub(super) static SLOT: AtomicU64 = AtomicU64::new(0);
    #[cfg(feature = "redis")]
    pub(super) static CONFIGURATION: AtomicU64 = AtomicU64::new(0);
    #[cfg(feature = "redis")]
    pub(super) static FAILURE: AtomicU64 = AtomicU64::new(0);
    #[cfg(feature = "redis")]
    pub(super) static HEARTBEAT: AtomicU64 = AtomicU64::new(0);
    #[cfg(feature = "redis")]
    pub(super) static QUOTA: AtomicU64 = AtomicU64::new(0);
}

/// Whether an event whose turn is `next` may be said now: the first time,
/// and then once each [`LOUD_INTERVAL`] of this process's time.
#[cfg(feature = "tracing")]
fn loud_turn(next: &std::sync::atomic::AtomicU64) -> bool {
    use std::sync::atomic::Ordering;
    use std::sync::OnceLock;
    static START: OnceLock<std::time::Instant> = OnceLock::new();
    let now = u64::try_from(
        START
            .get_or_init(std::time::Instant::now)
            .elapsed()
            .as_micros(),
    )
    .unwrap_or(u64::MAX);
    let due = next.load(Ordering::Relaxed);
    let interval = LOUD_INTERVAL.as_micros() as u64;
    now >= due
        && next
            .compare_exchange(
                due,
                now.saturating_add(interval),
                Ordering::Relaxed,
                Ordering::Relaxed,
            )
            .is_ok()
}

/// The `kind` label of a store failure.
#[cfg(all(feature = "redis", any(feature = "metrics", feature = "tracing")))]
fn kind_label(kind: crate::store::StoreErrorKind) -> &'static str {
    use crate::store::StoreErrorKind::*;
    match kind {
        Timeout => "timeout",
        Connection => "connection",
        Malformed => "malformed",
        Authentication => "authentication",
        Tls => "tls",
        Config => "config",
        Other => "other",
    }
}

/// A layer that waits was polled outside a tokio runtime, where it has no
/// timer to wait on: its refusals are answered at once. Said once a
/// process, as a program without a runtime would say it on every refusal.
pub(crate) fn cannot_wait() {
    #[cfg(feature = "tracing")]
    {
        static SAID: std::sync::Once = std::sync::Once::new();
        SAID.call_once(|| {
            tracing::warn!("rate-limit wait_up_to: no tokio runtime to wait in; refusing at once");
        });
    }
}
