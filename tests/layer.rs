//! The layer's own behaviour: headers, gRPC answers, missing keys, store
//! failures, extensions, stacking and configuration errors.

use std::convert::Infallible;
use std::time::Duration;

use http::{Request, Response, StatusCode};
use http_body_util::BodyExt;
use tower::{service_fn, ServiceBuilder, ServiceExt};
use tower_sliding_window::layer::WrapBody;
use tower_sliding_window::{
    Algorithm, ConfigError, Decision, Limit, ManualClock, MemoryStore, MissingKey, Policy,
    SlidingWindowLayer,
};

#[path = "support/failing_store.rs"]
mod failing_store;
use failing_store::FailingStore;

fn by_client(request: &Request<String>) -> Option<String> {
    request
        .headers()
        .get("x-client")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
}

fn request(client: Option<&str>, content_type: Option<&str>) -> Request<String> {
    let mut builder = Request::builder();
    if let Some(client) = client {
        builder = builder.header("x-client", client);
    }
    if let Some(content_type) = content_type {
        builder = builder.header("content-type", content_type);
    }
    builder.body(String::new()).unwrap()
}

/// Echoes the remaining quota the layer put in the request's extensions.
async fn echo_decision(request: Request<String>) -> Result<Response<String>, Infallible> {
    let remaining = request
        .extensions()
        .get::<Decision>()
        .map(|d| d.remaining().to_string())
        .unwrap_or_else(|| "none".into());
    Ok(Response::new(remaining))
}

async fn body_text<B>(response: Response<B>) -> String
where
    B: http_body::Body,
    B::Error: std::fmt::Debug,
{
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    String::from_utf8(bytes.to_vec()).unwrap()
}

type ByClient = fn(&Request<String>) -> Option<String>;

fn layer(
    limit: Limit,
    clock: &ManualClock,
) -> SlidingWindowLayer<ByClient, MemoryStore<ManualClock>, WrapBody> {
    SlidingWindowLayer::new(limit, by_client as ByClient)
        .store(MemoryStore::with_clock(clock.clone()))
        .decision_extension(true)
        .wrap_body()
}

#[tokio::test]
async fn accepted_responses_carry_headers_and_the_decision() {
    let clock = ManualClock::new();
    let svc = ServiceBuilder::new()
        .layer(layer(Limit::per_second(3), &clock))
        .service(service_fn(echo_decision));
    let response = svc.clone().oneshot(request(Some("a"), None)).await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(response.headers()["ratelimit-policy"], "\"1s\";q=3;w=1");
    // Counter: the request at 0 s still weighs on the next window, so full
    // quota (one more than the 2 left) returns when that window ends.
    assert_eq!(response.headers()["ratelimit"], "\"1s\";r=2;t=2");
    assert!(response.headers().get("retry-after").is_none());
    assert_eq!(
        body_text(response).await,
        "2",
        "the handler saw the decision"
    );
}

#[tokio::test]
async fn headers_on_accepted_responses_can_be_switched_off() {
    let clock = ManualClock::new();
    let svc = ServiceBuilder::new()
        .layer(layer(Limit::per_second(1), &clock).rate_limit_headers(false))
        .service(service_fn(echo_decision));
    let accepted = svc.clone().oneshot(request(Some("a"), None)).await.unwrap();
    assert!(accepted.headers().get("ratelimit").is_none());
    let refused = svc.clone().oneshot(request(Some("a"), None)).await.unwrap();
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(
        refused.headers()["ratelimit"],
        "\"1s\";r=0;t=2",
        "rejections keep them"
    );
}

#[tokio::test]
async fn rejection_is_a_plain_429_with_retry_after() {
    let clock = ManualClock::new();
    let svc = ServiceBuilder::new()
        .layer(layer(
            Limit::new(1, Duration::from_secs(10)).unwrap(),
            &clock,
        ))
        .service(service_fn(echo_decision));
    svc.clone().oneshot(request(Some("a"), None)).await.unwrap();
    clock.set(Duration::from_millis(2_500));
    let refused = svc.clone().oneshot(request(Some("a"), None)).await.unwrap();
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    // Counter with a limit of 1: the request in [0, 10) weighs on [10, 20)
    // until it ends, so the next fits at 20 s.
    assert_eq!(refused.headers()["retry-after"], "18");
    assert_eq!(
        refused.headers()["content-type"],
        "text/plain; charset=utf-8"
    );
    assert!(body_text(refused).await.contains("limit of 1 per 10s"));
}

#[tokio::test]
async fn grpc_requests_get_resource_exhausted_trailers_only() {
    let clock = ManualClock::new();
    let svc = ServiceBuilder::new()
        .layer(layer(Limit::per_minute(1), &clock))
        .service(service_fn(echo_decision));
    let grpc = Some("application/grpc+proto");
    assert_eq!(
        svc.clone()
            .oneshot(request(Some("g"), grpc))
            .await
            .unwrap()
            .status(),
        200
    );
    let refused = svc.clone().oneshot(request(Some("g"), grpc)).await.unwrap();
    assert_eq!(
        refused.status(),
        StatusCode::OK,
        "gRPC errors travel with HTTP 200"
    );
    assert_eq!(refused.headers()["content-type"], "application/grpc");
    assert_eq!(refused.headers()["grpc-status"], "8");
    assert!(refused.headers()["grpc-message"]
        .to_str()
        .unwrap()
        .contains("retry after 120 s"));
    assert_eq!(refused.headers()["retry-after"], "120");
    assert_eq!(body_text(refused).await, "", "trailers-only: no body");
}

#[tokio::test]
async fn missing_key_is_refused_by_default_and_can_pass() {
    let clock = ManualClock::new();
    let strict = ServiceBuilder::new()
        .layer(layer(Limit::per_second(5), &clock))
        .service(service_fn(echo_decision));
    let response = strict.clone().oneshot(request(None, None)).await.unwrap();
    assert_eq!(response.status(), StatusCode::BAD_REQUEST);
    assert!(body_text(response).await.contains("no rate-limit key"));
    let grpc = strict
        .clone()
        .oneshot(request(None, Some("application/grpc")))
        .await
        .unwrap();
    assert_eq!(grpc.headers()["grpc-status"], "3");

    let lenient = ServiceBuilder::new()
        .layer(layer(Limit::per_second(5), &clock).on_missing_key(MissingKey::Allow))
        .service(service_fn(echo_decision));
    let response = lenient.clone().oneshot(request(None, None)).await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert!(response.headers().get("ratelimit").is_none());
    assert_eq!(body_text(response).await, "none", "no decision was made");
}

#[tokio::test]
async fn a_failing_store_answers_503_not_an_error() {
    let svc = ServiceBuilder::new()
        .layer(
            SlidingWindowLayer::new(Limit::per_second(5), by_client)
                .store(FailingStore("connection refused"))
                .wrap_body(),
        )
        .service(service_fn(echo_decision));
    let response = svc.clone().oneshot(request(Some("a"), None)).await.unwrap();
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    let grpc = svc
        .oneshot(request(Some("a"), Some("application/grpc")))
        .await
        .unwrap();
    assert_eq!(grpc.headers()["grpc-status"], "14");
}

#[tokio::test]
async fn stacked_layers_count_independently() {
    // Outer: 3 per minute. Inner: 1 per second. Separate layers, shared store.
    let clock = ManualClock::new();
    let store = MemoryStore::with_clock(clock.clone());
    let per_minute = SlidingWindowLayer::new(Limit::per_minute(3), by_client)
        .store(store.clone())
        .wrap_body();
    let per_second = SlidingWindowLayer::new(Limit::per_second(1), by_client)
        .store(store.clone())
        .wrap_body();
    let stacked = ServiceBuilder::new()
        .layer(per_minute)
        .layer(per_second)
        .service(service_fn(echo_decision));

    // Same limits inside one layer, for comparison.
    let combined = ServiceBuilder::new()
        .layer(
            SlidingWindowLayer::new(Limit::per_minute(3), by_client)
                .limit(Limit::per_second(1))
                .store(store)
                .wrap_body(),
        )
        .service(service_fn(echo_decision));

    let mut stacked_statuses = Vec::new();
    let mut combined_statuses = Vec::new();
    for second in [0, 0, 0, 2, 4] {
        clock.set(Duration::from_secs(second));
        stacked_statuses.push(
            stacked
                .clone()
                .oneshot(request(Some("s"), None))
                .await
                .unwrap()
                .status()
                .as_u16(),
        );
        combined_statuses.push(
            combined
                .clone()
                .oneshot(request(Some("s"), None))
                .await
                .unwrap()
                .status()
                .as_u16(),
        );
    }
    // Stacked: the two refused at 0 s were counted by the outer per-minute
    // layer, so its quota of 3 is gone by 2 s.
    assert_eq!(stacked_statuses, [200, 429, 429, 429, 429]);
    // One layer: refused requests are recorded nowhere, so 2 s and 4 s fit.
    assert_eq!(combined_statuses, [200, 429, 429, 200, 200]);
}

#[tokio::test]
async fn cloned_layers_and_services_share_windows() {
    let clock = ManualClock::new();
    let layer = layer(Limit::per_second(2), &clock);
    let a = ServiceBuilder::new()
        .layer(layer.clone())
        .service(service_fn(echo_decision));
    let b = ServiceBuilder::new()
        .layer(layer)
        .service(service_fn(echo_decision));
    assert_eq!(
        a.clone()
            .oneshot(request(Some("x"), None))
            .await
            .unwrap()
            .status(),
        200
    );
    assert_eq!(
        b.clone()
            .oneshot(request(Some("x"), None))
            .await
            .unwrap()
            .status(),
        200
    );
    assert_eq!(
        a.oneshot(request(Some("x"), None)).await.unwrap().status(),
        429
    );
}

#[test]
fn bad_configuration_is_a_clear_error() {
    assert_eq!(
        Limit::new(0, Duration::from_secs(1)),
        Err(ConfigError::ZeroLimit)
    );
    assert_eq!(Limit::new(1, Duration::ZERO), Err(ConfigError::ZeroWindow));
    assert!(matches!(
        Limit::new(1, Duration::from_nanos(1_500)),
        Err(ConfigError::WindowNotWholeMicros(_))
    ));
    assert!(matches!(
        Limit::new(1, Duration::MAX),
        Err(ConfigError::WindowTooLong(_))
    ));
    assert_eq!(
        Policy::new(Algorithm::SlidingLog, []).unwrap_err(),
        ConfigError::NoLimits
    );
    let nine = std::iter::repeat_n(Limit::per_second(1), 9);
    let err = Policy::new(Algorithm::SlidingLog, nine).unwrap_err();
    assert_eq!(
        err.to_string(),
        "a policy holds at most 8 limits, 9 were given"
    );
    assert_eq!(
        Limit::new(0, Duration::from_secs(1))
            .unwrap_err()
            .to_string(),
        "a limit must allow at least one request per window"
    );
    assert!(MemoryStore::new().with_max_keys(0).is_err());
}

#[test]
#[should_panic(expected = "a limit must allow at least one request per window")]
fn literal_constructors_panic_on_zero() {
    let _ = Limit::per_second(0);
}

#[tokio::test]
async fn the_decision_extension_can_be_switched_off() {
    let clock = ManualClock::new();
    let svc = ServiceBuilder::new()
        .layer(layer(Limit::per_second(3), &clock).decision_extension(false))
        .service(service_fn(echo_decision));
    let response = svc.oneshot(request(Some("a"), None)).await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(body_text(response).await, "none");
}

#[test]
fn refining_a_named_policy_keeps_its_name() {
    let key = |_: &Request<()>| Some("client");
    let login = Policy::new(Algorithm::SlidingCounter, [Limit::per_second(1)])
        .unwrap()
        .named("login");
    let layer = SlidingWindowLayer::with_policy(login, key)
        .limit(Limit::per_minute(10))
        .algorithm(Algorithm::SlidingLog)
        .wrap_body();
    assert_eq!(layer.policy().name(), Some("login"));
    assert_eq!(layer.policy().limits().len(), 2);
    assert_eq!(layer.policy().algorithm(), Algorithm::SlidingLog);
    let signup = SlidingWindowLayer::new(Limit::per_second(1), key)
        .named("signup")
        .wrap_body();
    assert_eq!(signup.policy().label(), "signup");
}

/// A cost in bytes says so in `RateLimit-Policy`, with the unit the draft
/// registers; the default says nothing.
#[tokio::test]
async fn a_cost_in_bytes_names_its_unit() {
    let layer = SlidingWindowLayer::new(Limit::per_minute(1_000_000), by_client)
        .cost(|request: &Request<String>| request.body().len() as u32)
        .quota_unit(tower_sliding_window::QuotaUnit::ContentBytes)
        .store(MemoryStore::with_clock(ManualClock::new()))
        .wrap_body();
    let svc = ServiceBuilder::new()
        .layer(layer)
        .service(service_fn(|_: Request<String>| async {
            Ok::<_, Infallible>(Response::new(String::new()))
        }));
    let mut upload = request(Some("a"), None);
    *upload.body_mut() = "x".repeat(1_500);
    let response = svc.clone().oneshot(upload).await.unwrap();
    let policy = response.headers()["ratelimit-policy"].to_str().unwrap();
    assert_eq!(policy, "\"60s\";q=1000000;w=60;qu=\"content-bytes\"");
    let ratelimit = response.headers()["ratelimit"].to_str().unwrap();
    assert!(ratelimit.starts_with("\"60s\";r=998500;"), "{ratelimit}");
    let plain = SlidingWindowLayer::new(Limit::per_minute(10), by_client)
        .store(MemoryStore::with_clock(ManualClock::new()))
        .wrap_body();
    let svc = ServiceBuilder::new()
        .layer(plain)
        .service(service_fn(|_: Request<String>| async {
            Ok::<_, Infallible>(Response::new(String::new()))
        }));
    let response = svc.oneshot(request(Some("a"), None)).await.unwrap();
    assert_eq!(response.headers()["ratelimit-policy"], "\"60s\";q=10;w=60");
}

/// The decision goes in the request's extensions only when asked for, or
/// in shadow mode, where it tells the handler what enforcement would do.
#[tokio::test]
async fn the_decision_extension_is_opt_in_except_in_shadow_mode() {
    let handler_sees = |layer: SlidingWindowLayer<ByClient, MemoryStore<ManualClock>, WrapBody>| async move {
        let svc = ServiceBuilder::new()
            .layer(layer)
            .service(service_fn(echo_decision));
        body_text(svc.oneshot(request(Some("a"), None)).await.unwrap()).await
    };
    let clock = ManualClock::new();
    let plain = || {
        SlidingWindowLayer::new(Limit::per_second(3), by_client as ByClient)
            .store(MemoryStore::with_clock(clock.clone()))
            .wrap_body()
    };
    assert_eq!(handler_sees(plain()).await, "none");
    assert_eq!(handler_sees(plain().decision_extension(true)).await, "2");
    assert_eq!(handler_sees(plain().shadow_mode(true)).await, "2");
    assert_eq!(
        handler_sees(plain().shadow_mode(true).decision_extension(false)).await,
        "none"
    );
}
