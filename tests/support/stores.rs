//! Builders the test files share: Redis stores set up for tests, and
//! policies written as `(max, window in ms)` pairs.

#![allow(dead_code)]

use std::time::Duration;

use tower_sliding_window::{Algorithm, FailurePolicy, Limit, ManualClock, Policy, RedisStore};

use crate::redis_server::unique_prefix;

/// Every algorithm, for the tests that hold for each.
pub const ALGORITHMS: [Algorithm; 4] = [
    Algorithm::SlidingLog,
    Algorithm::SlidingCounter,
    Algorithm::FixedWindow,
    Algorithm::TokenBucket,
];

/// A store on the Redis at `url` under a prefix of its own, on `clock`,
/// that reports failures as failures (not admissions) and waits long
/// enough for a loaded test machine.
pub async fn redis_store(url: &str, label: &str, clock: &ManualClock) -> RedisStore {
    let store = RedisStore::connect(url)
        .await
        .unwrap_or_else(|e| panic!("the Redis tests need a Redis at {url} (set REDIS_URL): {e}"));
    set_up(store, label, clock)
}

/// `store` under a prefix of its own, on `clock`, failing closed with a
/// timeout long enough for a loaded test machine.
pub fn set_up(store: RedisStore, label: &str, clock: &ManualClock) -> RedisStore {
    store
        .with_prefix(&unique_prefix(label))
        .with_clock(clock.clone())
        .with_failure_policy(FailurePolicy::FailClosed)
        .with_timeout(Duration::from_secs(5))
}

/// A policy of `(max, window in ms)` limits.
pub fn policy(algorithm: Algorithm, limits: &[(u32, u64)]) -> Policy {
    Policy::new(
        algorithm,
        limits
            .iter()
            .map(|&(max, ms)| Limit::new(max, Duration::from_millis(ms)).unwrap()),
    )
    .unwrap()
}
