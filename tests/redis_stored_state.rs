//! What the Redis store keeps for a counter or fixed window, and how it
//! reads what it finds: the state packed into one integer for policies with
//! small counts, an index wrapping around its modulus, and values that are
//! no state at all; and log trailers that contradict themselves. Each run is
//! checked against the memory store on the same clock.
#![cfg(feature = "redis")]

#[path = "support/redis_server.rs"]
mod redis_server;

use std::time::Duration;

use redis::AsyncCommands;
use redis_server::{shared_url, unique_prefix};
use tower_sliding_window::{
    Algorithm, FailurePolicy, Limit, ManualClock, MemoryStore, Policy, RedisStore, Store,
};

const SECOND: u64 = 1_000_000;

async fn store_at(clock: &ManualClock) -> RedisStore {
    let url = shared_url();
    RedisStore::connect(&url)
        .await
        .unwrap_or_else(|e| panic!("the Redis tests need a Redis at {url} (set REDIS_URL): {e}"))
        .with_prefix(&unique_prefix("stored-state"))
        .with_clock(clock.clone())
        .with_failure_policy(FailurePolicy::FailClosed)
        .with_timeout(Duration::from_secs(5))
}

async fn connection() -> redis::aio::MultiplexedConnection {
    redis::Client::open(shared_url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .expect("a Redis connection")
}

/// Ten a second and a hundred a minute: counts of 4 and 7 bits, so the
/// state packs into an integer with 31 bits of seconds.
fn per_second_and_minute(algorithm: Algorithm) -> Policy {
    Policy::new(algorithm, [Limit::per_second(10), Limit::per_minute(100)]).unwrap()
}

async fn encoding(connection: &mut redis::aio::MultiplexedConnection, name: &str) -> String {
    redis::cmd("OBJECT")
        .arg("ENCODING")
        .arg(name)
        .query_async(connection)
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn small_counts_are_stored_as_one_integer() {
    let clock = ManualClock::new();
    clock.set(Duration::from_secs(1_800_000_000));
    let redis = store_at(&clock).await;
    let mut connection = connection().await;
    for algorithm in [Algorithm::SlidingCounter, Algorithm::FixedWindow] {
        let policy = per_second_and_minute(algorithm);
        assert!(redis.decide("packed", &policy).await.unwrap().is_allowed());
        let name = redis.key_name(&"packed", &policy);
        assert_eq!(
            encoding(&mut connection, &name).await,
            "int",
            "{algorithm:?}"
        );
    }
    // One limit a minute stores minutes times 2^14 plus the counts: twelve
    // digits, as long as a one-limit binary state, and read as an integer.
    let memory = MemoryStore::with_clock(clock.clone());
    let minute = Policy::new(Algorithm::SlidingCounter, [Limit::per_minute(100)]).unwrap();
    for _ in 0..101 {
        let from_memory = memory.decide("twelve", &minute).await.unwrap();
        let from_redis = redis.decide("twelve", &minute).await.unwrap();
        assert_eq!(from_redis, from_memory);
    }
    let name = redis.key_name(&"twelve", &minute);
    let stored: String = connection.get(&name).await.unwrap();
    assert_eq!(stored.len(), 12, "{stored}");
    assert_eq!(encoding(&mut connection, &name).await, "int");
    // Counts of 17 and 20 bits leave too few for the index: binary.
    let wide = Policy::new(
        Algorithm::SlidingCounter,
        [Limit::per_second(100_000), Limit::per_minute(1_000_000)],
    )
    .unwrap();
    assert!(redis.decide("packed", &wide).await.unwrap().is_allowed());
    let stored: Vec<u8> = connection
        .get(redis.key_name(&"packed", &wide))
        .await
        .unwrap();
    assert_eq!(stored.len(), 24);
}

/// The packed index is seconds modulo 2^31 for this policy, which wraps in
/// January 2038: traffic across that instant, with the clock stepping back
/// over it, is judged as the memory store judges it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_packed_index_wraps_around_without_losing_counts() {
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
        // A binary state's length for one limit and for two.
        &[7, 0, 0, 0, 3, 0, 0, 0, 9, 0, 0, 0],
        &[b'1'; 24],
        b"",
    ];
    let one_limit = Policy::new(Algorithm::SlidingCounter, [Limit::per_second(10)]).unwrap();
    for policy in [
        per_second_and_minute(Algorithm::SlidingCounter),
        per_second_and_minute(Algorithm::FixedWindow),
        one_limit,
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

/// A log trailer whose next stamp contradicts its cursor (one said to be
/// missing where a stamp follows, one said to be unknown where none does,
/// a value no script writes) reads as a fresh key, whether the ring is read
/// whole or in ranges; the same trailer with a consistent next stamp is
/// read as it stands.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_log_trailer_that_contradicts_itself_reads_as_a_fresh_key() {
    let clock = ManualClock::new();
    clock.set(Duration::from_micros(6));
    let redis = store_at(&clock).await;
    let memory = MemoryStore::with_clock(clock.clone());
    let mut connection = connection().await;
    // One limit: the ring, then the trailer: head, length and newest
    // stamp, then the cursor, its stamp and the next (4, 4, 8, 4, 8 and 8
    // bytes).
    let state = |len: u32, cursor: u32, at: i64, next: i64, ring: &[i64]| -> Vec<u8> {
        let mut bytes = Vec::new();
        for stamp in ring {
            bytes.extend_from_slice(&stamp.to_le_bytes());
        }
        bytes.extend_from_slice(&0u32.to_le_bytes());
        bytes.extend_from_slice(&len.to_le_bytes());
        bytes.extend_from_slice(&ring.last().copied().unwrap_or(-1).to_le_bytes());
        bytes.extend_from_slice(&cursor.to_le_bytes());
        bytes.extend_from_slice(&at.to_le_bytes());
        bytes.extend_from_slice(&next.to_le_bytes());
        bytes
    };
    let contradictions = [
        (
            "none next, though a stamp follows",
            state(2, 0, 1, -1, &[1, 5]),
        ),
        (
            "next unknown, though none follows",
            state(1, 0, 1, -2, &[1]),
        ),
        ("a next no script writes", state(2, 0, 1, -3, &[1, 5])),
    ];
    // 4 a second is read whole, 200 a second in ranges.
    for max in [4, 200] {
        let policy = Policy::new(
            Algorithm::SlidingLog,
            [Limit::new(max, Duration::from_secs(1)).unwrap()],
        )
        .unwrap();
        for (i, (what, value)) in contradictions.iter().enumerate() {
            let key = format!("contradiction-{i}");
            let () = connection
                .set(redis.key_name(&key, &policy), value.as_slice())
                .await
                .unwrap();
            let from_memory = memory.decide(key.clone(), &policy).await.unwrap();
            let from_redis = redis.decide(key, &policy).await.unwrap();
            assert_eq!(from_redis, from_memory, "limit {max}, {what}");
            assert_eq!(
                from_redis.remaining(),
                max - 1,
                "limit {max}, {what}: fresh"
            );
        }
        // The consistent trailer: two stamps inside the second, this request
        // the third.
        let key = "consistent".to_owned();
        let () = connection
            .set(redis.key_name(&key, &policy), state(2, 0, 1, 5, &[1, 5]))
            .await
            .unwrap();
        let decision = redis.decide(key, &policy).await.unwrap();
        assert_eq!(
            decision.remaining(),
            max - 3,
            "limit {max}: read as it stands"
        );
    }
}

/// A log string longer than its trailer says: a trailer that holds
/// together, after bytes no script wrote. A ring read whole checks its
/// length and reads it as a fresh key. A ring read in ranges finds its
/// trailer from the end, so the first write, landing where the trailer
/// says, finds the string's length wrong and starts the key afresh with
/// that request's stamp and time: else the trailer would never be
/// overwritten, and every request would be judged by it until the key
/// expired. That holds for a ring growing, and for a full one whose new
/// stamp goes in its last slot (written with the trailer) or in another
/// (written apart); and a newest stamp an hour ahead does not hold the
/// fresh key's clock. Either way the key decides as a fresh one in memory
/// does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_log_string_longer_than_its_trailer_says_starts_afresh() {
    let clock = ManualClock::new();
    clock.set(Duration::from_secs(10));
    let redis = store_at(&clock).await;
    let memory = MemoryStore::with_clock(clock.clone());
    let mut connection = connection().await;
    let hour_ahead = 3_610 * SECOND as i64;
    // Stray bytes (100 more than the ring the trailer describes), then a
    // trailer of one limit: head, length, newest stamp, then the cursor,
    // its stamp (9.5 s, inside the window) and an unknown next one.
    let value = |slots: usize, head: u32, len: u32, newest: i64, cursor: u32| -> Vec<u8> {
        let mut bytes = vec![0xab_u8; 8 * slots + 100];
        bytes.extend_from_slice(&head.to_le_bytes());
        bytes.extend_from_slice(&len.to_le_bytes());
        bytes.extend_from_slice(&newest.to_le_bytes());
        bytes.extend_from_slice(&cursor.to_le_bytes());
        bytes.extend_from_slice(&9_500_000i64.to_le_bytes());
        let next: i64 = if cursor + 1 < len { -2 } else { -1 };
        bytes.extend_from_slice(&next.to_le_bytes());
        bytes
    };
    let cases = [
        // 4 a second, read whole.
        ("whole", 4, value(1, 0, 1, 9_500_000, 0)),
        // 200 a second, read in ranges: growing from one stamp.
        ("growing", 200, value(1, 0, 1, 9_500_000, 0)),
        // Full, 150 stamps outside the window: the new stamp goes in the
        // last slot, then in another.
        ("full, last slot", 200, value(200, 199, 200, 9_500_000, 150)),
        (
            "full, another slot",
            200,
            value(200, 5, 200, 9_500_000, 150),
        ),
        // The same with a newest stamp an hour ahead.
        ("full, ahead", 200, value(200, 5, 200, hour_ahead, 150)),
    ];
    for (i, (what, max, value)) in cases.iter().enumerate() {
        let policy = Policy::new(
            Algorithm::SlidingLog,
            [Limit::new(*max, Duration::from_secs(1)).unwrap()],
        )
        .unwrap();
        let key = format!("too-long-{i}");
        let name = redis.key_name(&key, &policy);
        let () = connection.set(&name, value.as_slice()).await.unwrap();
        for _ in 0..6 {
            clock.advance(Duration::from_millis(1));
            let from_memory = memory.decide(key.clone(), &policy).await.unwrap();
            let from_redis = redis.decide(key.clone(), &policy).await.unwrap();
            assert_eq!(from_redis, from_memory, "{what}");
        }
        // The stamps accepted, one slot each, then the trailer.
        let length: u64 = connection.strlen(&name).await.unwrap();
        assert_eq!(length, 8 * u64::from((*max).min(6)) + 36, "{what}");
        let ttl: i64 = connection.ttl(&name).await.unwrap();
        assert!(ttl > 0, "{what}: TTL {ttl}");
    }
}
