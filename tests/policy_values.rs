//! A memory store keeps a window per (store, policy value, key): equal
//! policies built apart share it, names keep it apart, each store has its
//! own, and a map is dropped only once nothing binds it and its keys have
//! gone idle.

use std::time::Duration;

use tower_sliding_window::{Algorithm, Limit, ManualClock, MemoryStore, Policy};

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
fn an_unbound_map_goes_once_its_keys_are_idle_and_never_before() {
    let clock = ManualClock::new();
    let store = MemoryStore::with_clock(clock.clone());
    let old = two_per_minute().named("before the reload");
    for key in 0..100u64 {
        assert!(store.decide_now(key, &old).is_allowed());
    }
    // No binding holds the map now, but its keys are live: a new policy
    // bound later leaves them be.
    clock.advance(Duration::from_secs(30));
    assert_eq!(accepted(&store, &two_per_minute(), 0, 1), 1);
    assert_eq!(store.key_count::<u64>(), 101);
    assert_eq!(accepted(&store, &old, 5, 2), 1, "its windows are intact");

    // Held by a binding, a map stays whatever its keys do; the unnamed
    // policy's map, idle and unbound, goes.
    let held = store.bind::<u64>(&old);
    clock.advance(Duration::from_secs(600));
    assert!(store
        .decide_now(1u64, &two_per_minute().named("another"))
        .is_allowed());
    assert_eq!(store.key_count::<u64>(), 101);
    drop(held);

    // Idle and unbound: it goes when the next new policy is bound.
    clock.advance(Duration::from_secs(600));
    assert!(store
        .decide_now(1u64, &two_per_minute().named("a third"))
        .is_allowed());
    assert_eq!(store.key_count::<u64>(), 1);
    assert_eq!(
        accepted(&store, &old, 5, 3),
        2,
        "a fresh window, as it was idle"
    );
}
