//! The fleet and the outage, against a private redis-server that the tests
//! stop and start: instances count each other, an outage costs each
//! instance at most one slow call, and during it the fallback of N
//! instances admits about one limit in all.
#![cfg(feature = "redis")]

#[path = "support/redis_server.rs"]
mod redis_server;
#[path = "support/stores.rs"]
mod stores;

use std::time::{Duration, Instant};

use redis_server::{unique_prefix, Server};
use stores::{policy, ALGORITHMS};
use tower_sliding_window::{
    Algorithm, FailurePolicy, ManualClock, Origin, Policy, RedisStore, Store, StoreErrorKind,
};

// Long enough that an entry (three heartbeats) outlives a stalled worker
// on a loaded machine.
const HEARTBEAT: Duration = Duration::from_millis(200);
const TIMEOUT: Duration = Duration::from_millis(200);

/// `n` instances sharing one prefix on the server at `url`.
async fn fleet(url: &str, n: usize, failure: FailurePolicy) -> Vec<RedisStore> {
    let prefix = unique_prefix("fleet");
    let mut stores = Vec::new();
    for _ in 0..n {
        let store = RedisStore::connect(url)
            .await
            .unwrap()
            .with_prefix(&prefix)
            .with_heartbeat(HEARTBEAT)
            .with_timeout(TIMEOUT)
            .with_failure_policy(failure);
        stores.push(store);
    }
    stores
}

/// Makes each store call Redis once (its heartbeat runs from when it was
/// built), then waits until every one counts `n` live instances.
async fn until_all_see(stores: &[RedisStore], n: usize) {
    let policy = policy(Algorithm::SlidingCounter, &[(1_000, 60_000)]);
    for store in stores {
        store.decide("join", &policy).await.unwrap();
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    while stores.iter().any(|store| store.live_instances() != n) {
        let seen: Vec<usize> = stores.iter().map(RedisStore::live_instances).collect();
        assert!(
            Instant::now() < deadline,
            "wanted {n} everywhere, saw {seen:?}"
        );
        tokio::time::sleep(HEARTBEAT / 2).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn instances_count_each_other_and_a_dropped_one_leaves() {
    let server = tokio::task::spawn_blocking(Server::start).await.unwrap();
    let mut stores = fleet(&server.url(), 4, FailurePolicy::FailClosed).await;
    // The heartbeats start as the stores are built, so the first may have
    // counted some of the others already; an expected count stands until
    // they count as many.
    let expected = stores[1].clone().with_expected_instances(4);
    assert_eq!(
        expected.live_instances(),
        4,
        "before the heartbeats count 4"
    );
    // A clone is the same instance.
    let clone = stores[0].clone();
    until_all_see(&stores, 4).await;
    assert_eq!(clone.live_instances(), 4);
    let key = format!("{}:instances", unique_prefix_of(&stores[0]));
    assert_eq!(server.cli(&["ZCARD", &key]).as_deref(), Some("4"));

    drop(stores.pop());
    until_all_see(&stores, 3).await;
    assert_eq!(server.cli(&["ZCARD", &key]).as_deref(), Some("3"));
    // The last clone of an instance is what makes it leave.
    drop(stores.remove(0));
    tokio::time::sleep(HEARTBEAT * 4).await;
    assert_eq!(stores[0].live_instances(), 3, "a clone still runs");
    drop(clone);
    until_all_see(&stores, 2).await;
}

/// A builder that leaves the heartbeat as it was keeps the store's fleet:
/// what the heartbeats counted stands, and the set never holds a second
/// entry for the store.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn builders_that_leave_the_heartbeat_keep_the_fleet() {
    let server = tokio::task::spawn_blocking(Server::start).await.unwrap();
    let prefix = unique_prefix("chain");
    let store = RedisStore::connect(&server.url())
        .await
        .unwrap()
        .with_prefix(&prefix)
        .with_heartbeat(HEARTBEAT)
        .with_expected_instances(4);
    assert_eq!(store.live_instances(), 4, "expected, before any heartbeat");
    let deadline = Instant::now() + Duration::from_secs(10);
    while store.live_instances() != 1 {
        assert!(
            Instant::now() < deadline,
            "three heartbeats never counted 1"
        );
        tokio::time::sleep(HEARTBEAT / 4).await;
    }
    let store = store
        .with_failure_policy(FailurePolicy::Fallback)
        .with_timeout(TIMEOUT / 2)
        .with_deny_cache(16)
        .with_lease(Duration::from_secs(5));
    assert_eq!(store.live_instances(), 1, "the count stands");
    let key = format!("{prefix}:instances");
    tokio::time::sleep(HEARTBEAT * 2).await;
    assert_eq!(server.cli(&["ZCARD", &key]).as_deref(), Some("1"));
    // A new heartbeat is a new fleet, counted afresh.
    let store = store.with_heartbeat(HEARTBEAT / 2);
    assert_eq!(store.live_instances(), 4, "expected again");
}

/// The prefix a store was given, read from a key name it makes.
fn unique_prefix_of(store: &RedisStore) -> String {
    let policy = policy(Algorithm::SlidingCounter, &[(1, 1_000)]);
    let name = store.key_name(&"k", &policy);
    name.split(":{").next().unwrap().to_owned()
}

/// Times each of `calls` decisions of `store` for `key`.
async fn timed(store: &RedisStore, policy: &Policy, calls: usize) -> Vec<(Duration, Origin)> {
    let mut out = Vec::new();
    for _ in 0..calls {
        let started = Instant::now();
        let origin = match store.decide("key", policy).await {
            Ok(decision) => decision.origin(),
            Err(_) => Origin::Limits,
        };
        out.push((started.elapsed(), origin));
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outage_costs_each_instance_at_most_one_slow_call() {
    let mut server = tokio::task::spawn_blocking(Server::start).await.unwrap();
    let policy = policy(Algorithm::SlidingLog, &[(1_000, 60_000)]);
    for failure in [
        FailurePolicy::FailOpen,
        FailurePolicy::FailClosed,
        FailurePolicy::Fallback,
    ] {
        let stores = fleet(&server.url(), 4, failure).await;
        until_all_see(&stores, 4).await;
        for (stop, label) in [(false, "paused"), (true, "stopped")] {
            if stop {
                server.kill();
            } else {
                server.pause();
            }
            for store in &stores {
                let times = timed(store, &policy, 20).await;
                let slow = times
                    .iter()
                    .filter(|(took, _)| *took >= TIMEOUT / 2)
                    .count();
                assert!(
                    slow <= 1,
                    "{failure:?} {label}: {slow} slow calls {times:?}"
                );
                let mut fast: Vec<Duration> = times.iter().map(|(took, _)| *took).collect();
                fast.sort();
                let median = fast[fast.len() / 2];
                assert!(
                    median < Duration::from_millis(1),
                    "{failure:?} {label}: {times:?}"
                );
                if failure == FailurePolicy::Fallback {
                    assert!(times.iter().all(|(_, origin)| *origin == Origin::Fallback));
                }
            }
            if stop {
                server.restart();
            } else {
                server.resume();
            }
            // The probe sends decisions back to Redis.
            for store in &stores {
                let deadline = Instant::now() + Duration::from_secs(10);
                while !matches!(store.decide("key", &policy).await, Ok(d) if d.origin() == Origin::Limits)
                {
                    assert!(
                        Instant::now() < deadline,
                        "{failure:?}: no recovery after {label}"
                    );
                    tokio::time::sleep(HEARTBEAT).await;
                }
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_instances_fall_back_to_a_quarter_of_each_limit() {
    let mut server = tokio::task::spawn_blocking(Server::start).await.unwrap();
    let clock = ManualClock::new();
    let stores: Vec<RedisStore> = fleet(&server.url(), 4, FailurePolicy::Fallback)
        .await
        .into_iter()
        .map(|store| store.with_clock(clock.clone()))
        .collect();
    until_all_see(&stores, 4).await;
    let settled = policy(Algorithm::SlidingCounter, &[(100, 60_000)]);
    let mut admitted = Vec::new();
    for store in &stores {
        admitted.push(store.decide_cost("settled", &settled, 5).await.unwrap());
    }
    server.kill();
    // Redis's admissions cannot be settled while it is out of reach: the
    // store says so, and without waiting once it knows of the outage.
    for (store, admitted) in stores.iter().zip(&admitted) {
        assert_eq!(admitted.origin(), Origin::Limits);
        let binding = Store::<&str>::bind(store, &settled);
        let outcome = store
            .settle_bound("settled", &binding, admitted, 5, 1)
            .await;
        let err = outcome.expect_err("settled during an outage");
        assert_eq!(err.kind(), StoreErrorKind::Connection, "{err}");
        let started = Instant::now();
        let again = store
            .settle_bound("settled", &binding, admitted, 5, 1)
            .await;
        assert!(again.is_err() && started.elapsed() < TIMEOUT / 2);
    }
    for algorithm in ALGORITHMS {
        let policy = policy(algorithm, &[(100, 60_000)]);
        let mut admitted = 0;
        for store in &stores {
            for _ in 0..40 {
                let decision = store.decide("one", &policy).await.unwrap();
                assert_eq!(decision.origin(), Origin::Fallback);
                admitted += u32::from(decision.is_allowed());
            }
        }
        assert_eq!(admitted, 100, "{algorithm:?}");
        // Costs count in units against the divided limit: 5 of 5 units
        // each, and a request costing more than 25 is too costly.
        let mut units = 0;
        for store in &stores {
            for _ in 0..8 {
                let decision = store.decide_cost("costly", &policy, 5).await.unwrap();
                units += 5 * u32::from(decision.is_allowed());
            }
            let binding = Store::<&str>::bind(store, &policy);
            let too_costly = store
                .decide_cost_bound("other", &binding, 26)
                .await
                .unwrap();
            assert_eq!(too_costly.origin(), Origin::TooCostly, "{algorithm:?}");
        }
        assert_eq!(units, 100, "{algorithm:?}");
        clock.advance(Duration::from_secs(120));
    }
    server.restart();
}

/// Four instances under load while Redis stops for 5 s and comes back:
/// in the outage the fleet admits about one limit (at most one more per
/// instance, for the rounding up), and requests take no longer than with
/// Redis up. `cargo test --features redis --test redis_fleet drill -- --nocapture`
/// prints the figures.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drill_four_instances_through_a_five_second_outage() {
    let mut server = tokio::task::spawn_blocking(Server::start).await.unwrap();
    let stores = fleet(&server.url(), 4, FailurePolicy::Fallback).await;
    until_all_see(&stores, 4).await;
    // Redis up is timed on a limit no request reaches, so that every
    // decision is a call to Redis (none is answered by the deny cache).
    let roomy = policy(Algorithm::SlidingCounter, &[(1_000_000, 60_000)]);
    let policy = policy(Algorithm::SlidingCounter, &[(100, 60_000)]);
    let load = |for_how_long: Duration, policy: &Policy| {
        let stores = stores.clone();
        let policy = policy.clone();
        async move {
            let tasks = stores.into_iter().map(|store| {
                let policy = policy.clone();
                tokio::spawn(async move {
                    let until = Instant::now() + for_how_long;
                    let mut seen = Vec::new();
                    while Instant::now() < until {
                        let started = Instant::now();
                        let decision = store.decide("drill", &policy).await.unwrap();
                        seen.push((started.elapsed(), decision));
                        tokio::time::sleep(Duration::from_millis(2)).await;
                    }
                    seen
                })
            });
            let mut all = Vec::new();
            for task in tasks.collect::<Vec<_>>() {
                all.extend(task.await.unwrap());
            }
            all
        }
    };
    let median = |seen: &[(Duration, tower_sliding_window::Decision)]| {
        let mut times: Vec<Duration> = seen.iter().map(|(took, _)| *took).collect();
        times.sort();
        times[times.len() / 2]
    };
    let up = load(Duration::from_secs(1), &roomy).await;
    server.kill();
    let down = load(Duration::from_secs(5), &policy).await;
    server.restart();
    tokio::time::sleep(HEARTBEAT * 4).await;
    let back = load(Duration::from_secs(1), &policy).await;

    let admitted_down = down
        .iter()
        .filter(|(_, d)| d.is_allowed() && d.origin() == Origin::Fallback)
        .count();
    println!(
        "up: {} requests, median {:?}; outage: {} requests, {admitted_down} admitted, median {:?}",
        up.len(),
        median(&up),
        down.len(),
        median(&down)
    );
    assert!(admitted_down <= 100 + 4, "{admitted_down} admitted");
    assert!(admitted_down >= 100, "{admitted_down} admitted");
    assert!(median(&down) <= median(&up) + Duration::from_millis(1));
    assert!(back.iter().any(|(_, d)| d.origin() == Origin::Limits));
}

/// On a Cluster an outage is decided per node: with one of three primaries
/// paused, its keys are answered by the fallback after at most one slow
/// call, and the other nodes' keys are still judged by Redis.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_cluster_an_outage_is_decided_per_node() {
    let mut cluster = tokio::task::spawn_blocking(|| {
        // The other primaries keep serving their slots while one is out.
        let mut args = redis_server::CLUSTER_NODE.to_vec();
        args.extend(["--cluster-require-full-coverage", "no"]);
        let nodes: Vec<Server> = (0..3).map(|_| Server::start_with(&args)).collect();
        redis_server::form_cluster(&nodes.iter().collect::<Vec<_>>());
        nodes
    })
    .await
    .unwrap();
    let urls: Vec<String> = cluster.iter().map(Server::url).collect();
    let urls: Vec<&str> = urls.iter().map(String::as_str).collect();
    let store = RedisStore::connect_cluster(&urls)
        .await
        .unwrap()
        .with_prefix(&unique_prefix("cluster-outage"))
        .with_heartbeat(HEARTBEAT)
        .with_timeout(TIMEOUT)
        .with_failure_policy(FailurePolicy::Fallback);
    let policy = policy(Algorithm::SlidingCounter, &[(1_000, 60_000)]);
    let keys: Vec<String> = (0..30).map(|i| format!("key-{i}")).collect();
    for key in &keys {
        assert_eq!(
            store.decide(key.as_str(), &policy).await.unwrap().origin(),
            Origin::Limits
        );
    }
    // Long enough for the heartbeat to have read the hash-slot map.
    tokio::time::sleep(HEARTBEAT * 4).await;
    cluster[0].pause();
    let mut slow = 0;
    let mut origins = Vec::new();
    for _ in 0..2 {
        for key in &keys {
            let started = Instant::now();
            let decision = store.decide(key.as_str(), &policy).await.unwrap();
            slow += usize::from(started.elapsed() >= TIMEOUT / 2);
            origins.push((key.clone(), decision.origin()));
        }
    }
    cluster[0].resume();
    let fallback = origins
        .iter()
        .filter(|(_, o)| *o == Origin::Fallback)
        .count();
    let redis = origins.iter().filter(|(_, o)| *o == Origin::Limits).count();
    assert!(slow <= 1, "{slow} slow calls: {origins:?}");
    assert!(fallback > 0 && redis > 0, "{origins:?}");
    assert_eq!(fallback + redis, origins.len(), "{origins:?}");
    // A key's node decides: each key had the same answer both times.
    let (first, second) = origins.split_at(keys.len());
    assert_eq!(first, second);
    let deadline = Instant::now() + Duration::from_secs(10);
    for key in &keys {
        while store.decide(key.as_str(), &policy).await.unwrap().origin() != Origin::Limits {
            assert!(Instant::now() < deadline, "no recovery for {key}");
            tokio::time::sleep(HEARTBEAT).await;
        }
    }
    // Killed, the node stays down through the probes (the client's own
    // "no connection" is no answer), and its keys keep their answer.
    cluster[0].kill();
    let mut slow = 0;
    let mut rounds = Vec::new();
    for _ in 0..5 {
        let mut round = Vec::new();
        for key in &keys {
            let started = Instant::now();
            let decision = store.decide(key.as_str(), &policy).await.unwrap();
            slow += usize::from(started.elapsed() >= TIMEOUT / 2);
            round.push(decision.origin() == Origin::Fallback);
        }
        rounds.push(round);
        tokio::time::sleep(HEARTBEAT).await;
    }
    assert!(slow <= 1, "{slow} slow calls");
    assert!(
        rounds.windows(2).skip(1).all(|pair| pair[0] == pair[1]),
        "{rounds:?}"
    );
    assert_eq!(
        rounds[4],
        first
            .iter()
            .map(|(_, o)| *o == Origin::Fallback)
            .collect::<Vec<_>>()
    );
}

/// A reply error (here a key of the wrong type) fails its own call, and
/// is no outage: the next call goes to Redis.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reply_error_is_not_an_outage() {
    let server = tokio::task::spawn_blocking(Server::start).await.unwrap();
    let store = fleet(&server.url(), 1, FailurePolicy::FailClosed)
        .await
        .remove(0);
    let policy = policy(Algorithm::SlidingCounter, &[(10, 60_000)]);
    let poisoned = store.key_name(&"poisoned", &policy);
    server.cli(&["HSET", &poisoned, "field", "1"]).unwrap();
    let err = store.decide("poisoned", &policy).await.unwrap_err();
    assert_ne!(err.kind(), StoreErrorKind::Connection, "{err}");
    assert_ne!(err.kind(), StoreErrorKind::Timeout, "{err}");
    let next = store.decide("fine", &policy).await.unwrap();
    assert_eq!(next.origin(), Origin::Limits);
}
