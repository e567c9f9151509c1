//! What the Redis store keeps, as docs/design.md describes it, and how it
//! reads what it finds: the counter's 16-byte records, the fixed window's
//! and the bucket's 12-byte records, the log's stamps, values that are no state
//! at all; bytes a key and one script call a decision. Each run is
//! checked against the memory store on the same clock.
#![cfg(feature = "redis")]

#[path = "support/redis_server.rs"]
mod redis_server;
#[path = "support/stores.rs"]
mod stores;

use std::time::Duration;

use redis::AsyncCommands;
use redis_server::{shared_url, Server};
use stores::{policy, redis_store, ALGORITHMS};
use tower_sliding_window::{Algorithm, Limit, ManualClock, MemoryStore, Policy, RedisStore, Store};

const SECOND: u64 = 1_000_000;

async fn store_at(clock: &ManualClock) -> RedisStore {
    redis_store(&shared_url(), "stored-state", clock).await
}

async fn connection() -> redis::aio::MultiplexedConnection {
    redis::Client::open(shared_url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .expect("a Redis connection")
}

/// Ten a second and a hundred a minute: two 16-byte records for the
/// counter, two 12-byte ones for the fixed window and the bucket.
fn per_second_and_minute(algorithm: Algorithm) -> Policy {
    Policy::new(algorithm, [Limit::per_second(10), Limit::per_minute(100)]).unwrap()
}

/// The records under a counter's or fixed window's key: per limit the
/// window index, the previous count (the counter only) and the current
/// one, as `struct.pack('<i8I4I4', ...)` or `struct.pack('<i8I4', ...)`
/// wrote them; a fixed window's previous count reads as 0.
fn records(bytes: &[u8], algorithm: Algorithm) -> Vec<(i64, u32, u32)> {
    let size = if algorithm == Algorithm::FixedWindow {
        12
    } else {
        16
    };
    assert_eq!(bytes.len() % size, 0, "{size} bytes a limit: {bytes:?}");
    bytes
        .chunks(size)
        .map(|r| {
            let window = i64::from_le_bytes(r[..8].try_into().unwrap());
            let count = |at: usize| u32::from_le_bytes(r[at..at + 4].try_into().unwrap());
            match size {
                12 => (window, 0, count(8)),
                _ => (window, count(8), count(12)),
            }
        })
        .collect()
}

/// The counter keeps one record of 16 bytes a limit and the fixed window
/// one of 12, whatever the limits: the window index (`now` over the
/// window, whole) and the counts, which a reader decodes as docs/design.md
/// says. Each decision matches the memory store's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_counts_are_kept_as_fixed_size_records() {
    let clock = ManualClock::new();
    let start = 1_800_000_000 * SECOND;
    clock.set(Duration::from_micros(start));
    let redis = store_at(&clock).await;
    let memory = MemoryStore::with_clock(clock.clone());
    let mut connection = connection().await;
    let decade = 3_650 * 86_400_000;
    for limits in [
        &[(100, 60_000)][..],
        &[(10, 1_000), (100, 60_000)][..],
        &[(100_000, 1_000), (1_000_000, 60_000)][..],
        &[(1, 1), (5, decade)][..],
        &[(3, 1_500), (20, 4_000), (50, 60_000)][..],
    ] {
        for algorithm in [Algorithm::SlidingCounter, Algorithm::FixedWindow] {
            clock.set(Duration::from_micros(start));
            let policy = policy(algorithm, limits);
            for second in [0, 0, 1, 61] {
                clock.set(Duration::from_micros(start + second * SECOND));
                let from_memory = memory.decide("records", &policy).await.unwrap();
                let from_redis = redis.decide("records", &policy).await.unwrap();
                assert_eq!(from_redis, from_memory, "{algorithm:?} {limits:?}");
            }
            let name = redis.key_name(&"records", &policy);
            let stored: Vec<u8> = connection.get(&name).await.unwrap();
            let now = start + 61 * SECOND;
            for (record, &(_, ms)) in records(&stored, algorithm).iter().zip(limits) {
                let window = ms * 1_000;
                assert_eq!(record.0, (now / window) as i64, "{algorithm:?} {limits:?}");
                assert!(record.2 >= 1, "the request at 61 s counts: {record:?}");
            }
            let size = if algorithm == Algorithm::FixedWindow {
                12
            } else {
                16
            };
            assert_eq!(stored.len(), size * limits.len());
        }
    }
}

/// The arrival times under a bucket's key: per limit the whole µs and the
/// remainder in max-ths of one, as `struct.pack('<i8I4', ...)` wrote them.
fn arrival_times(bytes: &[u8]) -> Vec<(u64, u32)> {
    assert_eq!(bytes.len() % 12, 0, "12 bytes a limit: {bytes:?}");
    bytes
        .chunks(12)
        .map(|r| {
            let micros = u64::from_le_bytes(r[..8].try_into().unwrap());
            (micros, u32::from_le_bytes(r[8..].try_into().unwrap()))
        })
        .collect()
}

/// The bucket keeps one 12-byte record a limit, its arrival time's whole
/// µs and remainder, and lets the key expire 5 to 10 s after its latest
/// arrival time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_bucket_keeps_one_arrival_time_a_limit() {
    let clock = ManualClock::new();
    let now = 1_800_000_000 * SECOND;
    clock.set(Duration::from_micros(now));
    let redis = store_at(&clock).await;
    let mut connection = connection().await;
    // A token every 6 s: two taken leave the arrival time 12 s ahead.
    let whole = policy(Algorithm::TokenBucket, &[(5, 30_000)]);
    for _ in 0..2 {
        assert!(redis.decide("records", &whole).await.unwrap().is_allowed());
    }
    let name = redis.key_name(&"records", &whole);
    let stored: Vec<u8> = connection.get(&name).await.unwrap();
    assert_eq!(arrival_times(&stored), [(now + 12 * SECOND, 0)]);
    // Full again at now + 12 s; expiring 5 to 10 s later, at the end of
    // the 5 s step after the one that falls in.
    let ttl: i64 = connection.pttl(&name).await.unwrap();
    assert!(ttl > 16_000 && ttl <= 22_001, "PTTL {ttl}");
    // A token every 333,333 1/3 µs and every 8,571,428 4/7 µs.
    let thirds = policy(Algorithm::TokenBucket, &[(3, 1_000), (7, 60_000)]);
    assert!(redis.decide("records", &thirds).await.unwrap().is_allowed());
    let name = redis.key_name(&"records", &thirds);
    let stored: Vec<u8> = connection.get(&name).await.unwrap();
    assert_eq!(
        arrival_times(&stored),
        [(now + 333_333, 1), (now + 8_571_428, 4)]
    );
    // A settling that gives the unit back leaves both at now.
    let admitted = redis.decide("settled", &thirds).await.unwrap();
    let binding = Store::<&str>::bind(&redis, &thirds);
    redis
        .settle_bound("settled", &binding, &admitted, 1, 0)
        .await
        .unwrap();
    let name = redis.key_name(&"settled", &thirds);
    let stored: Vec<u8> = connection.get(&name).await.unwrap();
    assert_eq!(arrival_times(&stored), [(now, 0), (now, 0)]);
    // The state read back as a person would see it.
    let state = redis.state(&"settled", &thirds).await.unwrap().unwrap();
    assert!(format!("{state:?}").contains(&now.to_string()), "{state:?}");
}

/// Traffic across 2^31 s (January 2038), with the clock stepping back over
/// it, is judged as the memory store judges it: the records keep whole
/// window indices, with no modulus to wrap.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn time_past_2038_is_judged_as_the_memory_store_judges_it() {
    let clock = ManualClock::new();
    let redis = store_at(&clock).await;
    let memory = MemoryStore::with_clock(clock.clone());
    let policy = per_second_and_minute(Algorithm::SlidingCounter);
    let wrap = (1u64 << 31) * SECOND;
    let mut now = wrap - 60 * SECOND;
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    let (mut allowed, mut refused, mut crossings) = (0, 0, 0);
    for _ in 0..3_000 {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        let before = now;
        now = match seed % 10 {
            0..=6 => now + seed % 20_000,
            7 => now.saturating_sub(seed % (2 * SECOND)),
            _ => now + seed % (3 * SECOND / 2),
        };
        crossings += u32::from((before < wrap) != (now < wrap));
        clock.set(Duration::from_micros(now));
        let key = format!("client-{}", (seed >> 40) % 2);
        let from_memory = memory.decide(key.clone(), &policy).await.unwrap();
        let from_redis = redis.decide(key, &policy).await.unwrap();
        assert_eq!(from_redis, from_memory, "at {now} µs");
        if from_redis.is_allowed() {
            allowed += 1;
        } else {
            refused += 1;
        }
    }
    assert!(
        now > wrap + 60 * SECOND,
        "the run must pass the wrap: {now}"
    );
    assert!(crossings > 1, "the clock must step back over the wrap");
    assert!(
        allowed > 100 && refused > 100,
        "{allowed} allowed, {refused} refused"
    );
}

/// Anything else under the key (left by hand, or by another program) is no
/// state: the key starts afresh, as a new one would. That includes numbers
/// whose window index lies far from now's: a small number left under the
/// key must not read as a window years ahead, which would hold the key
/// refused until then.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_value_that_is_no_state_reads_as_a_fresh_key() {
    // One limit's record of the counts.
    let record = |window: i64, previous: u32, current: u32| {
        let mut bytes = window.to_le_bytes().to_vec();
        bytes.extend(previous.to_le_bytes());
        bytes.extend(current.to_le_bytes());
        bytes
    };
    // One limit's arrival time.
    let tat = |micros: u64, rem: u32| {
        let mut bytes = micros.to_le_bytes().to_vec();
        bytes.extend(rem.to_le_bytes());
        bytes
    };
    let clock = ManualClock::new();
    clock.set(Duration::from_secs(1_800_000_000));
    let redis = store_at(&clock).await;
    let memory = MemoryStore::with_clock(clock.clone());
    let mut connection = connection().await;
    let values: &[&[u8]] = &[
        b"not a state",
        b"0",
        b"1",
        b"127",
        b"0x10",
        b" 5 ",
        b"-1",
        b"0.5",
        b"1e300",
        b"nan",
        // 2^53: past the doubles' exact integers.
        b"9007199254740992",
        // Records of the right length but no state: a negative window
        // index, one past 2^53, one more than 2^31 windows ahead, counts
        // over max.
        &[0xff; 16],
        &[0xff; 32],
        &[b'1'; 32],
        &record(-1, 0, 0),
        &record(i64::MAX, 0, 0),
        &record(1_800_000_000 + 2_147_483_649, 0, 0),
        &record(1_800_000_000, 0, 11),
        &record(1_800_000_000, 11, 0),
        // A first limit's record 5 s ahead of now (a clock that stepped
        // back), a second one's over its max: the whole value is no state,
        // judged at now, not at the first record's window.
        &[
            record(1_800_000_005, 0, 0),
            record(1_800_000_000 / 60, 0, 101),
        ]
        .concat(),
        &[7, 0, 0, 0, 3, 0, 0, 0, 9, 0, 0, 0],
        &[b'1'; 24],
        b"",
        // The bucket's arrival times at now and ahead of it, but with a
        // remainder not below max (10, 100), a time past 2^53, one record
        // too many or too few; and the decimal text an earlier script wrote.
        &tat(1_800_000_000_000_000, 10),
        &[
            tat(1_800_000_000_000_000, 9),
            tat(1_800_000_000_000_000, 100),
        ]
        .concat(),
        &[tat(1_800_000_000_900_000, 0), tat(1 << 53, 0)].concat(),
        &tat(1_800_000_000_900_000, 0).repeat(3),
        &tat(u64::MAX, 0),
        &[tat(1_800_000_000_900_000, 0), vec![0]].concat(),
        b"1800000000000000+10",
        b"1800000000000000+10 1800000000000000+100",
        b"1800000000900000 9007199254740992",
        b"1800000000900000 1800000000900000 1800000000900000",
        b"1800000000900000+",
        b"1800000000900000  1800000000900000",
        b" 1800000000900000 1800000000900000",
        b"1800000000900000 1800000000900000 ",
        b"1800000000900000+-1",
        b"1800000000900000.5",
        b"1800000000900000+1.0 1800000000900000",
    ];
    let one_limit = |algorithm| Policy::new(algorithm, [Limit::per_second(10)]).unwrap();
    for policy in [
        per_second_and_minute(Algorithm::SlidingCounter),
        per_second_and_minute(Algorithm::FixedWindow),
        per_second_and_minute(Algorithm::TokenBucket),
        one_limit(Algorithm::SlidingCounter),
        one_limit(Algorithm::TokenBucket),
    ] {
        let algorithm = policy.algorithm();
        for (i, value) in values.iter().enumerate() {
            let key = format!("garbage-{i}");
            let name = redis.key_name(&key, &policy);
            let () = connection.set(&name, *value).await.unwrap();
            for _ in 0..11 {
                let from_memory = memory.decide(key.clone(), &policy).await.unwrap();
                let from_redis = redis.decide(key.clone(), &policy).await.unwrap();
                assert_eq!(from_redis, from_memory, "{algorithm:?} over {value:?}");
            }
            // Rewritten as a state, with a TTL again.
            let ttl: i64 = connection.ttl(&name).await.unwrap();
            assert!(ttl > 0, "{algorithm:?} over {value:?}: TTL {ttl}");
        }
    }
}

/// A log key holds the stamps of its accepted requests, 8 bytes each,
/// oldest first (past 128 in a ring), and nothing the log no longer needs:
/// none older than its longest window and at most its largest `max`. An
/// accepted request on a small log reads the key with one `GETRANGE` and
/// writes it with one `SET` carrying the TTL; a refusal writes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_log_key_holds_its_stamps_oldest_first() {
    let server = tokio::task::spawn_blocking(Server::start).await.unwrap();
    let clock = ManualClock::new();
    clock.set(Duration::from_secs(100));
    let store = redis_store(&server.url(), "stored-state", &clock).await;
    let policy = policy(Algorithm::SlidingLog, &[(3, 1_000), (5, 10_000)]);
    let name = store.key_name(&"stamps", &policy);
    let stamps = |server: &Server| -> Vec<i64> {
        use redis::Commands as _;
        let bytes: Vec<u8> = redis::Client::open(server.url())
            .unwrap()
            .get_connection()
            .unwrap()
            .get(&name)
            .unwrap();
        log_stamps(&bytes)
    };
    let at = |ms: i64| ms * 1_000;
    for step_ms in [0, 200, 200, 700, 200] {
        clock.advance(Duration::from_millis(step_ms));
        assert!(store.decide("stamps", &policy).await.unwrap().is_allowed());
    }
    assert_eq!(
        stamps(&server),
        [100_000, 100_200, 100_400, 101_100, 101_300].map(at)
    );
    // The sixth in ten seconds is refused and written nowhere.
    server.cli(&["CONFIG", "RESETSTAT"]);
    clock.advance(Duration::from_secs(1));
    assert!(!store.decide("stamps", &policy).await.unwrap().is_allowed());
    assert_eq!(server.command_calls("set"), 0);
    // At 110.3 s the two oldest have left the long window: they are
    // dropped as the new stamp is written.
    clock.set(Duration::from_millis(110_300));
    assert!(store.decide("stamps", &policy).await.unwrap().is_allowed());
    assert_eq!(
        (
            server.command_calls("getrange"),
            server.command_calls("set")
        ),
        (2, 1)
    );
    assert_eq!(
        stamps(&server),
        [100_400, 101_100, 101_300, 110_300].map(at)
    );
    let ttl: i64 = server.cli(&["PTTL", &name]).unwrap().parse().unwrap();
    assert!(ttl > 10_000 && ttl <= 20_001, "PTTL {ttl}");
}

/// Stamps as a log of up to 128 of them keeps them: alone, oldest first.
fn plain(stamps: &[i64]) -> Vec<u8> {
    stamps
        .iter()
        .flat_map(|stamp| stamp.to_le_bytes())
        .collect()
}

/// A longer log's value as the script writes it: the head's slot and how
/// many stamps are held, then the ring's slots.
fn ring(head: u32, len: u32, slots: &[i64]) -> Vec<u8> {
    let header = [head.to_le_bytes(), len.to_le_bytes()].concat();
    header.into_iter().chain(plain(slots)).collect()
}

/// The stamps a log's value holds, oldest first: alone up to 128 of them,
/// else read from its ring.
fn log_stamps(bytes: &[u8]) -> Vec<i64> {
    assert!(bytes.len().is_multiple_of(8), "whole stamps: {bytes:?}");
    let stamp = |at: usize| i64::from_le_bytes(bytes[at..at + 8].try_into().unwrap());
    if bytes.len() <= 8 * 128 {
        return (0..bytes.len()).step_by(8).map(stamp).collect();
    }
    let word = |at: usize| u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap()) as usize;
    let (head, len, size) = (word(0), word(4), bytes.len() / 8 - 1);
    (0..len)
        .map(|i| stamp(8 + 8 * ((head + i) % size)))
        .collect()
}

/// A log value that is not a ring of whole 8-byte stamps, or holds more
/// stamps than the largest `max`, is no state the script writes: it reads
/// as a fresh key, and is never read past its end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_log_value_that_is_no_state_reads_as_a_fresh_key() {
    let clock = ManualClock::new();
    clock.set(Duration::from_secs(10));
    let redis = store_at(&clock).await;
    let memory = MemoryStore::with_clock(clock.clone());
    let mut connection = connection().await;
    let now = 10 * SECOND as i64;
    let stamps = plain;
    let small = policy(Algorithm::SlidingLog, &[(4, 1_000)]);
    let large = policy(Algorithm::SlidingLog, &[(300, 1_000)]);
    let values: [(&str, Vec<u8>, &Policy); 8] = [
        ("text", b"not a state".to_vec(), &small),
        ("one byte short", stamps(&[now, now])[..15].to_vec(), &small),
        ("one byte over", [stamps(&[now]), vec![0]].concat(), &small),
        (
            "more stamps than the largest max",
            stamps(&[now; 5]),
            &small,
        ),
        ("a head past the ring", ring(200, 1, &[now; 200]), &large),
        (
            "more held than the ring holds",
            ring(0, 201, &[now; 200]),
            &large,
        ),
        (
            "a ring past the largest max",
            ring(0, 301, &[now; 301]),
            &large,
        ),
        ("empty", Vec::new(), &small),
    ];
    for (i, &(what, ref value, policy)) in values.iter().enumerate() {
        let key = format!("log-garbage-{i}");
        let () = connection
            .set(redis.key_name(&key, policy), value.as_slice())
            .await
            .unwrap();
        for _ in 0..5 {
            let from_memory = memory.decide(key.clone(), policy).await.unwrap();
            let from_redis = redis.decide(key.clone(), policy).await.unwrap();
            assert_eq!(from_redis, from_memory, "{what}");
        }
    }
    // Four stamps at now, as the script would write them, are read as
    // they stand: the key is full.
    let key = "log-full".to_owned();
    let () = connection
        .set(redis.key_name(&key, &small), stamps(&[now; 4]))
        .await
        .unwrap();
    assert!(!redis.decide(key, &small).await.unwrap().is_allowed());
    // So is a ring of 300 at now, its head mid-way.
    let key = "log-full-ring".to_owned();
    let () = connection
        .set(redis.key_name(&key, &large), ring(150, 300, &[now; 300]))
        .await
        .unwrap();
    assert!(!redis.decide(key, &large).await.unwrap().is_allowed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_script_call_per_decision_whatever_the_number_of_limits() {
    let server = tokio::task::spawn_blocking(Server::start).await.unwrap();
    let clock = ManualClock::new();
    // Every decision a call: the deny cache, which spares calls for
    // refusals, has tests of its own.
    let store = redis_store(&server.url(), "stored-state", &clock)
        .await
        .with_deny_cache(0);
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
        // The heartbeat's call on the set of instances is no decision.
        let from_client: Vec<&String> = seen
            .iter()
            .filter(|line| !line.contains("lua]") && !line.contains(":instances\""))
            .collect();
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
    // Thirty-two clients at once, each asking in turn: thousands of calls
    // at once would wait behind each other longer than any timeout on a
    // busy machine.
    const CLIENTS: u32 = 32;
    let tasks: Vec<_> = (0..CLIENTS)
        .map(|client| {
            let (store, policy) = (store.clone(), policy.clone());
            let share = requests / CLIENTS + u32::from(client < requests % CLIENTS);
            tokio::spawn(async move {
                let mut accepted = 0;
                for _ in 0..share {
                    let decision = store.decide("203.0.113.7", &policy).await.unwrap();
                    accepted += u32::from(decision.is_allowed());
                }
                accepted
            })
        })
        .collect();
    let mut accepted = 0;
    for task in tasks {
        accepted += task.await.unwrap();
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

/// `MEMORY USAGE` of the log keys `state_is_compact` measures, as the `v2`
/// format (a script filled per policy, 8854324) stored them under names of
/// the same length: later formats, their scripts fixed, keep no more.
const V2_BYTES: [(&str, u64); 4] = [
    ("log, limit 5", 152),
    ("log, limit 100", 984),
    ("log, limit 3000", 24_664),
    ("log, limit 10000", 98_392),
];

/// Fails unless `bytes` is no more than the `v2` format took for `label`.
fn no_more_than_v2(label: &str, bytes: u64) {
    let (_, v2) = V2_BYTES
        .iter()
        .find(|(measured, _)| *measured == label)
        .unwrap_or_else(|| panic!("no v2 figure for {label}"));
    assert!(bytes <= *v2, "{label}: {bytes} bytes, {v2} in v2");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn state_is_compact() {
    let server = tokio::task::spawn_blocking(Server::start).await.unwrap();
    let clock = ManualClock::new();
    // The default prefix and an IPv4 key, as in production: MEMORY USAGE
    // counts the key's name too.
    let store = redis_store(&server.url(), "stored-state", &clock)
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
        no_more_than_v2(&format!("log, limit {max}"), bytes);
        // 8 bytes a stamp (and an 8-byte head past 128), plus Redis's own
        // key overhead. A full log was written whole at its size, so Redis
        // allocated it to size: what is left is the allocator's rounding,
        // up to a quarter.
        assert!(
            bytes <= 10 * u64::from(max) + 150,
            "log limit {max}: {bytes} bytes"
        );
    }
    // The counter keeps 16 bytes a limit in a string, whatever its counts
    // (nearly ten million a minute is not filled: the layout does not
    // depend on the counts); Redis's own overhead for the key and its
    // name come on top.
    for limits in [
        &[(100u32, 60_000u64)][..],
        &[(10, 1_000), (100, 60_000)][..],
        &[(9_999_999u32, 60_000u64)][..],
        &[(100, 1_000), (1_000, 60_000)][..],
    ] {
        let (bytes, encoding) =
            bytes_for(&store, &server, Algorithm::SlidingCounter, limits, 1_000).await;
        println!(
            "counter, {} limit(s) of {limits:?}: MEMORY USAGE {bytes} bytes, {encoding}",
            limits.len()
        );
        assert_eq!(encoding, "embstr", "counter {limits:?}");
        // Redis rounds a string up to its allocator's sizes: 104 bytes
        // with one limit of 100 a minute, 136 with two; a longer
        // signature in the key's name takes another 16.
        let bound = 120 + 32 * (limits.len() as u64 - 1);
        assert!(bytes <= bound, "counter {limits:?}: {bytes} bytes");
    }
    // The bucket's 12-byte records: 88 bytes with one limit, 120 with
    // two, rounded up as the counter's are.
    clock.set(Duration::from_secs(1_800_000_000));
    for limits in [
        &[(100u32, 60_000u64)][..],
        &[(10, 1_000), (100, 60_000)][..],
    ] {
        let (bytes, encoding) =
            bytes_for(&store, &server, Algorithm::TokenBucket, limits, u32::MAX).await;
        println!(
            "bucket, {} limit(s): MEMORY USAGE {bytes} bytes, {encoding}",
            limits.len()
        );
        assert_eq!(encoding, "embstr", "bucket {limits:?}");
        let bound = 104 + 32 * (limits.len() as u64 - 1);
        assert!(bytes <= bound, "bucket {limits:?}: {bytes} bytes");
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

/// Settling through the layer: a response that changes nothing costs no
/// call to Redis; one that gives back or charges costs one script call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_settle_costs_a_script_call_only_when_it_changes_something() {
    use std::convert::Infallible;

    use http::{Request, Response};
    use tower::{service_fn, Layer, ServiceExt};
    use tower_sliding_window::SlidingWindowLayer;

    let server = tokio::task::spawn_blocking(Server::start).await.unwrap();
    let clock = ManualClock::new();
    let store = redis_store(&server.url(), "stored-state", &clock).await;
    let header = |headers: &http::HeaderMap, name: &str| -> Option<u32> {
        headers.get(name)?.to_str().ok()?.parse().ok()
    };
    for algorithm in ALGORITHMS {
        let layer = SlidingWindowLayer::with_policy(
            policy(algorithm, &[(100, 60_000)]),
            |_: &Request<u32>| Some("k"),
        )
        .cost(move |request: &Request<u32>| *request.body())
        .settle(move |response: &Response<()>| header(response.headers(), "x-used"))
        .store(store.clone())
        .wrap_body();
        let svc = layer.layer(service_fn(|request: Request<u32>| {
            let mut response = Response::new(());
            if let Some(used) = request.headers().get("x-use") {
                response.headers_mut().insert("x-used", used.clone());
            }
            std::future::ready(Ok::<_, Infallible>(response))
        }));
        let calls = || server.decision_scripts();
        let send = |cost: u32, used: Option<u32>| {
            let mut request = Request::new(cost);
            if let Some(used) = used {
                request.headers_mut().insert("x-use", used.into());
            }
            svc.clone().oneshot(request)
        };
        // Load the scripts, so that the counts below are steady calls.
        send(1, Some(2)).await.unwrap();
        send(3, Some(1)).await.unwrap();
        let before = calls();
        send(5, None).await.unwrap();
        send(5, Some(5)).await.unwrap();
        assert_eq!(
            calls() - before,
            2,
            "{algorithm:?}: one call each, nothing to settle"
        );
        let before = calls();
        send(5, Some(2)).await.unwrap();
        send(5, Some(9)).await.unwrap();
        assert_eq!(
            calls() - before,
            4,
            "{algorithm:?}: one call each to judge, one to settle"
        );
    }
}

/// A 64 KB key, as a closure might return a client's header unbounded,
/// is named by its digest in Redis, and its limits hold exactly: each
/// algorithm admits its 3 of a minute, then refuses, for this key alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_64_kb_key_gets_a_short_name_and_exact_limits() {
    let clock = ManualClock::new();
    clock.set(Duration::from_secs(1_800_000_000));
    let redis = store_at(&clock).await;
    let mut connection = connection().await;
    let long = "k".repeat(65_536);
    let mut one_byte_apart = long.clone();
    one_byte_apart.replace_range(100..101, "j");
    for algorithm in ALGORITHMS {
        let policy = policy(algorithm, &[(3, 60_000)]);
        for _ in 0..3 {
            assert!(redis
                .decide(long.as_str(), &policy)
                .await
                .unwrap()
                .is_allowed());
        }
        assert!(!redis
            .decide(long.as_str(), &policy)
            .await
            .unwrap()
            .is_allowed());
        let other = redis
            .decide(one_byte_apart.as_str(), &policy)
            .await
            .unwrap();
        assert!(
            other.is_allowed(),
            "{algorithm:?}: one byte apart is another key"
        );
        let name = redis.key_name(&long.as_str(), &policy);
        assert!(name.len() < 160, "{algorithm:?}: {name}");
        assert!(name.contains(":{sha256:"), "{name}");
        let exists: bool = connection.exists(&name).await.unwrap();
        assert!(exists, "{algorithm:?}: the state is under {name}");
    }
}

/// `RedisStore::state` reads each algorithm's format back as the
/// `KeyState` the scripts judge by: after every decision of a run of
/// traffic, the state read from Redis judges a next request exactly as
/// the memory store would.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_keys_state_reads_back_as_the_memory_store_holds_it() {
    let clock = ManualClock::new();
    let start = 1_800_000_000 * SECOND;
    let redis = store_at(&clock).await;
    for algorithm in ALGORITHMS {
        for limits in [&[(3, 1_000)][..], &[(3, 1_000), (5, 60_000)][..]] {
            let policy = policy(algorithm, limits);
            let penalised = policy.clone().with_penalty(Duration::from_secs(2));
            for policy in [policy, penalised] {
                let memory = MemoryStore::with_clock(clock.clone());
                clock.set(Duration::from_micros(start));
                assert!(redis.state(&"read", &policy).await.unwrap().is_none());
                let mut now = start;
                for step in 0..24u64 {
                    now += (step * 7_919) % 700_000;
                    clock.set(Duration::from_micros(now));
                    let from_memory = memory.decide("read", &policy).await.unwrap();
                    let from_redis = redis.decide("read", &policy).await.unwrap();
                    assert_eq!(from_redis, from_memory, "{algorithm:?} {limits:?}");
                    let state = redis.state(&"read", &policy).await.unwrap();
                    let state = state.unwrap_or_else(|| panic!("{algorithm:?}: a state"));
                    let at = Duration::from_micros(now + 1);
                    clock.set(at);
                    assert_eq!(
                        state.peek(&policy, at),
                        memory.peek_now(&"read", &policy),
                        "{algorithm:?} {limits:?} at step {step}: {state:?}"
                    );
                }
            }
        }
    }
}
