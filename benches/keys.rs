//! Memory per key in the memory store against governor's keyed limiter,
//! as a per-IP limiter under a flood holds one entry for every address
//! that ever knocked: the heap each grows by for 700k, 1M and 1.4M `u64`
//! keys, counted by a wrapping global allocator, and its mean over the
//! three counts, so that no table size tuned to one count decides it.
//!
//! `cargo bench --bench keys`.

// Its criterion helpers serve the other benches.
#[allow(dead_code)]
mod report;

#[path = "../tests/support/live_bytes.rs"]
mod live_bytes;

use std::num::NonZeroU32;
use std::time::Duration;

use governor::{Quota, RateLimiter};
use tower_sliding_window::{Algorithm, Limit, MemoryStore, Policy};

const COUNTS: [u64; 3] = [700_000, 1_000_000, 1_400_000];

/// Heap bytes a key after `fill` has judged keys `0..keys` in a limiter
/// `make` built, the limiter still alive.
fn per_key<L>(keys: u64, make: impl Fn() -> L, fill: impl Fn(&L, u64)) -> f64 {
    let before = live_bytes::live_bytes();
    let limiter = make();
    for key in 0..keys {
        fill(&limiter, key);
    }
    let grown = live_bytes::live_bytes() - before;
    drop(limiter);
    grown as f64 / keys as f64
}

/// Our store under `limits` (max, window in seconds) of `algorithm`, with
/// room for the largest count: the heap `keys` keys take in it.
fn ours(keys: u64, algorithm: Algorithm, limits: &[(u32, u64)]) -> f64 {
    let limits = limits
        .iter()
        .map(|&(max, secs)| Limit::new(max, Duration::from_secs(secs)).unwrap());
    let policy = Policy::new(algorithm, limits).unwrap();
    let room = *COUNTS.iter().max().unwrap() as usize;
    let make = || {
        let store = MemoryStore::new().with_max_keys(room).unwrap();
        let binding = store.bind::<u64>(&policy);
        (store, binding)
    };
    per_key(keys, make, |(store, binding), key| {
        assert!(store.decide_bound_now(key, binding).is_allowed());
    })
}

fn governor(keys: u64) -> f64 {
    let make = || RateLimiter::keyed(Quota::per_second(NonZeroU32::MAX));
    per_key(keys, make, |limiter, key| {
        assert!(limiter.check_key(&key).is_ok());
    })
}

fn main() {
    let huge = u32::MAX;
    type Measure = Box<dyn Fn(u64) -> f64>;
    let contenders: [(&str, Measure); 4] = [
        ("governor keyed", Box::new(governor)),
        (
            "ours counter, 1 limit",
            Box::new(move |keys| ours(keys, Algorithm::SlidingCounter, &[(huge, 1)])),
        ),
        (
            "ours token bucket, 1 limit",
            Box::new(move |keys| ours(keys, Algorithm::TokenBucket, &[(huge, 1)])),
        ),
        (
            "ours counter, 2 limits",
            Box::new(move |keys| ours(keys, Algorithm::SlidingCounter, &[(huge, 1), (huge, 60)])),
        ),
    ];
    let mut columns: Vec<String> = vec![String::new()];
    columns.extend(["700k keys", "1M keys", "1.4M keys"].map(String::from));
    columns.extend(["mean".to_string(), "ratio".to_string()]);
    let columns: Vec<&str> = columns.iter().map(String::as_str).collect();
    let mut table = report::Table::new(
        "memory per key",
        "Heap bytes a key, `u64` keys, counted by a global allocator once every key was judged (one limit of a huge max, so every call is admitted and recorded); the mean over the three counts, and its ratio to governor's keyed limiter in the same run.",
        &columns,
    );
    let mut baseline = None;
    for (name, measure) in &contenders {
        let bytes: Vec<f64> = COUNTS.iter().map(|&keys| measure(keys)).collect();
        let mean = bytes.iter().sum::<f64>() / bytes.len() as f64;
        let base = *baseline.get_or_insert(mean);
        let mut row = vec![name.to_string()];
        row.extend(bytes.iter().map(|b| format!("{b:.1}")));
        row.push(format!("{mean:.1}"));
        row.push(format!("**{:.2}**", mean / base));
        table.row(&row);
    }
    table.finish();
}
