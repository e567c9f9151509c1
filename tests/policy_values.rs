//! A memory store keeps a window per (store, policy value, key): equal
//! policies built apart share it, names keep it apart, each store has its
//! own, keys of a policy no longer used go once idle, and the cap on live
//! keys is the store's, whatever the policies and key types.

use std::time::Duration;

use tower_sliding_window::{Algorithm, Limit, ManualClock, MemoryStore, Origin, Policy};

fn two_per_minute() -> Policy {
    Policy::new(
        Algorithm::SlidingCounter,
        [Limit::new(2, Duration::from_secs(60)).unwrap()],
    )
    .unwrap()
}

fn accepted(store: &MemoryStore<ManualClock>, policy: &Policy, key: u64, tries: usize) -> usize {
    (0..tries)
        .filter(|_| store.decide_now(key, policy).is_allowed())
        .count()
}

#[test]
fn equal_policies_built_apart_share_one_window_and_names_keep_them_apart() {
    let store = MemoryStore::with_clock(ManualClock::new());
    assert_eq!(accepted(&store, &two_per_minute(), 7, 1), 1);
    assert_eq!(
        accepted(&store, &two_per_minute(), 7, 3),
        1,
        "the same value"
    );
    assert_eq!(accepted(&store, &two_per_minute().named("login"), 7, 3), 2);
    assert_eq!(accepted(&store, &two_per_minute().named("login"), 7, 1), 0);
    assert_eq!(store.key_count::<u64>(), 2, "one key under each value");
}

#[test]
fn a_policy_built_for_every_request_limits_like_one_built_once() {
    let store = MemoryStore::with_clock(ManualClock::new());
    let limits = [("acme", 5u32), ("initech", 2)];
    for (customer, max) in limits {
        let built_now = || {
            let limit = Limit::new(max, Duration::from_secs(60)).unwrap();
            Policy::new(Algorithm::SlidingLog, [limit]).unwrap()
        };
        let passed = (0..10)
            .filter(|_| store.decide_now(customer, &built_now()).is_allowed())
            .count();
        assert_eq!(passed, max as usize, "{customer}");
    }
    assert_eq!(store.key_count::<&str>(), 2);
}

#[test]
fn one_policy_keeps_a_window_in_each_of_many_stores() {
    let policy = two_per_minute();
    let stores: Vec<_> = (0..5)
        .map(|_| MemoryStore::with_clock(ManualClock::new()))
        .collect();
    for store in &stores {
        assert_eq!(accepted(store, &policy, 1, 1), 1);
        assert!(store.decide_now("text key", &policy).is_allowed());
    }
    for (index, store) in stores.iter().enumerate() {
        assert_eq!(accepted(store, &policy, 1, 3), 1, "store {index}");
        assert_eq!(store.key_count::<u64>(), 1, "store {index}");
        assert_eq!(store.key_count::<&str>(), 1, "store {index}");
    }
}

#[test]
fn keys_of_a_policy_no_longer_used_go_once_idle_and_never_before() {
    let clock = ManualClock::new();
    let store = MemoryStore::with_clock(clock.clone());
    let old = two_per_minute().named("before the reload");
    for key in 0..100u64 {
        assert!(store.decide_now(key, &old).is_allowed());
    }
    // A reload: every later request is judged by another policy, whose
    // keys the store keeps in another form (a penalty needs the whole
    // state, where the old policy's keys are their records alone). The old
    // policy's keys are live, and stay through a sweep.
    let new = two_per_minute()
        .named("after the reload")
        .with_penalty(Duration::from_secs(1));
    clock.advance(Duration::from_secs(30));
    for key in 1_000..3_000u64 {
        assert!(store.decide_now(key, &new).is_allowed());
    }
    assert_eq!(store.key_count::<u64>(), 2_100);
    assert_eq!(accepted(&store, &old, 5, 2), 1, "its windows are intact");

    // Idle, they go at the next sweep of their shards, which requests for
    // any policy and key of the same type run.
    clock.advance(Duration::from_secs(600));
    for key in 1_000..3_000u64 {
        assert!(store.decide_now(key, &new).is_allowed());
    }
    assert_eq!(store.key_count::<u64>(), 2_000);
    assert_eq!(
        accepted(&store, &old, 5, 3),
        2,
        "a fresh window, as it was idle"
    );
}

/// `with_max_keys` caps the store: tenants with policies of their own, and
/// keys of other types, all draw on the one budget.
#[test]
fn the_key_cap_holds_across_policies_and_key_types() {
    let clock = ManualClock::new();
    let store = MemoryStore::with_clock(clock.clone())
        .with_max_keys(1_000)
        .unwrap();
    let tenant = |i: u32| {
        let limit = Limit::new(10 + i, Duration::from_secs(60)).unwrap();
        Policy::new(Algorithm::SlidingCounter, [limit]).unwrap()
    };
    let mut admitted = 0;
    let mut full = 0;
    for i in 0..50 {
        for key in 0..100u64 {
            let decision = store.decide_now(key, &tenant(i));
            match decision.origin() {
                Origin::StoreFull => {
                    assert!(!decision.is_allowed());
                    assert!(decision.retry_after() > Duration::ZERO);
                    full += 1;
                }
                _ => admitted += 1,
            }
        }
    }
    assert_eq!((admitted, full), (1_000, 4_000));
    assert_eq!(store.key_count::<u64>(), 1_000);
    // Another key type and another algorithm find the store as full.
    let log = Policy::new(Algorithm::SlidingLog, [Limit::per_minute(5)]).unwrap();
    assert_eq!(store.decide_now("text", &log).origin(), Origin::StoreFull);
    // Known keys are still judged, and count.
    assert_eq!(accepted(&store, &tenant(0), 0, 20), 9);

    // Once the keys are idle, new ones find room again.
    clock.advance(Duration::from_secs(200));
    assert!(store.decide_now("text", &log).is_allowed());
    for key in 0..999u64 {
        assert!(store.decide_now(key, &tenant(49)).is_allowed(), "key {key}");
    }
    assert_eq!(
        store.decide_now(5_000u64, &tenant(49)).origin(),
        Origin::StoreFull
    );
}
