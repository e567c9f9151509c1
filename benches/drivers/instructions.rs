//! The workload `bench/callgrind.sh` counts instructions of: `N` decisions
//! of the in-memory store or of governor, or `N` requests through an axum
//! router, bare or behind a rate limiter. Instruction counts do not depend on
//! the machine's noise, so they show what a change saves where timings on a
//! shared two-core machine cannot.
//!
//! `cargo run --release --example instructions --features axum -- WHAT N [KEYS]`
//! with WHAT one of `governor`, `counter`, `counter2`, `fixed`, `log` (store,
//! over KEYS keys), `log-gaps-G` (a log of 100 on a clock one microsecond
//! further each call, whose window spans G rounds of the keys: every key
//! holds G + 1 stamps inside it at each call, as the store bench's "10 in
//! window" (G = 9), "4 in window" (3) and "full ring" (99) rows) or `bare`,
//! `governor-layer`, `governor-layer-headers`, `ours-on`, `ours-off`,
//! `ours-wrapped-on`, `ours-one-off` (router; see
//! `SlidingWindowLayer::wrap_body`).

use std::future::Future;
use std::hint::black_box;
use std::net::SocketAddr;
use std::num::NonZeroU32;
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::routing::get;
use axum::Router;
use governor::{Quota, RateLimiter};
use http::Request;
use http_body_util::BodyExt;
use tower::ServiceExt;
use tower_governor::governor::GovernorConfigBuilder;
use tower_governor::GovernorLayer;
use tower_sliding_window::extract::PeerIp;
use tower_sliding_window::{Algorithm, Limit, MemoryStore, Policy, SlidingWindowLayer};

/// Drives a future that never waits, as everything here completes at once.
fn run<F: Future>(future: F) -> F::Output {
    let mut cx = Context::from_waker(Waker::noop());
    match pin!(future).poll(&mut cx) {
        Poll::Ready(output) => output,
        Poll::Pending => panic!("the workload waited; it must complete at once"),
    }
}

/// Quotas large enough that every call is accepted, on one key or many.
fn store_policy(what: &str, keys: u64) -> Option<Policy> {
    let huge = u32::MAX;
    let one = |algorithm, max, window| Policy::new(algorithm, [Limit::new(max, window).ok()?]).ok();
    match what {
        "counter" => one(Algorithm::SlidingCounter, huge, Duration::from_secs(1)),
        // Quotas of different sizes, as real per-second and per-minute limits have.
        "counter2" => Policy::new(
            Algorithm::SlidingCounter,
            [Limit::per_second(huge / 2), Limit::per_minute(huge)],
        )
        .ok(),
        "fixed" => one(Algorithm::FixedWindow, huge, Duration::from_secs(1)),
        // Over many keys a 1 µs window: every call accepts and records,
        // with one stamp inside its window. On one key that window would
        // hold one stamp or several depending on how fast calls come: a
        // window of a second and the largest `max` hold every stamp
        // instead, as the hot key of `benches/store.rs` holds tens of them.
        "log" if keys > 1 => one(Algorithm::SlidingLog, 100, Duration::from_micros(1)),
        "log" => one(Algorithm::SlidingLog, huge, Duration::from_secs(1)),
        _ => None,
    }
}

/// The router for `what`, as `axum::serve` runs it: `with_state` applies
/// its layers once, where an unserved router applies them again for every
/// request.
fn router(what: &str) -> Option<Router> {
    let bare = Router::new().route("/", get(|| async { "hello" }));
    let huge = u32::MAX;
    let ours = SlidingWindowLayer::new(Limit::per_second(huge), PeerIp::new())
        .limit(Limit::per_minute(huge / 2));
    let router = match what {
        "bare" => bare,
        "ours-on" => bare.layer(ours),
        "ours-off" => bare.layer(ours.rate_limit_headers(false)),
        "ours-wrapped-on" => bare.layer(ours.wrap_body()),
        "ours-one-off" => bare.layer(
            SlidingWindowLayer::new(Limit::per_second(huge), PeerIp::new())
                .rate_limit_headers(false),
        ),
        "governor-layer" => {
            let config = GovernorConfigBuilder::default()
                .per_nanosecond(1)
                .burst_size(huge)
                .finish()?;
            bare.layer(GovernorLayer::new(Arc::new(config)))
        }
        // tower_governor with its own headers on success (`x-ratelimit-limit`
        // and `x-ratelimit-remaining`): a peer that, like ours, writes two
        // headers on every response.
        "governor-layer-headers" => {
            let config = GovernorConfigBuilder::default()
                .per_nanosecond(1)
                .burst_size(huge)
                .use_headers()
                .finish()?;
            bare.layer(GovernorLayer::new(Arc::new(config)))
        }
        _ => return None,
    };
    Some(router.with_state(()))
}

fn main() {
    let mut args = std::env::args().skip(1);
    let what = args.next().unwrap_or_default();
    let n: u64 = args.next().and_then(|n| n.parse().ok()).unwrap_or(100_000);
    let keys: u64 = args.next().and_then(|k| k.parse().ok()).unwrap_or(1).max(1);
    if what == "governor" {
        let limiter = RateLimiter::keyed(Quota::per_second(NonZeroU32::MAX));
        prime_and_measure(n, keys, |key| limiter.check_key(&key).is_ok());
    } else if let Some(gaps) = what
        .strip_prefix("log-gaps-")
        .and_then(|gaps| gaps.parse::<u64>().ok())
    {
        let clock = tower_sliding_window::ManualClock::new();
        let store = MemoryStore::with_clock(clock.clone());
        let policy = Policy::new(
            Algorithm::SlidingLog,
            [Limit::new(100, Duration::from_micros(gaps * keys))
                .expect("a window of one microsecond or more")],
        )
        .unwrap();
        let binding = store.bind(&policy);
        let call = |key| {
            clock.advance(Duration::from_micros(1));
            store.decide_bound_now(key, &binding).is_allowed()
        };
        // Every key's log filled first, as the store bench fills them: in
        // a scattered order (each key once a round), so that the rings'
        // heap memory does not lie in the order the keys are then visited,
        // where neighbouring keys' rings would share cache lines. Then a
        // round's quiet, so the first visits in order find no more stamps
        // inside their windows than later ones. The store sweeps every 5 s
        // of its time, 5,000,000 calls here: priming ends at 10.2 s, and
        // the measured calls fall between two sweeps.
        for _ in 0..100 {
            for i in 0..keys {
                assert!(call(i * 7_919 % keys), "every call must be accepted");
            }
        }
        clock.advance(Duration::from_micros(keys));
        prime_and_measure(n, keys, call);
    } else if let Some(policy) = store_policy(&what, keys) {
        let store = MemoryStore::new();
        let binding = store.bind(&policy);
        prime_and_measure(n, keys, |key| {
            store.decide_bound_now(key, &binding).is_allowed()
        });
    } else if let Some(router) = router(&what) {
        let peer: SocketAddr = "203.0.113.7:40000".parse().expect("address");
        prime_and_measure(n, 1, |_| {
            let mut request = Request::get("/").body(Body::empty()).expect("request");
            request.extensions_mut().insert(ConnectInfo(peer));
            let response = run(router.clone().oneshot(request)).expect("infallible");
            let ok = response.status() == 200;
            let body = run(response.into_body().collect()).map(|b| b.to_bytes().len());
            ok && body.is_ok()
        });
    } else {
        eprintln!("unknown workload {what:?}");
        std::process::exit(2);
    }
}

/// Calls once per key first (the maps then hold every key, and the clocks
/// are calibrated), then `n` times inside [`measured`], the only function
/// `bench/callgrind.sh` counts.
fn prime_and_measure(n: u64, keys: u64, mut call: impl FnMut(u64) -> bool) {
    for key in 0..keys {
        assert!(call(key), "every call must be accepted");
    }
    measured(n, keys, &mut call);
}

#[inline(never)]
fn measured(n: u64, keys: u64, call: &mut impl FnMut(u64) -> bool) {
    let mut key = 0;
    for _ in 0..n {
        key = if key + 1 >= keys { 0 } else { key + 1 };
        black_box(call(black_box(key)));
    }
}
