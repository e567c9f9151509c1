//! Heap allocations per accepted request through an axum router (peer IP
//! key, two limits), counted by a wrapping global allocator: with its body
//! passed through, the layer allocates nothing beyond what axum costs any
//! layer, RateLimit headers included, as tower_governor in the same process
//! shows.
//!
//! Allocations are counted per thread (`support/counting_alloc.rs`), so that
//! other tests' threads (or the harness's) do not show in the count.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::routing::get;
use axum::Router;
use http::{Request, StatusCode};
use http_body_util::BodyExt;
use tower::ServiceExt;
use tower_governor::governor::GovernorConfigBuilder;
use tower_governor::GovernorLayer;
use tower_sliding_window::extract::PeerIp;
use tower_sliding_window::{Limit, SlidingWindowLayer};

#[path = "support/counting_alloc.rs"]
mod counting_alloc;

use counting_alloc::{allocations, run};

/// One request, answered and its body read; whether the layer set the
/// RateLimit header.
async fn one_request(router: &Router) -> bool {
    let mut request = Request::get("/").body(Body::empty()).unwrap();
    let peer: SocketAddr = "203.0.113.7:40000".parse().unwrap();
    request.extensions_mut().insert(ConnectInfo(peer));
    let response = router.clone().oneshot(request).await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let headed = response.headers().contains_key("ratelimit");
    let body = response.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(&body[..], b"hello");
    headed
}

const REQUESTS: u64 = 2_000;

/// Allocations per request, over enough requests that what is shared among
/// them shows as a fraction; and whether the RateLimit header came back.
fn per_request(router: &Router) -> (f64, bool) {
    // Warm: the policy's map, the key's entry, the thread's header chunk.
    for _ in 0..100 {
        run(one_request(router));
    }
    let before = allocations();
    let mut headed = true;
    for _ in 0..REQUESTS {
        headed &= run(one_request(router));
    }
    let after = allocations();
    ((after - before) as f64 / REQUESTS as f64, headed)
}

#[test]
fn the_layer_allocates_no_more_than_tower_governor_headers_included() {
    // Each router as `axum::serve` runs it: `with_state` applies its layers
    // once, where an unserved router applies them again for every request.
    let served = |router: Router| router.with_state(());
    let bare = || Router::new().route("/", get(|| async { "hello" }));
    let huge = u32::MAX;
    let ours = SlidingWindowLayer::new(Limit::per_second(huge), PeerIp::new())
        .limit(Limit::per_minute(huge / 2));
    let governor = GovernorConfigBuilder::default()
        .per_nanosecond(1)
        .burst_size(huge)
        .finish()
        .unwrap();

    let (bare_router, _) = per_request(&served(bare()));
    let (governor, _) = per_request(&served(
        bare().layer(GovernorLayer::new(Arc::new(governor))),
    ));
    let (headers_on, headed) = per_request(&served(
        bare().layer(ours.clone().decision_extension(false)),
    ));
    let (headers_off, unheaded) = per_request(&served(
        bare().layer(
            ours.clone()
                .decision_extension(false)
                .rate_limit_headers(false),
        ),
    ));
    let (with_extension, _) =
        per_request(&served(bare().layer(ours.clone().decision_extension(true))));
    let (by_default, _) = per_request(&served(bare().layer(ours.clone())));
    // Unserved, a router applies its layers on every request; ours then
    // also allocates the `Arc` its service's clones share, one more than
    // tower_governor.
    let (unserved_governor, _) = per_request(
        &bare().layer(GovernorLayer::new(Arc::new(
            GovernorConfigBuilder::default()
                .per_nanosecond(1)
                .burst_size(huge)
                .finish()
                .unwrap(),
        ))),
    );
    let (unserved_ours, _) = per_request(&bare().layer(ours.decision_extension(false)));
    println!(
        "allocations per request: bare {bare_router}, tower_governor {governor}, \
         ours headers on {headers_on}, headers off {headers_off}, \
         with the decision extension {with_extension}; unserved: tower_governor \
         {unserved_governor}, ours headers on {unserved_ours}"
    );
    assert!(
        unserved_ours <= unserved_governor + 1.1,
        "unserved, ours {unserved_ours} > tower_governor {unserved_governor} + 1"
    );

    assert!(headed && !unheaded, "the headers must be on, then off");
    // The headers' text is cut from a chunk shared by some forty responses:
    // two allocations a chunk, a twentieth of one a request.
    assert!(
        headers_on <= governor + 0.1,
        "ours with headers {headers_on} > tower_governor {governor}"
    );
    assert!(
        headers_on - headers_off < 0.1,
        "the headers allocate: {headers_on} against {headers_off}"
    );
    // The decision extension is one boxed value in the request's
    // extensions, as http's `Extensions` stores every value.
    assert!(
        (with_extension - headers_on - 1.0).abs() < 0.1,
        "the decision extension: {with_extension} against {headers_on}"
    );
    // By default nothing is put in the extensions.
    assert!(
        (by_default - headers_on).abs() < 0.1,
        "the default: {by_default} against {headers_on}"
    );
    // axum's own cost for any layer is what tower_governor adds.
    assert!(governor > bare_router);
}
