//! The Redis store when things go wrong or change under it: a script cache
//! flushed (and never grown by policies), server time, keys expiring on
//! Redis's clock, and the failure policies against a server that dies and
//! comes back.
#![cfg(feature = "redis")]

#[path = "support/redis_server.rs"]
mod redis_server;
#[path = "support/stores.rs"]
mod stores;

use std::time::{Duration, Instant};

use http::{Request, Response, StatusCode};
use redis_server::{shared_url, unique_prefix, Server};
use stores::{policy, redis_store, ALGORITHMS};
use tower::{service_fn, ServiceBuilder, ServiceExt};
use tower_sliding_window::{
    Algorithm, FailurePolicy, KeyState, ManualClock, MemoryStore, Origin, Policy, RedisStore,
    SlidingWindowLayer, Store,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn script_flush_is_recovered_transparently() {
    let server = tokio::task::spawn_blocking(Server::start).await.unwrap();
    let clock = ManualClock::new();
    let store = redis_store(&server.url(), "faults", &clock).await;
    let policy = policy(Algorithm::SlidingCounter, &[(2, 60_000)]);
    assert!(store.decide("k", &policy).await.unwrap().is_allowed());
    server.cli(&["SCRIPT", "FLUSH"]).unwrap();
    let decision = store.decide("k", &policy).await.unwrap();
    assert!(decision.is_allowed());
    assert_eq!(decision.origin(), Origin::Limits);
    assert!(
        !store.decide("k", &policy).await.unwrap().is_allowed(),
        "state survived the flush"
    );
}

/// Tenants with limits of their own cost Redis's script cache nothing:
/// every algorithm, with and without a penalty, judged, peeked at, charged
/// a cost and settled under 2,000 distinct policies, leaves no more scripts
/// than the store's fixed set.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn policies_per_tenant_leave_only_the_fixed_scripts_cached() {
    let server = tokio::task::spawn_blocking(Server::start).await.unwrap();
    let clock = ManualClock::new();
    let store = redis_store(&server.url(), "scripts", &clock).await;
    server.cli(&["SCRIPT", "FLUSH"]).unwrap();
    assert_eq!(
        server
            .scripts_cached()
            .expect("INFO memory counts the cached scripts"),
        0
    );
    for tenant in 0..2_000_u32 {
        let algorithm = ALGORITHMS[tenant as usize % ALGORITHMS.len()];
        let mut policy = policy(algorithm, &[(5 + tenant, 60_000), (10_000, 3_600_000)]);
        if tenant % 7 == 0 {
            policy = policy.with_penalty(Duration::from_secs(30));
        }
        let key = format!("tenant-{tenant}");
        let admitted = store.decide_cost(key.as_str(), &policy, 3).await.unwrap();
        assert!(admitted.is_allowed());
        let binding = Store::<&str>::bind(&store, &policy);
        store
            .settle_bound(key.as_str(), &binding, &admitted, 3, 1)
            .await
            .unwrap();
        assert!(store
            .decide(key.as_str(), &policy)
            .await
            .unwrap()
            .is_allowed());
        assert!(store
            .peek(key.as_str(), &policy)
            .await
            .unwrap()
            .is_allowed());
    }
    let cached = server
        .scripts_cached()
        .expect("INFO memory counts the cached scripts");
    let fixed = RedisStore::script_sources().len() as u64;
    println!("{cached} scripts cached after 2,000 policies");
    assert!(
        cached <= fixed,
        "{cached} scripts cached, {fixed} in the set"
    );
}

/// While Redis is down, the fallback store judges a request at its cost:
/// requests of cost 4 against a limit of 10 pass twice, not four times.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fallback_judges_a_request_at_its_cost() {
    let mut server = tokio::task::spawn_blocking(Server::start).await.unwrap();
    let clock = ManualClock::new();
    let store = redis_store(&server.url(), "fallback-cost", &clock)
        .await
        .with_failure_policy(FailurePolicy::Fallback)
        .with_timeout(Duration::from_millis(100));
    for algorithm in ALGORITHMS {
        let policy = policy(algorithm, &[(10, 60_000)]);
        // Judged by Redis first, once the connection is back.
        let deadline = Instant::now() + Duration::from_secs(10);
        while store.decide("up", &policy).await.unwrap().origin() != Origin::Limits {
            assert!(Instant::now() < deadline, "no recovery");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        server.kill();
        // The fallback answers as a memory store would.
        let memory = MemoryStore::with_clock(clock.clone());
        let mut passed = 0;
        for _ in 0..4 {
            let decision = store.decide_cost("down", &policy, 4).await.unwrap();
            assert_eq!(decision.origin(), Origin::Fallback, "{algorithm:?}");
            let expected = memory.decide_cost("down", &policy, 4).await.unwrap();
            assert_eq!(
                decision.is_allowed(),
                expected.is_allowed(),
                "{algorithm:?}"
            );
            passed += usize::from(decision.is_allowed());
        }
        assert_eq!(passed, 2, "{algorithm:?}");
        // A cost of nothing is a peek, which records nothing.
        for _ in 0..2 {
            let peek = store.decide_cost("down", &policy, 0).await.unwrap();
            let expected = memory.decide_cost("down", &policy, 0).await.unwrap();
            assert!(peek.is_allowed(), "{algorithm:?}");
            assert_eq!(peek.remaining(), expected.remaining(), "{algorithm:?}");
        }
        server.restart();
        clock.advance(Duration::from_secs(120));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_time_is_used_by_default() {
    let store = RedisStore::connect(&shared_url())
        .await
        .expect("Redis")
        .with_prefix(&unique_prefix("server-time"))
        .with_failure_policy(FailurePolicy::FailClosed)
        .with_timeout(Duration::from_secs(5));
    for algorithm in ALGORITHMS {
        let policy = policy(algorithm, &[(3, 10_000)]);
        for _ in 0..3 {
            assert!(
                store.decide("t", &policy).await.unwrap().is_allowed(),
                "{algorithm:?}"
            );
        }
        let refused = store.decide("t", &policy).await.unwrap();
        assert!(!refused.is_allowed(), "{algorithm:?}");
        assert!(
            refused.retry_after() > Duration::ZERO
                && refused.retry_after() <= Duration::from_secs(20)
        );
    }
}

/// The scripts renew a key's TTL only when a window rolls (the counter's
/// and the fixed window's windows, the log's longest), or for the bucket
/// when the instant its buckets are full again enters another 5 s step. On
/// server time, through several windows, the key must still outlive every
/// state that matters: checked after each decision, with the server's time
/// and the key's TTL read in one script so that no time passes between them.
/// What the bucket's state needs is `KeyState`'s word, judging the same
/// requests at the times Redis judged them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_outlive_their_state_though_the_ttl_is_renewed_rarely() {
    let server = tokio::task::spawn_blocking(Server::start).await.unwrap();
    let store = RedisStore::connect(&server.url())
        .await
        .expect("Redis")
        .with_failure_policy(FailurePolicy::FailClosed)
        .with_timeout(Duration::from_secs(5));
    let mut connection = redis::Client::open(server.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let time_and_ttl = redis::Script::new(
        "local t = redis.call('TIME') return {t[1] * 1000000 + t[2], redis.call('PTTL', KEYS[1])}",
    );
    // Windows long enough for several checks each on a loaded machine.
    let window_micros = 100_000;
    // A log of up to 32 stamps is read whole, a longer one in ranges.
    let runs = [
        (Algorithm::SlidingLog, 1_000),
        (Algorithm::SlidingLog, 32),
        (Algorithm::SlidingCounter, 1_000),
        (Algorithm::FixedWindow, 1_000),
        // A token every 20 ms: refusals between refills.
        (Algorithm::TokenBucket, 5),
    ];
    for (algorithm, max) in runs {
        let policy = policy(algorithm, &[(max, 100)]);
        let name = store.key_name(&"ttl", &policy);
        let mut state = KeyState::new(algorithm);
        // What matters is the state the last accepted request left.
        let mut accepted_at = 0;
        let (mut renewals, mut checks, mut last_ttl) = (0, 0, 0);
        let (mut windows, mut last_window) = (0, -1);
        // A busy loop across six 100 ms windows: no sleeping, the property
        // holds at every instant.
        while windows < 6 {
            let decision = store.decide("ttl", &policy).await.unwrap();
            let judged_at = decision.decided_at();
            assert_eq!(
                decision,
                state.decide(&policy, judged_at, 1),
                "{algorithm:?}"
            );
            let at = judged_at.as_micros() as i64;
            if at / window_micros != last_window {
                (windows, last_window) = (windows + 1, at / window_micros);
            }
            if decision.is_allowed() {
                accepted_at = at;
            }
            let at = accepted_at;
            let (now, ttl): (i64, i64) = time_and_ttl
                .key(&name)
                .invoke_async(&mut connection)
                .await
                .unwrap();
            // Expiry counts in whole milliseconds: a key with `ttl` ms left
            // at `now` is there until at least `now + ttl` ms.
            let expires_at = now + ttl * 1_000;
            let window_start = at - at % window_micros;
            let needed_until = match algorithm {
                // The newest stamp counts for one window.
                Algorithm::SlidingLog => at + window_micros,
                // This window's count weighs on the next one too.
                Algorithm::SlidingCounter => window_start + 2 * window_micros,
                Algorithm::TokenBucket => {
                    let idle_after = state.idle_after(&policy, judged_at);
                    (judged_at + idle_after).as_micros() as i64
                }
                _ => window_start + window_micros,
            };
            assert!(
                expires_at >= needed_until - 1,
                "{algorithm:?}: the key expires at {expires_at} µs, its state matters until {needed_until}"
            );
            if algorithm == Algorithm::TokenBucket {
                // With a grace of 5 to 10 s after it, to the ms.
                assert!(
                    expires_at >= needed_until + 4_998_000
                        && expires_at <= needed_until + 10_002_000,
                    "the key expires at {expires_at} µs, its state matters until {needed_until}"
                );
            }
            renewals += usize::from(ttl > last_ttl);
            last_ttl = ttl;
            checks += 1;
        }
        // Renewed when a new window starts, not at each request (the
        // bucket's steps are longer than this test).
        assert!(
            algorithm == Algorithm::TokenBucket
                || renewals >= 2 && renewals <= windows && renewals * 5 < checks,
            "{algorithm:?} {max}: {renewals} renewals in {checks} checks over {windows} windows"
        );
        println!("{algorithm:?} {max}: {checks} checks, {renewals} renewals");
    }
}

/// Sends one request through a layer over `store` and times it.
async fn timed_status(
    store: &RedisStore,
    policy: &Policy,
) -> (StatusCode, Duration, Option<Origin>) {
    let layer = SlidingWindowLayer::with_policy(policy.clone(), |_: &Request<()>| Some("faulty"))
        .store(store.clone())
        .decision_extension(true)
        .wrap_body();
    let svc =
        ServiceBuilder::new()
            .layer(layer)
            .service(service_fn(|request: Request<()>| async move {
                let origin = request
                    .extensions()
                    .get::<tower_sliding_window::Decision>()
                    .map(|d| d.origin());
                let mut response = Response::new(());
                response.extensions_mut().insert(origin);
                Ok::<_, std::convert::Infallible>(response)
            }));
    let started = Instant::now();
    let response = svc.oneshot(Request::new(())).await.unwrap();
    let origin = response
        .extensions()
        .get::<Option<Origin>>()
        .copied()
        .flatten();
    (response.status(), started.elapsed(), origin)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failure_policies_hold_while_redis_is_down_and_recover() {
    let mut server = tokio::task::spawn_blocking(Server::start).await.unwrap();
    let clock = ManualClock::new();
    let timeout = Duration::from_millis(100);
    let make = |failure| {
        let url = server.url();
        let clock = clock.clone();
        async move {
            redis_store(&url, "faults", &clock)
                .await
                .with_failure_policy(failure)
                .with_timeout(timeout)
        }
    };
    let open = make(FailurePolicy::FailOpen).await;
    let closed = make(FailurePolicy::FailClosed).await;
    let fallback = make(FailurePolicy::Fallback).await;
    let policy = policy(Algorithm::SlidingLog, &[(2, 60_000)]);
    for store in [&open, &closed, &fallback] {
        assert_eq!(timed_status(store, &policy).await.0, StatusCode::OK);
    }

    let mut worst = Duration::ZERO;
    for (label, stop) in [("killed", true), ("paused", false)] {
        if stop {
            server.kill();
        } else {
            server.pause();
        }
        for _ in 0..3 {
            let (status, took, origin) = timed_status(&open, &policy).await;
            assert_eq!(
                (status, origin),
                (StatusCode::OK, Some(Origin::FailOpen)),
                "fail open, {label}"
            );
            worst = worst.max(took);
            let (status, took, _) = timed_status(&closed, &policy).await;
            assert_eq!(
                status,
                StatusCode::SERVICE_UNAVAILABLE,
                "fail closed, {label}"
            );
            worst = worst.max(took);
        }
        // The fallback limits locally: a fresh local window of 2.
        clock.advance(Duration::from_secs(120));
        let statuses: Vec<(StatusCode, Option<Origin>)> = {
            let mut out = Vec::new();
            for _ in 0..3 {
                let (status, took, origin) = timed_status(&fallback, &policy).await;
                worst = worst.max(took);
                out.push((status, origin));
            }
            out
        };
        assert_eq!(
            statuses[0],
            (StatusCode::OK, Some(Origin::Fallback)),
            "{label}: {statuses:?}"
        );
        assert_eq!(
            statuses[1],
            (StatusCode::OK, Some(Origin::Fallback)),
            "{label}: {statuses:?}"
        );
        assert_eq!(
            statuses[2].0,
            StatusCode::TOO_MANY_REQUESTS,
            "{label}: {statuses:?}"
        );

        if stop {
            server.restart();
        } else {
            server.resume();
        }
        // Reconnection is automatic: decisions come from Redis again.
        clock.advance(Duration::from_secs(120));
        let deadline = Instant::now() + Duration::from_secs(10);
        for store in [&open, &closed, &fallback] {
            loop {
                let (status, _, origin) = timed_status(store, &policy).await;
                if status == StatusCode::OK && origin == Some(Origin::Limits) {
                    break;
                }
                assert!(
                    Instant::now() < deadline,
                    "no recovery after the server was {label}"
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
    println!("worst latency while Redis was down: {worst:?} (timeout {timeout:?})");
    assert!(
        worst <= timeout + Duration::from_millis(250),
        "worst {worst:?}"
    );
}
