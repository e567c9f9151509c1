//! An "LLM gateway" on axum that limits tokens per minute per API key: each
//! call reserves the tokens it asks for at most (`x-max-tokens`), and is
//! settled at what the model really used, which the handler reports in
//! `x-tokens-used`. It prints what each call reserved, used and left.
//!
//! Run with `cargo run --example tokens`.

use std::time::Duration;

use axum::body::Body;
use axum::routing::post;
use axum::Router;
use http::{HeaderMap, Request, Response, StatusCode};
use tower::ServiceExt;
use tower_sliding_window::extract::HeaderKey;
use tower_sliding_window::{Limit, ManualClock, MemoryStore, SlidingWindowLayer};

/// Tokens each API key may use a minute.
pub const TOKENS_PER_MINUTE: u32 = 1_000;

fn number(headers: &HeaderMap, name: &str) -> Option<u32> {
    headers.get(name)?.to_str().ok()?.parse().ok()
}

/// The model: answers with as many tokens as the prompt's words, up to the
/// call's maximum, and says how many it used.
async fn complete(headers: HeaderMap, prompt: String) -> Response<Body> {
    let most = number(&headers, "x-max-tokens").unwrap_or(256);
    let used = (prompt.split_whitespace().count() as u32).min(most);
    Response::builder()
        .header("x-tokens-used", used)
        .body(Body::from(format!("{used} tokens of completion\n")))
        .unwrap()
}

/// The gateway: `/v1/complete` behind a limit of tokens per minute per key.
pub fn gateway(store: MemoryStore<ManualClock>) -> Router {
    let limit = SlidingWindowLayer::new(
        Limit::per_minute(TOKENS_PER_MINUTE),
        HeaderKey::new("x-api-key").expect("a valid header name"),
    )
    .named("tokens")
    .store(store)
    // Reserve the most the call may use...
    .cost(|request: &Request<Body>| number(request.headers(), "x-max-tokens").unwrap_or(256))
    // ...and settle at what it did use.
    .settle(|response: &Response<Body>| number(response.headers(), "x-tokens-used"));
    Router::new()
        .route("/v1/complete", post(complete))
        .layer(limit)
}

/// One call: its status, the tokens it used and the quota left after it.
pub async fn call(
    app: &Router,
    key: &str,
    max_tokens: u32,
    words: usize,
) -> (StatusCode, Option<u32>, Option<String>) {
    let request = Request::post("/v1/complete")
        .header("x-api-key", key)
        .header("x-max-tokens", max_tokens)
        .body(Body::from("word ".repeat(words)))
        .unwrap();
    let response = app.clone().oneshot(request).await.unwrap();
    let used = number(response.headers(), "x-tokens-used");
    let left = response
        .headers()
        .get("ratelimit")
        .and_then(|value| value.to_str().ok())
        .map(str::to_owned);
    (response.status(), used, left)
}

#[allow(dead_code)]
#[tokio::main(flavor = "current_thread")]
async fn main() {
    let clock = ManualClock::new();
    let app = gateway(MemoryStore::with_clock(clock.clone()));
    println!("{TOKENS_PER_MINUTE} tokens a minute per API key\n");
    println!(
        "{:>4}  {:<6} {:>8} {:>5}  {:<4} RateLimit",
        "time", "key", "reserved", "used", ""
    );
    let calls: [(u64, &str, u32, usize); 10] = [
        (0, "alice", 400, 120),
        (1, "alice", 400, 380),
        (2, "alice", 400, 50),
        (3, "alice", 400, 10),
        (4, "bob", 800, 700),
        (5, "alice", 2_000, 10),
        (6, "bob", 400, 100),
        (40, "alice", 400, 300),
        (61, "alice", 400, 300),
        (90, "alice", 400, 300),
    ];
    for (at, key, reserved, words) in calls {
        clock.set(Duration::from_secs(at));
        let (status, used, left) = call(&app, key, reserved, words).await;
        let used = used.map_or("-".to_owned(), |used| used.to_string());
        println!(
            "{at:>3}s  {key:<6} {reserved:>8} {used:>5}  {:<4} {}",
            status.as_u16(),
            left.unwrap_or_default()
        );
    }
}
