//! Hardening: the log's guarantee under real time and real threads, clock
//! faults, and the service's poll contract.

use std::convert::Infallible;
use std::future::{ready, Future, Ready};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use http::{Request, Response, StatusCode};
use tower::{Service, ServiceExt};
use tower_sliding_window::algorithm::{FixedWindow, SlidingCounter, SlidingLog};
use tower_sliding_window::store::MemoryBinding;
use tower_sliding_window::{
    Algorithm, Decision, Limit, ManualClock, MemoryStore, Policy, SlidingWindowLayer, Store,
    StoreError,
};

/// Most accepted times in any closed interval of `window` µs.
fn densest(sorted: &[u64], window: u64) -> usize {
    let mut best = 0;
    let mut end = 0;
    for (start, &from) in sorted.iter().enumerate() {
        while end < sorted.len() && sorted[end] <= from + window {
            end += 1;
        }
        best = best.max(end - start);
    }
    best
}

#[test]
fn log_never_over_admits_under_real_time_and_two_threads() {
    // A million decisions on the system clock from two OS threads, on four
    // keys, against 20 per 2 ms: windows slide constantly under contention.
    let store = MemoryStore::new();
    let window = Duration::from_millis(2);
    let policy = Policy::new(Algorithm::SlidingLog, [Limit::new(20, window).unwrap()]).unwrap();
    let per_thread = 500_000;
    let accepted: Vec<Vec<(u64, u64)>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..2u64)
            .map(|thread| {
                let (store, policy) = (store.clone(), policy.clone());
                scope.spawn(move || {
                    let mut accepted = Vec::new();
                    for i in 0..per_thread {
                        let key = (i + thread) % 4;
                        let decision = store.decide_now(key, &policy);
                        if decision.is_allowed() {
                            accepted.push((key, decision.decided_at().as_micros() as u64));
                        }
                    }
                    accepted
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let mut violations = 0;
    let mut total = 0;
    for key in 0..4 {
        let mut times: Vec<u64> = accepted
            .iter()
            .flatten()
            .filter(|(k, _)| *k == key)
            .map(|(_, t)| *t)
            .collect();
        times.sort_unstable();
        total += times.len();
        if densest(&times, window.as_micros() as u64) > 20 {
            violations += 1;
        }
    }
    println!(
        "{} decisions, {total} accepted, {violations} keys over the limit",
        2 * per_thread
    );
    assert_eq!(violations, 0);
    assert!(
        total > 1_000,
        "the run must actually accept and slide ({total})"
    );
}

/// A memory store keeps an idle key five seconds before dropping it, so a
/// request judged a little behind the clock that swept still finds the
/// key's full window instead of a fresh one.
#[test]
fn a_late_request_finds_a_just_idle_key_still_counted() {
    // Two requests at 4 s, under 2 per 10 s. The key goes idle at 10 s (the
    // fixed window's end), just after 14 s (the log's stamps leave) or at
    // 20 s (the counter's window no longer weighs); the shard is then swept
    // two seconds later, inside the five seconds' grace.
    for (algorithm, swept_at) in [
        (Algorithm::FixedWindow, 12.0),
        (Algorithm::SlidingLog, 16.0),
        (Algorithm::SlidingCounter, 22.0),
    ] {
        let policy =
            Policy::new(algorithm, [Limit::new(2, Duration::from_secs(10)).unwrap()]).unwrap();
        let clock = ManualClock::new();
        // Sixteen keys make one shard, so another key's decision sweeps it.
        let store = MemoryStore::with_clock(clock.clone())
            .with_max_keys(16)
            .unwrap();
        let at = |seconds: f64| clock.set(Duration::from_secs_f64(seconds));
        at(4.0);
        assert!(store.decide_now("late", &policy).is_allowed());
        assert!(store.decide_now("late", &policy).is_allowed());
        at(swept_at);
        store.decide_now("other", &policy);
        at(9.5);
        assert!(
            !store.decide_now("late", &policy).is_allowed(),
            "{algorithm:?}: a request at 9.5 s got a fresh window"
        );
    }
}

#[test]
fn clocks_stepping_back_or_leaping_ahead_never_panic_or_over_admit() {
    let limits = [
        Limit::new(3, Duration::from_secs(10)).unwrap(),
        Limit::per_hour(5),
    ];
    for algorithm in ["log", "counter", "fixed"] {
        let mut decide: Box<dyn FnMut(Duration) -> Decision> = match algorithm {
            "log" => {
                let mut s = SlidingLog::new();
                Box::new(move |t| s.decide(t, &limits))
            }
            "counter" => {
                let mut s = SlidingCounter::new();
                Box::new(move |t| s.decide(t, &limits))
            }
            _ => {
                let mut s = FixedWindow::new();
                Box::new(move |t| s.decide(t, &limits))
            }
        };
        let start = Duration::from_secs(1_000);
        let admitted = (0..3).filter(|_| decide(start).is_allowed()).count();
        assert_eq!(admitted, 3);
        for back in [999, 500, 0] {
            assert!(
                !decide(Duration::from_secs(back)).is_allowed(),
                "{algorithm}: back to {back}s"
            );
        }
        // Days, years, then the end of time: no overflow, and the limits still hold.
        for ahead in [
            Duration::from_secs(86_400 * 3),
            Duration::from_secs(86_400 * 365 * 500),
            Duration::MAX,
        ] {
            let fresh = (0..10).filter(|_| decide(ahead).is_allowed()).count();
            assert!(fresh <= 3, "{algorithm} at {ahead:?}: {fresh}");
        }
    }
}

/// An inner service that insists on tower's contract: it must be polled
/// ready before each call, and its readiness flips between pending and
/// ready. It counts live instances, to show nothing leaks.
struct Strict {
    ready: bool,
    flip: Arc<AtomicBool>,
    live: Arc<AtomicUsize>,
    calls: Arc<AtomicUsize>,
}

impl Clone for Strict {
    fn clone(&self) -> Self {
        self.live.fetch_add(1, Ordering::SeqCst);
        Self {
            ready: false,
            flip: Arc::clone(&self.flip),
            live: Arc::clone(&self.live),
            calls: Arc::clone(&self.calls),
        }
    }
}

impl Drop for Strict {
    fn drop(&mut self) {
        self.live.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Service<Request<String>> for Strict {
    type Response = Response<String>;
    type Error = Infallible;
    type Future = Ready<Result<Response<String>, Infallible>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        // Every other poll is pending, to catch a caller that does not wait.
        if self.flip.fetch_xor(true, Ordering::SeqCst) {
            cx.waker().wake_by_ref();
            return Poll::Pending;
        }
        self.ready = true;
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _: Request<String>) -> Self::Future {
        assert!(self.ready, "called without being polled ready");
        self.ready = false;
        self.calls.fetch_add(1, Ordering::SeqCst);
        ready(Ok(Response::new(String::new())))
    }
}

/// A memory store whose answer comes one poll late, like a remote store.
#[derive(Clone)]
struct Late(MemoryStore<ManualClock>);

struct LateFuture(Option<Decision>, bool);

impl Future for LateFuture {
    type Output = Result<Decision, StoreError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        if !self.1 {
            self.1 = true;
            cx.waker().wake_by_ref();
            return Poll::Pending;
        }
        Poll::Ready(
            self.0
                .take()
                .ok_or_else(|| StoreError::new("polled twice", None)),
        )
    }
}

impl Store<&'static str> for Late {
    type Binding = MemoryBinding<&'static str>;
    type Future = LateFuture;

    fn bind(&self, policy: &Policy) -> Self::Binding {
        self.0.bind(policy)
    }

    fn decide_cost_bound(
        &self,
        key: &'static str,
        binding: &Self::Binding,
        cost: u32,
    ) -> LateFuture {
        LateFuture(
            Some(
                self.0
                    .decide_cost_bound(key, binding, cost)
                    .into_inner()
                    .unwrap(),
            ),
            false,
        )
    }

    fn settle_bound(
        &self,
        key: &'static str,
        binding: &Self::Binding,
        admitted: &tower_sliding_window::Decision,
        cost: u32,
        used: u32,
    ) -> LateFuture {
        LateFuture(
            Some(
                self.0
                    .settle_bound(key, binding, admitted, cost, used)
                    .into_inner()
                    .unwrap(),
            ),
            false,
        )
    }

    fn peek_bound(&self, key: &'static str, binding: &Self::Binding) -> LateFuture {
        LateFuture(
            Some(self.0.peek_bound(key, binding).into_inner().unwrap()),
            false,
        )
    }
}

fn strict() -> (Strict, Arc<AtomicUsize>, Arc<AtomicUsize>) {
    let live = Arc::new(AtomicUsize::new(1));
    let calls = Arc::new(AtomicUsize::new(0));
    let service = Strict {
        ready: false,
        flip: Arc::new(AtomicBool::new(false)),
        live: Arc::clone(&live),
        calls: Arc::clone(&calls),
    };
    (service, live, calls)
}

fn key(_: &Request<String>) -> Option<&'static str> {
    Some("k")
}

#[tokio::test]
async fn poll_ready_is_never_skipped_with_a_store_that_answers_at_once() {
    let (inner, live, calls) = strict();
    let layer = SlidingWindowLayer::new(Limit::per_minute(3), key)
        .store(MemoryStore::with_clock(ManualClock::new()))
        .wrap_body();
    let mut svc = tower::Layer::layer(&layer, inner);
    let mut statuses = Vec::new();
    for _ in 0..5 {
        let response = svc
            .ready()
            .await
            .unwrap()
            .call(Request::new(String::new()))
            .await
            .unwrap();
        statuses.push(response.status().as_u16());
    }
    assert_eq!(statuses, [200, 200, 200, 429, 429]);
    assert_eq!(calls.load(Ordering::SeqCst), 3);
    drop(svc);
    assert_eq!(live.load(Ordering::SeqCst), 0, "no service leaked");
}

#[tokio::test]
async fn a_clone_is_called_only_after_being_polled_ready_with_a_late_store() {
    let (inner, live, calls) = strict();
    let clock = ManualClock::new();
    let layer = SlidingWindowLayer::new(Limit::per_minute(3), key)
        .store(Late(MemoryStore::with_clock(clock)))
        .wrap_body();
    let mut svc = tower::Layer::layer(&layer, inner);
    let mut statuses = Vec::new();
    for _ in 0..5 {
        let response = svc
            .ready()
            .await
            .unwrap()
            .call(Request::new(String::new()))
            .await
            .unwrap();
        statuses.push(response.status());
    }
    assert_eq!(statuses.iter().filter(|s| **s == StatusCode::OK).count(), 3);
    assert_eq!(calls.load(Ordering::SeqCst), 3);

    // A response future dropped before the store answered: the request was
    // judged (counted once) but the inner service is never called, and the
    // service it held is dropped with it.
    let clock_key_policy_fresh = SlidingWindowLayer::new(Limit::per_minute(2), key)
        .store(Late(MemoryStore::with_clock(ManualClock::new())))
        .wrap_body();
    let (inner, live2, calls2) = strict();
    let mut svc2 = tower::Layer::layer(&clock_key_policy_fresh, inner);
    let dropped = svc2
        .ready()
        .await
        .unwrap()
        .call(Request::new(String::new()));
    drop(dropped);
    assert_eq!(calls2.load(Ordering::SeqCst), 0);
    let second = svc2
        .ready()
        .await
        .unwrap()
        .call(Request::new(String::new()))
        .await
        .unwrap();
    assert_eq!(
        second.status(),
        StatusCode::OK,
        "the dropped request counted once, not twice"
    );
    let third = svc2
        .ready()
        .await
        .unwrap()
        .call(Request::new(String::new()))
        .await
        .unwrap();
    assert_eq!(third.status(), StatusCode::TOO_MANY_REQUESTS);
    drop(svc2);
    drop(svc);
    assert_eq!(live.load(Ordering::SeqCst), 0, "no service leaked");
    assert_eq!(live2.load(Ordering::SeqCst), 0, "no service leaked");
}

#[tokio::test]
async fn nothing_panics_on_hostile_keys_through_the_layer() {
    let layer = SlidingWindowLayer::new(Limit::per_second(1), |req: &Request<String>| {
        req.headers().get("x-key").map(|v| v.as_bytes().to_vec())
    })
    .store(MemoryStore::with_clock(ManualClock::new()))
    .wrap_body();
    let svc = tower::ServiceBuilder::new()
        .layer(layer)
        .service(tower::service_fn(|_: Request<String>| async {
            Ok::<_, Infallible>(Response::new(String::new()))
        }));
    for value in [&b"\xff\xfe\x00"[..], b"", b"{}:%", &[b'x'; 65_536][..]] {
        let mut request = Request::new(String::new());
        if let Ok(header) = http::HeaderValue::from_bytes(value) {
            request.headers_mut().insert("x-key", header);
        }
        let response = svc.clone().oneshot(request).await.unwrap();
        assert!(
            response.status() == 200 || response.status() == 400,
            "{:?}",
            response.status()
        );
    }
}
