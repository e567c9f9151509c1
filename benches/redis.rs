//! The Redis store against a minimal GET/GET/INCR/PEXPIRE script, on a
//! private redis-server started for the run: decisions per second with one
//! call in flight and with 64, and Redis CPU per call from
//! `INFO commandstats`.
//!
//! `cargo bench --bench redis --features redis`.

#[path = "../tests/support/redis_server.rs"]
mod redis_server;

use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::aio::ConnectionManager;
use redis::Script;
use redis_server::Server;
use tower_sliding_window::{Algorithm, Limit, Origin, Policy, RedisStore, Store};

const ROUNDS: usize = 5;
const KEYS: u64 = 1_000;

/// The cheapest honest fixed-window counter: what a hand-written Lua
/// limiter costs, as the yardstick for ours.
const BASELINE: &str = "local previous = redis.call('GET', KEYS[1])
local current = redis.call('GET', KEYS[2])
local n = redis.call('INCR', KEYS[2])
redis.call('PEXPIRE', KEYS[2], ARGV[1])
return n";

#[derive(Clone)]
enum Contender {
    Ours(RedisStore, Policy),
    Baseline(ConnectionManager, Arc<Script>),
}

impl Contender {
    async fn call(&self, key: u64) {
        match self {
            Self::Ours(store, policy) => {
                let decision = store
                    .decide(key, policy)
                    .await
                    .expect("the bench store fails closed");
                assert_eq!(
                    decision.origin(),
                    Origin::Limits,
                    "Redis must answer every call"
                );
            }
            Self::Baseline(connection, script) => {
                let mut connection = connection.clone();
                let _: i64 = script
                    .key(format!("b:{{{key}}}:prev"))
                    .key(format!("b:{{{key}}}:cur"))
                    .arg(60_000)
                    .invoke_async(&mut connection)
                    .await
                    .expect("baseline script");
            }
        }
    }
}

/// Decisions per second with `in_flight` concurrent callers.
async fn throughput(contender: &Contender, in_flight: usize, calls: usize) -> f64 {
    let started = Instant::now();
    let tasks: Vec<_> = (0..in_flight)
        .map(|worker| {
            let contender = contender.clone();
            tokio::spawn(async move {
                for i in 0..calls / in_flight {
                    contender.call(((worker * 7919 + i) as u64) % KEYS).await;
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.expect("bench task");
    }
    calls as f64 / started.elapsed().as_secs_f64()
}

/// Redis CPU per script call (µs), from `INFO commandstats`.
fn usec_per_call(server: &Server) -> f64 {
    let stats = server.cli(&["INFO", "commandstats"]).unwrap_or_default();
    stats
        .lines()
        .find(|line| line.starts_with("cmdstat_evalsha:"))
        .and_then(|line| line.split("usec_per_call=").nth(1))
        .and_then(|rest| rest.split(',').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(f64::NAN)
}

fn spread(mut values: Vec<f64>) -> (f64, f64, f64) {
    values.sort_by(f64::total_cmp);
    (
        values[0],
        values[values.len() / 2],
        values[values.len() - 1],
    )
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let server = tokio::task::spawn_blocking(Server::start)
        .await
        .expect("start redis-server");
    let url = server.url();
    // Large enough that every call is accepted, realistic enough that the
    // script's exact test stays in double precision (the limb fallback for
    // products beyond 2^53 is for limits in the billions).
    let two_limits = |algorithm| {
        Policy::new(
            algorithm,
            [Limit::per_second(1_000_000), Limit::per_minute(10_000_000)],
        )
        .unwrap()
    };
    // The log's ring is as long as its largest limit: 100 keeps it realistic
    // while a 1 ms window keeps every call on the accepting path.
    let log_policy = Policy::new(
        Algorithm::SlidingLog,
        [
            Limit::new(100, Duration::from_millis(1)).unwrap(),
            Limit::new(1_000, Duration::from_millis(10)).unwrap(),
        ],
    )
    .unwrap();
    let store = RedisStore::connect(&url)
        .await
        .expect("connect")
        .with_timeout(Duration::from_secs(2))
        .with_failure_policy(tower_sliding_window::FailurePolicy::FailClosed);
    let manager = ConnectionManager::new(redis::Client::open(url.as_str()).unwrap())
        .await
        .unwrap();
    let contenders = [
        (
            "baseline GET/GET/INCR/PEXPIRE",
            Contender::Baseline(manager, Arc::new(Script::new(BASELINE))),
        ),
        (
            "ours counter, 2 limits",
            Contender::Ours(store.clone(), two_limits(Algorithm::SlidingCounter)),
        ),
        (
            "ours fixed, 2 limits",
            Contender::Ours(store.clone(), two_limits(Algorithm::FixedWindow)),
        ),
        (
            "ours log, 2 limits (100, 1000)",
            Contender::Ours(store, log_policy),
        ),
    ];

    println!(
        "Redis {} on loopback, {ROUNDS} rounds each; decisions per second (min / median / max)",
        server
            .cli(&["INFO", "server"])
            .unwrap_or_default()
            .lines()
            .find_map(|l| l.strip_prefix("redis_version:"))
            .unwrap_or("?")
    );
    let mut medians = Vec::new();
    for (name, contender) in &contenders {
        contender.call(0).await;
        server.cli(&["CONFIG", "RESETSTAT"]);
        let sequential: Vec<f64> = {
            let mut out = Vec::new();
            for _ in 0..ROUNDS {
                out.push(throughput(contender, 1, 3_000).await);
            }
            out
        };
        let parallel: Vec<f64> = {
            let mut out = Vec::new();
            for _ in 0..ROUNDS {
                out.push(throughput(contender, 64, 40_000).await);
            }
            out
        };
        let cpu = usec_per_call(&server);
        let (s_min, s_med, s_max) = spread(sequential);
        let (p_min, p_med, p_max) = spread(parallel);
        println!("  {name:<32} 1 in flight {s_min:>8.0} {s_med:>8.0} {s_max:>8.0}   64 in flight {p_min:>8.0} {p_med:>8.0} {p_max:>8.0}   Redis CPU {cpu:.2} µs/call");
        medians.push((name, s_med, p_med, cpu));
    }
    let baseline = medians[0];
    println!("\nratios to the baseline script (medians; throughput higher is better, CPU lower is better)");
    for (name, s_med, p_med, cpu) in &medians[1..] {
        println!(
            "  {name:<32} 1 in flight {:.2}   64 in flight {:.2}   CPU {:.2}",
            s_med / baseline.1,
            p_med / baseline.2,
            cpu / baseline.3
        );
    }
}
