//! The Redis store's deny cache: a refused key is answered locally until its
//! wait is up, with the decision Redis would have given, in bounded memory.
#![cfg(feature = "redis")]

#[path = "support/redis_server.rs"]
mod redis_server;
#[path = "support/stores.rs"]
mod stores;
#[path = "support/xorshift.rs"]
mod xorshift;

use std::time::Duration;

use redis_server::{shared_url, Server};
use stores::{policy, redis_store, ALGORITHMS};
use tower_sliding_window::{
    Algorithm, Decision, Limit, ManualClock, Origin, Policy, RedisStore, Store,
};
use xorshift::XorShift;

/// Script calls the server has run to an answer.
fn script_calls(server: &Server) -> u64 {
    server.decision_scripts()
}

async fn private_store(server: &Server, clock: &ManualClock) -> RedisStore {
    redis_store(&server.url(), "deny-cache", clock).await
}

/// The policies the flood runs under: each algorithm, and each with a
/// penalty, the cache's best case.
fn flood_policies() -> Vec<Policy> {
    ALGORITHMS
        .iter()
        .flat_map(|&algorithm| {
            let policy = Policy::new(algorithm, [Limit::per_minute(10)]).unwrap();
            [policy.clone(), policy.with_penalty(Duration::from_secs(30))]
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_one_refused_key_costs_redis_a_call_per_hundred_refusals() {
    let server = tokio::task::spawn_blocking(Server::start).await.unwrap();
    for policy in flood_policies() {
        for cache_on in [true, false] {
            let clock = ManualClock::new();
            let mut store = private_store(&server, &clock).await;
            if !cache_on {
                store = store.with_deny_cache(0);
            }
            let before = script_calls(&server);
            let (mut refused, mut normal) = (0u64, 0u64);
            // 10 s of one key at 1,000 requests a second, among clients
            // that stay within their limit.
            for i in 0..10_000u64 {
                clock.set(Duration::from_millis(i));
                let decision = store.decide("attacker", &policy).await.unwrap();
                refused += u64::from(!decision.is_allowed());
                if i % 100 == 0 {
                    let client = format!("client-{}", i / 100);
                    assert!(store.decide(client, &policy).await.unwrap().is_allowed());
                    normal += 1;
                }
            }
            // Ten at once, and for the bucket without a penalty one more
            // token refilled 6 s in.
            let refilled =
                policy.algorithm() == Algorithm::TokenBucket && policy.penalty().is_none();
            assert_eq!(refused, 10_000 - 10 - u64::from(refilled), "{policy:?}");
            let calls = script_calls(&server) - before;
            if cache_on {
                assert!(
                    calls <= normal + 10 + refused / 100,
                    "{policy:?}: {calls} calls for {refused} refusals and {normal} other requests"
                );
            } else {
                assert_eq!(calls, normal + 10_000, "{policy:?}: every decision a call");
            }
        }
    }
}

/// Random traffic on a few keys, with peeks, penalties and a clock that
/// sometimes steps back: a store with the cache decides exactly as one
/// without, and spares calls doing it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn decisions_are_the_same_with_and_without_the_cache() {
    let (cached_server, plain_server) =
        tokio::task::spawn_blocking(|| (Server::start(), Server::start()))
            .await
            .unwrap();
    let mut decisions = 0;
    for (seed, algorithm) in [
        (3u64, ALGORITHMS[0]),
        (5, ALGORITHMS[1]),
        (7, ALGORITHMS[2]),
        (11, ALGORITHMS[3]),
    ] {
        for penalty in [None, Some(Duration::from_millis(1_500))] {
            let clock = ManualClock::new();
            let cached = private_store(&cached_server, &clock).await;
            let plain = private_store(&plain_server, &clock)
                .await
                .with_deny_cache(0);
            let mut policy = policy(algorithm, &[(3, 1_000), (8, 10_000)]);
            if let Some(penalty) = penalty {
                policy = policy.with_penalty(penalty);
            }
            let mut rng = XorShift(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15));
            let mut now = 0u64;
            for _ in 0..800 {
                let r = rng.next();
                now = match r % 10 {
                    0..=4 => now + r % 50_000,
                    5..=7 => now + r % 700_000,
                    8 => now.saturating_sub(r % 2_000_000),
                    _ => now + r % 4_000_000,
                };
                clock.set(Duration::from_micros(now));
                let key = format!("client-{}", (r >> 32) % 3);
                let peek = (r >> 16).is_multiple_of(5);
                let judge = |store: &RedisStore| {
                    if peek {
                        store.peek(key.clone(), &policy)
                    } else {
                        store.decide(key.clone(), &policy)
                    }
                };
                let with_cache: Decision = judge(&cached).await.unwrap();
                let without: Decision = judge(&plain).await.unwrap();
                assert_eq!(with_cache, without, "{policy:?} at {now} µs, peek {peek}");
                decisions += 1;
            }
        }
    }
    let (with_cache, without) = (script_calls(&cached_server), script_calls(&plain_server));
    assert_eq!(
        without, decisions,
        "one call per decision without the cache"
    );
    assert!(
        with_cache < without * 3 / 4,
        "the cache spared too few calls: {with_cache} of {without}"
    );
    println!(
        "deny cache: {decisions} decisions identical, {with_cache} calls instead of {without}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_distinct_refused_keys_keeps_the_cache_bounded() {
    let clock = ManualClock::new();
    let store = redis_store(&shared_url(), "deny-bounded", &clock)
        .await
        .with_deny_cache(64);
    let policy = Policy::new(Algorithm::SlidingCounter, [Limit::per_minute(1)]).unwrap();
    let mut most = 0;
    for i in 0..1_000 {
        let key = format!("bot-{i}");
        assert!(store
            .decide(key.clone(), &policy)
            .await
            .unwrap()
            .is_allowed());
        assert!(!store.decide(key, &policy).await.unwrap().is_allowed());
        most = most.max(store.denied_keys());
    }
    assert!(most <= 64, "the cache held {most} keys");
    assert!(most >= 32, "the cache held only {most} keys: is it on?");
    // The newest refusal is among those held, and answered locally.
    assert!(!store.decide("bot-999", &policy).await.unwrap().is_allowed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_key_is_judged_by_redis_again_the_moment_its_wait_is_up() {
    let server = tokio::task::spawn_blocking(Server::start).await.unwrap();
    for algorithm in ALGORITHMS {
        let clock = ManualClock::new();
        let store = private_store(&server, &clock).await;
        let policy = Policy::new(algorithm, [Limit::per_second(2)]).unwrap();
        clock.set(Duration::from_millis(250));
        for _ in 0..2 {
            assert!(store.decide("k", &policy).await.unwrap().is_allowed());
        }
        let refusal = store.decide("k", &policy).await.unwrap();
        assert!(!refusal.is_allowed());
        let calls = script_calls(&server);
        let wait = refusal.retry_after();
        clock.advance(wait - Duration::from_micros(1));
        let still = store.decide("k", &policy).await.unwrap();
        assert_eq!(
            still.retry_after(),
            Duration::from_micros(1),
            "{algorithm:?}"
        );
        assert_eq!(
            script_calls(&server),
            calls,
            "{algorithm:?}: answered locally"
        );
        clock.advance(Duration::from_micros(1));
        assert!(
            store.decide("k", &policy).await.unwrap().is_allowed(),
            "{algorithm:?}"
        );
        assert_eq!(
            script_calls(&server),
            calls + 1,
            "{algorithm:?}: Redis judged it"
        );
    }
}

/// A plan that moves a key to another policy (other limits, or the same
/// limits under another name) finds that policy's windows, not the refusal
/// the old one left in the cache.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_moved_to_another_policy_is_not_answered_from_the_old_refusal() {
    let clock = ManualClock::new();
    let store = redis_store(&shared_url(), "deny-plan", &clock).await;
    let strict = Policy::new(Algorithm::SlidingLog, [Limit::per_minute(1)]).unwrap();
    let renamed = strict.clone().named("renamed");
    let generous = Policy::new(Algorithm::SlidingLog, [Limit::per_minute(5)]).unwrap();
    assert!(store.decide("k", &strict).await.unwrap().is_allowed());
    assert!(!store.decide("k", &strict).await.unwrap().is_allowed());
    assert!(!store.decide("k", &strict).await.unwrap().is_allowed());
    assert!(store.decide("k", &generous).await.unwrap().is_allowed());
    assert!(store.decide("k", &renamed).await.unwrap().is_allowed());
    let penalised = strict.with_penalty(Duration::from_secs(60));
    assert!(store.decide("k", &penalised).await.unwrap().is_allowed());
    let refusal = store.decide("k", &penalised).await.unwrap();
    assert_eq!(refusal.origin(), Origin::Limits);
    let during = store.decide("k", &penalised).await.unwrap();
    assert_eq!(
        during.origin(),
        Origin::Penalty,
        "the cache keeps the origin"
    );
    assert_eq!(during.retry_after(), Duration::from_secs(60));
}

#[cfg(feature = "metrics")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals_answered_locally_are_counted_by_policy() {
    use metrics_util::debugging::{DebugValue, DebuggingRecorder};

    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    metrics::set_global_recorder(recorder).unwrap();
    let clock = ManualClock::new();
    let store = redis_store(&shared_url(), "deny-metrics", &clock).await;
    let policy = Policy::new(Algorithm::FixedWindow, [Limit::per_minute(1)])
        .unwrap()
        .named("deny-metrics");
    for _ in 0..6 {
        store.decide("k", &policy).await.unwrap();
    }
    let counted: Vec<_> = snapshotter
        .snapshot()
        .into_vec()
        .into_iter()
        .filter(|(key, ..)| key.key().name() == "tower_sliding_window_denied_locally_total")
        .map(|(key, _, _, value)| {
            let labels: Vec<_> = key
                .key()
                .labels()
                .map(|label| format!("{}={}", label.key(), label.value()))
                .collect();
            (labels, value)
        })
        .collect();
    // One accepted, one refused by Redis, four answered locally.
    assert_eq!(
        counted,
        vec![(
            vec!["policy=deny-metrics".to_owned()],
            DebugValue::Counter(4)
        )]
    );
}

/// Quota that a settling gives back is seen at once: the refusal the cache
/// held for the key is forgotten.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_settling_that_gives_quota_back_is_seen_at_once() {
    let server = tokio::task::spawn_blocking(Server::start).await.unwrap();
    for algorithm in ALGORITHMS {
        let clock = ManualClock::new();
        let store = private_store(&server, &clock).await;
        let policy = Policy::new(algorithm, [Limit::per_minute(10)]).unwrap();
        let binding = Store::<&str>::bind(&store, &policy);
        clock.set(Duration::from_secs(1));
        let reserved = store.decide_cost("k", &policy, 10).await.unwrap();
        assert!(reserved.is_allowed(), "{algorithm:?}");
        assert!(!store.decide("k", &policy).await.unwrap().is_allowed());
        let calls = script_calls(&server);
        assert!(!store.decide("k", &policy).await.unwrap().is_allowed());
        assert_eq!(
            script_calls(&server),
            calls,
            "{algorithm:?}: answered locally"
        );
        let settled = store
            .settle_bound("k", &binding, &reserved, 10, 4)
            .await
            .unwrap();
        assert_eq!(settled.remaining(), 6, "{algorithm:?}");
        assert!(
            store.decide("k", &policy).await.unwrap().is_allowed(),
            "{algorithm:?}"
        );
        assert_eq!(
            script_calls(&server),
            calls + 2,
            "{algorithm:?}: settled, then judged by Redis"
        );
    }
}
