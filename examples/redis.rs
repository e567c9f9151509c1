//! Two instances of a service sharing one limit through Redis.
//!
//! Starts two axum servers on two ports in this process, each with its own
//! Redis connection, limits every client to 5 requests per 10 seconds
//! across both, and sends requests to them in turn.
//!
//! Run with `cargo run --example redis --features redis` (Redis at
//! `REDIS_URL`, default `redis://127.0.0.1:6379`).

use std::net::SocketAddr;
use std::time::Duration;

use axum::body::Body;
use axum::routing::get;
use axum::Router;
use http::Request;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tower_sliding_window::{Algorithm, FailurePolicy, Limit, RedisStore, SlidingWindowLayer};

fn api_key(request: &Request<Body>) -> Option<String> {
    let key = request.headers().get("x-api-key")?;
    key.to_str().ok().map(str::to_owned)
}

/// One instance: its own Redis connection, the shared limit.
async fn start_instance(
    name: &'static str,
    url: &str,
    prefix: &str,
) -> Result<SocketAddr, Box<dyn std::error::Error>> {
    let store = RedisStore::connect(url)
        .await?
        .with_prefix(prefix)
        .with_failure_policy(FailurePolicy::FailClosed);
    let limit = Limit::new(5, Duration::from_secs(10))?;
    let layer = SlidingWindowLayer::new(limit, api_key)
        .algorithm(Algorithm::SlidingLog)
        .store(store);
    let app = Router::new()
        .route("/", get(move || async move { name }))
        .layer(layer);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move { axum::serve(listener, app).await });
    Ok(addr)
}

/// A minimal HTTP/1.1 GET; returns the status line and the `ratelimit` header.
async fn get_once(addr: SocketAddr, key: &str) -> std::io::Result<(String, String)> {
    let mut stream = tokio::net::TcpStream::connect(addr).await?;
    let request =
        format!("GET / HTTP/1.1\r\nhost: demo\r\nx-api-key: {key}\r\nconnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await?;
    let mut reply = String::new();
    stream.read_to_string(&mut reply).await?;
    let status = reply.lines().next().unwrap_or_default().to_owned();
    let ratelimit = reply
        .lines()
        .find_map(|line| line.strip_prefix("ratelimit: "))
        .unwrap_or("-")
        .to_owned();
    Ok((status, ratelimit))
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    // A prefix of this run's own, so that running the example twice in a row
    // starts from a clean slate.
    let run = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .as_millis();
    let prefix = format!("tsw-example-{run}");
    let a = start_instance("instance A", &url, &prefix).await?;
    let b = start_instance("instance B", &url, &prefix).await?;
    println!("instance A on http://{a}, instance B on http://{b}, sharing {url}");
    println!("limit: 5 requests per 10 s per API key, across both instances\n");

    for i in 0..8 {
        let (name, addr) = if i % 2 == 0 { ("A", a) } else { ("B", b) };
        let (status, ratelimit) = get_once(addr, "alice").await?;
        println!(
            "request {} to {name}: {status:<30} ratelimit: {ratelimit}",
            i + 1
        );
    }
    let (status, _) = get_once(b, "bob").await?;
    println!("\nbob, a different key, on B: {status}");
    println!("\nalice got 5 in total, split across A and B: the window lives in Redis.");
    Ok(())
}
