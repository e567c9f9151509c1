//! `CasStore` over a service of the test's own: names, expiry, a write
//! beaten by another instance, contention without end, and the service's
//! errors. The conformance suite runs it too (tests/conformance).

#[path = "support/bytes_store.rs"]
mod bytes_store;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes_store::BytesMap;
use tower_sliding_window::{
    Algorithm, CasStore, Clock, CompareAndSwap, KeyState, Limit, ManualClock, Policy, Store,
    StoreError, StoreErrorKind,
};

fn one_a_minute() -> Policy {
    Policy::new(Algorithm::SlidingLog, [Limit::per_minute(1)]).unwrap()
}

#[tokio::test]
async fn a_key_is_named_by_prefix_key_and_policy_and_expires_when_idle() {
    let clock = ManualClock::new();
    let map = BytesMap::new(clock.clone());
    let store = CasStore::with_clock(map.clone(), clock.clone()).with_prefix("app");
    let policy = one_a_minute().named("free");
    assert!(store
        .decide("alice".to_owned(), &policy)
        .await
        .unwrap()
        .is_allowed());
    assert_eq!(map.names(), ["app:{alice}:free/l1/60s"]);
    let bytes = map.get("app:{alice}:free/l1/60s").unwrap();
    assert_eq!(
        KeyState::from_bytes(&bytes)
            .unwrap()
            .idle_after(&policy, clock.now()),
        Duration::from_micros(60_000_001)
    );
    // Kept five seconds past the window, then gone: the key is fresh again.
    clock.set(Duration::from_secs(65));
    assert!(map.get("app:{alice}:free/l1/60s").is_some());
    clock.set(Duration::from_secs(66));
    assert!(map.get("app:{alice}:free/l1/60s").is_none());
    assert!(store
        .decide("alice".to_owned(), &policy)
        .await
        .unwrap()
        .is_allowed());
}

/// A service on which another instance records a request for the key
/// just before this one's first write.
#[derive(Clone)]
struct Racing {
    map: BytesMap,
    raced: Arc<AtomicBool>,
    policy: Policy,
}

impl CompareAndSwap for Racing {
    async fn load(&self, name: &str) -> Result<Option<Vec<u8>>, StoreError> {
        self.map.load(name).await
    }

    async fn swap(
        &self,
        name: &str,
        old: Option<&[u8]>,
        new: Vec<u8>,
        ttl: Duration,
    ) -> Result<bool, StoreError> {
        if !self.raced.swap(true, Ordering::Relaxed) {
            let mut theirs = KeyState::new(self.policy.algorithm());
            assert!(theirs.decide(&self.policy, Duration::ZERO, 1).is_allowed());
            assert!(self.map.swap(name, None, theirs.to_bytes(), ttl).await?);
        }
        self.map.swap(name, old, new, ttl).await
    }
}

#[tokio::test]
async fn a_write_beaten_by_another_instance_is_judged_again_on_theirs() {
    let clock = ManualClock::new();
    let map = BytesMap::new(clock.clone());
    let policy = one_a_minute();
    let racing = Racing {
        map: map.clone(),
        raced: Arc::default(),
        policy: policy.clone(),
    };
    let store = CasStore::with_clock(racing, clock);
    let decision = store.decide("bob".to_owned(), &policy).await.unwrap();
    assert!(
        !decision.is_allowed(),
        "the other instance took the only unit: {decision:?}"
    );
    assert_eq!(map.beaten.load(Ordering::Relaxed), 1);
}

/// A service where every write loses, or every call fails.
#[derive(Clone)]
enum Broken {
    AlwaysBeaten,
    TimesOut,
}

impl CompareAndSwap for Broken {
    async fn load(&self, _: &str) -> Result<Option<Vec<u8>>, StoreError> {
        match self {
            Broken::AlwaysBeaten => Ok(None),
            Broken::TimesOut => {
                Err(StoreError::new("no answer", None).with_kind(StoreErrorKind::Timeout))
            }
        }
    }

    async fn swap(
        &self,
        _: &str,
        _: Option<&[u8]>,
        _: Vec<u8>,
        _: Duration,
    ) -> Result<bool, StoreError> {
        Ok(false)
    }
}

#[tokio::test]
async fn a_key_contended_without_end_or_a_failing_service_is_an_error() {
    let policy = one_a_minute();
    let store = CasStore::with_clock(Broken::AlwaysBeaten, ManualClock::new());
    let error = store.decide("carol".to_owned(), &policy).await.unwrap_err();
    assert_eq!(error.kind(), StoreErrorKind::Other);
    assert!(error.to_string().contains("16 attempts"), "{error}");

    let store = CasStore::with_clock(Broken::TimesOut, ManualClock::new());
    let error = store.decide("carol".to_owned(), &policy).await.unwrap_err();
    assert_eq!(error.kind(), StoreErrorKind::Timeout);
    let error = store.peek("carol".to_owned(), &policy).await.unwrap_err();
    assert_eq!(error.kind(), StoreErrorKind::Timeout);
}

#[tokio::test]
async fn bytes_that_are_no_state_are_a_malformed_error_not_a_fresh_key() {
    let clock = ManualClock::new();
    let map = BytesMap::new(clock.clone());
    let policy = one_a_minute();
    assert!(map
        .swap(
            "tsw:{dave}:l1/60s",
            None,
            b"garbage".to_vec(),
            Duration::from_secs(60)
        )
        .await
        .unwrap());
    let store = CasStore::with_clock(map, clock);
    let error = store.decide("dave".to_owned(), &policy).await.unwrap_err();
    assert_eq!(error.kind(), StoreErrorKind::Malformed);
}

/// A slot held past its lease is renewed while its store lives; one whose
/// store is gone (a crashed instance) ends with its lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn held_slots_are_renewed_and_a_gone_instances_expire() {
    const LEASE: Duration = Duration::from_millis(300);
    let clock = ManualClock::new();
    let map = BytesMap::new(clock.clone());
    let store = CasStore::with_clock(map.clone(), clock.clone()).with_lease(LEASE);
    let policy = Policy::in_flight_only(1);
    let key = || "k".to_owned();
    let held = store.decide(key(), &policy).await.unwrap();
    assert!(held.holds_slot());
    // Renewed at 200 ms (a renewal every 100 ms of real time), it outlives
    // its first expiry at 300 ms.
    clock.advance(Duration::from_millis(200));
    tokio::time::sleep(Duration::from_millis(350)).await;
    clock.advance(Duration::from_millis(200));
    let refused = store.decide(key(), &policy).await.unwrap();
    assert_eq!(refused.origin(), tower_sliding_window::Origin::InFlight);
    store.release_bound(key(), &Store::<String>::bind(&store, &policy), &held);
    // Another instance takes the slot and dies: nobody renews it.
    let gone = CasStore::with_clock(map.clone(), clock.clone()).with_lease(LEASE);
    let mut taken = gone.decide(key(), &policy).await.unwrap();
    for _ in 0..100 {
        if taken.holds_slot() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
        taken = gone.decide(key(), &policy).await.unwrap();
    }
    assert!(taken.holds_slot(), "the release landed");
    drop(gone);
    assert!(!store.decide(key(), &policy).await.unwrap().is_allowed());
    clock.advance(LEASE + Duration::from_millis(1));
    assert!(store.decide(key(), &policy).await.unwrap().is_allowed());
}
