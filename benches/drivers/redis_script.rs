//! Prints the Lua script the Redis store runs for a request of one unit
//! under one of the policies that `bench/redis-callgrind.sh` measures, for
//! `bench/redis_load.py` to load; with `--args`, the arguments the store
//! passes it after now (no in-flight cap, the units, the settling's time,
//! the penalty, the algorithm, then each limit's max and window), one a
//! line.
//!
//! `cargo run --example redis_script --features redis -- counter`

use std::time::Duration;

use tower_sliding_window::{Algorithm, Limit, Policy, RedisStore};

fn main() {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let print_args = args.first().is_some_and(|arg| arg == "--args");
    if print_args {
        args.remove(0);
    }
    let which = args.first().cloned().unwrap_or_default();
    let limit = |max, window_micros| Limit::new(max, Duration::from_micros(window_micros));
    let (algorithm, limits) = match which.as_str() {
        "counter" => (
            Algorithm::SlidingCounter,
            vec![limit(1_000_000, 1_000_000), limit(10_000_000, 60_000_000)],
        ),
        "counter1" => (Algorithm::SlidingCounter, vec![limit(1_000_000, 1_000_000)]),
        // Small counts, yet above the 22 calls a key gets from
        // bench/redis_load.py.
        "counter-small" => (
            Algorithm::SlidingCounter,
            vec![limit(30, 1_000_000), limit(100, 60_000_000)],
        ),
        // Windows of a minute and an hour, which valgrind's slowness does
        // not roll on every call when the time is the server's.
        "counter-time" => (
            Algorithm::SlidingCounter,
            vec![
                limit(1_000_000, 60_000_000),
                limit(10_000_000, 3_600_000_000),
            ],
        ),
        "log" => (
            Algorithm::SlidingLog,
            vec![limit(100, 1_000), limit(1_000, 10_000)],
        ),
        // Windows long enough that keys outlive a run under valgrind.
        "log-steady" => (
            Algorithm::SlidingLog,
            vec![limit(500, 5_000_000), limit(5_000, 1_000_000_000)],
        ),
        // One limit of 100, its ring full and wrapping: 80 stamps in
        // its window at bench/redis_load.py's pace.
        "log-100" => (Algorithm::SlidingLog, vec![limit(100, 4_000_000)]),
        // A token every µs, as the Redis bench's bucket row of one limit.
        "bucket" => (Algorithm::TokenBucket, vec![limit(1_000_000, 1_000_000)]),
        // Two limits, as the Redis bench's bucket row of two.
        "bucket2" => (
            Algorithm::TokenBucket,
            vec![limit(1_000_000, 1_000_000), limit(10_000_000, 60_000_000)],
        ),
        _ => {
            eprintln!(
                "usage: redis_script [--args] counter|counter1|counter-small|counter-time|log|log-steady|log-100|bucket|bucket2"
            );
            std::process::exit(2);
        }
    };
    let limits: Result<Vec<Limit>, _> = limits.into_iter().collect();
    match limits.and_then(|limits| Policy::new(algorithm, limits)) {
        Ok(policy) if print_args => {
            // The signature starts with the algorithm's letter, as the scripts take it.
            let letter = &policy.signature()[..1];
            println!("\n1\n\n0\n{letter}");
            for limit in policy.limits() {
                println!("{}\n{}", limit.max(), limit.window().as_micros());
            }
        }
        Ok(policy) => {
            let file = match policy.algorithm() {
                Algorithm::SlidingLog => "log.lua",
                Algorithm::TokenBucket => "bucket.lua",
                _ => "window.lua",
            };
            let scripts = RedisStore::script_sources();
            let (_, source) = scripts.iter().find(|(name, _)| *name == file).unwrap();
            print!("{source}");
        }
        Err(err) => {
            eprintln!("bad policy: {err}");
            std::process::exit(1);
        }
    }
}
