//! The layer on a real axum Router, in process and over a socket.

use std::net::SocketAddr;
use std::time::Duration;

use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::routing::get;
use axum::Router;
use http::{Request, StatusCode};
use tower::{Layer, ServiceExt};
use tower_sliding_window::{Limit, ManualClock, MemoryStore, SlidingWindowLayer};

fn api_key(request: &Request<Body>) -> Option<String> {
    request
        .headers()
        .get("x-api-key")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
}

#[tokio::test]
async fn router_layer_answers_200s_then_429_with_headers() {
    let clock = ManualClock::new();
    let layer = SlidingWindowLayer::new(Limit::per_second(2), api_key)
        .limit(Limit::per_minute(100))
        .store(MemoryStore::with_clock(clock.clone()));
    let app = Router::new()
        .route("/", get(|| async { "hello" }))
        .route("/other", get(|| async { "other" }))
        .layer(layer);

    let call = |path: &'static str| {
        let app = app.clone();
        async move {
            let request = Request::get(path)
                .header("x-api-key", "k1")
                .body(Body::empty())
                .unwrap();
            app.oneshot(request).await.unwrap()
        }
    };
    let first = call("/").await;
    assert_eq!(first.status(), StatusCode::OK);
    assert_eq!(
        first.headers()["ratelimit-policy"],
        "\"1s\";q=2;w=1, \"60s\";q=100;w=60"
    );
    assert_eq!(first.headers()["ratelimit"], "\"1s\";r=1;t=2");
    // Router::layer wraps each route, but they share the layer's windows.
    assert_eq!(call("/other").await.status(), StatusCode::OK);
    let refused = call("/").await;
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(refused.headers()["retry-after"], "2");
    assert_eq!(refused.headers()["ratelimit"], "\"1s\";r=0;t=2");

    clock.advance(Duration::from_secs(2));
    assert_eq!(call("/").await.status(), StatusCode::OK);
}

/// By default the layer answers in axum's own `Body`: the same statuses,
/// headers and texts, with no wrapper for axum to box again.
#[tokio::test]
async fn the_layer_answers_in_axums_own_body() {
    use http_body_util::BodyExt;

    let clock = ManualClock::new();
    let layer = SlidingWindowLayer::new(Limit::per_second(1), api_key)
        .store(MemoryStore::with_clock(clock.clone()));
    // The layer's service returns `Response<Body>` itself, before axum sees it.
    let service = layer.layer(get(|| async { "hello" }).with_state(()));
    let call = |key: Option<&'static str>| {
        let service = service.clone();
        async move {
            let mut request = Request::get("/");
            if let Some(key) = key {
                request = request.header("x-api-key", key);
            }
            let response: http::Response<Body> = service
                .oneshot(request.body(Body::empty()).unwrap())
                .await
                .unwrap();
            let status = response.status();
            let ratelimit = response.headers().get("ratelimit").cloned();
            let body = response.into_body().collect().await.unwrap().to_bytes();
            (status, ratelimit, String::from_utf8(body.to_vec()).unwrap())
        }
    };
    // The one request counted at 0 s weighs fully on the next window's
    // start, so quota returns at 2 s.
    let (status, ratelimit, body) = call(Some("k")).await;
    assert_eq!((status, body.as_str()), (StatusCode::OK, "hello"));
    assert_eq!(ratelimit.unwrap(), "\"1s\";r=0;t=2");
    let (status, ratelimit, body) = call(Some("k")).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(ratelimit.unwrap(), "\"1s\";r=0;t=2");
    assert!(
        body.starts_with("Too Many Requests: limit of 1 per 1s"),
        "{body}"
    );
    let (status, _, body) = call(None).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(!body.is_empty());

    let app = Router::new()
        .route("/", get(|| async { "hello" }))
        .layer(layer);
    let request = Request::get("/")
        .header("x-api-key", "other")
        .body(Body::empty())
        .unwrap();
    assert_eq!(app.oneshot(request).await.unwrap().status(), StatusCode::OK);
}

#[tokio::test]
async fn served_over_tcp_keyed_by_peer_address() {
    let peer = |request: &Request<Body>| {
        request
            .extensions()
            .get::<ConnectInfo<SocketAddr>>()
            .map(|ConnectInfo(addr)| addr.ip())
    };
    let app = Router::new()
        .route("/", get(|| async { "hello" }))
        .layer(SlidingWindowLayer::new(Limit::per_minute(3), peer));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(async move {
        axum::serve(
            listener,
            app.into_make_service_with_connect_info::<SocketAddr>(),
        )
        .await
        .unwrap();
    });

    let mut statuses = Vec::new();
    for _ in 0..4 {
        statuses.push(raw_get(addr).await);
    }
    server.abort();
    assert_eq!(statuses[..3], ["200", "200", "200"]);
    assert_eq!(statuses[3], "429");
}

/// One HTTP/1.1 GET on a fresh connection; returns the status code.
async fn raw_get(addr: SocketAddr) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    stream
        .write_all(b"GET / HTTP/1.1\r\nhost: test\r\nconnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut reply = String::new();
    stream.read_to_string(&mut reply).await.unwrap();
    reply.split(' ').nth(1).unwrap_or_default().to_owned()
}
