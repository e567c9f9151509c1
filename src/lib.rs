//! Sliding-window rate limiting for any tower `Service`, in front of axum
//! routers and tonic servers.
//!
//! [`SlidingWindowLayer`] takes a key out of each request (client IP, API
//! key, user id…) with a closure, asks a [`Store`] whether the request fits
//! the key's [`Limit`]s, and either passes it on or answers by itself:
//! `429 Too Many Requests` with `Retry-After` and the IETF `RateLimit` /
//! `RateLimit-Policy` headers, or for gRPC requests a trailers-only response
//! with status `RESOURCE_EXHAUSTED`. Its error type is the inner service's,
//! so axum's `Router::layer` and tonic's `Server::layer` take it as is.
//! For services of any other request type (jobs, clients of other
//! services), [`refuse_with_error`](SlidingWindowLayer::refuse_with_error)
//! fails refused calls with [`RateLimited`] instead, and
//! [`wait_up_to`](SlidingWindowLayer::wait_up_to) lets a refused call wait
//! for its turn.
//!
//! # Quick start: axum
//!
//! ```no_run
//! use std::net::SocketAddr;
//! use axum::{routing::get, Router};
//! use tower_sliding_window::extract::PeerIp;
//! use tower_sliding_window::{Limit, SlidingWindowLayer};
//!
//! # async fn run() -> std::io::Result<()> {
//! // 10 per second and 100 per minute per client IP, judged together.
//! let limit = SlidingWindowLayer::new(Limit::per_second(10), PeerIp::new()).limit(Limit::per_minute(100));
//! let app = Router::new().route("/", get(|| async { "hello" })).layer(limit);
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:3000").await?;
//! // PeerIp reads ConnectInfo (feature `axum`); or key by anything with a closure.
//! axum::serve(listener, app.into_make_service_with_connect_info::<SocketAddr>()).await
//! # }
//! ```
//!
//! # Quick start: tonic
//!
//! ```no_run
//! use tonic::transport::Server;
//! use tower_sliding_window::extract::PeerIp;
//! use tower_sliding_window::{Limit, SlidingWindowLayer};
//!
//! # async fn run() -> Result<(), tonic::transport::Error> {
//! let (_reporter, health) = tonic_health::server::health_reporter();
//! Server::builder()
//!     // Refused calls fail with Code::ResourceExhausted and a retry-after in the metadata.
//!     .layer(SlidingWindowLayer::new(Limit::per_minute(600), PeerIp::new()))
//!     .add_service(health)
//!     .serve("127.0.0.1:50051".parse().unwrap())
//!     .await
//! # }
//! ```
//!
//! # Any service: jobs, clients, calls that wait their turn
//!
//! Key extractors, costs, settles and plans are closures over the
//! service's own request and response types. An outbound client held to a
//! provider's published limits, shared by every instance through one
//! store, waits for its turn rather than fail (see `examples/outbound.rs`,
//! and a job consumer at
//! [`refuse_with_error`](SlidingWindowLayer::refuse_with_error)):
//!
//! ```
//! use std::time::Duration;
//! use tower::{service_fn, BoxError, ServiceBuilder, ServiceExt};
//! use tower_sliding_window::{Limit, RateLimited, SlidingWindowLayer};
//!
//! struct Completion {
//!     api_key: String,
//!     max_tokens: u32,
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), BoxError> {
//! let tokens_per_minute = SlidingWindowLayer::new(Limit::per_minute(10_000), |c: &Completion| Some(c.api_key.clone()))
//!     .cost(|c: &Completion| c.max_tokens) // reserved, then settled from the answer
//!     .settle(|tokens_used: &u32| Some(*tokens_used))
//!     .refuse_with_error()
//!     .wait_up_to(Duration::from_secs(30));
//! let provider = service_fn(|c: Completion| async move { Ok::<u32, BoxError>(c.max_tokens / 2) });
//! let client = ServiceBuilder::new().layer(tokens_per_minute).service(provider);
//!
//! match client.oneshot(Completion { api_key: "sk-1".into(), max_tokens: 512 }).await {
//!     Ok(used) => assert_eq!(used, 256),
//!     Err(e) if e.is::<RateLimited>() => println!("no turn within 30 s, or too big: {e}"),
//!     Err(e) => return Err(e), // the provider's own error, unchanged
//! }
//! # Ok(())
//! # }
//! ```
//!
//! A tonic client's `Channel` is wrapped like any service: keep the HTTP
//! mode there, and its callers see `Code::ResourceExhausted` as from a
//! server (error mode would reach them as `Code::Unknown`).
//!
//! # Testing with a manual clock
//!
//! Stores read a [`Clock`]; give them a [`ManualClock`] and drive a service
//! with `tower::ServiceExt`:
//!
//! ```
//! use std::time::Duration;
//! use tower::{service_fn, ServiceBuilder, ServiceExt};
//! use tower_sliding_window::{Algorithm, Limit, ManualClock, MemoryStore, SlidingWindowLayer};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let clock = ManualClock::new();
//! let layer = SlidingWindowLayer::new(Limit::new(5, Duration::from_secs(30))?, |req: &http::Request<String>| {
//!     req.headers().get("x-client").and_then(|v| v.to_str().ok()).map(str::to_owned)
//! })
//! .algorithm(Algorithm::SlidingLog)
//! .store(MemoryStore::with_clock(clock.clone()))
//! .wrap_body(); // a `String` body: answers go in a `ResponseBody` around it
//!
//! let hello = service_fn(|_req: http::Request<String>| async {
//!     Ok::<_, std::convert::Infallible>(http::Response::new(String::from("hello")))
//! });
//! let svc = ServiceBuilder::new().layer(layer).service(hello);
//!
//! let request = || http::Request::builder().header("x-client", "alice").body(String::new()).unwrap();
//! for _ in 0..5 {
//!     assert_eq!(svc.clone().oneshot(request()).await?.status(), 200);
//! }
//! let refused = svc.clone().oneshot(request()).await?;
//! assert_eq!(refused.status(), 429);
//! assert_eq!(refused.headers()["retry-after"], "31");
//! clock.advance(Duration::from_secs(31));
//! assert_eq!(svc.clone().oneshot(request()).await?.status(), 200);
//! # Ok(())
//! # }
//! ```
//!
//! # Choosing an algorithm
//!
//! * [`Algorithm::SlidingLog`] is exact: no closed interval of one window's
//!   length ever holds more accepted requests than the limit. It stores one
//!   timestamp per accepted request (up to the limit) per key, so it suits
//!   small limits and endpoints where a wrong rejection is expensive.
//! * [`Algorithm::SlidingCounter`] (the default) keeps two counts per key and
//!   limit and weights the previous window's by how much of it still
//!   overlaps. It assumes the previous window's traffic was spread evenly:
//!   traffic bunched at the *start* of the previous window is over-charged
//!   (clients that sent nothing recently can be refused), and traffic bunched
//!   at its *end* is under-charged (an attacker who knows the window alignment
//!   can get nearly twice the limit through across one window length).
//!   Cloudflare published that over 400 million requests from 270,000
//!   sources, this approximation decided 0.003 % of requests differently
//!   from an exact count, with an average gap of 6 % between real and
//!   estimated rate.
//! * [`Algorithm::FixedWindow`] counts per block of the clock. A burst
//!   straddling two blocks gets up to twice the limit through; it is here as
//!   the baseline, and for users who want exactly that.
//! * [`Algorithm::TokenBucket`] (GCRA, exact) allows bursts on purpose: a
//!   bucket of `max` tokens per limit, refilled one every `W / max`, with
//!   one arrival time per key and limit. For bursty clients and API keys;
//!   the price is up to twice the limit in one window's length (a full
//!   burst and a window's refill), so pair it with a short window where
//!   that matters.
//!
//! Against window shaping, do not rely on one window: a per-second limit with
//! a per-minute limit catches a burst shaped against either.
//!
//! # Several limits: one layer or stacked layers
//!
//! Limits inside **one layer** ([`SlidingWindowLayer::limit`]) are judged
//! all-or-nothing: a request is recorded in every window only if every window
//! accepts it, so a request refused by the per-minute limit does not use up
//! per-second quota. **Stacked layers** count independently: the outer layer
//! records a request before the inner one judges it, so a request the inner
//! layer refuses has still used the outer layer's quota.
//!
//! # Requests in flight
//!
//! [`SlidingWindowLayer::in_flight`] caps how many requests of a key run at
//! once, judged with the rate limits all-or-nothing, on every store (on
//! Redis as leases that a crashed instance gives back within
//! `RedisStore::with_lease`, with feature
//! `redis`); [`SlidingWindowLayer::in_flight_only`] caps alone. A request's
//! slot is freed when its response body ends or is dropped:
//!
//! ```
//! use tower_sliding_window::{extract::HeaderKey, Limit, SlidingWindowLayer};
//!
//! // 8 generations at once and 10,000 tokens a minute per API key.
//! let layer = SlidingWindowLayer::new(Limit::per_minute(10_000), HeaderKey::new("x-api-key")?)
//!     .in_flight(8);
//! # Ok::<(), tower_sliding_window::ConfigError>(())
//! ```
//!
//! # Time
//!
//! Stores read a [`Clock`]: [`SystemClock`] (monotonic) by default, or a
//! [`ManualClock`] that tests move by hand, so a scenario spanning minutes
//! runs in microseconds. Windows are counted in whole microseconds. A layer
//! that waits sleeps on tokio's timer: under tokio's paused time, a store
//! on a [`TokioClock`] sees the time the sleeps see.
//!
//! # Differences from `tower::limit::RateLimit` and `tower_governor`
//!
//! * `tower::limit::RateLimit` counts per *service instance*, is not `Clone`,
//!   and makes callers wait in `poll_ready` instead of refusing. axum needs
//!   `Buffer` in front of it, and then one limit is shared by every client.
//!   Here state lives in a shared store keyed per client, clones share it,
//!   `poll_ready` never waits, and refusals are real 429 responses; a call
//!   that should wait ([`wait_up_to`](SlidingWindowLayer::wait_up_to))
//!   waits in its own future, for its own key, on a limit every instance
//!   shares, until its turn (to tokio's millisecond).
//! * `tower_governor` (GCRA through `governor`) allows bursts by design and
//!   keeps state in one process. Refusals come out of the service as errors
//!   that axum users turn into responses. Its smart IP extractor takes the
//!   *leftmost* `X-Forwarded-For` entry, which any client can forge; here
//!   [`extract::ClientIp`] takes the rightmost address no trusted proxy
//!   vouches for. This crate adds sliding windows (exact or approximate),
//!   several limits judged all-or-nothing, Redis and Redis Cluster for shared
//!   limits, plans per key, gRPC-native refusals and the IETF `RateLimit`
//!   headers, and offers governor's own algorithm as
//!   [`Algorithm::TokenBucket`], on every store.
//!
//! # Stores
//!
//! A [`Store`] keeps each key's state: [`MemoryStore`] (the default),
//! `RedisStore` (feature `redis`), [`CasStore`] over any key-value service
//! with compare-and-swap, or one of your own. [`KeyState`] is the
//! judgement of one key under one policy, kept as compact bytes, exactly as
//! the memory store decides (see [`Store`], "Writing a store").
//!
//! # Features
//!
//! * `redis`: [`RedisStore`], for Redis 6+ and Redis Cluster.
//! * `redis-tls`: `rediss://` through rustls, and `RedisTls` for a CA of
//!   your own or a client certificate. It installs ring as rustls's
//!   process-wide provider unless the application installed one first.
//! * `axum`, `tonic`: [`extract::PeerIp`] and [`extract::ClientIp`] read the
//!   peer address those servers record.
//! * `tonic-tls`: they also read tonic's `TlsConnectInfo`, all tonic records
//!   when TLS is ended before it (tokio-rustls streams); tonic's own
//!   `tls_config` needs only `tonic`. It forces no crypto provider.
//! * `tracing`: events for refusals and store failures.
//! * `metrics`: decision counters (`tower_sliding_window_decisions_total`,
//!   `…_store_errors_total`) and the waits of
//!   [`wait_up_to`](SlidingWindowLayer::wait_up_to)
//!   (`tower_sliding_window_wait_seconds`) through the `metrics` facade,
//!   labelled by policy ([`Policy::label`]; `unnamed` for an unnamed policy
//!   a plan chose), never by key; and the Redis store's failures
//!   (`tower_sliding_window_store_failures_total`), labelled by kind.
#![forbid(unsafe_code)]
#![warn(missing_docs, unreachable_pub)]
#![cfg_attr(docsrs, feature(doc_cfg))]

pub mod algorithm;
mod bounded_key;
mod builder;
mod clock;
mod error;
pub mod extract;
pub mod layer;
mod limit;
mod observe;
mod policy;
mod state;
pub mod store;

pub use crate::algorithm::{Algorithm, Decision, Origin};
pub use crate::bounded_key::{bound_key, DEFAULT_KEY_BOUND, DIGEST_LEN};
pub use crate::builder::ServiceBuilderExt;
pub use crate::clock::{Clock, ManualClock, SystemClock, TokioClock, UnixClock};
pub use crate::error::ConfigError;
pub use crate::layer::{
    KeyExtractor, MissingKey, MissingKeyError, QuotaUnit, RateLimited, Rejection, SlidingWindow,
    SlidingWindowLayer, SlidingWindowRefuseWithError, SlidingWindowWrapBody,
};
pub use crate::limit::Limit;
pub use crate::policy::Policy;
pub use crate::state::{KeyState, DEFAULT_LEASE};
#[cfg(feature = "redis-tls")]
#[cfg_attr(docsrs, doc(cfg(feature = "redis-tls")))]
pub use crate::store::RedisTls;
pub use crate::store::{CasStore, CompareAndSwap, MemoryStore, Store, StoreError, StoreErrorKind};
#[cfg(feature = "redis")]
#[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
pub use crate::store::{FailurePolicy, RedisStore};

/// The README's code blocks, compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
