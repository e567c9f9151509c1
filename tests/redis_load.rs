//! The Redis store under load and faults, against private redis-servers:
//! a burst past the timeout is no outage, a rotated password and a pause
//! are recovered from without a restart, idle instances count each other,
//! and a fleet demanding twice its limit is judged by Redis.
#![cfg(feature = "redis")]

#[path = "support/redis_server.rs"]
mod redis_server;
#[path = "support/stores.rs"]
mod stores;

use std::sync::Arc;
use std::time::{Duration, Instant};

use redis_server::{unique_prefix, Server};
use stores::policy;
use tower_sliding_window::{
    Algorithm, FailurePolicy, Origin, Policy, RedisStore, Store, StoreErrorKind,
};

/// A store on `server` under a prefix of its own.
async fn connected(server: &Server, label: &str) -> RedisStore {
    let store = RedisStore::connect(&server.url()).await.unwrap();
    store.with_prefix(&unique_prefix(label))
}

async fn private_server(extra: &'static [&'static str]) -> Server {
    tokio::task::spawn_blocking(move || Server::start_with(extra))
        .await
        .unwrap()
}

/// 5,000 calls at once under a 5 ms timeout overrun it on any machine:
/// those that time out are answered by the failure policy, each alone, and
/// the calls made one at a time after the burst are all judged by Redis.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_past_the_timeout_is_no_outage() {
    let server = private_server(&[]).await;
    let store = connected(&server, "burst")
        .await
        .with_timeout(Duration::from_millis(5));
    let policy = policy(Algorithm::SlidingCounter, &[(1_000_000, 60_000)]);
    let mut burst = tokio::task::JoinSet::new();
    for call in 0..5_000 {
        let (store, policy) = (store.clone(), policy.clone());
        burst.spawn(async move { store.decide(call % 100, &policy).await.map(|d| d.origin()) });
    }
    let (mut judged, mut answered) = (0, 0);
    while let Some(origin) = burst.join_next().await {
        match origin.unwrap().unwrap() {
            Origin::Limits => judged += 1,
            Origin::FailOpen => answered += 1,
            other => panic!("a burst decision came from {other:?}"),
        }
    }
    println!(
        "burst of 5,000 under 5 ms: {judged} judged by Redis, {answered} by the failure policy"
    );
    assert!(answered > 0, "the burst never overran the timeout");
    // The next calls are judged by Redis: no outage was declared. A clone
    // shares what the store knows of Redis; its longer timeout only keeps a
    // busy machine's slow reply from being taken for the policy's answer.
    let after = store.clone().with_timeout(Duration::from_secs(2));
    for key in 0..100 {
        let decision = after.decide(key, &policy).await.unwrap();
        assert_eq!(
            decision.origin(),
            Origin::Limits,
            "key {key} after the burst"
        );
    }
}

/// The password changes under a running store and every connection is
/// dropped: decisions fail as authentication failures while it is wrong,
/// and are judged by Redis again within 10 s of its return, with
/// requests coming all along and no restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rotated_password_is_recovered_from_when_it_comes_back() {
    let server = private_server(&["--requirepass", "old"]).await;
    let url = format!("redis://:old@127.0.0.1:{}", server.port);
    let store = RedisStore::connect(&url)
        .await
        .unwrap()
        .with_prefix(&unique_prefix("password"))
        .with_failure_policy(FailurePolicy::FailClosed)
        .with_timeout(Duration::from_secs(2));
    let policy = policy(Algorithm::SlidingLog, &[(1_000_000, 60_000)]);
    assert_eq!(
        store.decide("k", &policy).await.unwrap().origin(),
        Origin::Limits
    );

    let as_new = |args: &[&str]| {
        let output = std::process::Command::new("redis-cli")
            .env("REDISCLI_AUTH", "new")
            .args(["-p", &server.port.to_string()])
            .args(args)
            .output()
            .unwrap();
        assert!(output.status.success(), "{output:?}");
    };
    server
        .cli(&["CONFIG", "SET", "requirepass", "new"])
        .unwrap();
    as_new(&["CLIENT", "KILL", "TYPE", "normal"]);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match store.decide("k", &policy).await {
            Err(err) if err.kind() == StoreErrorKind::Authentication => break,
            Err(_) => {}
            Ok(decision) => panic!("decided with a rotated password: {decision:?}"),
        }
        assert!(Instant::now() < deadline, "never an authentication failure");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Still wrong a few heartbeats later: nothing gets through.
    for _ in 0..30 {
        let failed = store.decide("k", &policy).await.unwrap_err();
        assert_eq!(failed.kind(), StoreErrorKind::Authentication);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    as_new(&["CONFIG", "SET", "requirepass", "old"]);
    let restored = Instant::now();
    loop {
        if let Ok(decision) = store.decide("k", &policy).await {
            assert_eq!(decision.origin(), Origin::Limits);
            break;
        }
        assert!(
            restored.elapsed() < Duration::from_secs(10),
            "not judged by Redis 10 s after the password came back"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    println!(
        "judged by Redis again {:?} after the password came back",
        restored.elapsed()
    );
}

/// Four instances connected and idle each count four within a few
/// heartbeats; an expected count stands until the heartbeats have counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_instances_count_each_other() {
    let server = private_server(&[]).await;
    let prefix = unique_prefix("idle");
    let heartbeat = Duration::from_millis(200);
    let mut stores = Vec::new();
    for _ in 0..4 {
        let store = RedisStore::connect(&server.url())
            .await
            .unwrap()
            .with_prefix(&prefix)
            .with_heartbeat(heartbeat);
        stores.push(store);
    }
    let deadline = Instant::now() + heartbeat * 8;
    while stores.iter().any(|store| store.live_instances() != 4) {
        let seen: Vec<usize> = stores.iter().map(RedisStore::live_instances).collect();
        assert!(Instant::now() < deadline, "idle instances saw {seen:?}");
        tokio::time::sleep(heartbeat / 4).await;
    }

    // Alone under another prefix, told to expect 8: 8 until a few
    // heartbeats have counted 1.
    let alone = connected(&server, "alone")
        .await
        .with_heartbeat(heartbeat)
        .with_expected_instances(8);
    assert_eq!(alone.live_instances(), 8);
    let deadline = Instant::now() + heartbeat * 10;
    while alone.live_instances() != 1 {
        assert!(
            Instant::now() < deadline,
            "the expected count never gave way"
        );
        tokio::time::sleep(heartbeat / 4).await;
    }
}

/// A timeout longer than a pause is waited out: the call is judged by
/// Redis, whatever timeout the connection was opened with.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_timeout_outlasts_a_pause() {
    let server = private_server(&[]).await;
    let store = connected(&server, "pause")
        .await
        .with_timeout(Duration::from_secs(5));
    let policy = policy(Algorithm::SlidingCounter, &[(10, 60_000)]);
    assert_eq!(
        store.decide("k", &policy).await.unwrap().origin(),
        Origin::Limits
    );
    server.pause();
    let started = Instant::now();
    let server = Arc::new(server);
    let resume = {
        let server = Arc::clone(&server);
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_secs(3));
            server.resume();
        })
    };
    let decision = store.decide("k", &policy).await.unwrap();
    resume.join().unwrap();
    assert_eq!(
        decision.origin(),
        Origin::Limits,
        "after {:?}",
        started.elapsed()
    );
    assert!(started.elapsed() >= Duration::from_secs(3));
}

/// Four instances on one key, 32 decisions in flight each, demanding
/// 20,000 of a limit of 10,000 an hour, with the default timeout: Redis
/// judges them, so that between 9,500 and 10,000 are admitted (beside any
/// the failure policy let through) and at most 0.1 % are answered by the
/// failure policy.
async fn four_instances_demand_twice_the_limit(algorithm: Algorithm) {
    let server = private_server(&[]).await;
    let prefix = unique_prefix("demand");
    let policy: Policy = policy(algorithm, &[(10_000, 3_600_000)]);
    let mut instances = tokio::task::JoinSet::new();
    for _ in 0..4 {
        let store = RedisStore::connect(&server.url())
            .await
            .unwrap()
            .with_prefix(&prefix);
        for _ in 0..32 {
            let (store, policy) = (store.clone(), policy.clone());
            instances.spawn(async move {
                let mut origins = Vec::new();
                for _ in 0..20_000 / 128 {
                    let decision = store.decide("hot", &policy).await.unwrap();
                    origins.push((decision.is_allowed(), decision.origin()));
                }
                origins
            });
        }
    }
    let (mut admitted, mut by_policy, mut decided) = (0, 0, 0);
    while let Some(origins) = instances.join_next().await {
        for (allowed, origin) in origins.unwrap() {
            decided += 1;
            admitted += usize::from(allowed);
            by_policy += usize::from(origin == Origin::FailOpen);
        }
    }
    println!(
        "{algorithm:?}: {decided} decided, {admitted} admitted, {by_policy} by the failure policy"
    );
    // A call the machine stalls past its timeout is let through by the
    // failure policy (fail-open), outside the limit: the limit holds for
    // the rest.
    assert!(
        (9_500..=10_000 + by_policy).contains(&admitted),
        "{algorithm:?}: {admitted} admitted ({by_policy} by the failure policy)"
    );
    assert!(
        by_policy * 1_000 <= decided,
        "{algorithm:?}: {by_policy} of {decided} by the failure policy"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_instances_on_the_log_are_judged_by_redis() {
    four_instances_demand_twice_the_limit(Algorithm::SlidingLog).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_instances_on_the_counter_are_judged_by_redis() {
    four_instances_demand_twice_the_limit(Algorithm::SlidingCounter).await;
}

/// A Cluster of three primaries with a replica each loses a primary under
/// load. The keys of the other primaries are judged by Redis all along,
/// with no answer from the failure policy; the lost primary's keys are
/// judged again once its replica has taken over.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failover_spills_onto_no_other_primary() {
    let mut nodes = tokio::task::spawn_blocking(|| {
        let mut args = redis_server::CLUSTER_NODE.to_vec();
        args.extend(["--cluster-require-full-coverage", "no"]);
        let nodes: Vec<Server> = (0..6).map(|_| Server::start_with(&args)).collect();
        redis_server::form_cluster_with_replicas(&nodes.iter().collect::<Vec<_>>(), 1);
        nodes
    })
    .await
    .unwrap();
    let urls: Vec<String> = nodes.iter().map(Server::url).collect();
    let urls: Vec<&str> = urls.iter().map(String::as_str).collect();
    let store = RedisStore::connect_cluster(&urls)
        .await
        .unwrap()
        .with_prefix(&unique_prefix("failover"))
        .with_failure_policy(FailurePolicy::FailClosed)
        // Well past a busy machine's slowest reply, well short of the
        // failover's seconds.
        .with_timeout(Duration::from_millis(250));
    let policy = policy(Algorithm::SlidingCounter, &[(1_000_000, 60_000)]);
    let keys: Vec<String> = (0..24).map(|i| format!("key-{i}")).collect();
    for key in &keys {
        let decision = store.decide(key.as_str(), &policy).await.unwrap();
        assert_eq!(decision.origin(), Origin::Limits);
    }
    // The primary to kill, and which keys it holds.
    let primary = nodes
        .iter()
        .position(|node| {
            node.cli(&["ROLE"])
                .unwrap_or_default()
                .starts_with("master")
        })
        .unwrap();
    let on_primary: Vec<bool> = keys
        .iter()
        .map(|key| {
            nodes[primary]
                .cli(&["EXISTS", &store.key_name(&key.as_str(), &policy)])
                .as_deref()
                == Some("1")
        })
        .collect();
    assert!(on_primary.iter().any(|&on| on) && !on_primary.iter().all(|&on| on));

    let until = Instant::now() + Duration::from_secs(12);
    let mut load = tokio::task::JoinSet::new();
    for worker in 0..8 {
        let (store, policy, keys) = (store.clone(), policy.clone(), keys.clone());
        load.spawn(async move {
            let mut seen = Vec::new();
            let mut i = worker;
            while Instant::now() < until {
                let key = i % keys.len();
                let outcome = store.decide(keys[key].as_str(), &policy).await;
                seen.push((key, Instant::now(), outcome.map(|d| d.origin())));
                i += 1;
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            seen
        });
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let killed = Instant::now();
    nodes[primary].kill();
    let mut seen = Vec::new();
    while let Some(worker) = load.join_next().await {
        seen.extend(worker.unwrap());
    }
    let others: Vec<_> = seen.iter().filter(|(key, ..)| !on_primary[*key]).collect();
    let failed: Vec<_> = others
        .iter()
        .filter(|(_, _, outcome)| !matches!(outcome, Ok(Origin::Limits)))
        .map(|(key, at, outcome)| (key, at.saturating_duration_since(killed), outcome))
        .collect();
    assert!(
        failed.is_empty(),
        "{} of {} decisions on healthy primaries failed: {:?}",
        failed.len(),
        others.len(),
        &failed[..failed.len().min(10)]
    );
    // The lost primary's keys are judged by its replica in the end.
    let deadline = Instant::now() + Duration::from_secs(20);
    for (key, _) in keys.iter().zip(&on_primary).filter(|(_, &on)| on) {
        while !matches!(store.decide(key.as_str(), &policy).await, Ok(d) if d.origin() == Origin::Limits)
        {
            assert!(
                Instant::now() < deadline,
                "{key} never judged after the failover"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    let lost = seen.iter().filter(|(key, ..)| on_primary[*key]).count();
    println!(
        "{} decisions on healthy primaries, all judged; {lost} on the lost one",
        others.len()
    );
}

/// Redis CPU per admitting call on logs of the same shape at limits a
/// hundred times apart: `calls` admissions spread over `keys` keys that
/// already hold `held` stamps each.
async fn log_cpu_per_call(server: &Server, max: u32, keys: u32, held: u32, calls: u32) -> f64 {
    let store = connected(server, "log-cost")
        .await
        .with_heartbeat(Duration::from_secs(3_600))
        .with_failure_policy(FailurePolicy::FailClosed)
        .with_timeout(Duration::from_secs(5));
    let policy = policy(Algorithm::SlidingLog, &[(max, 3_600_000)]);
    for key in 0..keys {
        let mut filled = 0;
        while filled < held {
            let cost = (held - filled).min(max / 10);
            assert!(store
                .decide_cost(key, &policy, cost)
                .await
                .unwrap()
                .is_allowed());
            filled += cost;
        }
    }
    server.cli(&["CONFIG", "RESETSTAT"]).unwrap();
    for call in 0..calls {
        assert!(store
            .decide(call % keys, &policy)
            .await
            .unwrap()
            .is_allowed());
    }
    let usec = server.command_usec("evalsha") as f64;
    // The heartbeat's script may have run among them: a little more CPU.
    assert!(server.command_calls("evalsha") >= u64::from(calls));
    usec / f64::from(calls)
}

/// A call on a log holding 9,000 to 10,000 stamps costs Redis about what
/// one holding 90 to 100 costs: it reads and writes a few stamps, not all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_logs_cost_per_call_does_not_grow_with_its_limit() {
    let server = private_server(&[]).await;
    let small = log_cpu_per_call(&server, 100, 100, 90, 1_000).await;
    let large = log_cpu_per_call(&server, 10_000, 1, 9_000, 1_000).await;
    println!("Redis CPU per admitting call: {small:.1} µs at 90-100 stamps, {large:.1} µs at 9,000-10,000");
    assert!(large <= 3.0 * small, "{large:.1} µs against {small:.1} µs");
}

/// A request under an in-flight cap whose call times out holds no slot
/// once Redis has answered the call: here Redis is paused with its script
/// cache flushed, so that the script runs only after the client loads it
/// again, later than any release sent at the timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slot_taken_by_a_call_that_timed_out_is_given_back() {
    let server = private_server(&[]).await;
    let store = connected(&server, "orphan")
        .await
        .with_failure_policy(FailurePolicy::FailClosed)
        .with_timeout(Duration::from_millis(50));
    let policy = Policy::in_flight_only(1);
    let leases = format!("{}:leases", store.key_name(&"k", &policy));
    let held = store.decide("k", &policy).await.unwrap();
    assert!(held.holds_slot());
    store.release_bound("k", &Store::<&str>::bind(&store, &policy), &held);
    let deadline = Instant::now() + Duration::from_secs(2);
    server.wait_for(
        &["ZCARD", &leases],
        "0",
        deadline,
        "the release never landed",
    );

    server.cli(&["SCRIPT", "FLUSH"]).unwrap();
    server.pause();
    let late = store.decide("k", &policy).await.unwrap_err();
    assert_eq!(late.kind(), StoreErrorKind::Timeout, "{late}");
    std::thread::sleep(Duration::from_millis(200));
    server.resume();
    // The script ran once loaded again and took the slot; its reply, which
    // nobody read, released it.
    let deadline = Instant::now() + Duration::from_secs(2);
    server.wait_for(
        &["ZCARD", &leases],
        "0",
        deadline,
        "a slot nobody holds stayed taken",
    );
    let next = store.decide("k", &policy).await.unwrap();
    assert!(next.is_allowed() && next.holds_slot());
}
