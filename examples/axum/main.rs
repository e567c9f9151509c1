//! An axum server with per-route limits: 5/s and 30/min per client on `/`,
//! 3/min on `/login`, clients identified behind a trusted proxy.
//!
//! Run with `cargo run --example axum --features axum` (the feature lets the
//! extractors read axum's `ConnectInfo`), then try the printed curl lines.

mod app;

use std::net::SocketAddr;

#[tokio::main]
async fn main() -> std::io::Result<()> {
    // Pretend the proxy runs on this machine, so that local curl can play it.
    let app = app::app(&["127.0.0.1/32"]);
    let port = std::env::var("PORT").unwrap_or_else(|_| "3000".into());
    let listener = tokio::net::TcpListener::bind(format!("127.0.0.1:{port}")).await?;
    let addr = listener.local_addr()?;
    println!("listening on http://{addr}");
    println!("as a client behind the proxy (7 requests, the 6th is refused):");
    println!("  for i in $(seq 7); do curl -s -H 'x-forwarded-for: 203.0.113.7' http://{addr}/ -o /dev/null -w '%{{http_code}} '; done; echo");
    println!("the login limit (3 per minute, the 4th gets problem+json):");
    println!("  for i in $(seq 4); do curl -s -X POST http://{addr}/login; done");
    axum::serve(
        listener,
        app.into_make_service_with_connect_info::<SocketAddr>(),
    )
    .await
}
