//! An axum server limited per client IP: 5 requests per second and 30 per
//! minute, judged together.
//!
//! Run with `cargo run --example axum`, then hammer it with the printed curl
//! line and watch the `RateLimit` headers count down to a 429.

use std::net::{IpAddr, SocketAddr};

use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::routing::get;
use axum::{Extension, Router};
use http::Request;
use tower_sliding_window::{Algorithm, Decision, Limit, SlidingWindowLayer};

/// The peer's IP, as axum's `into_make_service_with_connect_info` records it.
fn client_ip(request: &Request<Body>) -> Option<IpAddr> {
    request
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map(|ConnectInfo(addr)| addr.ip())
}

async fn hello(Extension(decision): Extension<Decision>) -> String {
    format!(
        "hello! {} requests left this {:?}\n",
        decision.remaining(),
        decision.limit().window()
    )
}

#[tokio::main]
async fn main() -> std::io::Result<()> {
    let limits = SlidingWindowLayer::new(Limit::per_second(5), client_ip)
        .limit(Limit::per_minute(30))
        .algorithm(Algorithm::SlidingLog);
    let app = Router::new().route("/", get(hello)).layer(limits);

    let port = std::env::var("PORT").unwrap_or_else(|_| "3000".into());
    let listener = tokio::net::TcpListener::bind(format!("127.0.0.1:{port}")).await?;
    let addr = listener.local_addr()?;
    println!("listening on http://{addr}");
    println!("try: for i in $(seq 8); do curl -si http://{addr}/ | grep -iE '^(HTTP|ratelimit|retry-after)'; done");
    axum::serve(
        listener,
        app.into_make_service_with_connect_info::<SocketAddr>(),
    )
    .await
}
