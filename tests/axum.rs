//! The layer on a real axum Router, in process and over a socket.

use std::net::SocketAddr;
use std::time::Duration;

use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::routing::get;
use axum::Router;
use http::{Request, StatusCode};
use tower::ServiceExt;
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
