//! Plans per key, rejection styles and `ServiceBuilderExt`.

use std::convert::Infallible;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::BodyExt;
use tower::{service_fn, ServiceBuilder, ServiceExt};
use tower_sliding_window::{
    Algorithm, Limit, ManualClock, MemoryStore, Policy, Rejection, ServiceBuilderExt,
    SlidingWindowLayer,
};

fn api_key(request: &Request<()>) -> Option<String> {
    request
        .headers()
        .get("x-api-key")?
        .to_str()
        .ok()
        .map(str::to_owned)
}

fn with_key(key: &str) -> Request<()> {
    Request::builder()
        .header("x-api-key", key)
        .body(())
        .unwrap()
}

async fn ok(_: Request<()>) -> Result<Response<String>, Infallible> {
    Ok(Response::new(String::new()))
}

/// How many of `n` requests for `key` at one instant get through.
async fn admitted<S, B>(svc: &S, key: &str, n: usize) -> usize
where
    S: tower::Service<Request<()>, Response = Response<B>, Error = Infallible> + Clone,
{
    let mut count = 0;
    for _ in 0..n {
        let response = svc.clone().oneshot(with_key(key)).await.unwrap();
        count += usize::from(response.status() == StatusCode::OK);
    }
    count
}

#[tokio::test]
async fn plans_pick_limits_per_key_and_can_change_while_running() {
    let clock = ManualClock::new();
    let free = Policy::new(
        Algorithm::SlidingLog,
        [Limit::per_second(2), Limit::per_minute(5)],
    )
    .unwrap()
    .named("free");
    let paid = Policy::new(
        Algorithm::SlidingLog,
        [Limit::per_second(20), Limit::per_minute(500)],
    )
    .unwrap()
    .named("paid");
    let paying: Arc<RwLock<Vec<String>>> = Arc::new(RwLock::new(vec!["acme".into()]));
    let layer = {
        let (free, paid, paying) = (free.clone(), paid.clone(), Arc::clone(&paying));
        SlidingWindowLayer::with_policy(free.clone(), api_key)
            .plan(move |key: &String| {
                if paying.read().unwrap().contains(key) {
                    paid.clone()
                } else {
                    free.clone()
                }
            })
            .store(MemoryStore::with_clock(clock.clone()))
            .wrap_body()
    };
    let svc = ServiceBuilder::new().layer(layer).service(service_fn(ok));

    // An accepted request's headers describe the plan it was judged by.
    let accepted = svc.clone().oneshot(with_key("acme")).await.unwrap();
    assert_eq!(accepted.status(), StatusCode::OK);
    assert_eq!(
        accepted.headers()["ratelimit-policy"],
        "\"1s\";q=20;w=1, \"60s\";q=500;w=60"
    );
    assert_eq!(
        accepted.headers()["ratelimit"].to_str().unwrap(),
        "\"1s\";r=19;t=2"
    );
    // The stamp counts for the closed second after it: two seconds on, acme
    // starts afresh.
    clock.advance(Duration::from_secs(2));

    assert_eq!(admitted(&svc, "acme", 30).await, 20, "paid: 20 per second");
    assert_eq!(admitted(&svc, "bob", 30).await, 2, "free: 2 per second");
    let refused = svc.clone().oneshot(with_key("bob")).await.unwrap();
    assert_eq!(
        refused.headers()["ratelimit-policy"],
        "\"1s\";q=2;w=1, \"60s\";q=5;w=60"
    );

    // Bob upgrades: no restart, the next request is judged by the paid plan.
    paying.write().unwrap().push("bob".into());
    assert_eq!(admitted(&svc, "bob", 30).await, 20);
}

#[tokio::test]
async fn plans_by_request_see_the_request() {
    let strict = Policy::new(Algorithm::SlidingCounter, [Limit::per_minute(1)]).unwrap();
    let lenient = Policy::new(Algorithm::SlidingCounter, [Limit::per_minute(3)]).unwrap();
    let layer = SlidingWindowLayer::with_policy(lenient.clone(), api_key)
        .plan_by_request(move |request: &Request<()>, _key: &String| {
            if request.uri().path() == "/login" {
                strict.clone()
            } else {
                lenient.clone()
            }
        })
        .store(MemoryStore::with_clock(ManualClock::new()))
        .wrap_body();
    let svc = ServiceBuilder::new().layer(layer).service(service_fn(ok));
    let to = |path: &str| {
        Request::builder()
            .uri(path)
            .header("x-api-key", "k")
            .body(())
            .unwrap()
    };
    let mut statuses = Vec::new();
    for path in ["/login", "/login", "/home", "/home", "/home", "/home"] {
        statuses.push(
            svc.clone()
                .oneshot(to(path))
                .await
                .unwrap()
                .status()
                .as_u16(),
        );
    }
    assert_eq!(statuses, [200, 429, 200, 200, 200, 429]);
}

async fn refused_with(
    rejection: Rejection,
) -> Response<tower_sliding_window::layer::ResponseBody<String>> {
    let layer = SlidingWindowLayer::new(Limit::per_minute(1), api_key)
        .rejection(rejection)
        .store(MemoryStore::with_clock(ManualClock::new()))
        .wrap_body();
    let svc = ServiceBuilder::new().layer(layer).service(service_fn(ok));
    svc.clone().oneshot(with_key("k")).await.unwrap();
    svc.oneshot(with_key("k")).await.unwrap()
}

async fn text(response: Response<tower_sliding_window::layer::ResponseBody<String>>) -> String {
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    String::from_utf8(bytes.to_vec()).unwrap()
}

#[tokio::test]
async fn problem_json_rejection() {
    let response = refused_with(Rejection::problem_json()).await;
    assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(
        response.headers()["content-type"],
        "application/problem+json"
    );
    assert_eq!(response.headers()["retry-after"], "120");
    let body = text(response).await;
    assert!(
        body.starts_with(
            "{\"type\":\"https://iana.org/assignments/http-problem-types#quota-exceeded\""
        ),
        "{body}"
    );
    assert!(
        body.contains("\"status\":429") && body.contains("\"retry-after\":120"),
        "{body}"
    );
}

#[tokio::test]
async fn custom_rejection_and_status() {
    let custom = Rejection::custom(|decision| {
        let mut response = Response::new(Bytes::from(format!(
            "wait {}s",
            decision.retry_after().as_secs()
        )));
        *response.status_mut() = StatusCode::IM_A_TEAPOT;
        response
            .headers_mut()
            .insert("retry-after", "999".parse().unwrap());
        response
    });
    let response = refused_with(custom).await;
    assert_eq!(response.status(), StatusCode::IM_A_TEAPOT);
    assert_eq!(
        response.headers()["retry-after"],
        "999",
        "its own header is kept"
    );
    assert!(
        response.headers().contains_key("ratelimit"),
        "missing ones are added"
    );
    assert_eq!(text(response).await, "wait 120s");

    let unavailable =
        refused_with(Rejection::plain_text().with_status(StatusCode::SERVICE_UNAVAILABLE)).await;
    assert_eq!(unavailable.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(unavailable.headers()["retry-after"], "120");
}

/// The shortcut adds the default layer, which answers in axum's body.
#[cfg(feature = "axum")]
#[tokio::test]
async fn service_builder_ext_adds_the_layer() {
    let axum_ok =
        |_: Request<()>| async { Ok::<_, Infallible>(Response::new(axum::body::Body::empty())) };
    let svc = ServiceBuilder::new()
        .sliding_window(Limit::per_second(1), api_key)
        .service(service_fn(axum_ok));
    assert_eq!(admitted(&svc, "k", 3).await, 1);

    let clock = ManualClock::new();
    let layer = SlidingWindowLayer::new(Limit::per_second(2), api_key)
        .store(MemoryStore::with_clock(clock))
        .wrap_body();
    let svc = ServiceBuilder::new()
        .sliding_window_layer(layer)
        .service(service_fn(ok));
    assert_eq!(admitted(&svc, "k", 3).await, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn count_only_admits_exactly_the_limit_of_requests_in_flight() {
    // Ten failed logins in flight at once against a limit of three: each
    // reserves its unit on arrival, so three reach the service (which holds
    // them until all three are there) and seven are refused at once.
    let barrier = Arc::new(tokio::sync::Barrier::new(3));
    let layer = SlidingWindowLayer::new(Limit::per_minute(3), api_key)
        .count_only(|status, _| status == StatusCode::UNAUTHORIZED)
        .store(MemoryStore::with_clock(ManualClock::new()))
        .wrap_body();
    let svc = ServiceBuilder::new()
        .layer(layer)
        .service(service_fn(move |_: Request<()>| {
            let barrier = Arc::clone(&barrier);
            async move {
                barrier.wait().await;
                let mut response = Response::new(String::new());
                *response.status_mut() = StatusCode::UNAUTHORIZED;
                Ok::<_, Infallible>(response)
            }
        }));
    let tasks: Vec<_> = (0..10)
        .map(|_| {
            let svc = svc.clone();
            tokio::spawn(async move { svc.oneshot(with_key("mallory")).await.unwrap().status() })
        })
        .collect();
    let mut statuses = Vec::new();
    for task in tasks {
        statuses.push(task.await.unwrap());
    }
    let count = |status| statuses.iter().filter(|&&s| s == status).count();
    assert_eq!(count(StatusCode::UNAUTHORIZED), 3, "{statuses:?}");
    assert_eq!(count(StatusCode::TOO_MANY_REQUESTS), 7, "{statuses:?}");
    let next = svc.oneshot(with_key("mallory")).await.unwrap();
    assert_eq!(next.status(), StatusCode::TOO_MANY_REQUESTS);
}

/// A login endpoint that fails when `x-wrong` is sent, behind `count_only`,
/// with the RateLimit headers on accepted requests or without.
fn counting_failures(
    store: MemoryStore<ManualClock>,
    limit: u32,
    headers: bool,
) -> impl tower::Service<
    Request<()>,
    Response = Response<tower_sliding_window::layer::ResponseBody<String>>,
    Error = Infallible,
    Future = impl Send,
> + Clone {
    let layer = SlidingWindowLayer::new(Limit::per_minute(limit), api_key)
        .count_only(|status, _| status == StatusCode::UNAUTHORIZED)
        .rate_limit_headers(headers)
        .store(store)
        .wrap_body();
    ServiceBuilder::new()
        .layer(layer)
        .service(service_fn(|request: Request<()>| async move {
            let mut response = Response::new(String::new());
            if request.headers().contains_key("x-wrong") {
                *response.status_mut() = StatusCode::UNAUTHORIZED;
            }
            Ok::<_, Infallible>(response)
        }))
}

fn login(key: &str, wrong: bool) -> Request<()> {
    let mut request = with_key(key);
    if wrong {
        request
            .headers_mut()
            .insert("x-wrong", "1".parse().unwrap());
    }
    request
}

#[tokio::test]
async fn count_only_counts_with_the_headers_off() {
    let svc = counting_failures(MemoryStore::with_clock(ManualClock::new()), 2, false);
    for _ in 0..3 {
        let success = svc.clone().oneshot(login("k", false)).await.unwrap();
        assert_eq!(
            success.status(),
            StatusCode::OK,
            "successes are not counted"
        );
        assert!(!success.headers().contains_key("ratelimit"));
    }
    for _ in 0..2 {
        let failure = svc.clone().oneshot(login("k", true)).await.unwrap();
        assert_eq!(failure.status(), StatusCode::UNAUTHORIZED);
    }
    let refused = svc.clone().oneshot(login("k", false)).await.unwrap();
    assert_eq!(
        refused.status(),
        StatusCode::TOO_MANY_REQUESTS,
        "the two failures were counted"
    );
}

#[tokio::test]
async fn count_only_headers_show_what_was_counted() {
    let svc = counting_failures(MemoryStore::with_clock(ManualClock::new()), 3, true);
    let success = svc.clone().oneshot(login("k", false)).await.unwrap();
    assert_eq!(
        success.headers()["ratelimit"],
        "\"60s\";r=3;t=0",
        "a success uses nothing"
    );
    let failure = svc.clone().oneshot(login("k", true)).await.unwrap();
    assert_eq!(failure.status(), StatusCode::UNAUTHORIZED);
    assert!(failure.headers()["ratelimit"]
        .to_str()
        .unwrap()
        .starts_with("\"60s\";r=2;"));
}

#[tokio::test]
async fn count_only_refuses_new_keys_when_the_store_is_full() {
    // A store with room for 16 keys, all taken by failed logins: a new key's
    // attempt must be refused, not let through uncounted.
    let store = MemoryStore::with_clock(ManualClock::new())
        .with_max_keys(16)
        .unwrap();
    let svc = counting_failures(store, 3, true);
    for user in 0..16 {
        let response = svc
            .clone()
            .oneshot(login(&format!("user-{user}"), true))
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
    }
    let newcomer = svc.clone().oneshot(login("user-16", true)).await.unwrap();
    assert_eq!(newcomer.status(), StatusCode::TOO_MANY_REQUESTS);
}
