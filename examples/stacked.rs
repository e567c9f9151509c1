//! Per-second over per-minute, two ways: both limits inside one layer
//! (all-or-nothing) and as two stacked layers (each counting on its own),
//! on the same traffic, printing where they differ.
//!
//! Run with `cargo run --example stacked`.

use std::convert::Infallible;
use std::time::Duration;

use http::{Request, Response};
use tower::{service_fn, Service, ServiceBuilder, ServiceExt};
use tower_sliding_window::{Limit, ManualClock, MemoryStore, SlidingWindowLayer};

fn client(_: &Request<()>) -> Option<&'static str> {
    Some("client")
}

async fn status<S, B>(svc: &mut S) -> u16
where
    S: Service<Request<()>, Response = Response<B>, Error = Infallible>,
{
    let ready = svc.ready().await.expect("infallible");
    ready
        .call(Request::new(()))
        .await
        .expect("infallible")
        .status()
        .as_u16()
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let clock = ManualClock::new();
    let store = MemoryStore::with_clock(clock.clone());
    let handler =
        || service_fn(|_: Request<()>| async { Ok::<_, Infallible>(Response::new(String::new())) });

    let mut one_layer = ServiceBuilder::new()
        .layer(
            SlidingWindowLayer::new(Limit::per_second(2), client)
                .limit(Limit::per_minute(6))
                .store(store.clone())
                .wrap_body(),
        )
        .service(handler());
    let mut two_layers = ServiceBuilder::new()
        .layer(
            SlidingWindowLayer::new(Limit::per_minute(6), client)
                .store(store.clone())
                .wrap_body(),
        )
        .layer(
            SlidingWindowLayer::new(Limit::per_second(2), client)
                .store(store)
                .wrap_body(),
        )
        .service(handler());

    println!("limits: 2 per second and 6 per minute; a client sends bursts of 4 every 2 s\n");
    println!(
        "{:>6}  {:<22} {:<22}",
        "time", "one layer", "two stacked layers"
    );
    let mut totals = (0, 0);
    for second in (0..12).step_by(2) {
        clock.set(Duration::from_secs(second));
        let mut row = (Vec::new(), Vec::new());
        for _ in 0..4 {
            let a = status(&mut one_layer).await;
            let b = status(&mut two_layers).await;
            totals.0 += usize::from(a == 200);
            totals.1 += usize::from(b == 200);
            row.0.push(a.to_string());
            row.1.push(b.to_string());
        }
        let marker = if row.0 != row.1 { "  <- differ" } else { "" };
        println!(
            "{:>5}s  {:<22} {:<22}{marker}",
            second,
            row.0.join(" "),
            row.1.join(" ")
        );
    }
    println!(
        "\naccepted: one layer {}, two layers {}",
        totals.0, totals.1
    );
    println!("One layer records a request in both windows only if both accept it.");
    println!("Stacked, the outer per-minute layer counts every request that reaches it,");
    println!(
        "including those the inner per-second layer then refuses, so its quota runs out sooner."
    );
}
