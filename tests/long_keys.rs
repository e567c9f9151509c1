//! Keys a client chooses cost bounded memory: 20,000 distinct 64 KB
//! `x-api-key` values through `HeaderKey` and the layer's own store, with
//! the live heap measured before and after.
//!
//! The only test in its binary, because it counts the heap of the whole
//! process with a wrapping allocator.

use std::convert::Infallible;

use http::{Request, Response, StatusCode};
use tower::{service_fn, ServiceExt};
use tower_layer::Layer;
use tower_sliding_window::extract::HeaderKey;
use tower_sliding_window::{Limit, SlidingWindowLayer};

#[path = "support/live_bytes.rs"]
mod live_bytes;

use live_bytes::live_bytes;

const KEYS: usize = 20_000;
const VALUE_LEN: usize = 64 * 1024;

/// A distinct 64 KB value for each `i`, differing from the others in its
/// last bytes only, so that a key keeping a prefix would merge them.
fn long_value(i: usize) -> String {
    format!("{}{i:08}", "a".repeat(VALUE_LEN - 8))
}

#[tokio::test(flavor = "current_thread")]
async fn twenty_thousand_64_kb_keys_cost_at_most_1_kb_each() {
    let layer =
        SlidingWindowLayer::new(Limit::per_minute(100), HeaderKey::new("x-api-key").unwrap())
            .wrap_body();
    let service = layer.layer(service_fn(|_: Request<()>| async {
        Ok::<_, Infallible>(Response::new(()))
    }));
    let status = |value: &str| {
        let request = Request::get("/")
            .header("x-api-key", value)
            .body(())
            .unwrap();
        let service = service.clone();
        async move { service.oneshot(request).await.unwrap().status() }
    };
    // Warm: the policy's map and the store's first allocations.
    assert_eq!(status("warm").await, StatusCode::OK);

    let before = live_bytes();
    for i in 0..KEYS {
        assert_eq!(status(&long_value(i)).await, StatusCode::OK);
    }
    let per_key = (live_bytes() - before) / KEYS as isize;
    println!("{KEYS} distinct {VALUE_LEN}-byte keys: {per_key} live heap bytes a key");
    assert!(per_key <= 1024, "{per_key} bytes a key");

    // Each value kept a window of its own, of 100 a minute.
    for _ in 1..100 {
        assert_eq!(status(&long_value(0)).await, StatusCode::OK);
    }
    assert_eq!(status(&long_value(0)).await, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(status(&long_value(1)).await, StatusCode::OK);
}
