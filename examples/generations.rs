//! An LLM gateway on axum that lets each API key run at most 8 generations
//! at once, beside a limit of tokens per minute. A generation streams its
//! answer, and holds its slot until the stream ends (or the client goes
//! away), so the 9th concurrent one gets a 429 at once.
//!
//! Run with `cargo run --example generations`.

use std::sync::{Arc, Mutex};

use axum::body::Body;
use axum::routing::post;
use axum::Router;
use bytes::Bytes;
use http::{Request, StatusCode};
use tokio::sync::mpsc;
use tokio_stream::wrappers::UnboundedReceiverStream;
use tokio_stream::StreamExt;
use tower::ServiceExt;
use tower_sliding_window::extract::HeaderKey;
use tower_sliding_window::{Limit, SlidingWindowLayer};

/// Generations each API key may run at once.
pub const IN_FLIGHT: u32 = 8;

/// The streams the model is writing, for `main` to finish one by one: a
/// stand-in for the tokens a model produces over seconds.
pub type Streams = Arc<Mutex<Vec<mpsc::UnboundedSender<Bytes>>>>;

/// The gateway: `/v1/generate` behind 8 generations in flight and 10,000
/// tokens a minute per key (each call reserves its `x-max-tokens`).
pub fn gateway(streams: Streams) -> Router {
    let limits = SlidingWindowLayer::new(
        Limit::per_minute(10_000),
        HeaderKey::new("x-api-key").expect("a valid header name"),
    )
    .in_flight(IN_FLIGHT)
    .cost(|request: &Request<Body>| {
        let asked = request.headers().get("x-max-tokens");
        let asked = asked.and_then(|value| value.to_str().ok()?.parse().ok());
        asked.unwrap_or(256_u32).clamp(1, 4_096)
    });
    let generate = move || {
        let streams = Arc::clone(&streams);
        async move {
            let (send, tokens) = mpsc::unbounded_channel();
            streams.lock().unwrap().push(send);
            let stream = UnboundedReceiverStream::new(tokens).map(Ok::<_, std::io::Error>);
            Body::from_stream(stream)
        }
    };
    Router::new()
        .route("/v1/generate", post(generate))
        .layer(limits)
}

/// Starts a generation for `key`: its status, `Retry-After` and the
/// response, whose body streams until the model ends it.
pub async fn start(app: &Router, key: &str) -> (StatusCode, String, axum::response::Response) {
    let request = Request::post("/v1/generate")
        .header("x-api-key", key)
        .header("x-max-tokens", "500")
        .body(Body::empty())
        .unwrap();
    let response = app.clone().oneshot(request).await.unwrap();
    let retry = response.headers().get("retry-after");
    let retry = retry.map_or(String::new(), |value| format!("retry after {value:?}"));
    (response.status(), retry, response)
}

#[allow(dead_code)]
#[tokio::main(flavor = "current_thread")]
async fn main() {
    let streams = Streams::default();
    let app = gateway(Arc::clone(&streams));
    println!("{IN_FLIGHT} generations in flight per API key\n");
    let mut running = Vec::new();
    for i in 1..=10 {
        let (status, retry, response) = start(&app, "carol").await;
        println!("generation {i:>2}: {} {retry}", status.as_u16());
        running.push(response);
    }
    // The model finishes the first generation; its client reads it to the end.
    let first = streams.lock().unwrap().remove(0);
    first
        .send(Bytes::from_static(b"Once upon a time."))
        .unwrap();
    drop(first);
    let story = axum::body::to_bytes(running.remove(0).into_body(), 1 << 20).await;
    println!("\ngeneration  1 ended: {:?}", story.unwrap());
    let (status, _, eleventh) = start(&app, "carol").await;
    println!("generation 11: {} (the slot it freed)", status.as_u16());
    let (status, retry, _) = start(&app, "carol").await;
    println!("generation 12: {} {retry}", status.as_u16());
    // A client that goes away drops its stream, and frees its slot.
    drop(eleventh);
    let (status, _, _) = start(&app, "carol").await;
    println!(
        "generation 13: {} (generation 11's client left)",
        status.as_u16()
    );
}
