//! In-flight caps through the layer, on the memory store: what each mode,
//! shadow mode, waiting and a store without caps do with them. The cases
//! every store shares are in the conformance suite.

use std::convert::Infallible;
use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use http::{Request, Response, StatusCode};
use tokio::sync::Semaphore;
use tower::{service_fn, BoxError, Layer, Service, ServiceExt};
use tower_sliding_window::layer::RateLimited;
use tower_sliding_window::store::MemoryBinding;
use tower_sliding_window::{
    Decision, Limit, MemoryStore, Origin, Policy, SlidingWindowLayer, Store, StoreError,
    StoreErrorKind,
};

type KeyFn = fn(&Request<()>) -> Option<String>;

fn key(_: &Request<()>) -> Option<String> {
    Some("k".to_owned())
}

fn request() -> Request<()> {
    Request::new(())
}

/// A handler that waits at `gate` for one permit, counting how many run.
fn gated(
    gate: &Arc<Semaphore>,
    running: &Arc<AtomicUsize>,
) -> impl Service<
    Request<()>,
    Response = Response<String>,
    Error = Infallible,
    Future = impl Future<Output = Result<Response<String>, Infallible>> + Send,
> + Clone {
    let (gate, running) = (Arc::clone(gate), Arc::clone(running));
    service_fn(move |_: Request<()>| {
        let (gate, running) = (Arc::clone(&gate), Arc::clone(&running));
        async move {
            running.fetch_add(1, Ordering::SeqCst);
            gate.acquire().await.unwrap().forget();
            running.fetch_sub(1, Ordering::SeqCst);
            Ok(Response::new(String::new()))
        }
    })
}

#[test]
#[should_panic(expected = "an in-flight cap of 0 would refuse every request")]
fn a_cap_of_zero_panics() {
    let _ = SlidingWindowLayer::new(Limit::per_second(1), key as KeyFn)
        .in_flight(0)
        .wrap_body();
}

#[test]
fn the_cap_is_part_of_the_policy_value() {
    let rate = Policy::new(Default::default(), [Limit::per_minute(60)]).unwrap();
    assert_ne!(
        rate.clone().with_in_flight(8),
        rate.clone().with_in_flight(4)
    );
    assert_eq!(
        rate.clone().with_in_flight(8),
        rate.clone().with_in_flight(8)
    );
    assert_eq!(rate.clone().with_in_flight(8).signature(), "c60/60s;i8");
    assert_eq!(Policy::in_flight_only(3).in_flight(), Some(3));
    assert_eq!(rate.in_flight(), None);
}

/// In error mode the slot is freed as the inner future resolves, and a
/// refusal is a `RateLimited` of origin `InFlight`.
#[tokio::test]
async fn error_mode_refuses_with_the_origin_and_frees_on_resolve() {
    let (gate, running) = (Arc::new(Semaphore::new(0)), Arc::new(AtomicUsize::new(0)));
    let svc = SlidingWindowLayer::in_flight_only(1, key as KeyFn)
        .refuse_with_error()
        .layer(gated(&gate, &running));
    let held = tokio::spawn(svc.clone().oneshot(request()));
    while running.load(Ordering::SeqCst) == 0 {
        tokio::task::yield_now().await;
    }
    let error: BoxError = svc.clone().oneshot(request()).await.unwrap_err();
    let refused = error.downcast_ref::<RateLimited>().expect("a RateLimited");
    assert_eq!(refused.decision().origin(), Origin::InFlight);
    assert_eq!(refused.retry_after(), Duration::from_secs(1));
    gate.add_permits(2);
    held.await.unwrap().unwrap();
    svc.oneshot(request()).await.unwrap();
}

/// An inner error and a panic that unwinds both free the slot.
#[tokio::test]
async fn an_inner_error_or_a_panic_frees_the_slot() {
    let calls = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&calls);
    let failing = service_fn(move |_: Request<()>| {
        let call = counted.fetch_add(1, Ordering::SeqCst);
        async move {
            match call {
                0 => Err::<Response<String>, _>("inner failure"),
                1 => panic!("the handler panics"),
                _ => Ok(Response::new(String::new())),
            }
        }
    });
    let svc = SlidingWindowLayer::in_flight_only(1, key as KeyFn)
        .wrap_body()
        .layer(failing);
    assert!(svc.clone().oneshot(request()).await.is_err());
    match tokio::spawn(svc.clone().oneshot(request())).await {
        Err(panicked) => assert!(panicked.is_panic()),
        Ok(_) => panic!("the handler was to panic"),
    }
    let response = svc.oneshot(request()).await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
}

/// Shadow mode counts slots but refuses nothing: the request over the cap
/// passes, marked as one enforcement would refuse.
#[tokio::test]
async fn shadow_mode_counts_slots_and_refuses_nothing() {
    let (gate, running) = (Arc::new(Semaphore::new(0)), Arc::new(AtomicUsize::new(0)));
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let record = Arc::clone(&seen);
    let inner = gated(&gate, &running);
    let recording = service_fn(move |request: Request<()>| {
        let decision = request.extensions().get::<Decision>().copied();
        record.lock().unwrap().push(decision);
        inner.clone().oneshot(request)
    });
    let svc = SlidingWindowLayer::in_flight_only(1, key as KeyFn)
        .shadow_mode(true)
        .wrap_body()
        .layer(recording);
    let first = tokio::spawn(svc.clone().oneshot(request()));
    let second = tokio::spawn(svc.clone().oneshot(request()));
    while running.load(Ordering::SeqCst) < 2 {
        tokio::task::yield_now().await;
    }
    gate.add_permits(2);
    first.await.unwrap().unwrap();
    second.await.unwrap().unwrap();
    let seen = seen.lock().unwrap();
    let verdicts: Vec<(bool, Origin)> = seen
        .iter()
        .map(|d| d.map(|d| (d.is_allowed(), d.origin())).unwrap())
        .collect();
    assert!(verdicts.contains(&(true, Origin::Limits)));
    assert!(verdicts.contains(&(false, Origin::InFlight)));
}

/// Under `wait_up_to`, a request refused for the cap waits for a slot, and
/// the memory store wakes it as the slot frees, not at its next poll.
#[tokio::test(start_paused = true)]
async fn a_waiting_request_is_woken_as_the_slot_frees() {
    let (gate, running) = (Arc::new(Semaphore::new(0)), Arc::new(AtomicUsize::new(0)));
    let entered = Arc::new(std::sync::Mutex::new(Vec::new()));
    let inner = gated(&gate, &running);
    let record = Arc::clone(&entered);
    let timed = service_fn(move |request: Request<()>| {
        record.lock().unwrap().push(tokio::time::Instant::now());
        inner.clone().oneshot(request)
    });
    let svc = SlidingWindowLayer::in_flight_only(1, key as KeyFn)
        .wait_up_to(Duration::from_secs(5))
        .wrap_body()
        .layer(timed);
    let first = tokio::spawn(svc.clone().oneshot(request()));
    while running.load(Ordering::SeqCst) == 0 {
        tokio::task::yield_now().await;
    }
    let second = tokio::spawn(svc.clone().oneshot(request()));
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(running.load(Ordering::SeqCst), 1, "the second waits");
    gate.add_permits(2);
    let first = first.await.unwrap().unwrap();
    let freed = tokio::time::Instant::now();
    drop(first);
    assert_eq!(second.await.unwrap().unwrap().status(), StatusCode::OK);
    let second_entered = entered.lock().unwrap()[1];
    assert_eq!(second_entered, freed, "woken by the release, not a poll");
}

/// A capped policy on a store without caps is a configuration error on
/// every request, never a cap that lets everything through.
#[tokio::test]
async fn a_store_without_caps_is_a_configuration_error() {
    let svc = SlidingWindowLayer::in_flight_only(1, key as KeyFn)
        .store(Later::without_caps())
        .refuse_with_error()
        .layer(service_fn(|_: Request<()>| async {
            Ok::<_, Infallible>(Response::new(String::new()))
        }));
    let error = svc.clone().oneshot(request()).await.unwrap_err();
    let error = error.downcast_ref::<StoreError>().expect("a StoreError");
    assert_eq!(error.kind(), StoreErrorKind::Config);
    assert!(error.to_string().contains("in-flight"), "{error}");
    let http = SlidingWindowLayer::in_flight_only(1, key as KeyFn)
        .store(Later::without_caps())
        .wrap_body()
        .layer(service_fn(|_: Request<()>| async {
            Ok::<_, Infallible>(Response::new(String::new()))
        }));
    let response = http.oneshot(request()).await.unwrap();
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
}

/// In the body type `body` makes, answered in by default, a request holds
/// its slot until that body ends, as in the wrapped body: the layer boxes
/// the body it holds the slot in.
#[cfg(any(feature = "axum", feature = "tonic"))]
async fn the_slot_is_held_until_the_body_ends<B>(body: fn(&'static str) -> B)
where
    B: tower_sliding_window::layer::AnswerBody
        + http_body::Body<Data = bytes::Bytes>
        + Send
        + 'static,
    B::Error: std::fmt::Debug,
{
    use http_body_util::BodyExt;
    let svc = SlidingWindowLayer::in_flight_only(1, key as KeyFn).layer(service_fn(
        move |_: Request<()>| async move { Ok::<_, Infallible>(Response::new(body("body"))) },
    ));
    let first = svc.clone().oneshot(request()).await.unwrap();
    let second = svc.clone().oneshot(request()).await.unwrap();
    assert_eq!(
        second.status(),
        StatusCode::TOO_MANY_REQUESTS,
        "the first body is unread"
    );
    let body = first.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(body, "body");
    let third = svc.oneshot(request()).await.unwrap();
    assert_eq!(third.status(), StatusCode::OK, "the first body has ended");
}

#[cfg(feature = "axum")]
#[tokio::test]
async fn axums_body_holds_the_slot_until_it_ends() {
    the_slot_is_held_until_the_body_ends(axum::body::Body::from).await;
}

#[cfg(feature = "tonic")]
#[tokio::test]
async fn tonics_body_holds_the_slot_until_it_ends() {
    the_slot_is_held_until_the_body_ends(|text| {
        tonic::body::Body::new(http_body_util::Full::new(bytes::Bytes::from(text)))
    })
    .await;
}

/// A store written outside the crate: a memory store whose answers come
/// a turn later, as a remote store's do (the layer waits for them in its
/// future), keeping caps or saying nothing of them.
#[derive(Clone)]
struct Later(MemoryStore, bool);

impl Later {
    fn without_caps() -> Self {
        Self(MemoryStore::new(), false)
    }
}

type Pending = std::pin::Pin<Box<dyn Future<Output = Result<Decision, StoreError>> + Send>>;

impl Store<String> for Later {
    type Binding = MemoryBinding<String>;
    type Future = Pending;

    fn bind(&self, policy: &Policy) -> Self::Binding {
        self.0.bind(policy)
    }

    fn decide_cost_bound(&self, key: String, binding: &Self::Binding, cost: u32) -> Pending {
        let decided = self
            .0
            .decide_cost_bound(key, binding, cost)
            .into_inner()
            .unwrap();
        Box::pin(async move {
            tokio::task::yield_now().await;
            Ok(decided)
        })
    }

    fn settle_bound(
        &self,
        key: String,
        binding: &Self::Binding,
        admitted: &Decision,
        cost: u32,
        used: u32,
    ) -> Pending {
        let settled = self
            .0
            .settle_bound(key, binding, admitted, cost, used)
            .into_inner()
            .unwrap();
        Box::pin(async move { Ok(settled) })
    }

    fn peek_bound(&self, key: String, binding: &Self::Binding) -> Pending {
        let peeked = self.0.peek_bound(key, binding).into_inner().unwrap();
        Box::pin(async move { Ok(peeked) })
    }

    fn holds_slots(&self) -> bool {
        self.1
    }

    fn release_bound(&self, key: String, binding: &Self::Binding, admitted: &Decision) {
        self.0.release_bound(key, binding, admitted);
    }
}

/// An inner service ready for the first call, then never again.
#[derive(Clone)]
struct ReadyOnce(Arc<AtomicUsize>);

impl Service<Request<()>> for ReadyOnce {
    type Response = Response<String>;
    type Error = Infallible;
    type Future = std::future::Ready<Result<Response<String>, Infallible>>;

    fn poll_ready(
        &mut self,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Infallible>> {
        if self.0.fetch_add(1, Ordering::SeqCst) == 0 {
            std::task::Poll::Ready(Ok(()))
        } else {
            std::task::Poll::Pending
        }
    }

    fn call(&mut self, _: Request<()>) -> Self::Future {
        std::future::ready(Ok(Response::new(String::new())))
    }
}

/// A request the store admitted, dropped while its inner service gets
/// ready, frees its slot.
#[tokio::test]
async fn a_request_dropped_while_its_service_gets_ready_frees_its_slot() {
    let store = Later(MemoryStore::new(), true);
    let layer = SlidingWindowLayer::in_flight_only(1, key as KeyFn)
        .store(store)
        .wrap_body();
    let stuck = layer.clone().layer(ReadyOnce(Arc::default()));
    let waiting = tokio::time::timeout(Duration::from_millis(50), stuck.oneshot(request())).await;
    assert!(waiting.is_err(), "the inner service never gets ready again");
    let fine = layer.layer(service_fn(|_: Request<()>| async {
        Ok::<_, Infallible>(Response::new(String::new()))
    }));
    assert_eq!(
        fine.oneshot(request()).await.unwrap().status(),
        StatusCode::OK
    );
}
