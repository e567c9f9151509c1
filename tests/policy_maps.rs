//! A memory store keeps each policy's keys apart and ties their life to the
//! policy's: clones and named copies share windows, a dropped policy takes
//! its keys with it, and one policy used with many stores keeps a window in
//! each.

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
fn clones_and_named_copies_share_one_window() {
    let store = MemoryStore::with_clock(ManualClock::new());
    let policy = two_per_minute();
    assert_eq!(accepted(&store, &policy, 7, 1), 1);
    assert_eq!(accepted(&store, &policy.clone(), 7, 1), 1);
    assert_eq!(accepted(&store, &policy.clone().named("renamed"), 7, 3), 0);
    assert_eq!(store.key_count::<u64>(), 1, "one key, counted once");
}

#[test]
fn dropping_the_last_clone_of_a_policy_drops_its_keys() {
    let store = MemoryStore::with_clock(ManualClock::new());
    let kept = two_per_minute();
    let dropped = two_per_minute();
    for key in 0..100u64 {
        store.decide_now(key, &kept);
        store.decide_now(key, &dropped);
    }
    assert_eq!(store.key_count::<u64>(), 200);
    let copy = dropped.clone();
    drop(dropped);
    assert_eq!(store.key_count::<u64>(), 200, "a clone still holds them");
    drop(copy);
    assert_eq!(store.key_count::<u64>(), 100);
    assert_eq!(
        accepted(&store, &kept, 0, 2),
        1,
        "the live policy's window is intact"
    );
}

#[test]
fn one_policy_keeps_a_window_in_each_of_many_stores() {
    let policy = two_per_minute();
    // More stores than a policy finds without a lock, and several key types.
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
fn a_named_copy_made_after_the_original_was_used_finds_its_window_in_a_busy_store() {
    let policy = two_per_minute();
    let stores: Vec<_> = (0..3)
        .map(|_| MemoryStore::with_clock(ManualClock::new()))
        .collect();
    for store in &stores {
        assert_eq!(accepted(store, &policy, 9, 1), 1);
    }
    let named = policy.clone().named("late");
    for (index, store) in stores.iter().enumerate() {
        assert_eq!(accepted(store, &named, 9, 1), 1, "store {index}");
        assert_eq!(accepted(store, &policy, 9, 1), 0, "store {index}");
    }
    drop(policy);
    for (index, store) in stores.iter().enumerate() {
        assert_eq!(
            accepted(store, &named, 9, 1),
            0,
            "store {index}: the window outlives the original"
        );
    }
}

#[test]
fn naming_the_only_handle_keeps_its_windows() {
    let store = MemoryStore::with_clock(ManualClock::new());
    let policy = two_per_minute();
    assert_eq!(accepted(&store, &policy, 3, 2), 2);
    let policy = policy.named("renamed");
    assert_eq!(accepted(&store, &policy, 3, 1), 0);
}
