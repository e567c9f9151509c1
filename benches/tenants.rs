//! Per-customer limits in the memory store, through the layer: 100,000
//! tenants, one key each, under a plan that builds each request's policy
//! from data. Either every tenant gets the same limits (one policy value
//! shared by all) or each its own (a policy value per tenant). Time per
//! request in paired rounds, and the heap each setup grows by per tenant,
//! counted by a wrapping global allocator.
//!
//! `cargo bench --bench tenants`.

// Its criterion helpers serve the other benches.
#[allow(dead_code)]
mod report;

#[path = "../tests/support/live_bytes.rs"]
mod live_bytes;

use std::convert::Infallible;
use std::hint::black_box;
use std::time::{Duration, Instant};

use http::{Request, Response};
use tower::{service_fn, Layer, Service, ServiceExt};
use tower_sliding_window::{Algorithm, Limit, MemoryStore, Policy, SlidingWindowLayer};

const TENANTS: u64 = 100_000;

/// A limit no benchmark reaches, different for each tenant if `own`.
fn policy(tenant: u64, own: bool) -> Policy {
    let max = 1_000_000_000 + if own { tenant as u32 } else { 0 };
    let limit = Limit::new(max, Duration::from_secs(60)).unwrap();
    Policy::new(Algorithm::SlidingCounter, [limit]).unwrap()
}

/// A service keyed by the tenant number the request carries, its policy
/// built per request by the plan. The layer's own policy is neither, so
/// that both setups take the plan's path.
fn service(
    own: bool,
) -> impl Service<Request<u64>, Response = Response<impl Sized>, Error = Infallible> + Clone {
    let hello = service_fn(|_: Request<u64>| async { Ok::<_, Infallible>(Response::new(())) });
    SlidingWindowLayer::new(Limit::per_second(1), |request: &Request<u64>| {
        Some(*request.body())
    })
    .store(MemoryStore::new())
    .plan(move |tenant: &u64| policy(*tenant, own))
    .rate_limit_headers(false)
    .wrap_body()
    .layer(hello)
}

/// The tenants in a scattered order, as independent clients arrive.
fn scattered(i: u64) -> u64 {
    i.wrapping_mul(0x9E37_79B9) % TENANTS
}

fn main() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let setups = [("shared policy", false), ("a policy per tenant", true)];
    let mut grown = Vec::new();
    let mut services = Vec::new();
    for (name, own) in setups {
        let before = live_bytes::live_bytes();
        let mut svc = service(own);
        runtime.block_on(async {
            for tenant in 0..TENANTS {
                let response = svc.ready().await.unwrap().call(Request::new(tenant)).await;
                assert_eq!(response.unwrap().status(), 200);
            }
        });
        grown.push((
            name,
            (live_bytes::live_bytes() - before) as f64 / TENANTS as f64,
        ));
        services.push((name, svc));
    }

    let mut batches: Vec<(&str, report::Batch)> = services
        .into_iter()
        .map(|(name, mut svc)| {
            let runtime = &runtime;
            let mut i = 0u64;
            let run: report::Batch = Box::new(move |iters| {
                let start = Instant::now();
                runtime.block_on(async {
                    for _ in 0..iters {
                        i += 1;
                        let request = Request::new(black_box(scattered(i)));
                        let response = svc.ready().await.unwrap().call(request).await;
                        black_box(response.unwrap());
                    }
                });
                start.elapsed()
            });
            (name, run)
        })
        .collect();
    report::paired(
        "100k tenants, memory store: time per request",
        &mut batches,
        21,
        Duration::from_millis(20),
        TENANTS,
    );

    let mut table = report::Table::new(
        "100k tenants, memory store: heap per tenant",
        "Bytes the heap grew by per tenant, one key each, once every tenant was judged.",
        &["", "bytes a tenant", "over shared"],
    );
    for (name, bytes) in &grown {
        table.row(&[
            name.to_string(),
            format!("{bytes:.0}"),
            format!("{:+.0}", bytes - grown[0].1),
        ]);
    }
    table.finish();
}
