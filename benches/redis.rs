//! The Redis store against a floor script (TIME, GET, SET PX and a reply
//! of three numbers: what any script of one key and Redis's time costs),
//! beside a minimal GET/GET/INCR/PEXPIRE counter and a minimal GCRA script,
//! on a private redis-server started for the run: decisions per second with one call in
//! flight and with 64, and Redis CPU per decision from
//! `INFO commandstats`, in interleaved rounds. Two rows send half their
//! calls for one key that is refused, with and without the deny cache; two
//! more spread calls over 5,000 tenants, under one shared policy or a policy
//! of each tenant's own, and count the scripts each leaves in Redis's cache.
//! A burst of 20,000 decisions is split into those Redis judged and those
//! the failure policy answered.
//!
//! `cargo bench --bench redis --features redis`.

#[path = "../tests/support/redis_server.rs"]
mod redis_server;
// Its criterion helpers serve the other benches.
#[allow(dead_code)]
mod report;

use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::aio::ConnectionManager;
use redis::Script;
use redis_server::Server;
use tower_sliding_window::{Algorithm, Limit, Origin, Policy, RedisStore, Store};

const ROUNDS: usize = 9;
const KEYS: u64 = 1_000;
/// Tenants of the per-tenant rows, one key each.
const TENANTS: u64 = 5_000;

/// The cheapest honest fixed-window counter: what a hand-written Lua
/// limiter costs, as the yardstick for ours.
const BASELINE: &str = "local previous = redis.call('GET', KEYS[1])
local current = redis.call('GET', KEYS[2])
local n = redis.call('INCR', KEYS[2])
redis.call('PEXPIRE', KEYS[2], ARGV[1])
return n";

/// The floor every decision stands on: Redis TIME, one key read and
/// written with a TTL, and a reply of three numbers. Every row's ratios are
/// taken against it.
const FLOOR: &str = "local t = redis.call('TIME')
local now = t[1] * 1000000 + t[2]
local state = redis.call('GET', KEYS[1])
redis.call('SET', KEYS[1], now, 'PX', ARGV[1])
return {1, now, 0}";

/// The cheapest honest GCRA: one limit whose token time is a whole number
/// of µs (ARGV[1], the window ARGV[2]), the arrival time stored as a
/// number, Redis TIME, GET and SET with PX, a verdict and a wait: the shape
/// of go-redis/redis_rate's script, as the yardstick for our bucket.
const GCRA_BASELINE: &str = "local t = redis.call('TIME')
local now = t[1] * 1000000 + t[2]
local tat = tonumber(redis.call('GET', KEYS[1])) or now
if tat < now then tat = now end
local new = tat + ARGV[1]
local ahead = new - now
if ahead > ARGV[2] + 0 then return {0, ahead - ARGV[2]} end
redis.call('SET', KEYS[1], new, 'PX', math.ceil(ahead / 1000))
return {1, ahead}";

#[derive(Clone)]
enum Contender {
    Ours(RedisStore, Policy),
    /// As `Ours`, over this many keys rather than [`KEYS`].
    OursOn(RedisStore, Policy, u64),
    /// A policy with an in-flight cap: each call takes a slot with its
    /// decision and frees it at once (one `ZREM`).
    Capped(RedisStore, Policy),
    /// Every other call for one key over `flooded`'s limit, the rest
    /// judged by the policy as `Ours`.
    Flooded {
        store: RedisStore,
        policy: Policy,
        flooded: Policy,
    },
    Baseline(ConnectionManager, Arc<Script>),
    /// The GCRA yardstick, a token every µs over a second.
    GcraBaseline(ConnectionManager, Arc<Script>),
    /// The floor script.
    Floor(ConnectionManager, Arc<Script>),
    /// One key per tenant, each judged under its tenant's policy (the
    /// policies may all be one).
    Tenants(RedisStore, Arc<Vec<Policy>>),
}

impl Contender {
    async fn call(&self, key: u64) {
        match self {
            Self::Ours(store, policy) | Self::OursOn(store, policy, _) => {
                judged_by_redis(store, key, policy).await;
            }
            Self::Capped(store, policy) => {
                let decision = judged_by_redis(store, key, policy).await;
                assert!(decision.holds_slot(), "a capped decision takes a slot");
                store.release_bound(key, &Store::<u64>::bind(store, policy), &decision);
            }
            Self::Flooded {
                store,
                policy,
                flooded,
            } if key.is_multiple_of(2) => drop(judged_by_redis(store, "flood", flooded).await),
            Self::Flooded { store, policy, .. } => drop(judged_by_redis(store, key, policy).await),
            Self::Tenants(store, policies) => {
                let tenant = key % TENANTS;
                judged_by_redis(store, tenant, &policies[tenant as usize]).await;
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
            Self::Floor(connection, script) => {
                let mut connection = connection.clone();
                let _: Vec<i64> = script
                    .key(format!("f:{{{key}}}"))
                    .arg(60_000)
                    .invoke_async(&mut connection)
                    .await
                    .expect("floor script");
            }
            Self::GcraBaseline(connection, script) => {
                let mut connection = connection.clone();
                let _: Vec<i64> = script
                    .key(format!("g:{{{key}}}"))
                    .arg(1)
                    .arg(1_000_000)
                    .invoke_async(&mut connection)
                    .await
                    .expect("GCRA baseline script");
            }
        }
    }

    /// How many keys its calls spread over.
    fn keys(&self) -> u64 {
        match self {
            Self::Tenants(..) => TENANTS,
            Self::OursOn(.., keys) => *keys,
            _ => KEYS,
        }
    }
}

/// One decision, which must come from the limits (Redis or the refusals it
/// gave), never from a failure policy.
async fn judged_by_redis(
    store: &RedisStore,
    key: impl std::fmt::Display,
    policy: &Policy,
) -> tower_sliding_window::Decision {
    let decision = store
        .decide(key, policy)
        .await
        .expect("the bench store fails closed");
    assert_eq!(
        decision.origin(),
        Origin::Limits,
        "Redis must judge every call"
    );
    decision
}

/// Decisions per second with `in_flight` concurrent callers.
async fn throughput(contender: &Contender, in_flight: usize, calls: usize) -> f64 {
    let started = Instant::now();
    let tasks: Vec<_> = (0..in_flight)
        .map(|worker| {
            let contender = contender.clone();
            tokio::spawn(async move {
                for i in 0..calls / in_flight {
                    contender
                        .call(((worker * 7919 + i) as u64) % contender.keys())
                        .await;
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.expect("bench task");
    }
    calls as f64 / started.elapsed().as_secs_f64()
}

/// Redis CPU per decision (µs) over `decisions`, from `INFO commandstats`:
/// the script calls, and the releases of in-flight slots.
fn usec_per_decision(server: &Server, decisions: usize) -> (f64, f64) {
    let stats = server.cli(&["INFO", "commandstats"]).unwrap_or_default();
    let usec = |command: &str| -> f64 {
        stats
            .lines()
            .find(|line| line.starts_with(&format!("cmdstat_{command}:")))
            .and_then(|line| line.split("usec=").nth(1))
            .and_then(|rest| rest.split(',').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or(0.0)
    };
    let per_decision = decisions as f64;
    (usec("evalsha") / per_decision, usec("zrem") / per_decision)
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
    let one_limit = |algorithm| Policy::new(algorithm, [Limit::per_second(1_000_000)]).unwrap();
    let two_limits = |algorithm| {
        Policy::new(
            algorithm,
            [Limit::per_second(1_000_000), Limit::per_minute(10_000_000)],
        )
        .unwrap()
    };
    // A log key holds up to its largest limit's stamps: 100 keeps it realistic
    // while a 1 ms window keeps every call on the accepting path.
    let log_policy = Policy::new(
        Algorithm::SlidingLog,
        [
            Limit::new(100, Duration::from_millis(1)).unwrap(),
            Limit::new(1_000, Duration::from_millis(10)).unwrap(),
        ],
    )
    .unwrap();
    // The common shape: one limit of 100. A key gets about 45 calls a
    // round, in well under a second, and it holds its full limit of
    // stamps (filled below). The TTL of 2 s outlives
    // the other rows' turns, which a shorter window's would not: the keys
    // would start afresh every round.
    let small_log_policy = Policy::new(Algorithm::SlidingLog, [Limit::per_second(100)]).unwrap();
    // The same at a limit a hundred times larger, on ten keys (filled
    // below): a call reads and writes a few of its stamps, not all.
    let large_log_policy = Policy::new(Algorithm::SlidingLog, [Limit::per_second(10_000)]).unwrap();
    // The bucket as its GCRA yardstick is called: a token every µs, so
    // every call is accepted and stores a whole µs.
    let bucket_policy =
        Policy::new(Algorithm::TokenBucket, [Limit::per_second(1_000_000)]).unwrap();
    // The flooding key's limit: spent by the warm-up, refused for a minute.
    let flooded = Policy::new(Algorithm::SlidingCounter, [Limit::per_minute(10)]).unwrap();
    // A plan with a limit per tenant (each its own value, so its own
    // windows), against the same keys under one policy: every call is
    // accepted either way.
    let per_tenant = |shared: bool| {
        let policies = (0..TENANTS)
            .map(|i| {
                let max = if shared { 1_000 } else { 1_000 + i as u32 };
                Policy::new(Algorithm::SlidingCounter, [Limit::per_minute(max)]).unwrap()
            })
            .collect::<Vec<_>>();
        Arc::new(policies)
    };
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
            "floor TIME/GET/SET PX",
            Contender::Floor(manager.clone(), Arc::new(Script::new(FLOOR))),
        ),
        (
            "baseline GET/GET/INCR/PEXPIRE",
            Contender::Baseline(manager.clone(), Arc::new(Script::new(BASELINE))),
        ),
        (
            "ours counter, 1 limit",
            Contender::Ours(store.clone(), one_limit(Algorithm::SlidingCounter)),
        ),
        (
            "ours counter, 1 limit, 8 in flight: admit, then release",
            Contender::Capped(
                store.clone(),
                one_limit(Algorithm::SlidingCounter).with_in_flight(8),
            ),
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
            Contender::Ours(store.clone(), log_policy),
        ),
        (
            "ours log, limit 100, full",
            Contender::Ours(store.clone(), small_log_policy),
        ),
        (
            "ours log, limit 10,000, full (10 keys)",
            Contender::OursOn(store.clone(), large_log_policy, 10),
        ),
        (
            "baseline GCRA GET/TIME/SET PX",
            Contender::GcraBaseline(manager, Arc::new(Script::new(GCRA_BASELINE))),
        ),
        (
            "ours token bucket, 1 limit",
            Contender::Ours(store.clone(), bucket_policy.clone()),
        ),
        (
            "ours token bucket, 2 limits",
            Contender::Ours(store.clone(), two_limits(Algorithm::TokenBucket)),
        ),
        (
            "ours counter, half the calls one refused key",
            Contender::Flooded {
                store: store.clone(),
                policy: two_limits(Algorithm::SlidingCounter),
                flooded: flooded.clone(),
            },
        ),
        (
            "the same without the deny cache",
            Contender::Flooded {
                store: store.clone().with_deny_cache(0),
                policy: two_limits(Algorithm::SlidingCounter),
                flooded,
            },
        ),
        (
            "ours counter, 5,000 tenants, one shared policy",
            Contender::Tenants(store.clone(), per_tenant(true)),
        ),
        (
            "ours counter, 5,000 tenants, a policy each",
            Contender::Tenants(store.clone(), per_tenant(false)),
        ),
    ];

    println!(
        "Redis {} on loopback, {ROUNDS} interleaved rounds; decisions per second (min / median / max)",
        server
            .cli(&["INFO", "server"])
            .unwrap_or_default()
            .lines()
            .find_map(|l| l.strip_prefix("redis_version:"))
            .unwrap_or("?")
    );
    // Interleaved: every round runs each contender once, back to back, in
    // a rotating order, so that a burst of other work on this shared machine
    // shifts a whole round rather than one contender; ratios are taken
    // within each round.
    // Scripts cached by each tenant row from an empty cache, every tenant
    // called once; the rows' first calls warm their keys as well.
    let mut cached = Vec::new();
    for (_, contender) in &contenders[contenders.len() - 2..] {
        server.cli(&["SCRIPT", "FLUSH"]);
        for key in 0..TENANTS {
            contender.call(key).await;
        }
        cached.push(server.scripts_cached().unwrap_or(0));
    }
    for (_, contender) in &contenders {
        for key in 0..20 {
            contender.call(key).await;
        }
    }
    // Every key of the full log rows full before anything is timed.
    for (name, stamps) in [
        ("ours log, limit 100, full", 100),
        ("ours log, limit 10,000, full (10 keys)", 10_000),
    ] {
        let (_, full_log) = contenders
            .iter()
            .find(|(row, _)| *row == name)
            .expect("the full log rows");
        throughput(full_log, 64, stamps * full_log.keys() as usize).await;
    }
    let count = contenders.len();
    let mut sequential = vec![Vec::new(); count];
    let mut parallel = vec![Vec::new(); count];
    let mut cpu = vec![Vec::new(); count];
    let mut releases = vec![Vec::new(); count];
    for round in 0..ROUNDS {
        for offset in 0..count {
            let i = (round + offset) % count;
            let contender = &contenders[i].1;
            server.cli(&["CONFIG", "RESETSTAT"]);
            sequential[i].push(throughput(contender, 1, 3_000).await);
            parallel[i].push(throughput(contender, 64, 40_000).await);
            let (judged, released) = usec_per_decision(&server, 43_000);
            cpu[i].push(judged + released);
            releases[i].push(released);
        }
    }
    // Every row against the floor's, the first.
    let per_round = |values: &[Vec<f64>], i: usize| {
        let base = 0;
        spread(
            (0..ROUNDS)
                .map(|r| values[i][r] / values[base][r])
                .collect(),
        )
        .1
    };
    let mut table = report::Table::new(
        "Redis: one script call per decision, none for a key known to be refused",
        &format!("{ROUNDS} interleaved rounds against a private redis-server; decisions a second (median), and the median over rounds of the ratio to the floor script (TIME, GET, SET PX, three numbers back) in the same round. Redis CPU per decision from `INFO commandstats`. The rows \"half the calls one refused key\" and \"the same without the deny cache\" send every other call for one key over its limit (10 a minute)."),
        &["", "1 in flight", "ratio", "64 in flight", "ratio", "Redis CPU µs/decision", "ratio"],
    );
    for (i, (name, _)) in contenders.iter().enumerate() {
        let (_, s_med, _) = spread(sequential[i].clone());
        let (_, p_med, _) = spread(parallel[i].clone());
        let (_, cpu_med, _) = spread(cpu[i].clone());
        table.row(&[
            name.to_string(),
            format!("{s_med:.0}"),
            format!("{:.2}", per_round(&sequential, i)),
            format!("{p_med:.0}"),
            format!("**{:.2}**", per_round(&parallel, i)),
            format!("{cpu_med:.2}"),
            format!("{:.2}", per_round(&cpu, i)),
        ]);
    }
    table.finish();
    let capped = contenders
        .iter()
        .position(|(_, contender)| matches!(contender, Contender::Capped(..)))
        .expect("the capped row");
    let mut table = report::Table::new(
        "Redis: an in-flight cap's two calls",
        "The capped row above, its Redis CPU split between the call that judges and takes the slot (the script) and the one that frees it (`ZREM`), each against the floor script's CPU in the same round (median over rounds).",
        &["", "Redis CPU µs/request", "ratio to the floor"],
    );
    let admit: Vec<Vec<f64>> = (0..count)
        .map(|i| (0..ROUNDS).map(|r| cpu[i][r] - releases[i][r]).collect())
        .collect();
    for (name, values) in [("admit (script)", &admit), ("release (ZREM)", &releases)] {
        let ratio = spread((0..ROUNDS).map(|r| values[capped][r] / cpu[0][r]).collect()).1;
        table.row(&[
            name.to_owned(),
            format!("{:.2}", spread(values[capped].clone()).1),
            format!("{ratio:.2}"),
        ]);
    }
    table.finish();
    let tenants = contenders.len() - 2;
    let micros = |i: usize| 1e6 / spread(sequential[i].clone()).1;
    let mut table = report::Table::new(
        "Redis: a policy per tenant",
        &format!("The last two rows above: {TENANTS} tenants, one key each, under one shared policy (1,000 a minute) or each under its own limit (1,000 + i a minute), every call through `Store::decide` as a plan's policy goes. Time per request with 1 in flight (median over rounds), its ratio to the shared policy (median of the ratios within a round), and the scripts Redis's script cache holds after every tenant's first call from an empty cache."),
        &["", "µs per request, 1 in flight", "ratio", "scripts cached"],
    );
    for (row, i) in [tenants, tenants + 1].into_iter().enumerate() {
        let ratio = spread(
            (0..ROUNDS)
                .map(|r| sequential[tenants][r] / sequential[i][r])
                .collect(),
        )
        .1;
        table.row(&[
            contenders[i].0.to_string(),
            format!("{:.1}", micros(i)),
            format!("**{ratio:.2}**"),
            cached[row].to_string(),
        ]);
    }
    table.finish();
    burst(&url).await;
    renewals(&server, &url).await;
    memory_per_key(&server, &url).await;
}

/// A burst of 20,000 decisions at once on 1,000 keys under their limits,
/// from one store with the default timeout and failure policy: how many
/// Redis judges and how many the failure policy answers (reported, not
/// targeted: a burst past what Redis serves within the timeout is answered
/// by the policy), then how many of 1,000 decisions made one at a time
/// right after it Redis judges.
async fn burst(url: &str) {
    let store = RedisStore::connect(url)
        .await
        .expect("connect")
        .with_prefix("burst");
    let policy = Policy::new(Algorithm::SlidingCounter, [Limit::per_minute(1_000_000)]).unwrap();
    let mut table = report::Table::new(
        "Redis: a burst",
        "20,000 decisions at once on 1,000 keys under their limits, from one store with the defaults (a 50 ms timeout, failing open), then 1,000 one at a time right after it; one run a round, the median of each count over the rounds. A call past the timeout is answered by the failure policy alone: Redis judges the next.",
        &["", "judged by Redis", "by the failure policy", "then one at a time, judged by Redis"],
    );
    let (mut judged, mut answered, mut after) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..ROUNDS {
        let calls: Vec<_> = (0..20_000u64)
            .map(|i| {
                let (store, policy) = (store.clone(), policy.clone());
                tokio::spawn(async move { store.decide(i % KEYS, &policy).await })
            })
            .collect();
        let mut by_redis = 0.0;
        for call in calls {
            let decision = call.await.expect("burst task").expect("fails open");
            by_redis += f64::from(u8::from(decision.origin() == Origin::Limits));
        }
        judged.push(by_redis);
        answered.push(20_000.0 - by_redis);
        let mut next = 0.0;
        for key in 0..1_000 {
            let decision = store.decide(key, &policy).await.expect("fails open");
            next += f64::from(u8::from(decision.origin() == Origin::Limits));
        }
        after.push(next);
    }
    table.row(&[
        "20,000 at once, then 1,000 one at a time".to_owned(),
        format!("{:.0}", spread(judged).1),
        format!("{:.0}", spread(answered).1),
        format!("{:.0}", spread(after).1),
    ]);
    table.finish();
}

/// Renewal calls a second for 1,000 requests held at once, spread over
/// 1,000 keys or 8 to a key, with leases of 3 s (renewed every second);
/// the default lease of 30 s renews ten times less often.
async fn renewals(server: &Server, url: &str) {
    let mut table = report::Table::new(
        "Redis: renewing the in-flight slots held",
        "1,000 requests held at once by one instance, leases of 3 s (renewed every second); script calls and `ZADD`s counted by `INFO commandstats` over 5 s, less the instance's heartbeat. A renewal call renews up to 256 keys. Under the default lease (30 s) there are ten times fewer.",
        &["", "renewal calls a second", "slots renewed a second"],
    );
    for (name, keys) in [
        ("1,000 keys, 1 slot each", 1_000u64),
        ("125 keys, 8 slots each", 125),
    ] {
        let store = RedisStore::connect(url)
            .await
            .expect("connect")
            .with_prefix(&format!("renew-{keys}"))
            .with_lease(Duration::from_secs(3));
        let policy = Policy::in_flight_only(8);
        let mut held = Vec::new();
        for i in 0..1_000u64 {
            held.push((
                i % keys,
                store.decide(i % keys, &policy).await.expect("decide"),
            ));
        }
        assert!(held.iter().all(|(_, decision)| decision.holds_slot()));
        let calls = || {
            let stats = server.cli(&["INFO", "commandstats"]).unwrap_or_default();
            let field = |command: &str, name: &str| -> f64 {
                stats
                    .lines()
                    .find(|line| line.starts_with(&format!("cmdstat_{command}:")))
                    .and_then(|line| line.split(&format!("{name}=")).nth(1))
                    .and_then(|rest| rest.split(',').next())
                    .and_then(|n| n.parse().ok())
                    .unwrap_or(0.0)
            };
            (field("evalsha", "calls"), field("zadd", "calls"))
        };
        let (calls_before, zadd_before) = calls();
        let started = Instant::now();
        tokio::time::sleep(Duration::from_secs(5)).await;
        let (calls_after, zadd_after) = calls();
        let seconds = started.elapsed().as_secs_f64();
        // The heartbeat: one script call and one ZADD a second.
        let heartbeats = seconds.floor();
        let renewals = (calls_after - calls_before - heartbeats) / seconds;
        let renewed = (zadd_after - zadd_before - heartbeats) / seconds;
        table.row(&[
            name.to_owned(),
            format!("{renewals:.0}"),
            format!("{renewed:.0}"),
        ]);
        let binding = Store::<u64>::bind(&store, &policy);
        for (key, decision) in held {
            store.release_bound(key, &binding, &decision);
        }
    }
    table.finish();
}

/// What one key's state takes in Redis (`MEMORY USAGE`, key and value with
/// Redis's own overhead) after a few requests, per algorithm: the state
/// key only (no penalty).
async fn memory_per_key(server: &Server, url: &str) {
    let store = RedisStore::connect(url)
        .await
        .expect("connect")
        .with_prefix("memory");
    let per_minute = Limit::per_minute(100);
    let per_second = Limit::per_second(10);
    let rows: [(&str, Algorithm, Vec<Limit>); 7] = [
        (
            "counter, 1 limit",
            Algorithm::SlidingCounter,
            vec![per_minute],
        ),
        (
            "counter, 2 limits",
            Algorithm::SlidingCounter,
            vec![per_second, per_minute],
        ),
        (
            "fixed window, 1 limit",
            Algorithm::FixedWindow,
            vec![per_minute],
        ),
        (
            "token bucket, 1 limit",
            Algorithm::TokenBucket,
            vec![per_minute],
        ),
        (
            "token bucket, 2 limits",
            Algorithm::TokenBucket,
            vec![per_second, per_minute],
        ),
        (
            "log, 1 limit, 5 stamps",
            Algorithm::SlidingLog,
            vec![per_minute],
        ),
        (
            "log, 1 limit, 100 stamps",
            Algorithm::SlidingLog,
            vec![per_minute],
        ),
    ];
    let mut table = report::Table::new(
        "Redis: memory per key",
        "`MEMORY USAGE` of one key's state after its requests (one limit of 100 a minute, or that and 10 a second), on the bench's redis-server.",
        &["", "bytes a key"],
    );
    for (i, (name, algorithm, limits)) in rows.into_iter().enumerate() {
        let policy = Policy::new(algorithm, limits).unwrap();
        let requests = if name.ends_with("100 stamps") { 100 } else { 5 };
        let key = format!("key-{i}");
        for _ in 0..requests {
            let decision = store.decide(key.clone(), &policy).await.expect("decide");
            assert!(decision.is_allowed(), "{name}: {decision:?}");
        }
        let name_in_redis = store.key_name(&key, &policy);
        let bytes = server
            .cli(&["MEMORY", "USAGE", &name_in_redis])
            .expect("MEMORY USAGE");
        table.row(&[name.to_string(), bytes]);
    }
    table.finish();
}
