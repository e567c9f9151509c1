//! Redis-only behaviour: agreement with the memory store on random traffic,
//! atomicity across connections, one round trip per decision, bytes per key,
//! server time, and the failure policies against a server that dies.
#![cfg(feature = "redis")]

#[path = "support/redis_server.rs"]
mod redis_server;

use std::time::{Duration, Instant};

use http::{Request, Response, StatusCode};
use redis_server::{shared_url, unique_prefix, Server};
use tower::{service_fn, ServiceBuilder, ServiceExt};
use tower_sliding_window::{
    Algorithm, Decision, FailurePolicy, Limit, ManualClock, MemoryStore, Origin, Policy,
    RedisStore, SlidingWindowLayer, Store,
};

const ALGORITHMS: [Algorithm; 3] = [
    Algorithm::SlidingLog,
    Algorithm::SlidingCounter,
    Algorithm::FixedWindow,
];

async fn store_at(url: &str, clock: &ManualClock) -> RedisStore {
    RedisStore::connect(url)
        .await
        .unwrap_or_else(|e| panic!("the Redis tests need a Redis at {url} (set REDIS_URL): {e}"))
        .with_prefix(&unique_prefix("redis"))
        .with_clock(clock.clone())
        .with_failure_policy(FailurePolicy::FailClosed)
        .with_timeout(Duration::from_secs(5))
}

fn policy(algorithm: Algorithm, limits: &[(u32, u64)]) -> Policy {
    Policy::new(
        algorithm,
        limits
            .iter()
            .map(|&(max, ms)| Limit::new(max, Duration::from_millis(ms)).unwrap()),
    )
    .unwrap()
}

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

struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_traffic_gets_identical_decisions_from_redis_and_memory() {
    let mut decisions = 0;
    // Two runs' log rings (300 and 200 stamps) are past the size the script
    // reads whole, so they exercise the other read and write paths too; full
    // rings are the next test's.
    let small: &[(u32, u64)] = &[(4, 1_000), (20, 10_000)];
    // Every script is written for each policy: one, two and three limits
    // here, eight below.
    let one: &[(u32, u64)] = &[(6, 2_000)];
    let three: &[(u32, u64)] = &[(3, 500), (8, 2_000), (25, 10_000)];
    // The window script is written for each policy, up to the most limits
    // a policy may hold.
    let eight: &[(u32, u64)] = &EIGHT;
    assert_eq!(eight.len(), Policy::MAX_LIMITS);
    type Run<'a> = (u64, Algorithm, &'a [(u32, u64)]);
    let runs: [Run; 15] = [
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
    ];
    for (seed, algorithm, limits) in runs {
        // Fresh stores per run: Redis shares windows between equal policies.
        let clock = ManualClock::new();
        let redis = store_at(&shared_url(), &clock).await;
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
            // Judging without recording takes the scripts' other mode.
            let peek = (r >> 16).is_multiple_of(4);
            let context = format!("{algorithm:?} at {now} µs");
            alike(&redis, &memory, &key, &policy, peek, &context).await;
            decisions += 1;
        }
    }
    println!("differential: {decisions} decisions, Redis and memory identical");
}

/// Under steady traffic a log's cursors move to the next stamp, which the
/// trailer keeps, without reading the ring for it every time: where the
/// ring is too large to be read whole, a decision reads the trailer, and a
/// cursor moving one stamp at a time reads two stamps every other
/// decision; a cursor on the newest stamp learns the next one as it is
/// recorded, and reads nothing. (Without the next stamp in the trailer,
/// those two cases took 1,050 reads: one stamp a cursor a decision.) A
/// ring small enough to be read whole takes one `GET` a decision instead.
/// Once full, either way, the new stamp and the trailer are written in
/// place, one `SETRANGE` each, or one for both when the stamp goes in the
/// ring's last slot, just before the trailer; nothing is rewritten whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn steady_traffic_reads_the_logs_ring_rarely() {
    let server = tokio::task::spawn_blocking(Server::start).await.unwrap();
    let clock = ManualClock::new();
    let store = store_at(&server.url(), &clock).await;
    // 300 stamps are read in ranges, 20 whole. A request every 7 s: a 10
    // or 12 s window holds one or two stamps, a 100 s window about
    // fifteen, and every decision moves each cursor by one; the ring wraps.
    // Seconds, not milliseconds: keys expire on the server's own clock,
    // which runs on while the test's stands still between calls, and a
    // TTL of two 12 ms windows could lapse between two calls on a busy
    // machine, starting the key afresh.
    for (limits, gets, reads_range) in [
        ([(200, 10_000), (300, 12_000)], 0, 350..=350),
        ([(200, 10_000), (300, 100_000)], 0, 350..=350 + 350 / 2 + 5),
        ([(10, 10_000), (20, 100_000)], 350, 0..=0),
    ] {
        let policy = policy(Algorithm::SlidingLog, &limits);
        let mut step = 0u64;
        let mut decide_next = async || {
            clock.set(Duration::from_secs(7 * step));
            step += 1;
            assert!(store.decide("steady", &policy).await.unwrap().is_allowed());
        };
        // Every ring full first: the stamp that fills one rewrites it.
        for _ in 0..300 {
            decide_next().await;
        }
        server.cli(&["CONFIG", "RESETSTAT"]);
        for _ in 0..350 {
            decide_next().await;
        }
        let reads = server.command_calls("getrange");
        println!("log {limits:?}, 350 decisions: {reads} GETRANGE");
        assert_eq!(server.command_calls("evalsha"), 350);
        assert!(reads_range.contains(&reads), "{limits:?}: {reads} reads");
        assert_eq!(server.command_calls("get"), gets, "{limits:?}");
        assert_eq!(server.command_calls("set"), 0, "{limits:?}");
        // After 300 decisions each ring is full with its oldest stamp in
        // slot 0 (300 is a multiple of both rings' sizes), so 350 more
        // write its last slot 350 / size times.
        let size = limits.iter().map(|&(max, _)| max).max().unwrap();
        assert_eq!(
            server.command_calls("setrange"),
            700 - 350 / u64::from(size),
            "{limits:?}: the stamp and the trailer"
        );
    }
}

/// How a log key is written, counted call by call. A fresh key's first
/// stamp and trailer go in one `SET` with the TTL, whatever the layout. A
/// ring read whole is rewritten whole (one `SET`) while it grows, and
/// written in place once full (two `SETRANGE`, one if the stamp goes in
/// the last slot). A ring read in ranges grows in place, one `SETRANGE`
/// for the new stamp and the trailer after it, and the stamp that fills
/// one of up to 4,096 stamps rewrites it
/// whole (a `GET` and a `SET`), so that no room grown for it is left; a
/// larger one is filled in place. Then it is written in place. The TTL is
/// set on the first write and renewed as a new span of the window starts,
/// not on every write.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn log_keys_are_rewritten_whole_only_to_stay_small() {
    let server = tokio::task::spawn_blocking(Server::start).await.unwrap();
    let clock = ManualClock::new();
    let store = store_at(&server.url(), &clock).await;
    // One limit a second, a request every 100 ms: at most eleven stamps
    // inside the window, so every request is accepted while the ring fills.
    // Renewals by `PEXPIRE`, as each second starts: none where every
    // growing write is a `SET`; at 1 to 4 s for the ring of 50, which its
    // `SET` fills at 5 s; at every second up to 409 s for the ring of
    // 4,097, filled in place at 409.7 s.
    for (max, renewals) in [(20u32, 0), (50, 4), (4_097, 409)] {
        let whole = max <= 32;
        let rewritten_when_full = !whole && max <= 4_096;
        let policy = policy(Algorithm::SlidingLog, &[(max, 1_000)]);
        let name = store.key_name(&"writes", &policy);
        clock.set(Duration::ZERO);
        server.cli(&["CONFIG", "RESETSTAT"]);
        let calls = |command| server.command_calls(command);
        let decide = async || {
            clock.advance(Duration::from_millis(100));
            assert!(store.decide("writes", &policy).await.unwrap().is_allowed());
        };
        decide().await;
        assert_eq!(
            (
                calls("set"),
                calls("setrange"),
                calls("pexpire"),
                calls("get") > 0
            ),
            (1, 0, 0, whole),
            "limit {max}: the first stamp"
        );
        let ttl: i64 = server.cli(&["PTTL", &name]).unwrap().parse().unwrap();
        assert!(ttl > 1_000 && ttl <= 2_001, "limit {max}: PTTL {ttl}");
        // The stamps up to the one before the ring is full.
        for _ in 2..max {
            decide().await;
        }
        let growing = u64::from(max) - 2;
        if whole {
            assert_eq!((calls("set"), calls("setrange")), (1 + growing, 0));
        } else {
            assert_eq!(
                (calls("set"), calls("setrange"), calls("get")),
                (1, growing, 0),
                "limit {max}: growing in place"
            );
        }
        // The stamp that fills the ring, then one on a full ring.
        decide().await;
        let (sets, setranges) = (calls("set"), calls("setrange"));
        if whole {
            assert_eq!((sets, setranges), (u64::from(max), 0));
        } else if rewritten_when_full {
            assert_eq!((sets, setranges, calls("get")), (2, growing, 1));
        } else {
            assert_eq!(
                (sets, setranges, calls("get")),
                (1, growing + 1, 0),
                "limit {max}: too large to rewrite"
            );
        }
        decide().await;
        assert_eq!(
            (calls("set"), calls("setrange")),
            (sets, setranges + 2),
            "limit {max}: a full ring is written in place"
        );
        let length: u64 = server.cli(&["STRLEN", &name]).unwrap().parse().unwrap();
        assert_eq!(
            length,
            36 + 8 * u64::from(max),
            "limit {max}: one slot a stamp, one trailer"
        );
        assert_eq!(calls("pexpire"), renewals, "limit {max}: renewals");
    }
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
        let redis = store_at(&shared_url(), &clock).await;
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
/// reads whole (32 stamps), and a larger one: one key, steps of
/// up to 600 ms against a 60 s window, so that rings fill, refuse, wrap and
/// drop their oldest stamp, with the clock stepping back now and then. Redis and memory
/// must agree on every decision.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn full_log_rings_wrap_and_refuse_alike_in_redis_and_memory() {
    let (mut accepted, mut refused) = (0, 0);
    // A ring of one slot too: every stamp goes in its last slot.
    let cases: [(u64, &[(u32, u64)]); 4] = [
        (3, &[(31, 2_000), (32, 60_000)]),
        (5, &[(33, 2_000), (34, 60_000)]),
        (7, &[(127, 2_000), (128, 60_000)]),
        (11, &[(1, 2_000)]),
    ];
    for (seed, limits) in cases {
        let clock = ManualClock::new();
        let redis = store_at(&shared_url(), &clock).await;
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
        let redis = store_at(&shared_url(), &clock).await;
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
    let first = store_at(&url, &clock)
        .await
        .with_prefix("tsw-test:shared-two-conn");
    let prefix = unique_prefix("two-connections");
    let first = first.with_prefix(&prefix);
    let second = store_at(&url, &clock).await.with_prefix(&prefix);
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
async fn one_script_call_per_decision_whatever_the_number_of_limits() {
    let server = tokio::task::spawn_blocking(Server::start).await.unwrap();
    let clock = ManualClock::new();
    let store = store_at(&server.url(), &clock).await;
    for algorithm in ALGORITHMS {
        let policy = policy(algorithm, &[(5, 1_000), (50, 60_000), (500, 3_600_000)]);
        // Load the script first, so the count below is the steady state.
        store.decide("warm-up", &policy).await.unwrap();
        // MONITOR shows every command a client sends, and marks the ones a
        // script runs inside the server with "lua]".
        let monitor = server.monitor();
        for i in 0..200u64 {
            clock.set(Duration::from_millis(i * 37));
            store.decide(format!("k{}", i % 3), &policy).await.unwrap();
        }
        let seen = monitor.finish();
        let from_client: Vec<&String> = seen.iter().filter(|line| !line.contains("lua]")).collect();
        let evalsha = from_client
            .iter()
            .filter(|line| line.contains("\"EVALSHA\""))
            .count();
        assert_eq!(evalsha, 200, "{algorithm:?}");
        assert_eq!(
            from_client.len(),
            200,
            "{algorithm:?}: nothing but EVALSHA: {from_client:?}"
        );
        println!(
            "{algorithm:?}, 3 limits: 200 decisions, {} round trips",
            from_client.len()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn script_flush_is_recovered_transparently() {
    let server = tokio::task::spawn_blocking(Server::start).await.unwrap();
    let clock = ManualClock::new();
    let store = store_at(&server.url(), &clock).await;
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

/// `MEMORY USAGE` and `OBJECT ENCODING` of one key's state after filling
/// its limit (or after at most `cap` requests, for limits too large to
/// fill).
async fn bytes_for(
    store: &RedisStore,
    server: &Server,
    algorithm: Algorithm,
    limits: &[(u32, u64)],
    cap: u32,
) -> (u64, String) {
    let policy = policy(algorithm, limits);
    let requests = limits.iter().map(|&(max, _)| max).max().unwrap().min(cap);
    let tasks: Vec<_> = (0..requests)
        .map(|_| {
            let (store, policy) = (store.clone(), policy.clone());
            tokio::spawn(async move { store.decide("203.0.113.7", &policy).await.unwrap() })
        })
        .collect();
    let mut accepted = 0;
    for task in tasks {
        accepted += u32::from(task.await.unwrap().is_allowed());
    }
    let smallest = limits.iter().map(|&(max, _)| max).min().unwrap();
    assert_eq!(accepted, smallest.min(requests), "{algorithm:?} {limits:?}");
    let name = store.key_name(&"203.0.113.7", &policy);
    let encoding = server.cli(&["OBJECT", "ENCODING", &name]).unwrap();
    let bytes = server
        .cli(&["MEMORY", "USAGE", &name, "SAMPLES", "0"])
        .unwrap()
        .parse()
        .unwrap();
    (bytes, encoding)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn state_is_compact() {
    let server = tokio::task::spawn_blocking(Server::start).await.unwrap();
    let clock = ManualClock::new();
    // The default prefix and an IPv4 key, as in production: MEMORY USAGE
    // counts the key's name too.
    let store = store_at(&server.url(), &clock)
        .await
        .with_prefix(RedisStore::DEFAULT_PREFIX);
    for max in [5u32, 100, 3_000, 10_000] {
        let (bytes, _) = bytes_for(
            &store,
            &server,
            Algorithm::SlidingLog,
            &[(max, 3_600_000)],
            u32::MAX,
        )
        .await;
        let per_stamp = bytes as f64 / f64::from(max);
        println!("log, limit {max}: MEMORY USAGE {bytes} bytes ({per_stamp:.1} per timestamp)");
        // 8 bytes a stamp, plus a fixed trailer and Redis's own key overhead.
        assert!(
            bytes <= 16 * u64::from(max) + 100,
            "log limit {max}: {bytes} bytes"
        );
        // A ring read in ranges grows in place, where Redis reserves up to
        // as much again, but the stamp that fills one of up to 4,096 stamps
        // rewrites the string to size: what is left is the allocator's
        // rounding, up to a quarter. (Grown in place to the end, limit 3,000
        // took 41,032 bytes.) Larger rings keep their room.
        if max > 32 && max <= 4_096 {
            assert!(
                bytes <= 10 * u64::from(max) + 150,
                "log limit {max}: {bytes} bytes, room left from growing"
            );
        }
    }
    // Small counts pack into one integer, which Redis keeps inside the
    // key's object: within 100 bytes with one limit or two.
    for limits in [
        &[(100u32, 60_000u64)][..],
        &[(10, 1_000), (100, 60_000)][..],
    ] {
        let (bytes, encoding) =
            bytes_for(&store, &server, Algorithm::SlidingCounter, limits, u32::MAX).await;
        println!(
            "counter, {} limit(s): MEMORY USAGE {bytes} bytes, {encoding}",
            limits.len()
        );
        assert_eq!(encoding, "int", "counter {limits:?}");
        assert!(bytes <= 100, "counter {limits:?}: {bytes} bytes");
    }
    // Counts too wide for the index to span 24.8 days in the bits left
    // keep 12 bytes a limit in a string: one limit still fits Redis's
    // smallest string allocation. (Nearly ten million a minute is not filled: the
    // layout does not depend on the counts.)
    for limits in [
        &[(9_999_999u32, 60_000u64)][..],
        &[(100, 1_000), (1_000, 60_000)][..],
    ] {
        let (bytes, encoding) =
            bytes_for(&store, &server, Algorithm::SlidingCounter, limits, 1_000).await;
        println!(
            "counter, {} wide limit(s): MEMORY USAGE {bytes} bytes, {encoding}",
            limits.len()
        );
        assert_eq!(encoding, "embstr", "counter {limits:?}");
        // The key's name counts too: its format version (`v2:`) takes the
        // longest of these names over one allocator size.
        let bound = 104 + 32 * (limits.len() as u64 - 1);
        assert!(bytes <= bound, "counter {limits:?}: {bytes} bytes");
    }
    let ttl: i64 = server
        .cli(&[
            "PTTL",
            &store.key_name(
                &"203.0.113.7",
                &policy(Algorithm::SlidingCounter, &[(100, 60_000)]),
            ),
        ])
        .unwrap()
        .parse()
        .unwrap();
    assert!(ttl > 0 && ttl <= 120_001, "every key expires: PTTL {ttl}");
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

/// The scripts renew a key's TTL only when a window rolls (counter, fixed)
/// or the newest stamp enters a new span of the longest window (log). On
/// server time, through several windows, the key must still outlive every
/// state that matters: checked after each decision, with the server's time
/// and the key's TTL read in one script so that no time passes between them.
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
    let window_micros = 20_000;
    // A log of up to 32 stamps is read whole, a longer one in ranges.
    let runs = [
        (Algorithm::SlidingLog, 1_000),
        (Algorithm::SlidingLog, 32),
        (Algorithm::SlidingCounter, 1_000),
        (Algorithm::FixedWindow, 1_000),
    ];
    for (algorithm, max) in runs {
        let policy = policy(algorithm, &[(max, 20)]);
        let name = store.key_name(&"ttl", &policy);
        // What matters is the state the last accepted request left.
        let mut accepted_at = 0;
        let (mut renewals, mut checks, mut last_ttl) = (0, 0, 0);
        let (mut windows, mut last_window) = (0, -1);
        // A busy loop across six 20 ms windows: no sleeping, the property
        // holds at every instant.
        while windows < 6 {
            let decision = store.decide("ttl", &policy).await.unwrap();
            let at = decision.decided_at().as_micros() as i64;
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
                _ => window_start + window_micros,
            };
            assert!(
                expires_at >= needed_until - 1,
                "{algorithm:?}: the key expires at {expires_at} µs, its state matters until {needed_until}"
            );
            renewals += usize::from(ttl > last_ttl);
            last_ttl = ttl;
            checks += 1;
        }
        // Renewed when a new window starts, not at each request.
        assert!(
            renewals >= 2 && renewals <= windows && renewals * 5 < checks,
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
        .store(store.clone());
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
            store_at(&url, &clock)
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
            "{label}"
        );
        assert_eq!(
            statuses[1],
            (StatusCode::OK, Some(Origin::Fallback)),
            "{label}"
        );
        assert_eq!(statuses[2].0, StatusCode::TOO_MANY_REQUESTS, "{label}");

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
    // Redis keeps each window index modulo 2^32 in the binary layout (and
    // one index of 45 bits where the counts are small enough to pack); a
    // 1 ms window idle for 30 days (2.6 * 10^9 windows) inside a key kept
    // alive by a 10-year limit must still read as old, not as a window in
    // the future. A `max` of 255 makes the counts too wide to pack.
    for long_max in [5, 255] {
        let clock = ManualClock::new();
        let redis = store_at(&shared_url(), &clock).await;
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
