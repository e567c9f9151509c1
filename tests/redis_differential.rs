//! The Redis store decides as the memory store does, decision for decision:
//! on random traffic, on the log's window edges and full rings, beyond
//! double precision, with an index that wraps, with the token bucket on
//! Unix-epoch times (against `KeyState`), and with several connections
//! racing for one key.
#![cfg(feature = "redis")]

#[path = "support/redis_server.rs"]
mod redis_server;
#[path = "support/stores.rs"]
mod stores;
#[path = "support/xorshift.rs"]
mod xorshift;

use std::time::Duration;

use redis_server::{shared_url, unique_prefix};
use stores::{policy, redis_store, ALGORITHMS};
use tower_sliding_window::{
    Algorithm, Decision, FailurePolicy, KeyState, Limit, ManualClock, MemoryStore, Policy,
    RedisStore, Store,
};
use xorshift::XorShift;

/// As many limits as a policy may hold, windows in ms.
const EIGHT: [(u32, u64); 8] = [
    (2, 300),
    (3, 700),
    (5, 1_500),
    (8, 4_000),
    (12, 9_000),
    (20, 20_000),
    (30, 50_000),
    (45, 120_000),
];

/// Judges `key` in both stores, peeking first if `peek`; they must agree.
async fn alike(
    redis: &RedisStore,
    memory: &MemoryStore<ManualClock>,
    key: &str,
    policy: &Policy,
    peek: bool,
    context: &str,
) -> Decision {
    if peek {
        let from_memory = memory.peek(key.to_owned(), policy).await.unwrap();
        let from_redis = redis.peek(key.to_owned(), policy).await.unwrap();
        assert_eq!(from_redis, from_memory, "peek, {context}");
    }
    let from_memory = memory.decide(key.to_owned(), policy).await.unwrap();
    let from_redis = redis.decide(key.to_owned(), policy).await.unwrap();
    assert_eq!(from_redis, from_memory, "{context}");
    from_redis
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_traffic_gets_identical_decisions_from_redis_and_memory() {
    let mut decisions = 0;
    // Two runs' log rings (300 and 200 stamps) are past the size the script
    // reads whole, so they exercise the other read and write paths too; full
    // rings are the next test's.
    let small: &[(u32, u64)] = &[(4, 1_000), (20, 10_000)];
    // The scripts loop over the limits they are passed: one, two and three
    // limits here, eight below.
    let one: &[(u32, u64)] = &[(6, 2_000)];
    let three: &[(u32, u64)] = &[(3, 500), (8, 2_000), (25, 10_000)];
    // Up to the most limits a policy may hold, beyond the two the scripts'
    // tables are first sized for.
    let eight: &[(u32, u64)] = &EIGHT;
    assert_eq!(eight.len(), Policy::MAX_LIMITS);
    type Run<'a> = (u64, Algorithm, &'a [(u32, u64)]);
    let runs: [Run; 19] = [
        (7, ALGORITHMS[0], small),
        (11, ALGORITHMS[1], small),
        (13, ALGORITHMS[2], small),
        (17, ALGORITHMS[0], small),
        (19, ALGORITHMS[0], &[(150, 1_000), (300, 10_000)]),
        (23, ALGORITHMS[1], one),
        (29, ALGORITHMS[2], one),
        (31, ALGORITHMS[1], three),
        (37, ALGORITHMS[2], three),
        (41, ALGORITHMS[1], eight),
        (43, ALGORITHMS[2], eight),
        (47, ALGORITHMS[0], one),
        (53, ALGORITHMS[0], three),
        (59, ALGORITHMS[0], eight),
        // One limit whose ring is read a few bytes at a time.
        (61, ALGORITHMS[0], &[(200, 3_000)]),
        (67, ALGORITHMS[3], small),
        (71, ALGORITHMS[3], one),
        (73, ALGORITHMS[3], three),
        (79, ALGORITHMS[3], eight),
    ];
    for (seed, algorithm, limits) in runs {
        // Fresh stores per run: Redis shares windows between equal policies.
        let clock = ManualClock::new();
        let redis = redis_store(&shared_url(), "differential", &clock).await;
        let memory = MemoryStore::with_clock(clock.clone());
        let policy = policy(algorithm, limits);
        let mut rng = XorShift(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15));
        let mut now = 0u64;
        for _ in 0..600 {
            let r = rng.next();
            now = match r % 10 {
                0..=2 => now,
                3..=6 => now + r % 400_000,
                // A clock stepping back: both stores judge at the start of
                // the latest window (or stamp) already counted in.
                7 => now.saturating_sub(r % 1_500_000),
                _ => now + r % 6_000_000,
            };
            clock.set(Duration::from_micros(now));
            let key = format!("client-{}", (r >> 32) % 5);
            // Judging without recording: the scripts' peek, a cost of 0.
            let peek = (r >> 16).is_multiple_of(4);
            let context = format!("{algorithm:?} at {now} µs");
            alike(&redis, &memory, &key, &policy, peek, &context).await;
            decisions += 1;
        }
    }
    println!("differential: {decisions} decisions, Redis and memory identical");
}

/// Scripted traffic on a window's edge, where the trailer's next stamp and
/// a cursor's first probe decide whether it moves (a stamp exactly one
/// window old still counts, one a microsecond older does not), read whole
/// and in ranges; a next stamp that lies past the ring's last slot; steps
/// that divide a window; and eight limits read in ranges. Redis and memory
/// must agree on every decision and peek.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn log_cursors_on_window_edges_decide_alike_in_redis_and_memory() {
    // Windows of seconds: keys expire on the server's own clock, which runs
    // on while the test's stands still, and a TTL of two 10 ms windows
    // could lapse between two calls on a busy machine, so that Redis
    // forgot stamps the memory store still counts.
    const W: u64 = 10_000_000;
    let ranged: &[(u32, u64)] = &[(5, 10_000), (300, 10_000)];
    let whole: &[(u32, u64)] = &[(5, 10_000), (30, 10_000)];
    // The largest limit past the size read whole.
    let mut eight = EIGHT;
    eight[7].0 = 140;
    let eight: &[(u32, u64)] = &eight;
    let steady = |step: u64, count: u64| -> Vec<u64> { (0..count).map(|i| i * step).collect() };
    // Each run: limits (max, window in ms), and the times of its requests (µs).
    type Run<'a> = (&'a [(u32, u64)], Vec<u64>);
    let mut runs: Vec<Run> = Vec::new();
    for limits in [ranged, whole] {
        runs.push((limits, vec![0, 1, W + 2]));
        runs.push((limits, vec![0, 1, W + 1]));
        runs.push((limits, vec![0, 1, 2, 3, W + 1, W + 2]));
        runs.push((
            limits,
            vec![0, 1, 2, 3, W, W + 1, W + 2, W + 3, 2 * W + 3, 2 * W + 4],
        ));
        runs.push((limits, steady(W / 2, 400)));
    }
    runs.push((&[(33, 10_000)], steady(W * 3 / 10, 300)));
    runs.push((&[(200, 10_000), (300, 100_000)], steady(W / 2, 400)));
    runs.push((eight, steady(250_000, 1_000)));
    let mut decisions = 0;
    for (limits, times) in runs {
        let clock = ManualClock::new();
        let redis = redis_store(&shared_url(), "differential", &clock).await;
        let memory = MemoryStore::with_clock(clock.clone());
        let policy = policy(Algorithm::SlidingLog, limits);
        for (i, &at) in times.iter().enumerate() {
            clock.set(Duration::from_micros(at));
            let context = format!("{limits:?} at {at} µs");
            alike(&redis, &memory, "edge", &policy, i % 3 == 2, &context).await;
            decisions += 1;
        }
    }
    println!("window edges: {decisions} decisions, Redis and memory identical");
}

/// Log rings filled to their size, on both sides of the size the script
/// reads and writes whole (128 stamps; past it, in place), and a smaller
/// one: one key, steps of
/// up to 600 ms against a 60 s window, so that rings fill, refuse, wrap and
/// drop their oldest stamp, with the clock stepping back now and then. Redis and memory
/// must agree on every decision.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn full_log_rings_wrap_and_refuse_alike_in_redis_and_memory() {
    let (mut accepted, mut refused) = (0, 0);
    // A ring of one slot too: every stamp goes in its last slot.
    let cases: [(u64, &[(u32, u64)]); 5] = [
        (3, &[(31, 2_000), (32, 60_000)]),
        (5, &[(33, 2_000), (34, 60_000)]),
        (7, &[(127, 2_000), (128, 60_000)]),
        (13, &[(129, 2_000), (130, 60_000)]),
        (11, &[(1, 2_000)]),
    ];
    for (seed, limits) in cases {
        let clock = ManualClock::new();
        let redis = redis_store(&shared_url(), "differential", &clock).await;
        let memory = MemoryStore::with_clock(clock.clone());
        let policy = policy(Algorithm::SlidingLog, limits);
        let mut rng = XorShift(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15));
        let mut now = 0u64;
        let (mut recorded, mut refused_here) = (0, 0);
        for _ in 0..900 {
            let r = rng.next();
            now = match r % 20 {
                0 => now.saturating_sub(r % 3_000_000),
                1..=4 => now,
                _ => now + r % 600_000,
            };
            clock.set(Duration::from_micros(now));
            let peek = (r >> 20).is_multiple_of(8);
            let context = format!("{limits:?} at {now} µs");
            if alike(&redis, &memory, "one", &policy, peek, &context)
                .await
                .is_allowed()
            {
                accepted += 1;
                recorded += u32::from(!peek);
            } else {
                refused += 1;
                refused_here += 1;
            }
        }
        // The ring took more stamps than it holds, so it wrapped, and it
        // refused too.
        let slots = limits.iter().map(|&(max, _)| max).max().unwrap();
        assert!(
            recorded > slots && refused_here > 10,
            "{limits:?}: {recorded} recorded, {refused_here} refused"
        );
    }
    println!("full rings: {accepted} accepted, {refused} refused, Redis and memory identical");
}

/// The counter's weighted test multiplies counts by windows. With a window
/// near the longest allowed, the products pass 2^53, where doubles are 2,048
/// apart: here the two sides differ by exactly 1 at the boundary, which only
/// exact arithmetic tells apart, in the script as in the core.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_counter_stays_exact_beyond_double_precision() {
    // 3001 is prime and w ≡ 1 (mod 3001): at `boundary` into the next
    // window, 3001 * (w - boundary) = 3000 * w + 1.
    const W: u64 = 3_000_000_000_000_742;
    const BOUNDARY: u64 = 999_666_777_741;
    assert_eq!(3001 * (W - BOUNDARY), 3000 * W + 1);
    let long = Limit::new(3001, Duration::from_micros(W)).unwrap();
    // Beside a limit whose products stay exact in doubles, and never binds.
    let short = Limit::new(10_000, Duration::from_millis(1)).unwrap();
    for limits in [vec![long], vec![short, long]] {
        let policy = Policy::new(Algorithm::SlidingCounter, limits).unwrap();
        let clock = ManualClock::new();
        let redis = redis_store(&shared_url(), "differential", &clock).await;
        let memory = MemoryStore::with_clock(clock.clone());
        let both = |at: u64| {
            clock.set(Duration::from_micros(at));
            let (redis, memory, policy) = (&redis, &memory, &policy);
            async move {
                let from_memory = memory.decide("k", policy).await.unwrap();
                let from_redis = redis.decide("k", policy).await.unwrap();
                assert_eq!(from_redis, from_memory, "at {at} µs");
                from_redis.is_allowed()
            }
        };
        for _ in 0..3001 {
            assert!(both(0).await);
        }
        // previous * (w - e) <= (max - current - 1) * w decides; the two
        // sides are 9e18, and one over at the boundary.
        assert!(!both(W + BOUNDARY).await, "one past the quota is refused");
        assert!(both(W + BOUNDARY + 1).await, "a microsecond later it fits");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_connections_hammering_one_key_admit_exactly_the_limit() {
    let clock = ManualClock::new();
    clock.set(Duration::from_secs(5));
    let url = shared_url();
    let first = redis_store(&url, "differential", &clock)
        .await
        .with_prefix("tsw-test:shared-two-conn");
    let prefix = unique_prefix("two-connections");
    let first = first.with_prefix(&prefix);
    let second = redis_store(&url, "differential", &clock)
        .await
        .with_prefix(&prefix);
    for algorithm in ALGORITHMS {
        for limit in [1u32, 10, 100] {
            let policy = policy(algorithm, &[(limit, 60_000)]);
            let tasks: Vec<_> = (0..(limit as usize * 2 + 50))
                .map(|i| {
                    let store = if i % 2 == 0 {
                        first.clone()
                    } else {
                        second.clone()
                    };
                    let policy = policy.clone();
                    tokio::spawn(
                        async move { store.decide("hot", &policy).await.unwrap().is_allowed() },
                    )
                })
                .collect();
            let mut accepted = 0;
            for task in tasks {
                accepted += u32::from(task.await.unwrap());
            }
            assert_eq!(accepted, limit, "{algorithm:?} limit {limit}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn log_never_over_admits_on_server_time_from_two_connections() {
    // 10^5 decisions on Redis TIME from two connections, 32 in flight each,
    // against 10 per 20 ms on four keys; every accepted time is checked.
    let url = shared_url();
    let prefix = unique_prefix("real-time");
    let connect = || async {
        RedisStore::connect(&url)
            .await
            .expect("Redis")
            .with_prefix(&prefix)
            .with_failure_policy(FailurePolicy::FailClosed)
            .with_timeout(Duration::from_secs(5))
    };
    let stores = [connect().await, connect().await];
    let window = Duration::from_millis(20);
    let policy = Policy::new(Algorithm::SlidingLog, [Limit::new(10, window).unwrap()]).unwrap();
    let tasks: Vec<_> = (0..64usize)
        .map(|task| {
            let store = stores[task % 2].clone();
            let policy = policy.clone();
            tokio::spawn(async move {
                let mut accepted = Vec::new();
                for i in 0..1_563usize {
                    let key = (task + i) % 4;
                    let decision = store.decide(key, &policy).await.expect("Redis answers");
                    if decision.is_allowed() {
                        accepted.push((key, decision.decided_at().as_micros() as u64));
                    }
                }
                accepted
            })
        })
        .collect();
    let mut accepted = Vec::new();
    for task in tasks {
        accepted.extend(task.await.unwrap());
    }
    let mut violations = 0;
    for key in 0..4 {
        let mut times: Vec<u64> = accepted
            .iter()
            .filter(|(k, _)| *k == key)
            .map(|(_, t)| *t)
            .collect();
        times.sort_unstable();
        let w = window.as_micros() as u64;
        let mut end = 0;
        for (start, &from) in times.iter().enumerate() {
            while end < times.len() && times[end] <= from + w {
                end += 1;
            }
            if end - start > 10 {
                violations += 1;
            }
        }
    }
    println!(
        "{} decisions on server time, {} accepted, {violations} windows over the limit",
        64 * 1_563,
        accepted.len()
    );
    assert_eq!(violations, 0);
    assert!(accepted.len() > 100, "the run must slide windows");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_short_window_beside_a_very_long_one_survives_index_wraparound() {
    // A 1 ms window idle for 30 days (2.6 * 10^9 windows, past 2^31)
    // inside a key kept alive by a 10-year limit must still read as old,
    // not as a window in the future, whatever the counts.
    for long_max in [5, 255] {
        let clock = ManualClock::new();
        let redis = redis_store(&shared_url(), "differential", &clock).await;
        let memory = MemoryStore::with_clock(clock.clone());
        let policy = Policy::new(
            Algorithm::SlidingCounter,
            [
                Limit::new(1, Duration::from_millis(1)).unwrap(),
                Limit::new(long_max, Duration::from_secs(3_650 * 86_400)).unwrap(),
            ],
        )
        .unwrap();
        for step in [
            Duration::ZERO,
            Duration::from_secs(30 * 86_400),
            Duration::from_secs(86_400),
        ] {
            clock.advance(step);
            let from_redis = redis.decide("wrap", &policy).await.unwrap();
            let from_memory = memory.decide("wrap", &policy).await.unwrap();
            assert!(from_redis.is_allowed(), "after {step:?}: {from_redis:?}");
            assert_eq!(from_redis, from_memory, "after {step:?}");
        }
    }
}

/// Requests of random costs (0, over the limit, and between), some
/// settled up or down once "answered", on random traffic with the clock
/// stepping back now and then: Redis and memory decide and settle alike.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn costs_and_settling_decide_alike_in_redis_and_memory() {
    let mut decisions = 0;
    let shapes: [&[(u32, u64)]; 3] = [&[(12, 2_000)], &[(6, 1_000), (40, 10_000)], &[(300, 3_000)]];
    for (seed, algorithm) in [
        (5u64, ALGORITHMS[0]),
        (7, ALGORITHMS[1]),
        (11, ALGORITHMS[2]),
        (13, ALGORITHMS[3]),
    ] {
        for limits in shapes {
            let clock = ManualClock::new();
            let redis = redis_store(&shared_url(), "differential-costs", &clock).await;
            let memory = MemoryStore::with_clock(clock.clone());
            let policy = policy(algorithm, limits);
            let redis_binding = Store::<String>::bind(&redis, &policy);
            let memory_binding = memory.bind::<String>(&policy);
            let largest = limits.iter().map(|&(max, _)| max).max().unwrap();
            let mut rng = XorShift(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ u64::from(largest));
            let mut now = 0u64;
            for _ in 0..400 {
                let r = rng.next();
                now = match r % 10 {
                    0..=3 => now + r % 100_000,
                    4..=7 => now + r % 700_000,
                    8 => now.saturating_sub(r % 1_500_000),
                    _ => now + r % 4_000_000,
                };
                clock.set(Duration::from_micros(now));
                let key = format!("client-{}", (r >> 32) % 3);
                let cost = match (r >> 8) % 8 {
                    0 => 0,
                    1 => largest + 1,
                    _ => 1 + ((r >> 16) as u32) % (largest / 2).max(1),
                };
                let context = format!("{policy:?} at {now} µs, {key}, cost {cost}");
                let from_memory = memory
                    .decide_cost(key.clone(), &policy, cost)
                    .await
                    .unwrap();
                let from_redis = redis.decide_cost(key.clone(), &policy, cost).await.unwrap();
                assert_eq!(from_redis, from_memory, "{context}");
                decisions += 1;
                if (r >> 40).is_multiple_of(3) {
                    // Answered a little later, using more or less than reserved.
                    now += (r >> 44) % 50_000;
                    clock.set(Duration::from_micros(now));
                    let used = ((r >> 24) as u32) % (2 * cost + 2);
                    let settled_memory = memory
                        .settle_bound(key.clone(), &memory_binding, &from_memory, cost, used)
                        .await
                        .unwrap();
                    let settled_redis = redis
                        .settle_bound(key.clone(), &redis_binding, &from_redis, cost, used)
                        .await
                        .unwrap();
                    assert_eq!(
                        settled_redis, settled_memory,
                        "{context}, settled at {used}"
                    );
                    // What the settling left: the next peek agrees too.
                    let peek_memory = memory.peek(key.clone(), &policy).await.unwrap();
                    let peek_redis = redis.peek(key, &policy).await.unwrap();
                    assert_eq!(
                        peek_redis, peek_memory,
                        "{context}, peek after settling at {used}"
                    );
                }
            }
        }
    }
    println!("differential with costs: {decisions} decisions, Redis and memory identical");
}

/// The token bucket on Unix-epoch times passed as the client's clock (now
/// about 1.78e15 µs, where now · max passes 2^53 from a max of 6 on, so the
/// script must never multiply a time by max): random costs, peeks, settles
/// up and down, two limits, the clock stepping back now and then, judged
/// by Redis and by `KeyState` alike. Refills of a fraction of a µs and
/// limits over 67 million, where cost · (W mod max) passes 2^52, take the
/// script's remainders and its split products; a penalty its sibling key;
/// one limit the script's path for one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_bucket_decides_exactly_on_unix_epoch_times() {
    use std::collections::HashMap;

    const EPOCH: u64 = 1_780_000_000_000_000;
    let limit = |max, micros| Limit::new(max, Duration::from_micros(micros)).unwrap();
    let policies = [
        Policy::new(
            Algorithm::TokenBucket,
            [limit(7, 3_000_000), limit(50, 60_000_000)],
        ),
        Policy::new(
            Algorithm::TokenBucket,
            [limit(7, 3_000_000), limit(50, 60_000_000)],
        )
        .map(|policy| policy.with_penalty(Duration::from_millis(2_500))),
        // Refills of a whole number of µs and a remainder.
        Policy::new(
            Algorithm::TokenBucket,
            [limit(13, 2_000_003), limit(1_000_003, 59_999_999)],
        ),
        // One limit, as nearly every call judges it, and one over 2^26,
        // which the script judges as it does several.
        Policy::new(Algorithm::TokenBucket, [limit(7, 3_000_000)]),
        Policy::new(
            Algorithm::TokenBucket,
            [limit(4_000_000_000, 7_999_999_999)],
        ),
        // Refills of under a µs, with remainders close to max.
        Policy::new(
            Algorithm::TokenBucket,
            [
                limit(4_000_000_000, 7_999_999_999),
                limit(3_000_000_007, 86_400_000_001),
            ],
        ),
    ];
    let (mut decisions, mut accepted, mut settled) = (0, 0, 0);
    for (seed, policy) in (3u64..).zip(policies) {
        let policy = policy.unwrap();
        let clock = ManualClock::new();
        let redis = redis_store(&shared_url(), "differential-epoch", &clock).await;
        let binding = Store::<String>::bind(&redis, &policy);
        let mut states: HashMap<String, KeyState> = HashMap::new();
        let smallest = policy.limits().iter().map(Limit::max).min().unwrap();
        let mut rng = XorShift(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15));
        let mut now = EPOCH;
        for _ in 0..500 {
            let r = rng.next();
            now = match r % 10 {
                0..=2 => now,
                3..=5 => now + r % 300_000,
                6 => now - r % 1_500_000,
                7..=8 => now + r % 3_000_000,
                _ => now + r % 20_000_000,
            };
            clock.set(Duration::from_micros(now));
            let at = Duration::from_micros(now);
            let key = format!("client-{}", (r >> 32) % 3);
            let state = states
                .entry(key.clone())
                .or_insert_with(|| KeyState::new(Algorithm::TokenBucket));
            let context = format!("{policy:?} at {now} µs, {key}");
            if (r >> 8).is_multiple_of(7) {
                let from_redis = redis.peek(key.clone(), &policy).await.unwrap();
                assert_eq!(from_redis, state.peek(&policy, at), "peek, {context}");
                continue;
            }
            let cost = match (r >> 12) % 8 {
                0 => 0,
                1 => smallest + 1,
                2 => smallest,
                3 | 4 => 1 + ((r >> 16) as u32) % smallest,
                _ => 1 + ((r >> 16) as u32) % smallest.min(3),
            };
            let from_redis = redis.decide_cost(key.clone(), &policy, cost).await.unwrap();
            let from_state = state.decide(&policy, at, cost);
            assert_eq!(from_redis, from_state, "{context}, cost {cost}");
            decisions += 1;
            accepted += u32::from(from_redis.is_allowed() && cost > 0);
            if from_redis.is_allowed() && (r >> 40).is_multiple_of(2) {
                // Answered a little later, using more or less than reserved.
                now += (r >> 44) % 2_000_000;
                clock.set(Duration::from_micros(now));
                let used = match (r >> 24) % 4 {
                    0 => 0,
                    1 => cost.saturating_add(1 + ((r >> 28) as u32) % smallest),
                    _ => ((r >> 28) % (2 * u64::from(cost) + 2)).min(u32::MAX.into()) as u32,
                };
                let at = Duration::from_micros(now);
                let from_redis = redis
                    .settle_bound(key.clone(), &binding, &from_redis, cost, used)
                    .await
                    .unwrap();
                let from_state = state.settle(&policy, at, &from_state, cost, used);
                assert_eq!(
                    from_redis, from_state,
                    "{context}, settled {cost} at {used}"
                );
                settled += 1;
                // What the settling left: the next peek agrees too.
                let peek = redis.peek(key.clone(), &policy).await.unwrap();
                assert_eq!(
                    peek,
                    state.peek(&policy, at),
                    "{context}, peek after settling"
                );
            }
        }
    }
    assert!(
        accepted > 200 && settled > 100,
        "{accepted} accepted, {settled} settled"
    );
    println!(
        "bucket on epoch times: {decisions} decisions ({accepted} accepted), {settled} settled, Redis and KeyState identical"
    );
}

/// A clock that stepped back is judged at the latest window or stamp
/// counted in, but the penalty a refusal starts counts from the time
/// asked, in Redis as in memory: the key is free again at the same instant.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_penalty_counts_from_the_time_asked_after_the_clock_steps_back() {
    let penalty = Duration::from_secs(30);
    for algorithm in [Algorithm::SlidingCounter, Algorithm::SlidingLog] {
        let policy = Policy::new(algorithm, [Limit::per_second(2)])
            .unwrap()
            .with_penalty(penalty);
        let clock = ManualClock::new();
        let redis = redis_store(&shared_url(), "penalty-asked", &clock).await;
        let memory = MemoryStore::with_clock(clock.clone());
        let context = format!("{algorithm:?}");
        clock.set(Duration::from_millis(100_900));
        for _ in 0..2 {
            assert!(alike(&redis, &memory, "k", &policy, false, &context)
                .await
                .is_allowed());
        }
        // 700 ms back: refused, judged at 100.9 s, penalised from 100.2 s.
        clock.set(Duration::from_millis(100_200));
        let refused = alike(&redis, &memory, "k", &policy, false, &context).await;
        assert!(!refused.is_allowed(), "{context}");
        for at in [130_100, 130_199, 130_200, 130_201] {
            clock.set(Duration::from_millis(at));
            let decision = alike(&redis, &memory, "k", &policy, true, &context).await;
            assert_eq!(decision.is_allowed(), at >= 130_200, "{context} at {at} ms");
        }
    }
}
