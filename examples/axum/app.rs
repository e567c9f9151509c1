//! The example's router, shared with the integration test that serves it.

use axum::routing::{get, post};
use axum::{Extension, Router};
use tower_sliding_window::extract::ClientIp;
use tower_sliding_window::{Algorithm, Decision, Limit, Rejection, SlidingWindowLayer};

async fn hello(Extension(decision): Extension<Decision>) -> String {
    format!(
        "hello! {} left in this {}\n",
        decision.remaining(),
        decision
            .limit()
            .map_or("moment".into(), |limit| limit.window_name())
    )
}

async fn login() -> &'static str {
    "logged in (not really)\n"
}

/// `/` allows 5 per second and 30 per minute per client; `/login` allows 3
/// per minute, exactly (sliding log), with a problem+json refusal. Clients
/// are identified by `X-Forwarded-For` when the request comes through one of
/// the `trusted_proxies`, by the peer address otherwise.
pub fn app(trusted_proxies: &[&str]) -> Router {
    let client_ip = ClientIp::behind(trusted_proxies).expect("valid proxy networks");
    // The handler reads its decision, so the layer hands it over.
    let general = SlidingWindowLayer::new(Limit::per_second(5), client_ip.clone())
        .limit(Limit::per_minute(30))
        .decision_extension(true);
    let login_limit = SlidingWindowLayer::new(Limit::per_minute(3), client_ip)
        .algorithm(Algorithm::SlidingLog)
        .rejection(Rejection::problem_json());
    Router::new()
        .route("/", get(hello))
        .route_layer(general)
        .merge(
            Router::new()
                .route("/login", post(login))
                .route_layer(login_limit),
        )
}
