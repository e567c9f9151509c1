//! The cost the layer adds to an axum Router in process (`ready`, `call`
//! and collecting the body), against a bare router and tower_governor, keyed
//! by peer IP; and heap allocations per request, counted by a wrapping
//! global allocator. Every router is driven as `axum::serve` drives it,
//! its layers applied once. tower_governor also runs with its own headers,
//! a second peer for the rows with ours.
//!
//! `cargo bench --bench layer --features axum`; ratios at the end.

mod report;

use std::hint::black_box;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::routing::get;
use axum::Router;
use criterion::Criterion;
use http::Request;
use http_body_util::BodyExt;
use tower::ServiceExt;
use tower_governor::governor::GovernorConfigBuilder;
use tower_governor::GovernorLayer;
use tower_sliding_window::extract::PeerIp;
use tower_sliding_window::{Limit, SlidingWindowLayer};

#[path = "../tests/support/counting_alloc.rs"]
mod counting_alloc;

use counting_alloc::{allocations, run};

fn request() -> Request<Body> {
    let mut request = Request::get("/").body(Body::empty()).unwrap();
    let peer: SocketAddr = "203.0.113.7:40000".parse().unwrap();
    request.extensions_mut().insert(ConnectInfo(peer));
    request
}

async fn one_request(router: &Router) -> usize {
    let response = router.clone().oneshot(request()).await.unwrap();
    let body = response.into_body().collect().await.unwrap().to_bytes();
    body.len()
}

/// The routers, each as `axum::serve` runs it: `with_state` turns every
/// handler into a route with its layers applied once, as axum does for
/// each connection. Called without it, a router applies its layers again
/// for every request, which no served router does.
fn routers() -> Vec<(&'static str, Router)> {
    unserved_routers()
        .into_iter()
        .map(|(name, router)| (name, router.with_state(())))
        .collect()
}

fn unserved_routers() -> Vec<(&'static str, Router)> {
    let bare = || Router::new().route("/", get(|| async { "hello" }));
    let huge = u32::MAX;
    // Quotas of different sizes, as real per-second and per-minute limits have.
    let ours = SlidingWindowLayer::new(Limit::per_second(huge), PeerIp::new())
        .limit(Limit::per_minute(huge / 2));
    let governor = GovernorConfigBuilder::default()
        .per_nanosecond(1)
        .burst_size(huge)
        .finish()
        .unwrap();
    let governor_headers = GovernorConfigBuilder::default()
        .per_nanosecond(1)
        .burst_size(huge)
        .use_headers()
        .finish()
        .unwrap();
    vec![
        ("bare router", bare()),
        ("ours, headers on", bare().layer(ours.clone())),
        (
            "ours, headers on, 8 in flight",
            bare().layer(ours.clone().in_flight(8)),
        ),
        (
            "ours, headers off",
            bare().layer(ours.clone().rate_limit_headers(false)),
        ),
        // A body axum boxes again: the layer's own `ResponseBody`.
        (
            "ours, wrapped body, headers on",
            bare().layer(ours.clone().wrap_body()),
        ),
        (
            "ours, one limit, headers off",
            bare().layer(
                SlidingWindowLayer::new(Limit::per_second(huge), PeerIp::new())
                    .rate_limit_headers(false),
            ),
        ),
        // A cost closure, called through a shared pointer on every request.
        (
            "ours, one limit, cost, headers off",
            bare().layer(
                SlidingWindowLayer::new(Limit::per_second(huge), PeerIp::new())
                    .cost(|_: &Request<Body>| 1)
                    .rate_limit_headers(false),
            ),
        ),
        // A peer that also writes two headers on every response (its own
        // `x-ratelimit-limit` and `x-ratelimit-remaining`), for context: the
        // performance target (BENCHMARKS.md) names the plain tower_governor
        // below.
        (
            "tower_governor, headers",
            bare().layer(GovernorLayer::new(Arc::new(governor_headers))),
        ),
        (
            "tower_governor",
            bare().layer(GovernorLayer::new(Arc::new(governor))),
        ),
    ]
}

/// The bare router first; the two peers last: tower_governor with its
/// headers, then the plain one.
const IDS: [&str; 9] = [
    "bare router",
    "ours, headers on",
    "ours, headers on, 8 in flight",
    "ours, headers off",
    "ours, wrapped body, headers on",
    "ours, one limit, headers off",
    "ours, one limit, cost, headers off",
    "tower_governor, headers",
    "tower_governor",
];
const OURS: usize = 1;
const CAPPED: usize = 2;
const GOVERNOR_HEADERS: usize = IDS.len() - 2;
const GOVERNOR: usize = IDS.len() - 1;

fn main() {
    let mut c = Criterion::default()
        .sample_size(30)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .configure_from_args();
    let routers = routers();
    let names: Vec<&str> = routers.iter().map(|(name, _)| *name).collect();
    assert_eq!(names, IDS, "the routers must come in the order IDS gives");
    let mut group = c.benchmark_group("axum router, one request");
    for (name, router) in &routers {
        group.bench_function(*name, |b| b.iter(|| black_box(run(one_request(router)))));
    }
    group.finish();
    c.final_summary();

    let found = report::print_group("axum router, one request", &IDS, "bare router");
    let bare = found.get("bare router").map(|s| s.1);
    let governor = found.get("tower_governor").map(|s| s.1);
    if let (Some(bare), Some(governor)) = (bare, governor) {
        let governor_added = governor - bare;
        println!("\nadded over the bare router (median ns; ratio to tower_governor's added ns)");
        for id in IDS.iter().skip(1) {
            if let Some(s) = found.get(*id) {
                let added = s.1 - bare;
                println!("  {id:<48} {added:>9.1} {:>7.2}", added / governor_added);
            }
        }
    }

    // The same routers in interleaved rounds: the added ns is small beside
    // the router's own, so a burst of other work during one contender's
    // criterion run would swamp it. A ratio of two small differences
    // spreads widely from round to round: its median wants many rounds.
    let mut batches: Vec<(&str, report::Batch)> = routers
        .iter()
        .map(|(name, router)| {
            let run: report::Batch = Box::new(move |iters| {
                let start = Instant::now();
                for _ in 0..iters {
                    black_box(run(one_request(router)));
                }
                start.elapsed()
            });
            (*name, run)
        })
        .collect();
    let rounds = report::paired(
        "axum router, one request",
        &mut batches,
        101,
        Duration::from_millis(20),
        0,
    );
    let mut added_table = report::Table::new(
        "The layer's cost: ns added over the bare router",
        "Paired rounds as above; ratio: the median over rounds of the added ns / the peer's added ns.",
        &["", "added ns (median)", "/ tower_governor", "/ tower_governor with headers"],
    );
    let ratio_to = |i: usize, peer: usize| -> f64 {
        report::median(
            (0..rounds[0].len())
                .map(|r| (rounds[i][r] - rounds[0][r]) / (rounds[peer][r] - rounds[0][r]))
                .collect(),
        )
    };
    for (i, id) in IDS.iter().enumerate().skip(1) {
        let added: Vec<f64> = (0..rounds[0].len())
            .map(|r| rounds[i][r] - rounds[0][r])
            .collect();
        // The peer with headers is compared only with rows that send them.
        let to_headers = if id.contains("headers on") || i == GOVERNOR_HEADERS {
            format!("**{:.2}**", ratio_to(i, GOVERNOR_HEADERS))
        } else {
            "—".to_owned()
        };
        added_table.row(&[
            id.to_string(),
            format!("{:.1}", report::median(added)),
            format!("**{:.2}**", ratio_to(i, GOVERNOR)),
            to_headers,
        ]);
    }
    added_table.finish();

    let mut cap_table = report::Table::new(
        "An in-flight cap's cost to the layer",
        "The default layer (two limits, headers) with and without `.in_flight(8)`, on the memory store, in the paired rounds above: the cap takes a slot with the decision and frees it when the body ends.",
        &["", "ratio of ns added over the bare router"],
    );
    cap_table.row(&[
        "with the cap / without".to_owned(),
        format!("**{:.2}**", ratio_to(CAPPED, OURS)),
    ]);
    cap_table.finish();

    let mut allocations_table = report::Table::new(
        "Heap allocations per request",
        "Accepted requests, 1,000 each.",
        &["", "allocations"],
    );
    for (name, router) in &routers {
        run(one_request(router));
        let before = allocations();
        for _ in 0..1_000 {
            black_box(run(one_request(router)));
        }
        let per_request = (allocations() - before) as f64 / 1_000.0;
        allocations_table.row(&[name.to_string(), format!("{per_request:.2}")]);
    }
    allocations_table.finish();
}
