//! Two clients, each with a layer of its own, share one limit through
//! Redis and wait their turns: together they never exceed it. Real time
//! (the store judges on Redis's clock), with a window short enough to keep
//! the test near a second.
#![cfg(feature = "redis")]

#[path = "support/redis_server.rs"]
mod redis_server;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use redis_server::{shared_url, unique_prefix};
use tower::{service_fn, BoxError, ServiceBuilder, ServiceExt};
use tower_sliding_window::{Algorithm, Limit, RedisStore, SlidingWindowLayer};

const MAX: usize = 3;
const WINDOW: Duration = Duration::from_millis(400);
/// How much later than Redis judged a call the call may be seen to start:
/// a reply's trip back and a loaded machine's scheduling.
const SLACK: Duration = Duration::from_millis(40);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_clients_waiting_on_one_redis_limit_never_exceed_it() {
    let prefix = unique_prefix("waiting");
    let started: Arc<Mutex<Vec<Instant>>> = Arc::default();
    let mut calls = tokio::task::JoinSet::new();
    for client in 0..2 {
        let store = RedisStore::connect(&shared_url())
            .await
            .unwrap_or_else(|e| panic!("this test needs a Redis (set REDIS_URL): {e}"))
            .with_prefix(&prefix);
        let layer = SlidingWindowLayer::new(Limit::new(MAX as u32, WINDOW).unwrap(), |_: &u32| {
            Some("provider")
        })
        .algorithm(Algorithm::SlidingLog)
        .store(store)
        .refuse_with_error()
        .wait_up_to(Duration::from_secs(10));
        let started = Arc::clone(&started);
        let provider = service_fn(move |call: u32| {
            started.lock().unwrap().push(Instant::now());
            async move { Ok::<_, BoxError>(call) }
        });
        let svc = ServiceBuilder::new().layer(layer).service(provider);
        for call in 0..5 {
            calls.spawn(svc.clone().oneshot(client * 10 + call));
        }
    }
    while let Some(call) = calls.join_next().await {
        call.unwrap()
            .expect("every call waits for its turn, none fails");
    }

    let mut started = started.lock().unwrap().clone();
    started.sort();
    assert_eq!(started.len(), 10);
    // Any MAX + 1 calls in a row span more than a window: no window of
    // Redis's time held more than MAX of them.
    for run in started.windows(MAX + 1) {
        let span = run[MAX] - run[0];
        assert!(span + SLACK > WINDOW, "{} calls within {span:?}", MAX + 1);
    }
    // Ten calls at three a window take three windows at least.
    assert!(started[9] - started[0] + SLACK > 3 * WINDOW);
}
