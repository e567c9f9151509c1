//! In-flight slots on Redis: leases several instances share, that come
//! back after a crash, are renewed while held, and meet the failure
//! policies. Times here are Redis's own (`TIME`), so the waits are real.
#![cfg(feature = "redis")]

#[path = "support/redis_server.rs"]
mod redis_server;

use std::time::{Duration, Instant};

use redis_server::{shared_url, unique_prefix, Server};
use tower_sliding_window::{Decision, FailurePolicy, Origin, Policy, RedisStore, Store};

async fn store(url: &str, prefix: &str) -> RedisStore {
    RedisStore::connect(url)
        .await
        .unwrap_or_else(|e| panic!("the Redis tests need a Redis at {url} (set REDIS_URL): {e}"))
        .with_prefix(prefix)
        .with_failure_policy(FailurePolicy::FailClosed)
        .with_timeout(Duration::from_secs(5))
}

async fn decide(store: &RedisStore, key: &str, policy: &Policy) -> Decision {
    store.decide(key, policy).await.unwrap()
}

fn release(store: &RedisStore, key: &str, policy: &Policy, admitted: &Decision) {
    let binding = Store::<&str>::bind(store, policy);
    store.release_bound(key, &binding, admitted);
}

/// Asks until `key` is admitted again; how long that took.
async fn until_admitted(store: &RedisStore, key: &str, policy: &Policy) -> Duration {
    let start = Instant::now();
    loop {
        let decision = decide(store, key, policy).await;
        if decision.is_allowed() {
            release(store, key, policy, &decision);
            return start.elapsed();
        }
        assert_eq!(decision.origin(), Origin::InFlight);
        assert!(start.elapsed() < Duration::from_secs(10), "never admitted");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Two instances on one prefix, 64 requests at once: exactly the cap is
/// admitted, and every slot comes back once released.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_instances_share_one_cap_exactly() {
    let prefix = unique_prefix("lease-share");
    let stores = [
        store(&shared_url(), &prefix).await,
        store(&shared_url(), &prefix).await,
    ];
    let policy = Policy::in_flight_only(5);
    let tasks: Vec<_> = (0..64)
        .map(|i| {
            let (store, policy) = (stores[i % 2].clone(), policy.clone());
            tokio::spawn(async move { (i % 2, decide(&store, "shared", &policy).await) })
        })
        .collect();
    let mut admitted = Vec::new();
    for task in tasks {
        let (by, decision) = task.await.unwrap();
        if decision.is_allowed() {
            assert!(decision.holds_slot());
            admitted.push((by, decision));
        } else {
            assert_eq!(decision.origin(), Origin::InFlight);
            assert_eq!(decision.limit(), None);
        }
    }
    assert_eq!(admitted.len(), 5);
    // A person reading the key sees the five slots and their expiries.
    let state = stores[0].state(&"shared", &policy).await.unwrap().unwrap();
    let shown = format!("{state:?}");
    assert_eq!(shown.matches("Lease {").count(), 5, "{shown}");
    // Freed by whichever instance took them.
    for (by, decision) in &admitted {
        release(&stores[*by], "shared", &policy, decision);
    }
    let mut again = Vec::new();
    for i in 0..5 {
        let store = &stores[i % 2];
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let decision = decide(store, "shared", &policy).await;
            if decision.is_allowed() {
                again.push(decision);
                break;
            }
            assert!(Instant::now() < deadline, "slot {i} never came back");
        }
    }
    assert!(!decide(&stores[0], "shared", &policy).await.is_allowed());
}

/// A process that holds two slots and dies (`abort`, no cleanup) loses
/// them once their lease ends, and not before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashed_instance_loses_its_slots_after_the_lease() {
    const LEASE: Duration = Duration::from_millis(600);
    let policy = Policy::in_flight_only(2);
    if let Ok(prefix) = std::env::var("TSW_HOLD_AND_ABORT") {
        // The child: take both slots, say so, and die holding them.
        let store = store(&shared_url(), &prefix).await.with_lease(LEASE);
        assert!(decide(&store, "crash", &policy).await.is_allowed());
        assert!(decide(&store, "crash", &policy).await.is_allowed());
        std::process::abort();
    }
    let prefix = unique_prefix("lease-crash");
    let child = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "a_crashed_instance_loses_its_slots_after_the_lease",
        ])
        .args(["--nocapture", "--test-threads", "1"])
        .env("TSW_HOLD_AND_ABORT", &prefix)
        .status()
        .unwrap();
    let died = Instant::now();
    assert!(!child.success(), "the child aborts");
    let store = store(&shared_url(), &prefix).await;
    let refused = decide(&store, "crash", &policy).await;
    assert_eq!(
        refused.origin(),
        Origin::InFlight,
        "the dead still hold both"
    );
    until_admitted(&store, "crash", &policy).await;
    let freed = died.elapsed();
    // The slots were taken just before the child died.
    assert!(freed >= LEASE / 2, "freed {freed:?} after the child died");
    assert!(
        freed < LEASE + Duration::from_secs(3),
        "freed {freed:?} after the child died"
    );
}

/// A slot held longer than its lease stays held: the store renews every
/// slot the instance holds, on every key, in one call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn held_slots_are_renewed_in_one_call() {
    const LEASE: Duration = Duration::from_millis(300);
    let server = tokio::task::spawn_blocking(Server::start).await.unwrap();
    let store = store(&server.url(), "renew").await.with_lease(LEASE);
    let policy = Policy::in_flight_only(10);
    let mut held = Vec::new();
    for key in ["a", "b"] {
        for _ in 0..10 {
            held.push((key, decide(&store, key, &policy).await));
        }
    }
    assert!(held.iter().all(|(_, decision)| decision.holds_slot()));
    let monitor = tokio::task::block_in_place(|| server.monitor());
    let start = Instant::now();
    tokio::time::sleep(4 * LEASE).await;
    let rounds = (start.elapsed().as_millis() / (LEASE / 3).as_millis()) as u64;
    // Script calls on a set of slots, sent by the store (not run inside a
    // script): renewals only, as no request is judged meanwhile.
    let lines = tokio::task::block_in_place(|| monitor.finish());
    let renewals = lines
        .iter()
        .filter(|line| !line.contains(" lua]") && line.contains(":leases\""))
        .filter(|line| line.to_lowercase().contains("\"evalsha\""))
        .count() as u64;
    // Two keys a round, not twenty slots a round.
    assert!(renewals >= 2, "{renewals} renewals");
    assert!(
        renewals <= 2 * (rounds + 2),
        "{renewals} renewals in {rounds} rounds"
    );
    for key in ["a", "b"] {
        let refused = decide(&store, key, &policy).await;
        assert_eq!(refused.origin(), Origin::InFlight, "{key} still holds ten");
    }
    for (key, decision) in &held {
        release(&store, key, &policy, decision);
    }
    until_admitted(&store, "a", &policy).await;
    println!("{renewals} renewal calls for 20 slots on 2 keys over {rounds} rounds");
}

/// With Redis gone, fail-open admits holding no slot, fail-closed fails,
/// and the fallback caps in flight locally, with origin `Fallback`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failure_policies_under_a_cap() {
    let mut server = tokio::task::spawn_blocking(Server::start).await.unwrap();
    let url = server.url();
    let policy = Policy::in_flight_only(2);
    let open = store(&url, "cap-open")
        .await
        .with_failure_policy(FailurePolicy::FailOpen)
        .with_timeout(Duration::from_millis(100));
    let closed = store(&url, "cap-closed")
        .await
        .with_timeout(Duration::from_millis(100));
    let fallback = store(&url, "cap-fallback")
        .await
        .with_failure_policy(FailurePolicy::Fallback)
        .with_timeout(Duration::from_millis(100));
    for store in [&open, &closed, &fallback] {
        assert_eq!(decide(store, "k", &policy).await.origin(), Origin::Limits);
    }
    server.kill();
    let admitted = decide(&open, "k", &policy).await;
    assert!(admitted.is_allowed() && !admitted.holds_slot());
    assert_eq!(admitted.origin(), Origin::FailOpen);
    assert!(closed.decide("k", &policy).await.is_err());
    let first = decide(&fallback, "k", &policy).await;
    let second = decide(&fallback, "k", &policy).await;
    let third = decide(&fallback, "k", &policy).await;
    assert!(first.is_allowed() && second.is_allowed() && !third.is_allowed());
    assert_eq!(third.origin(), Origin::Fallback);
    release(&fallback, "k", &policy, &first);
    let fourth = decide(&fallback, "k", &policy).await;
    assert!(fourth.is_allowed() && fourth.holds_slot());
    assert_eq!(fourth.origin(), Origin::Fallback);
}

/// A refusal for the cap is never answered from the deny cache: the next
/// request after a release is judged by Redis, and admitted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_deny_cache_never_remembers_a_cap_refusal() {
    let store = store(&shared_url(), &unique_prefix("lease-deny")).await;
    let policy = Policy::in_flight_only(1);
    let held = decide(&store, "d", &policy).await;
    assert_eq!(
        decide(&store, "d", &policy).await.origin(),
        Origin::InFlight
    );
    assert_eq!(store.denied_keys(), 0);
    release(&store, "d", &policy, &held);
    until_admitted(&store, "d", &policy).await;
}

/// A request waiting for a slot on Redis asks again at a bounded rate (25
/// to 50 ms apart), never spinning, and is admitted once the slot frees.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_polls_redis_at_a_bounded_rate() {
    use tower::{service_fn, Layer, ServiceExt};
    use tower_sliding_window::SlidingWindowLayer;

    let server = tokio::task::spawn_blocking(Server::start).await.unwrap();
    let store = store(&server.url(), "lease-wait").await;
    let gate = std::sync::Arc::new(tokio::sync::Semaphore::new(0));
    let held = std::sync::Arc::clone(&gate);
    let svc = SlidingWindowLayer::in_flight_only(1, |_: &http::Request<()>| Some("w".to_owned()))
        .store(store)
        .wait_up_to(Duration::from_secs(10))
        .wrap_body()
        .layer(service_fn(move |_: http::Request<()>| {
            let held = std::sync::Arc::clone(&held);
            async move {
                held.acquire().await.unwrap().forget();
                Ok::<_, std::convert::Infallible>(http::Response::new(String::new()))
            }
        }));
    let first = tokio::spawn(svc.clone().oneshot(http::Request::new(())));
    tokio::time::sleep(Duration::from_millis(200)).await;
    let second = tokio::spawn(svc.clone().oneshot(http::Request::new(())));
    tokio::time::sleep(Duration::from_millis(100)).await;
    let before = server.command_calls("evalsha");
    tokio::time::sleep(Duration::from_secs(1)).await;
    let asked = server.command_calls("evalsha") - before;
    // One waiter for a second: 20 to 40 asks, and a heartbeat or two.
    assert!((10..=45).contains(&asked), "{asked} calls in a second");
    gate.add_permits(2);
    drop(first.await.unwrap().unwrap());
    let second = tokio::time::timeout(Duration::from_secs(5), second).await;
    assert_eq!(
        second.unwrap().unwrap().unwrap().status(),
        http::StatusCode::OK
    );
}
