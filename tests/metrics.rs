//! The `metrics` counters move as decisions are made, labelled by policy.
#![cfg(feature = "metrics")]

use std::convert::Infallible;
use std::time::Duration;

use http::{Request, Response};
use metrics_util::debugging::{DebugValue, DebuggingRecorder};
use metrics_util::MetricKind;
use tower::{service_fn, ServiceBuilder, ServiceExt};
use tower_sliding_window::{
    Algorithm, Limit, ManualClock, MemoryStore, Policy, SlidingWindowLayer,
};

#[path = "support/failing_store.rs"]
mod failing_store;
use failing_store::FailingStore;

fn key(_: &Request<()>) -> Option<&'static str> {
    Some("secret-client-key")
}

#[tokio::test]
async fn decisions_and_store_errors_are_counted_by_policy_label() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    metrics::set_global_recorder(recorder).unwrap();

    let policy = Policy::new(Algorithm::SlidingLog, [Limit::per_minute(2)])
        .unwrap()
        .named("login");
    let svc = ServiceBuilder::new()
        .layer(
            SlidingWindowLayer::with_policy(policy.clone(), key)
                .store(MemoryStore::with_clock(ManualClock::new()))
                .wrap_body(),
        )
        .service(service_fn(|_: Request<()>| async {
            Ok::<_, Infallible>(Response::new(()))
        }));
    for _ in 0..5 {
        svc.clone().oneshot(Request::new(())).await.unwrap();
    }
    let failing = ServiceBuilder::new()
        .layer(
            SlidingWindowLayer::with_policy(policy, key)
                .store(FailingStore("down"))
                .wrap_body(),
        )
        .service(service_fn(|_: Request<()>| async {
            Ok::<_, Infallible>(Response::new(()))
        }));
    failing.oneshot(Request::new(())).await.unwrap();
    // In shadow mode what would be refused is counted apart, and passes.
    let shadow = ServiceBuilder::new()
        .layer(
            SlidingWindowLayer::new(Limit::per_minute(1), key)
                .named("rollout")
                .shadow_mode(true)
                .store(MemoryStore::with_clock(ManualClock::new()))
                .wrap_body(),
        )
        .service(service_fn(|_: Request<()>| async {
            Ok::<_, Infallible>(Response::new(()))
        }));
    for _ in 0..4 {
        let response = shadow.clone().oneshot(Request::new(())).await.unwrap();
        assert_eq!(response.status(), 200);
    }
    // Limits built per tenant, unnamed: one series, not one per tenant.
    let tenants = ServiceBuilder::new()
        .layer(
            SlidingWindowLayer::new(Limit::per_minute(1), |request: &Request<u32>| {
                Some(*request.body())
            })
            .plan(|tenant: &u32| {
                Policy::new(Algorithm::SlidingCounter, [Limit::per_minute(10 + tenant)]).unwrap()
            })
            .store(MemoryStore::with_clock(ManualClock::new()))
            .wrap_body(),
        )
        .service(service_fn(|_: Request<u32>| async {
            Ok::<_, Infallible>(Response::new(()))
        }));
    for tenant in 0..50 {
        let response = tenants.clone().oneshot(Request::new(tenant)).await.unwrap();
        assert_eq!(response.status(), 200);
    }

    // A request that waits for its turn: counted once, its wait recorded.
    let waiting = ServiceBuilder::new()
        .layer(
            SlidingWindowLayer::new(Limit::new(1, Duration::from_millis(100)).unwrap(), key)
                .named("waiting")
                .algorithm(Algorithm::SlidingLog)
                .wait_up_to(Duration::from_secs(5))
                .wrap_body(),
        )
        .service(service_fn(|_: Request<()>| async {
            Ok::<_, Infallible>(Response::new(()))
        }));
    for _ in 0..2 {
        let response = waiting.clone().oneshot(Request::new(())).await.unwrap();
        assert_eq!(response.status(), 200);
    }

    let mut counts = Vec::new();
    let mut waits = Vec::new();
    for (composite, _, _, value) in snapshotter.snapshot().into_vec() {
        let key = composite.key();
        if let DebugValue::Histogram(values) = &value {
            assert_eq!(key.name(), "tower_sliding_window_wait_seconds");
            let policy: Vec<_> = key.labels().map(|l| l.value().to_owned()).collect();
            waits.push((
                policy,
                values.iter().map(|v| v.into_inner()).collect::<Vec<_>>(),
            ));
            continue;
        }
        assert_eq!(composite.kind(), MetricKind::Counter);
        let labels: Vec<String> = key
            .labels()
            .map(|l| format!("{}={}", l.key(), l.value()))
            .collect();
        assert!(
            !labels.iter().any(|l| l.contains("secret-client-key")),
            "never label by key"
        );
        let DebugValue::Counter(n) = value else {
            panic!("counter expected")
        };
        counts.push((key.name().to_owned(), labels.join(","), n));
    }
    counts.sort();
    assert_eq!(
        counts,
        [
            (
                "tower_sliding_window_decisions_total".to_owned(),
                "policy=login,outcome=allowed".to_owned(),
                2
            ),
            (
                "tower_sliding_window_decisions_total".to_owned(),
                "policy=login,outcome=rejected".to_owned(),
                3
            ),
            (
                "tower_sliding_window_decisions_total".to_owned(),
                "policy=rollout,outcome=allowed".to_owned(),
                1
            ),
            (
                "tower_sliding_window_decisions_total".to_owned(),
                "policy=rollout,outcome=shadow_rejected".to_owned(),
                3
            ),
            (
                "tower_sliding_window_decisions_total".to_owned(),
                "policy=unnamed,outcome=allowed".to_owned(),
                50
            ),
            (
                "tower_sliding_window_decisions_total".to_owned(),
                "policy=waiting,outcome=allowed".to_owned(),
                2
            ),
            (
                "tower_sliding_window_store_errors_total".to_owned(),
                "policy=login".to_owned(),
                1
            ),
        ]
    );
    // The second request slept until the first left the window.
    assert_eq!(waits.len(), 1, "{waits:?}");
    assert_eq!(waits[0].0, ["waiting"]);
    let [slept] = waits[0].1[..] else {
        panic!("one wait recorded: {waits:?}")
    };
    assert!((0.05..=0.101).contains(&slept), "{slept}");
}
