//! In-flight caps, run through the real layer on every store: at most `n`
//! requests of a key running at once, freed however a request ends.

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body::Frame;
use http_body_util::BodyExt;
use tokio::sync::{mpsc, Semaphore};
use tower::util::BoxCloneService;
use tower::{service_fn, Layer, ServiceExt};
use tower_sliding_window::layer::ResponseBody;
use tower_sliding_window::{Algorithm, ManualClock, Policy, SlidingWindowLayer, Store};

use super::{at, client_key, policy, KeyFn};

/// A body fed through a channel: it streams until its sender is dropped.
pub struct Stream(mpsc::UnboundedReceiver<Bytes>);

impl http_body::Body for Stream {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        self.0
            .poll_recv(cx)
            .map(|data| data.map(|d| Ok(Frame::data(d))))
    }
}

/// What the handler behind the layer saw, and the gate that holds its
/// requests until the test lets them answer.
#[derive(Clone)]
struct Seen {
    running: Arc<AtomicUsize>,
    most: Arc<AtomicUsize>,
    gate: Arc<Semaphore>,
}

impl Default for Seen {
    fn default() -> Self {
        Self {
            running: Arc::default(),
            most: Arc::default(),
            gate: Arc::new(Semaphore::new(0)),
        }
    }
}

type Inner = BoxCloneService<Request<()>, Response<Stream>, Infallible>;
type Capped<St> = tower_sliding_window::layer::SlidingWindowWrapBody<Inner, KeyFn, St>;

/// A handler that answers at once, unless the request says `x-wait`
/// (wait at the gate) or `x-stream` (answer at once with a body that
/// streams until the sender handed out through `streams` is dropped).
fn capped<St: Store<String>>(
    store: St,
    policy: Policy,
    seen: &Seen,
    streams: mpsc::UnboundedSender<mpsc::UnboundedSender<Bytes>>,
) -> Capped<St> {
    let seen = seen.clone();
    let handler = service_fn(move |request: Request<()>| {
        let (seen, streams) = (seen.clone(), streams.clone());
        async move {
            let now = seen.running.fetch_add(1, Ordering::SeqCst) + 1;
            seen.most.fetch_max(now, Ordering::SeqCst);
            if request.headers().contains_key("x-wait") {
                seen.gate.acquire().await.unwrap().forget();
            }
            let (send, body) = mpsc::unbounded_channel();
            if request.headers().contains_key("x-stream") {
                streams.send(send).unwrap();
            }
            seen.running.fetch_sub(1, Ordering::SeqCst);
            Ok::<_, Infallible>(Response::new(Stream(body)))
        }
    });
    SlidingWindowLayer::with_policy(policy, client_key as KeyFn)
        .store(store)
        .wrap_body()
        .layer(BoxCloneService::new(handler))
}

fn request(client: &str, how: Option<&str>) -> Request<()> {
    let mut request = Request::builder().header("x-client", client);
    if let Some(how) = how {
        request = request.header(how, "1");
    }
    request.body(()).unwrap()
}

fn call<St: Store<String>>(
    svc: &Capped<St>,
    client: &str,
    how: Option<&str>,
) -> impl std::future::Future<Output = Response<ResponseBody<Stream>>> + Send + use<St> {
    let call = svc.clone().oneshot(request(client, how));
    async move { call.await.unwrap() }
}

/// Waits (a little real time, for remote stores) until `done` holds.
async fn until(what: &str, done: impl Fn() -> bool) {
    for _ in 0..2_000 {
        if done() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!("timed out waiting until {what}");
}

fn header(response: &Response<ResponseBody<Stream>>, name: &str) -> String {
    let value = response.headers().get(name);
    value.map_or(String::new(), |v| v.to_str().unwrap().to_owned())
}

/// 64 requests at once on one key under a cap of 4: the handler never sees
/// more than 4, and the other 60 get a 429 at once, before any ends.
pub async fn the_cap_holds_under_a_crowd<St: Store<String>>(store: St, clock: ManualClock) {
    at(&clock, 3.0);
    let seen = Seen::default();
    let (streams, _) = mpsc::unbounded_channel();
    let svc = capped(store, Policy::in_flight_only(4), &seen, streams);
    let (done, mut finished) = mpsc::unbounded_channel();
    for _ in 0..64 {
        let done = done.clone();
        let call = call(&svc, "crowd", Some("x-wait"));
        tokio::spawn(async move {
            let response = call.await;
            done.send((response.status(), header(&response, "retry-after")))
                .unwrap();
        });
    }
    for _ in 0..60 {
        let (status, retry_after) = finished.recv().await.unwrap();
        assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(retry_after, "1");
    }
    until("four are running", || {
        seen.running.load(Ordering::SeqCst) == 4
    })
    .await;
    assert_eq!(seen.most.load(Ordering::SeqCst), 4);
    seen.gate.add_permits(4);
    for _ in 0..4 {
        assert_eq!(finished.recv().await.unwrap().0, StatusCode::OK);
    }
    // Every slot came back.
    seen.gate.add_permits(4);
    for _ in 0..4 {
        assert_eq!(
            call(&svc, "crowd", Some("x-wait")).await.status(),
            StatusCode::OK
        );
    }
    assert_eq!(seen.most.load(Ordering::SeqCst), 4);
}

/// A streaming body holds its slot until it ends, or until it is dropped.
pub async fn a_stream_holds_its_slot_until_it_ends<St: Store<String>>(
    store: St,
    clock: ManualClock,
) {
    at(&clock, 3.0);
    let seen = Seen::default();
    let (streams, mut senders) = mpsc::unbounded_channel();
    let policy = policy(Algorithm::SlidingCounter, &[(100, 60)]).with_in_flight(1);
    let svc = capped(store, policy, &seen, streams);
    let streaming = call(&svc, "s", Some("x-stream")).await;
    assert_eq!(streaming.status(), StatusCode::OK);
    assert!(header(&streaming, "ratelimit-policy").contains("qu=\"concurrent-requests\""));
    let send = senders.recv().await.unwrap();
    let refused = call(&svc, "s", None).await;
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(header(&refused, "ratelimit"), "\"in-flight\";r=0");
    send.send(Bytes::from_static(b"chunk")).unwrap();
    drop(send);
    let body = streaming.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(&body[..], b"chunk");
    // Ended: the slot is free. This one is dropped half-way instead.
    let dropped = call(&svc, "s", Some("x-stream")).await;
    assert_eq!(dropped.status(), StatusCode::OK);
    let send = senders.recv().await.unwrap();
    assert_eq!(
        call(&svc, "s", None).await.status(),
        StatusCode::TOO_MANY_REQUESTS
    );
    drop(dropped);
    drop(send);
    until_admitted(&svc, "s").await;
}

/// Asks until a request of `client` is admitted: a remote store's release
/// may still be on its way when the body it freed is dropped.
async fn until_admitted<St: Store<String>>(svc: &Capped<St>, client: &str) {
    for _ in 0..400 {
        if call(svc, client, None).await.status() == StatusCode::OK {
            return;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!("the slot was never freed");
}

/// A request whose future is dropped before it answers frees its slot.
pub async fn a_cancelled_request_frees_its_slot<St: Store<String>>(store: St, clock: ManualClock) {
    at(&clock, 3.0);
    let seen = Seen::default();
    let (streams, _) = mpsc::unbounded_channel();
    let svc = capped(store, Policy::in_flight_only(1), &seen, streams);
    let hung = tokio::spawn(call(&svc, "c", Some("x-wait")));
    until("the request runs", || {
        seen.running.load(Ordering::SeqCst) == 1
    })
    .await;
    assert_eq!(
        call(&svc, "c", None).await.status(),
        StatusCode::TOO_MANY_REQUESTS
    );
    hung.abort();
    let _ = hung.await;
    until_admitted(&svc, "c").await;
}

/// A request the cap refuses spends no rate quota, and one a window
/// refuses takes no slot.
pub async fn cap_and_windows_are_all_or_nothing<St: Store<String>>(store: St, clock: ManualClock) {
    at(&clock, 3.0);
    let seen = Seen::default();
    let (streams, mut senders) = mpsc::unbounded_channel();
    let policy = policy(Algorithm::SlidingLog, &[(3, 60)]).with_in_flight(1);
    let svc = capped(store, policy, &seen, streams);
    let held = call(&svc, "a", Some("x-stream")).await;
    let send = senders.recv().await.unwrap();
    for _ in 0..5 {
        let refused = call(&svc, "a", None).await;
        assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(header(&refused, "ratelimit"), "\"in-flight\";r=0");
    }
    drop((held, send));
    until_admitted(&svc, "a").await;
    // Two of three used: one more fits, then the window refuses.
    let third = call(&svc, "a", None).await;
    assert_eq!(third.status(), StatusCode::OK);
    assert!(
        header(&third, "ratelimit").contains("r=0"),
        "{}",
        header(&third, "ratelimit")
    );
    drop(third);
    let by_window = call(&svc, "a", None).await;
    assert_eq!(by_window.status(), StatusCode::TOO_MANY_REQUESTS);
    assert!(header(&by_window, "ratelimit").starts_with("\"60s\""));
    // The window's refusal took no slot: once it slides, a request fits.
    at(&clock, 64.0);
    assert_eq!(call(&svc, "a", None).await.status(), StatusCode::OK);
}

/// A client that waits for each response to end before sending the next
/// is never refused by its own finished request.
pub async fn a_sequential_client_is_never_refused<St: Store<String>>(
    store: St,
    clock: ManualClock,
) {
    at(&clock, 3.0);
    let seen = Seen::default();
    let (streams, _) = mpsc::unbounded_channel();
    let svc = capped(store, Policy::in_flight_only(1), &seen, streams);
    for i in 0..40 {
        let response = call(&svc, "seq", None).await;
        assert_eq!(response.status(), StatusCode::OK, "request {i}");
        response.into_body().collect().await.unwrap();
    }
}

/// A request of no cost takes a slot too, and records nothing in the
/// windows; a peek (`Store::peek`) takes none.
pub async fn a_request_of_no_cost_takes_a_slot<St: Store<String>>(store: St, clock: ManualClock) {
    at(&clock, 3.0);
    let policy = policy(Algorithm::SlidingCounter, &[(5, 60)]).with_in_flight(1);
    let key = || "free".to_owned();
    let peeked = store.peek(key(), &policy).await.unwrap();
    assert!(peeked.is_allowed() && !peeked.holds_slot());
    let held = store.decide_cost(key(), &policy, 0).await.unwrap();
    assert!(held.is_allowed() && held.holds_slot(), "{held:?}");
    assert_eq!(
        held.remaining(),
        4,
        "told as a peek: what one unit would leave"
    );
    let refused = store.decide_cost(key(), &policy, 0).await.unwrap();
    assert_eq!(refused.origin(), tower_sliding_window::Origin::InFlight);
    assert_eq!(
        store.decide(key(), &policy).await.unwrap().origin(),
        refused.origin()
    );
    store.release_bound(key(), &store.bind(&policy), &held);
    for _ in 0..400 {
        let again = store.decide(key(), &policy).await.unwrap();
        if again.is_allowed() {
            assert_eq!(again.remaining(), 4, "one unit recorded, by this request");
            return;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!("the slot was never freed");
}
