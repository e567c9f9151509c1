//! The layer around services of any request type, through
//! `tower::ServiceExt`: refusals as errors, costs and settling on plain
//! types, and calls that wait their turn under tokio's paused time.

#[path = "support/failing_store.rs"]
mod failing_store;

use std::convert::Infallible;
use std::fmt;
use std::future::{ready, Future, Ready};
use std::time::Duration;

use failing_store::FailingStore;
use tokio::time::Instant;
use tower::util::ServiceFn;
use tower::{service_fn, BoxError, Service, ServiceBuilder, ServiceExt};
use tower_sliding_window::extract::HeaderKey;
use tower_sliding_window::layer::{
    Costed, Planned, RefuseWithError, Settled, SlidingWindowWrapBody,
};
use tower_sliding_window::{
    Algorithm, Limit, ManualClock, MemoryStore, MissingKey, MissingKeyError, Origin, Policy,
    RateLimited, ServiceBuilderExt, SlidingWindowLayer, StoreError, TokioClock,
};

/// A job for background workers, limited per tenant.
#[derive(Clone, Debug)]
struct Job {
    tenant: Option<&'static str>,
    weight: u32,
}

fn job(tenant: &'static str) -> Job {
    Job {
        tenant: Some(tenant),
        weight: 1,
    }
}

fn heavy(tenant: &'static str, weight: u32) -> Job {
    Job {
        tenant: Some(tenant),
        weight,
    }
}

fn tenant(job: &Job) -> Option<&'static str> {
    job.tenant
}

fn two_per_ten_seconds() -> Limit {
    Limit::new(2, Duration::from_secs(10)).unwrap()
}

/// A worker that answers each job with the time it ran.
fn worker() -> impl Service<
    Job,
    Response = Instant,
    Error = Infallible,
    Future = Ready<Result<Instant, Infallible>>,
> + Clone {
    service_fn(|_: Job| ready(Ok::<_, Infallible>(Instant::now())))
}

/// One call once the service is ready.
async fn call<S>(svc: &mut S, job: Job) -> Result<S::Response, BoxError>
where
    S: Service<Job, Error = BoxError>,
{
    svc.ready().await?.call(job).await
}

fn refusal(error: &BoxError) -> &RateLimited {
    error
        .downcast_ref::<RateLimited>()
        .unwrap_or_else(|| panic!("not a RateLimited: {error}"))
}

#[tokio::test]
async fn a_refusal_fails_the_call_with_its_exact_retry_after() {
    let clock = ManualClock::new();
    let layer = SlidingWindowLayer::new(two_per_ten_seconds(), tenant)
        .algorithm(Algorithm::SlidingLog)
        .store(MemoryStore::with_clock(clock.clone()))
        .refuse_with_error();
    let mut svc = ServiceBuilder::new().layer(layer).service(worker());

    call(&mut svc, job("acme")).await.unwrap();
    clock.advance(Duration::from_millis(3_250));
    call(&mut svc, job("acme")).await.unwrap();
    clock.advance(Duration::from_millis(1_000));
    let error = call(&mut svc, job("acme")).await.unwrap_err();
    let refused = refusal(&error);
    // The first stamp leaves the window just past 10 s after it was made.
    assert_eq!(refused.retry_after(), Duration::from_micros(5_750_001));
    assert_eq!(refused.decision().limit(), Some(two_per_ten_seconds()));
    assert!(!refused.decision().is_allowed());
    assert!(error.to_string().contains("2/10s"), "{error}");
    // Another tenant has quota of its own.
    call(&mut svc, job("initech")).await.unwrap();
}

#[derive(Debug, PartialEq)]
struct Unreachable(u16);

impl fmt::Display for Unreachable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "the provider answered {}", self.0)
    }
}

impl std::error::Error for Unreachable {}

#[tokio::test]
async fn the_inner_services_errors_pass_through_unchanged() {
    let layer = SlidingWindowLayer::new(Limit::per_minute(5), tenant).refuse_with_error();
    let failing = service_fn(|_: Job| async { Err::<(), _>(Unreachable(503)) });
    let error = ServiceBuilder::new()
        .layer(layer)
        .service(failing)
        .oneshot(job("acme"))
        .await
        .unwrap_err();
    assert_eq!(error.downcast_ref::<Unreachable>(), Some(&Unreachable(503)));
    assert!(!error.is::<RateLimited>());
}

#[tokio::test]
async fn costs_are_read_from_any_request_and_settled_from_any_response() {
    let clock = ManualClock::new();
    let layer = SlidingWindowLayer::new(Limit::per_minute(10), tenant)
        .algorithm(Algorithm::SlidingLog)
        .store(MemoryStore::with_clock(clock.clone()))
        .cost(|job: &Job| job.weight)
        // The "provider" reports what the job really used: half its estimate.
        .settle(|used: &u32| Some(*used))
        .refuse_with_error();
    let half = service_fn(|job: Job| ready(Ok::<_, Infallible>(job.weight / 2)));
    let mut svc = ServiceBuilder::new().layer(layer).service(half);

    // Reserves 8, settles at 4: 6 left.
    assert_eq!(call(&mut svc, heavy("acme", 8)).await.unwrap(), 4);
    // Reserves 6, settles at 3: 3 left.
    call(&mut svc, heavy("acme", 6)).await.unwrap();
    let error = call(&mut svc, heavy("acme", 4)).await.unwrap_err();
    assert!(!refusal(&error).decision().is_allowed());
    // Reserves 3, settles at 1: 2 left.
    call(&mut svc, heavy("acme", 3)).await.unwrap();
    let error = call(&mut svc, heavy("acme", 3)).await.unwrap_err();
    assert!(error.is::<RateLimited>());
    call(&mut svc, heavy("acme", 2)).await.unwrap();
}

#[tokio::test]
async fn a_keyless_call_fails_with_an_error_of_its_own_unless_allowed() {
    let keyless = Job {
        tenant: None,
        weight: 1,
    };
    let layer = SlidingWindowLayer::new(Limit::per_minute(1), tenant).refuse_with_error();
    let svc = ServiceBuilder::new().layer(layer.clone()).service(worker());
    let error = svc.oneshot(keyless.clone()).await.unwrap_err();
    assert!(error.is::<MissingKeyError>(), "{error}");

    let mut open = ServiceBuilder::new()
        .layer(layer.on_missing_key(MissingKey::Allow))
        .service(worker());
    for _ in 0..3 {
        call(&mut open, keyless.clone()).await.unwrap();
    }
}

#[tokio::test]
async fn a_failed_store_fails_the_call_with_its_error_at_once() {
    let layer = SlidingWindowLayer::new(Limit::per_minute(1), tenant)
        .store(FailingStore("redis is down"))
        .refuse_with_error()
        .wait_up_to(Duration::from_secs(60));
    let error = ServiceBuilder::new()
        .layer(layer.clone())
        .service(worker())
        .oneshot(job("acme"))
        .await
        .unwrap_err();
    let store_error = error
        .downcast_ref::<StoreError>()
        .expect("the store's own error");
    assert!(
        store_error.to_string().contains("redis is down"),
        "{store_error}"
    );

    // Shadow mode refuses nothing, not even for a failed store.
    let shadow = ServiceBuilder::new()
        .layer(layer.shadow_mode(true))
        .service(worker());
    shadow.oneshot(job("acme")).await.unwrap();
}

#[tokio::test]
async fn plans_choose_by_the_key_of_any_request() {
    let clock = ManualClock::new();
    let layer = SlidingWindowLayer::new(Limit::per_minute(1), tenant)
        .plan(|tenant: &&'static str| {
            let per_minute = if *tenant == "paying" { 3 } else { 1 };
            Policy::new(Algorithm::SlidingLog, [Limit::per_minute(per_minute)]).unwrap()
        })
        .store(MemoryStore::with_clock(clock))
        .refuse_with_error();
    let svc = ServiceBuilder::new().layer(layer).service(worker());
    let mut paying = Vec::new();
    for _ in 0..4 {
        paying.push(svc.clone().oneshot(job("paying")).await.is_ok());
    }
    let mut free = Vec::new();
    for _ in 0..2 {
        free.push(svc.clone().oneshot(job("free")).await.is_ok());
    }
    assert_eq!(paying, [true, true, true, false]);
    assert_eq!(free, [true, false]);
}

type ByTenant = fn(&Job) -> Option<&'static str>;

/// The clock of the store and the sleeps of the layer are both tokio's,
/// paused: the test runs in microseconds and the times are exact.
fn waiting_layer(
    bound: Duration,
) -> SlidingWindowLayer<ByTenant, MemoryStore<TokioClock>, RefuseWithError> {
    SlidingWindowLayer::new(
        two_per_ten_seconds(),
        tenant as fn(&Job) -> Option<&'static str>,
    )
    .algorithm(Algorithm::SlidingLog)
    .store(MemoryStore::with_clock(TokioClock::new()))
    .refuse_with_error()
    .wait_up_to(bound)
}

/// Whether `elapsed` is `seconds`, or later by no more than the timer's
/// rounding up to whole milliseconds, once for each wait.
fn is_at(elapsed: Duration, seconds: u64) -> bool {
    let expected = Duration::from_secs(seconds);
    elapsed >= expected && elapsed < expected + Duration::from_millis(5)
}

#[tokio::test(start_paused = true)]
async fn five_calls_at_two_per_ten_seconds_take_twenty_seconds() {
    let svc = ServiceBuilder::new()
        .layer(waiting_layer(Duration::from_secs(60)))
        .service(worker());
    let start = Instant::now();
    let mut ran_at = Vec::new();
    for _ in 0..5 {
        let ran = svc.clone().oneshot(job("acme")).await.unwrap();
        ran_at.push(ran - start);
    }
    let expected = [0, 0, 10, 10, 20];
    assert!(
        ran_at
            .iter()
            .zip(expected)
            .all(|(&at, seconds)| is_at(at, seconds)),
        "{ran_at:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_turn_further_away_than_the_bound_fails_at_once() {
    let svc = ServiceBuilder::new()
        .layer(waiting_layer(Duration::from_secs(5)))
        .service(worker());
    let start = Instant::now();
    svc.clone().oneshot(job("acme")).await.unwrap();
    svc.clone().oneshot(job("acme")).await.unwrap();
    let error = svc.clone().oneshot(job("acme")).await.unwrap_err();
    assert_eq!(start.elapsed(), Duration::ZERO);
    assert_eq!(
        refusal(&error).retry_after(),
        Duration::from_micros(10_000_001)
    );
}

#[tokio::test(start_paused = true)]
async fn a_cost_above_the_limit_fails_at_once_and_names_no_wait() {
    let layer = SlidingWindowLayer::new(two_per_ten_seconds(), tenant)
        .store(MemoryStore::with_clock(TokioClock::new()))
        .cost(|job: &Job| job.weight)
        .refuse_with_error()
        .wait_up_to(Duration::from_secs(3_600));
    let svc = ServiceBuilder::new().layer(layer).service(worker());
    let start = Instant::now();
    let error = svc.oneshot(heavy("acme", 3)).await.unwrap_err();
    assert_eq!(start.elapsed(), Duration::ZERO);
    let refused = refusal(&error);
    assert_eq!(refused.decision().origin(), Origin::TooCostly);
    assert_eq!(refused.retry_after(), Duration::ZERO);
    assert!(!refused.decision().wait_helps());
}

/// A caller that waited and lost its turn to another waits again, within
/// the bound counted from its arrival.
#[tokio::test(start_paused = true)]
async fn waiters_that_lose_a_turn_wait_again_within_the_same_bound() {
    let layer = SlidingWindowLayer::new(Limit::new(1, Duration::from_secs(10)).unwrap(), tenant)
        .algorithm(Algorithm::SlidingLog)
        .store(MemoryStore::with_clock(TokioClock::new()))
        .refuse_with_error()
        .wait_up_to(Duration::from_secs(15));
    let svc = ServiceBuilder::new().layer(layer).service(worker());
    let start = Instant::now();
    let calls: Vec<_> = (0..3)
        .map(|_| tokio::spawn(svc.clone().oneshot(job("acme"))))
        .collect();
    let mut served = Vec::new();
    let mut refused = Vec::new();
    for call in calls {
        match call.await.unwrap() {
            Ok(ran) => served.push(ran - start),
            Err(error) => refused.push((start.elapsed(), refusal(&error).retry_after())),
        }
    }
    served.sort();
    assert_eq!(served.len(), 2, "{served:?} {refused:?}");
    assert!(is_at(served[0], 0) && is_at(served[1], 10), "{served:?}");
    // The third waited for the turn at 10 s, lost it, and its next turn
    // (20 s) lies past its bound (15 s): it fails then, not later.
    assert_eq!(refused.len(), 1);
    assert!(is_at(refused[0].0, 10), "{refused:?}");
}

/// An HTTP server that would rather delay a burst than refuse it.
#[tokio::test(start_paused = true)]
async fn an_http_layer_that_waits_answers_later_instead_of_429() {
    let layer = SlidingWindowLayer::new(two_per_ten_seconds(), HeaderKey::new("x-client").unwrap())
        .store(MemoryStore::with_clock(TokioClock::new()))
        .algorithm(Algorithm::SlidingLog)
        .wait_up_to(Duration::from_secs(11))
        .wrap_body();
    let hello = service_fn(|_: http::Request<String>| {
        ready(Ok::<_, Infallible>(http::Response::new(String::from(
            "hello",
        ))))
    });
    let svc = ServiceBuilder::new().layer(layer).service(hello);
    let request = || {
        http::Request::builder()
            .header("x-client", "alice")
            .body(String::new())
            .unwrap()
    };
    let start = Instant::now();
    for _ in 0..5 {
        assert_eq!(svc.clone().oneshot(request()).await.unwrap().status(), 200);
    }
    assert!(is_at(start.elapsed(), 20), "{:?}", start.elapsed());
}

type Hello =
    ServiceFn<fn(http::Request<String>) -> Ready<Result<http::Response<String>, Infallible>>>;

fn hello(_: http::Request<String>) -> Ready<Result<http::Response<String>, Infallible>> {
    ready(Ok(http::Response::new(String::from("hello"))))
}

/// Per API key, a plan per customer, costs read from the request's body,
/// settled from the response.
type Weighed =
    Settled<Costed<Planned<HeaderKey, String>, http::Request<String>>, http::Response<String>>;

/// A service kept in a struct field with its layer's type written out:
/// a named extractor, plans, costs and settling, with no boxing.
struct App {
    limited: SlidingWindowWrapBody<Hello, Weighed>,
}

#[tokio::test]
async fn a_configured_service_has_a_type_a_struct_field_can_name() {
    let layer = SlidingWindowLayer::new(Limit::per_minute(10), HeaderKey::new("x-client").unwrap())
        .plan(|_: &String| Policy::new(Algorithm::SlidingCounter, [Limit::per_minute(3)]).unwrap())
        .cost(|request: &http::Request<String>| request.body().len() as u32)
        .settle(|_: &http::Response<String>| None)
        .wrap_body();
    let app = App {
        limited: ServiceBuilder::new()
            .sliding_window_layer(layer)
            .service(service_fn(hello as fn(_) -> _)),
    };
    let request = |body: &str| {
        http::Request::builder()
            .header("x-client", "alice")
            .body(String::from(body))
            .unwrap()
    };
    let ok = app.limited.clone().oneshot(request("ab")).await.unwrap();
    assert_eq!(ok.status(), 200);
    // The plan's 3 a minute, less the 2 units the first body cost.
    let refused = app.limited.clone().oneshot(request("ab")).await.unwrap();
    assert_eq!(refused.status(), 429);
}

/// A call waiting for its turn holds none of the inner service's capacity:
/// behind a `Buffer` of one place (as a tonic `Channel` is a buffer), a call
/// for another key goes through while the first waits, though the waiting
/// caller keeps its service.
#[tokio::test(start_paused = true)]
async fn a_waiting_call_holds_no_slot_of_a_buffer_behind_it() {
    let layer = SlidingWindowLayer::new(Limit::new(1, Duration::from_secs(10)).unwrap(), tenant)
        .algorithm(Algorithm::SlidingLog)
        .store(MemoryStore::with_clock(TokioClock::new()))
        .refuse_with_error()
        .wait_up_to(Duration::from_secs(60));
    let buffered = tower::buffer::Buffer::new(worker(), 1);
    let mut svc = ServiceBuilder::new().layer(layer).service(buffered);
    let start = Instant::now();
    call(&mut svc, job("acme")).await.unwrap();
    let mut waiter = svc.clone();
    let waiting = tokio::spawn(async move { call(&mut waiter, job("acme")).await });
    tokio::task::yield_now().await;
    let other = call(&mut svc, job("initech")).await.unwrap();
    assert_eq!(other - start, Duration::ZERO);
    let waited = waiting.await.unwrap().unwrap();
    assert!(is_at(waited - start, 10), "{:?}", waited - start);
}

/// A call that waited and was let through is settled against the
/// decision that let it through.
#[tokio::test(start_paused = true)]
async fn a_call_that_waited_is_settled_from_its_response() {
    let layer = SlidingWindowLayer::new(Limit::new(10, Duration::from_secs(10)).unwrap(), tenant)
        .algorithm(Algorithm::SlidingLog)
        .store(MemoryStore::with_clock(TokioClock::new()))
        .cost(|job: &Job| job.weight)
        .settle(|used: &u32| Some(*used))
        .refuse_with_error()
        .wait_up_to(Duration::from_secs(60));
    let half = service_fn(|job: Job| ready(Ok::<_, Infallible>(job.weight / 2)));
    let mut svc = ServiceBuilder::new().layer(layer).service(half);
    let start = Instant::now();
    // Reserves 10, settles at 5: 5 left.
    call(&mut svc, heavy("acme", 10)).await.unwrap();
    // 8 do not fit until the first 10 stamps leave the window, 10 s on;
    // then it reserves 8 and settles at 4.
    assert_eq!(call(&mut svc, heavy("acme", 8)).await.unwrap(), 4);
    assert!(is_at(start.elapsed(), 10), "{:?}", start.elapsed());
    // 6 are left at once: the 4 the settle gave back among them.
    let six = call(&mut svc, heavy("acme", 6)).await.unwrap();
    assert_eq!(six, 3);
    assert!(is_at(start.elapsed(), 10), "{:?}", start.elapsed());
}

/// Shadow mode refuses nothing and makes nothing wait, in error mode too.
#[tokio::test(start_paused = true)]
async fn shadow_mode_lets_refused_calls_through_at_once() {
    let svc = ServiceBuilder::new()
        .layer(waiting_layer(Duration::from_secs(60)).shadow_mode(true))
        .service(worker());
    let start = Instant::now();
    for _ in 0..3 {
        svc.clone().oneshot(job("acme")).await.unwrap();
    }
    assert_eq!(start.elapsed(), Duration::ZERO);
}

/// The same in HTTP mode: a request delayed for its turn holds no slot.
#[tokio::test(start_paused = true)]
async fn a_delayed_http_request_holds_no_slot_of_a_buffer_behind_it() {
    let layer = SlidingWindowLayer::new(
        Limit::new(1, Duration::from_secs(10)).unwrap(),
        HeaderKey::new("x-client").unwrap(),
    )
    .algorithm(Algorithm::SlidingLog)
    .store(MemoryStore::with_clock(TokioClock::new()))
    .wait_up_to(Duration::from_secs(60))
    .wrap_body();
    let hello = service_fn(|_: http::Request<String>| {
        ready(Ok::<_, Infallible>(http::Response::new(String::new())))
    });
    let svc = ServiceBuilder::new()
        .layer(layer)
        .service(tower::buffer::Buffer::new(hello, 1));
    let request = |client: &str| {
        http::Request::builder()
            .header("x-client", client)
            .body(String::new())
            .unwrap()
    };
    let start = Instant::now();
    svc.clone().oneshot(request("alice")).await.unwrap();
    let mut waiter = svc.clone();
    let waiting = tokio::spawn(async move {
        waiter.ready().await?.call(request("alice")).await?;
        Ok::<_, BoxError>(Instant::now())
    });
    tokio::task::yield_now().await;
    let mut other = svc.clone();
    let bob = other.ready().await.unwrap().call(request("bob")).await;
    assert_eq!(bob.unwrap().status(), 200);
    assert_eq!(start.elapsed(), Duration::ZERO);
    let waited = waiting.await.unwrap().unwrap();
    assert!(is_at(waited - start, 10), "{:?}", waited - start);
}

/// Polled outside any tokio runtime, a layer that waits has no timer to
/// sleep on: it refuses at once rather than panic.
#[test]
fn outside_a_tokio_runtime_a_waiting_layer_refuses_at_once() {
    let layer = SlidingWindowLayer::new(Limit::per_minute(1), tenant)
        .store(MemoryStore::with_clock(ManualClock::new()))
        .refuse_with_error()
        .wait_up_to(Duration::from_secs(120));
    let mut svc = ServiceBuilder::new()
        .layer(layer)
        .service(worker_without_timer());
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    let mut poll_once = |job| {
        let mut call = std::pin::pin!(svc.call(job));
        call.as_mut().poll(&mut cx)
    };
    assert!(matches!(
        poll_once(job("acme")),
        std::task::Poll::Ready(Ok(()))
    ));
    match poll_once(job("acme")) {
        std::task::Poll::Ready(Err(error)) => assert!(error.is::<RateLimited>(), "{error}"),
        _ => panic!("a refusal outside a runtime is answered at once"),
    }
}

fn worker_without_timer(
) -> impl Service<Job, Response = (), Error = Infallible, Future = Ready<Result<(), Infallible>>> + Clone
{
    service_fn(|_: Job| ready(Ok::<_, Infallible>(())))
}
