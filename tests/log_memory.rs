//! What the memory store's sliding log holds per key: its entry and a ring
//! of four slots for a key well below its limit, its largest limit's
//! worth for a key at the limit, 8 bytes a stamp, no allocation once a
//! key's stamps have the room they need, the ring given back when the
//! key's traffic falls again, and exact decisions throughout.
//!
//! The only test in its binary, because it counts the heap of the whole
//! process with a wrapping allocator.

use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

use tower_sliding_window::{Algorithm, Limit, ManualClock, MemoryStore, Policy};

#[path = "support/live_bytes.rs"]
mod live_bytes;

use live_bytes::{allocations, live_bytes};

const KEYS: u64 = 1_000;
const MAX: u32 = 100;

/// Bytes a key may take beside its ring's slots (counted, as all here, in
/// the sizes asked of the allocator): its entry in the map (the key, its
/// policy and its `KeyState`) with the map's spare room. The ring holds
/// stamps only: a header beside them would not fit. The spare room depends
/// on how the process's random hash seed spreads the keys over the shards,
/// each growing by doubling: 118 to 133 bytes a key over 20 runs, so a
/// bound of 128 failed one run in seven.
const PER_KEY: isize = 144;

/// Bytes a `u64` key with a ring of its first four slots may take.
const SMALL_PER_KEY: isize = PER_KEY + 32;

/// Bytes an IP-address key with a ring of its first four slots may take:
/// its address makes its entry larger.
const SMALL_PER_IP_KEY: isize = SMALL_PER_KEY + 32;

#[test]
fn a_log_key_holds_the_stamps_its_window_needs() {
    u64_keys_grow_a_ring_only_at_their_limit();
    ip_keys_hold_two_stamps_in_a_small_ring();
}

/// A fresh store on a manual clock, and a log of `MAX` a second.
fn store_with_log() -> (ManualClock, MemoryStore<ManualClock>, Policy) {
    let clock = ManualClock::new();
    let store = MemoryStore::with_clock(clock.clone());
    let policy = Policy::new(
        Algorithm::SlidingLog,
        [Limit::new(MAX, Duration::from_secs(1)).unwrap()],
    )
    .unwrap();
    (clock, store, policy)
}

/// Larger keys, IP addresses here, keep two stamps inside their window in
/// a ring of four: requests 600 ms apart under a window of a second, each
/// decision exact and none allocating once the keys are in.
fn ip_keys_hold_two_stamps_in_a_small_ring() {
    let (clock, store, policy) = store_with_log();
    let before = live_bytes();
    let mut steady_from = 0;
    for round in 0..40u32 {
        if round == 1 {
            steady_from = allocations();
        }
        for key in 0..KEYS as u32 {
            let ip = IpAddr::V4(Ipv4Addr::from(key));
            let decision = store.decide_now(ip, &policy);
            assert!(decision.is_allowed());
            // From the second request on, two stamps are inside the window.
            assert_eq!(decision.remaining(), MAX - (round + 1).min(2));
        }
        clock.advance(Duration::from_millis(600));
    }
    let per_key = (live_bytes() - before) / KEYS as isize;
    assert_eq!(
        allocations() - steady_from,
        0,
        "allocations once every IP key is in"
    );
    println!("an IP key with two stamps inside its window holds {per_key} bytes");
    assert!(
        per_key <= SMALL_PER_IP_KEY,
        "{per_key} bytes an IP key with two stamps"
    );
}

/// `u64` keys: a small ring, a ring of their limit at the limit, and the
/// ring given back when the traffic falls.
fn u64_keys_grow_a_ring_only_at_their_limit() {
    let (clock, store, policy) = store_with_log();
    let before = live_bytes();

    // Each key is seen every 2 s, so only the newest stamp is ever inside
    // its window of 1 s; 301 requests a key would fill a ring of 100 three
    // times over. The stamps stay in the key's first four slots, and its
    // decisions allocate nothing.
    let mut steady_from = 0;
    for round in 0..301 {
        if round == 200 {
            steady_from = allocations();
        }
        for key in 0..KEYS {
            let decision = store.decide_now(key, &policy);
            assert!(decision.is_allowed());
            assert_eq!(decision.remaining(), MAX - 1);
        }
        clock.advance(Duration::from_secs(2));
    }
    let sparse = (live_bytes() - before) / KEYS as isize;
    assert_eq!(
        allocations() - steady_from,
        0,
        "allocations in steady traffic"
    );

    // Then every key reaches its limit within 100 ms: each key's ring grows
    // to its limit, and every count stays exact.
    for sent in 1..=MAX {
        for key in 0..KEYS {
            let decision = store.decide_now(key, &policy);
            assert!(decision.is_allowed(), "request {sent} of key {key}");
            assert_eq!(decision.remaining(), MAX - sent);
        }
        clock.advance(Duration::from_millis(1));
    }
    for key in 0..KEYS {
        assert!(
            !store.decide_now(key, &policy).is_allowed(),
            "key {key} over its limit"
        );
    }
    let full = (live_bytes() - before) / KEYS as isize;

    // Back to one request every 2 s: the store's sweeps (every 5 s of its
    // time) give the rings back, and the counts stay exact.
    for _ in 0..8 {
        clock.advance(Duration::from_secs(2));
        for key in 0..KEYS {
            let decision = store.decide_now(key, &policy);
            assert!(decision.is_allowed());
            assert_eq!(decision.remaining(), MAX - 1);
        }
    }
    let after = (live_bytes() - before) / KEYS as isize;

    // What the keys kept still counts: half a second after each key's
    // last request, 99 more fit, and then none.
    clock.advance(Duration::from_millis(500));
    for key in 0..KEYS {
        for sent in 2..=MAX {
            let decision = store.decide_now(key, &policy);
            assert!(decision.is_allowed(), "request {sent} of key {key}");
            assert_eq!(decision.remaining(), MAX - sent);
        }
        assert!(!store.decide_now(key, &policy).is_allowed(), "key {key}");
    }

    println!(
        "a log key below its limit holds {sparse} bytes; at its limit of {MAX}, {full}; \
         below it again, {after}"
    );
    assert!(
        sparse <= SMALL_PER_KEY,
        "{sparse} bytes a key below its limit"
    );
    assert!(
        full <= 8 * MAX as isize + PER_KEY,
        "{full} bytes a key at its limit"
    );
    assert!(
        after <= SMALL_PER_KEY,
        "{after} bytes a key below its limit again"
    );
}
