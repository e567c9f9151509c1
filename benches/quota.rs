//! Local quota against per-request decisions, on one hot key shared by
//! four instances (four stores) of a private redis-server:
//!
//! * demand far under the limit, 32 decisions in flight per instance:
//!   decisions a second, script calls per 1,000 decisions (heartbeats and
//!   quota given back included) and each decision's latency;
//! * demand twice a limit of 1,000 a second, even, skewed (one instance
//!   sends 90 %) and bursty: what each admits, and the largest count over
//!   the limit at any admission, beside a **model** (not this crate) of
//!   periodic sync replayed on the same arrivals: every instance admits
//!   from the counts it last heard plus its own, and reports every 100 ms,
//!   as gubernator's `GLOBAL` does.
//!
//! `cargo bench --bench quota --features redis`.

#[path = "../tests/support/redis_server.rs"]
mod redis_server;
// Its criterion helpers serve the other benches.
#[allow(dead_code)]
mod report;
#[path = "../tests/support/xorshift.rs"]
mod xorshift;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use redis_server::{unique_prefix, Server};
use tower_sliding_window::{Algorithm, Limit, Policy, RedisStore, Store};
use xorshift::XorShift;

const INSTANCES: usize = 4;
const HORIZON: Duration = Duration::from_millis(250);
const ROUNDS: usize = 3;
/// The model's reporting interval.
const SYNC: u64 = 100_000;

async fn fleet(server: &Server, local: bool) -> Vec<RedisStore> {
    let prefix = unique_prefix("quota-bench");
    let mut stores = Vec::new();
    for _ in 0..INSTANCES {
        let store = RedisStore::connect(&server.url())
            .await
            .expect("connect")
            .with_prefix(&prefix);
        stores.push(if local {
            store.with_local_quota(HORIZON)
        } else {
            store
        });
    }
    stores
}

/// Decisions a second, script calls per 1,000 decisions, and the median
/// and 99th percentile latency in µs: 32 tasks per instance, each making
/// `calls` decisions one after another.
async fn far_under_the_limit(server: &Server, local: bool, calls: usize) -> [f64; 4] {
    let stores = fleet(server, local).await;
    let policy = Policy::new(Algorithm::SlidingCounter, [Limit::per_minute(100_000_000)]).unwrap();
    let before = server.command_calls("evalsha");
    let started = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for store in &stores {
        for _ in 0..32 {
            let (store, policy) = (store.clone(), policy.clone());
            tasks.spawn(async move {
                let mut latencies = Vec::with_capacity(calls);
                for _ in 0..calls {
                    let asked = Instant::now();
                    let decision = store.decide("hot", &policy).await.expect("decide");
                    assert!(decision.is_allowed(), "far under the limit");
                    latencies.push(asked.elapsed().as_secs_f64() * 1e6);
                }
                latencies
            });
        }
    }
    let mut latencies = Vec::new();
    while let Some(done) = tasks.join_next().await {
        latencies.extend(done.expect("task"));
    }
    let elapsed = started.elapsed().as_secs_f64();
    let calls_made = server.command_calls("evalsha") - before;
    latencies.sort_by(f64::total_cmp);
    let at = |share: f64| latencies[((latencies.len() - 1) as f64 * share) as usize];
    let decided = latencies.len() as f64;
    [
        decided / elapsed,
        calls_made as f64 * 1_000.0 / decided,
        at(0.5),
        at(0.99),
    ]
}

/// Script calls per 1,000 decisions and the median and 99th percentile
/// latency in µs, each instance sending 1,000 requests a second for 3 s,
/// one every millisecond, each on its own task.
async fn paced(server: &Server, local: bool) -> [f64; 3] {
    let stores = fleet(server, local).await;
    let policy = Policy::new(Algorithm::SlidingCounter, [Limit::per_minute(100_000_000)]).unwrap();
    let before = server.command_calls("evalsha");
    let started = tokio::time::Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for store in &stores {
        for at in 0..3_000 {
            let (store, policy) = (store.clone(), policy.clone());
            tasks.spawn(async move {
                tokio::time::sleep_until(started + Duration::from_millis(at)).await;
                let asked = Instant::now();
                let decision = store.decide("hot", &policy).await.expect("decide");
                assert!(decision.is_allowed(), "far under the limit");
                asked.elapsed().as_secs_f64() * 1e6
            });
        }
    }
    let mut latencies = Vec::new();
    while let Some(done) = tasks.join_next().await {
        latencies.push(done.expect("task"));
    }
    let calls_made = server.command_calls("evalsha") - before;
    latencies.sort_by(f64::total_cmp);
    let at = |share: f64| latencies[((latencies.len() - 1) as f64 * share) as usize];
    [
        calls_made as f64 * 1_000.0 / latencies.len() as f64,
        at(0.5),
        at(0.99),
    ]
}

/// A traffic shape: each instance's arrival times, µs from the start.
fn arrivals(shape: &str, seconds: u64) -> Vec<Vec<u64>> {
    let mut random = XorShift(0x5eed_0bad_cafe);
    let span = seconds * 1_000_000;
    // Twice the limit of 1,000 a second in all.
    let total = 2_000 * seconds;
    let mut per_instance = vec![Vec::new(); INSTANCES];
    for _ in 0..total {
        let instance = match shape {
            "skewed" if !random.next().is_multiple_of(10) => 0,
            "skewed" => 1 + (random.next() % 3) as usize,
            _ => (random.next() % INSTANCES as u64) as usize,
        };
        let at = match shape {
            // Every 250 ms, each instance's share within 5 ms.
            "bursty" => (random.next() % (span / 250_000)) * 250_000 + random.next() % 5_000,
            _ => random.next() % span,
        };
        per_instance[instance].push(at);
    }
    for times in &mut per_instance {
        times.sort_unstable();
    }
    per_instance
}

/// Every admission's time (the store's `decided_at`, µs), each instance
/// sending its requests at their arrival times, each request on its own
/// task.
async fn admitted_under(stores: &[RedisStore], policy: &Policy, arrivals: &[Vec<u64>]) -> Vec<u64> {
    let started = tokio::time::Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for (store, times) in stores.iter().zip(arrivals) {
        for &at in times {
            let (store, policy) = (store.clone(), policy.clone());
            tasks.spawn(async move {
                tokio::time::sleep_until(started + Duration::from_micros(at)).await;
                let decision = store.decide("hot", &policy).await.expect("decide");
                decision
                    .is_allowed()
                    .then(|| decision.decided_at().as_micros() as u64)
            });
        }
    }
    let mut admitted = Vec::new();
    while let Some(done) = tasks.join_next().await {
        admitted.extend(done.expect("task"));
    }
    admitted.sort_unstable();
    admitted
}

/// The largest amount by which the counter's weighted count exceeded
/// `max` at any admission in `admitted` (sorted), for a window `w`.
fn largest_excess(admitted: &[u64], max: u64, w: u64) -> f64 {
    let mut per_window: BTreeMap<u64, u64> = BTreeMap::new();
    let mut largest: f64 = 0.0;
    for &at in admitted {
        let current = {
            let count = per_window.entry(at / w).or_default();
            *count += 1;
            *count
        };
        let previous = (at / w)
            .checked_sub(1)
            .and_then(|k| per_window.get(&k).copied())
            .unwrap_or(0);
        let weighted = previous as f64 * (w - at % w) as f64 / w as f64 + current as f64;
        largest = largest.max(weighted - max as f64);
    }
    largest
}

/// Periodic sync, modelled: every instance judges by the counter's rule on
/// the counts reported at the last sync plus its own admissions since,
/// and all report every [`SYNC`] µs. Returns the admissions' times.
fn periodic_sync(arrivals: &[Vec<u64>], max: u64, w: u64) -> Vec<u64> {
    let mut all: Vec<(u64, usize)> = arrivals
        .iter()
        .enumerate()
        .flat_map(|(instance, times)| times.iter().map(move |&at| (at, instance)))
        .collect();
    all.sort_unstable();
    let mut reported: BTreeMap<u64, u64> = BTreeMap::new();
    let mut own: Vec<BTreeMap<u64, u64>> = vec![BTreeMap::new(); arrivals.len()];
    let mut next_sync = SYNC;
    let mut admitted = Vec::new();
    for (at, instance) in all {
        while at >= next_sync {
            for counts in &mut own {
                for (window, count) in std::mem::take(counts) {
                    *reported.entry(window).or_default() += count;
                }
            }
            next_sync += SYNC;
        }
        let seen = |window: u64| {
            reported.get(&window).copied().unwrap_or(0)
                + own[instance].get(&window).copied().unwrap_or(0)
        };
        let k = at / w;
        let previous = k.checked_sub(1).map_or(0, seen);
        let weighted = previous as f64 * (w - at % w) as f64 / w as f64 + seen(k) as f64;
        if weighted + 1.0 <= max as f64 {
            *own[instance].entry(k).or_default() += 1;
            admitted.push(at);
        }
    }
    admitted
}

/// Redis's time in µs.
fn redis_micros(server: &Server) -> u64 {
    let time = server.cli(&["TIME"]).unwrap_or_default();
    let mut parts = time
        .lines()
        .filter_map(|part| part.trim().parse::<u64>().ok());
    parts.next().unwrap_or(0) * 1_000_000 + parts.next().unwrap_or(0)
}

async fn over_the_limit(server: &Server) {
    let mut table = report::Table::new(
        "Redis: local quota, a hot key at twice its limit",
        "Four instances on one key, a sliding counter of 1,000 a second, 2,000 requests a second arriving for 3 s (even; skewed: one instance sends 90 %; bursty: every 250 ms at once), each request on its own task. Admitted, as a share of what per-request decisions admit on the same arrivals, and the largest amount the counter's weighted count exceeds 1,000 at any admission (on each decision's time). The periodic-sync row is a model replayed on the same arrivals, not this crate: each instance admits from the counts reported at the last sync plus its own, reporting every 100 ms. One run each.",
        &["traffic", "store", "admitted", "share of per-request's", "largest count over the limit"],
    );
    let (max, w) = (1_000, 1_000_000);
    let policy = Policy::new(Algorithm::SlidingCounter, [Limit::per_second(1_000)]).unwrap();
    for shape in ["even", "skewed", "bursty"] {
        let arrivals = arrivals(shape, 3);
        let mut exact = 0;
        for local in [false, true] {
            // Start at a second's turn, as the model does.
            let into = redis_micros(server) % w;
            tokio::time::sleep(Duration::from_micros(w - into)).await;
            let stores = fleet(server, local).await;
            let admitted = admitted_under(&stores, &policy, &arrivals).await;
            if !local {
                exact = admitted.len();
            }
            table.row(&[
                shape.to_owned(),
                if local { "local quota" } else { "per-request" }.to_owned(),
                admitted.len().to_string(),
                format!("{:.1} %", 100.0 * admitted.len() as f64 / exact as f64),
                format!("{:.0}", largest_excess(&admitted, max, w).ceil()),
            ]);
        }
        let modelled = periodic_sync(&arrivals, max, w);
        table.row(&[
            shape.to_owned(),
            "model: periodic sync, 100 ms".to_owned(),
            modelled.len().to_string(),
            format!("{:.1} %", 100.0 * modelled.len() as f64 / exact as f64),
            format!("{:.0}", largest_excess(&modelled, max, w).ceil()),
        ]);
    }
    table.finish();
}

async fn far_under(server: &Server) {
    let mut table = report::Table::new(
        "Redis: local quota, a hot key far under its limit",
        &format!("Four instances on one key, every decision accepted (a limit of 100,000,000 a minute), local quota with a horizon of 250 ms against a call per decision: 32 decisions in flight per instance as fast as they go, and 1,000 requests a second per instance for 3 s; {ROUNDS} rounds, medians. Script calls include the heartbeats and quota given back."),
        &["", "decisions a second", "× per-request", "script calls per 1,000 decisions", "p50 µs", "p99 µs"],
    );
    let mut figures: [Vec<[f64; 4]>; 2] = [Vec::new(), Vec::new()];
    let mut paced_figures: [Vec<[f64; 3]>; 2] = [Vec::new(), Vec::new()];
    for _ in 0..ROUNDS {
        figures[0].push(far_under_the_limit(server, false, 200).await);
        figures[1].push(far_under_the_limit(server, true, 2_000).await);
        paced_figures[0].push(paced(server, false).await);
        paced_figures[1].push(paced(server, true).await);
    }
    let median =
        |runs: &[[f64; 4]], at: usize| report::median(runs.iter().map(|r| r[at]).collect());
    let per_request = median(&figures[0], 0);
    for (name, runs) in [("per-request", &figures[0]), ("local quota", &figures[1])] {
        table.row(&[
            name.to_owned(),
            format!("{:.0}", median(runs, 0)),
            format!("{:.1}", median(runs, 0) / per_request),
            format!("{:.1}", median(runs, 1)),
            format!("{:.0}", median(runs, 2)),
            format!("{:.0}", median(runs, 3)),
        ]);
    }
    let median =
        |runs: &[[f64; 3]], at: usize| report::median(runs.iter().map(|r| r[at]).collect());
    for (name, runs) in [
        ("per-request", &paced_figures[0]),
        ("local quota", &paced_figures[1]),
    ] {
        table.row(&[
            format!("{name}, 1,000 a second per instance"),
            "4000".to_owned(),
            "".to_owned(),
            format!("{:.1}", median(runs, 0)),
            format!("{:.0}", median(runs, 1)),
            format!("{:.0}", median(runs, 2)),
        ]);
    }
    table.finish();
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let server = tokio::task::spawn_blocking(Server::start)
        .await
        .expect("start redis-server");
    far_under(&server).await;
    over_the_limit(&server).await;
}
