//! The `tracing` events of refusals, labelled by policy and never by key:
//! a refusal, and a request shadow mode lets through that enforcement would
//! refuse, each say which they are.
#![cfg(feature = "tracing")]

use std::convert::Infallible;
use std::fmt::Debug;
use std::sync::{Arc, Mutex};

use http::{Request, Response};
use tower::{service_fn, ServiceBuilder, ServiceExt};
use tower_sliding_window::{Limit, ManualClock, MemoryStore, SlidingWindowLayer};
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Metadata, Subscriber};

/// Each event's fields, as `name=value` text.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<String>>>);

struct Fields(Vec<String>);

impl Visit for Fields {
    fn record_debug(&mut self, field: &Field, value: &dyn Debug) {
        self.0.push(format!("{}={value:?}", field.name()));
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.push(format!("{}={value}", field.name()));
    }
}

impl Subscriber for Captured {
    fn enabled(&self, _: &Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, _: &Attributes<'_>) -> Id {
        Id::from_u64(1)
    }
    fn record(&self, _: &Id, _: &Record<'_>) {}
    fn record_follows_from(&self, _: &Id, _: &Id) {}
    fn event(&self, event: &Event<'_>) {
        let mut fields = Fields(Vec::new());
        event.record(&mut fields);
        self.0.lock().unwrap().push(fields.0.join(" "));
    }
    fn enter(&self, _: &Id) {}
    fn exit(&self, _: &Id) {}
}

fn key(_: &Request<()>) -> Option<&'static str> {
    Some("secret-client-key")
}

#[tokio::test]
async fn refusals_and_shadow_refusals_are_traced_by_policy() {
    let captured = Captured::default();
    let _guard = tracing::subscriber::set_default(captured.clone());
    let ok = || service_fn(|_: Request<()>| async { Ok::<_, Infallible>(Response::new(())) });
    let layer = || {
        SlidingWindowLayer::new(Limit::per_minute(1), key)
            .store(MemoryStore::with_clock(ManualClock::new()))
            .wrap_body()
    };
    let enforcing = ServiceBuilder::new()
        .layer(layer().named("login"))
        .service(ok());
    let shadow = ServiceBuilder::new()
        .layer(layer().named("rollout").shadow_mode(true))
        .service(ok());
    for _ in 0..2 {
        enforcing.clone().oneshot(Request::new(())).await.unwrap();
        shadow.clone().oneshot(Request::new(())).await.unwrap();
    }
    let events = captured.0.lock().unwrap().clone();
    assert_eq!(events.len(), 2, "{events:?}");
    assert!(events[0].contains("policy=login") && events[0].contains("outcome=rejected"));
    assert!(events[1].contains("policy=rollout") && events[1].contains("outcome=shadow_rejected"));
    assert!(events[1].contains("shadow mode"));
    assert!(events
        .iter()
        .all(|event| !event.contains("secret-client-key")));
}
