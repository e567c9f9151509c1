//! A flood of distinct keys against a capped memory store: the cap holds,
//! memory stays bounded, idle keys go without any clean-up call, and a
//! legitimate hot key keeps its window throughout.
//!
//! The only test in its binary, because it counts the heap of the whole
//! process with a wrapping allocator.

use std::time::Duration;

use tower_sliding_window::{Algorithm, Limit, ManualClock, MemoryStore, Origin, Policy};

#[path = "support/live_bytes.rs"]
mod live_bytes;

use live_bytes::live_bytes;

const CAP: usize = 100_000;
const FLOOD: u64 = 1_000_000;
const HOT: u64 = u64::MAX;

#[test]
fn a_million_key_flood_is_capped_bounded_evicted_and_cannot_reset_a_window() {
    let clock = ManualClock::new();
    let store = MemoryStore::with_clock(clock.clone())
        .with_max_keys(CAP)
        .unwrap();
    let policy = Policy::new(
        Algorithm::SlidingCounter,
        [Limit::new(5, Duration::from_secs(10)).unwrap()],
    )
    .unwrap();
    let before = live_bytes();

    // The legitimate client is there first; the flood comes at the same instant.
    assert!(store.decide_now(HOT, &policy).is_allowed());
    let mut hot_accepted = 1;
    let (mut admitted, mut refused_full) = (0u64, 0u64);
    let mut peak_keys = 0;
    for key in 0..FLOOD {
        let decision = store.decide_now(key, &policy);
        if decision.is_allowed() {
            admitted += 1;
        } else {
            assert_eq!(decision.origin(), Origin::StoreFull);
            assert!(decision.retry_after() > Duration::ZERO);
            refused_full += 1;
        }
        if key % 100 == 0 {
            hot_accepted += usize::from(store.decide_now(HOT, &policy).is_allowed());
        }
        if key % 100_000 == 0 {
            peak_keys = peak_keys.max(store.key_count::<u64>());
        }
    }
    peak_keys = peak_keys.max(store.key_count::<u64>());
    let bytes = live_bytes() - before;
    let keys = store.key_count::<u64>();
    println!(
        "flood of {FLOOD} keys, cap {CAP}: {admitted} admitted, {refused_full} refused as store-full, \
         {keys} keys held (peak {peak_keys}), {bytes} bytes live, {:.1} bytes per key",
        bytes as f64 / keys as f64
    );
    assert!(peak_keys <= CAP, "live keys {peak_keys} over the cap");
    assert_eq!(hot_accepted, 5, "the flood reset the hot key's window");
    assert!(refused_full > 0 && admitted as usize <= CAP);
    // A one-limit counter keeps a 32-byte entry: its key, its policy and
    // its record.
    assert!(bytes as f64 / keys as f64 <= 48.0, "bytes per key");

    // Thirty seconds later every flood key is idle: new keys get in, with no
    // clean-up call, and the count stays within the cap.
    clock.advance(Duration::from_secs(30));
    let fresh = (FLOOD..FLOOD + 50_000)
        .filter(|&key| store.decide_now(key, &policy).is_allowed())
        .count();
    assert_eq!(fresh, 50_000, "idle keys were not evicted");
    let keys = store.key_count::<u64>();
    assert!(keys <= CAP, "{keys} keys after eviction");
    // And the hot key has a fresh window, exactly 5 again.
    let again = (0..20)
        .filter(|_| store.decide_now(HOT, &policy).is_allowed())
        .count();
    assert_eq!(again, 5);
}
