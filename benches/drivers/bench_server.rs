//! The server the loopback HTTP benchmark (`bench/http.sh`) loads: a bare
//! axum router, the same router behind tower_governor, or behind the layer (per-second and
//! per-minute limits keyed by peer IP, RateLimit headers on, axum's own body
//! passed through), with limits
//! high enough that every request is accepted.
//!
//! `ours-noheaders` is the same layer with the headers off, and
//! `bare-headers` the bare router sending two RateLimit headers of the same
//! length as ours as static text.
//!
//! `cargo run --release --example bench_server --features axum -- bare|bare-headers|ours|ours-noheaders|governor PORT`

use std::net::SocketAddr;

use axum::routing::get;
use axum::Router;
use tower_sliding_window::extract::PeerIp;
use tower_sliding_window::{Limit, SlidingWindowLayer};

fn main() -> std::io::Result<()> {
    let mut args = std::env::args().skip(1);
    let mode = args.next().unwrap_or_else(|| "ours".into());
    let port: u16 = args.next().and_then(|p| p.parse().ok()).unwrap_or(3100);
    let bare = Router::new().route("/", get(|| async { "hello" }));
    let app = match mode.as_str() {
        "bare" => bare,
        // The bare router sending two RateLimit headers as long as ours, as
        // static text: what the headers cost any server (`REFERENCE=1`).
        "bare-headers" => Router::new().route(
            "/",
            get(|| async {
                (
                    [
                        (
                            "ratelimit-policy",
                            "\"1s\";q=4294967295;w=1, \"60s\";q=2147483647;w=60",
                        ),
                        ("ratelimit", "\"60s\";r=2147483646;t=120"),
                    ],
                    "hello",
                )
            }),
        ),
        // As the README sets it up for axum.
        "ours" => bare.layer(
            SlidingWindowLayer::new(Limit::per_second(u32::MAX), PeerIp::new())
                .limit(Limit::per_minute(u32::MAX / 2)),
        ),
        "ours-noheaders" => bare.layer(
            SlidingWindowLayer::new(Limit::per_second(u32::MAX), PeerIp::new())
                .limit(Limit::per_minute(u32::MAX / 2))
                .rate_limit_headers(false),
        ),
        "governor" => {
            let config = tower_governor::governor::GovernorConfigBuilder::default()
                .per_nanosecond(1)
                .burst_size(u32::MAX)
                .finish()
                .expect("valid governor config");
            bare.layer(tower_governor::GovernorLayer::new(std::sync::Arc::new(
                config,
            )))
        }
        other => {
            eprintln!(
                "mode must be bare, bare-headers, ours, ours-noheaders or governor, not {other:?}"
            );
            std::process::exit(2);
        }
    };
    // One worker thread: the benchmark pins the server to one core and the
    // load generator to the other.
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?
        .block_on(async move {
            let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await?;
            axum::serve(
                listener,
                app.into_make_service_with_connect_info::<SocketAddr>(),
            )
            .await
        })
}
