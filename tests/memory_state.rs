//! The memory store judges with each key's `KeyState` at the edges of its
//! range: counts past 16 bits count to their last request, a clock thrown
//! back any distance or to the end of time is judged as the core judges it,
//! and a refusal leaves a key as it was.

use std::time::Duration;

use tower_sliding_window::{Algorithm, Limit, ManualClock, MemoryStore, Policy};
use tower_sliding_window::{Clock, KeyState};

fn accepted_in_one_instant(policy: &Policy, tries: u32) -> u32 {
    let store = MemoryStore::with_clock(ManualClock::new());
    (0..tries)
        .filter(|_| store.decide_now(1u64, policy).is_allowed())
        .count() as u32
}

#[test]
fn counts_past_16_bits_count_to_their_last_request() {
    for max in [u32::from(u16::MAX), u32::from(u16::MAX) + 1] {
        for limits in [
            vec![Limit::new(max, Duration::from_secs(60)).unwrap()],
            vec![
                Limit::new(max, Duration::from_secs(60)).unwrap(),
                Limit::new(max, Duration::from_secs(3600)).unwrap(),
            ],
        ] {
            let count = limits.len();
            for algorithm in [Algorithm::SlidingCounter, Algorithm::FixedWindow] {
                let policy = Policy::new(algorithm, limits.clone()).unwrap();
                assert_eq!(
                    accepted_in_one_instant(&policy, max + 10),
                    max,
                    "{algorithm:?}, {count} limits of {max}"
                );
            }
        }
    }
}

#[test]
fn a_full_window_carries_into_the_next_at_a_limit_of_65535() {
    let max = u32::from(u16::MAX);
    let policy = Policy::new(
        Algorithm::SlidingCounter,
        [Limit::new(max, Duration::from_secs(10)).unwrap()],
    )
    .unwrap();
    let clock = ManualClock::new();
    let store = MemoryStore::with_clock(clock.clone());
    for _ in 0..max {
        assert!(store.decide_now(1u64, &policy).is_allowed());
    }
    // Halfway through the next window, half the previous count still weighs.
    clock.set(Duration::from_secs(15));
    let accepted = (0..max)
        .filter(|_| store.decide_now(1u64, &policy).is_allowed())
        .count() as u32;
    assert_eq!(accepted, max / 2);
}

/// A clock thrown back, by a minute or by ten hours, is judged at the
/// latest window the key counted in, as the core judges it: it never
/// opens a fresh window.
#[test]
fn a_clock_thrown_back_any_distance_admits_nothing_extra() {
    let policy = Policy::new(
        Algorithm::FixedWindow,
        [
            Limit::new(1, Duration::from_micros(1)).unwrap(),
            Limit::new(2, Duration::from_secs(3600)).unwrap(),
        ],
    )
    .unwrap();
    let clock = ManualClock::new();
    let store = MemoryStore::with_clock(clock.clone());
    let mut core = KeyState::new(policy.algorithm());
    let late = 10 * 3600 * 1_000_000;
    for at in [
        late,
        late,
        late + 1,
        late - 60_000_000,
        late - 3_600_000_000,
        0,
    ] {
        clock.set(Duration::from_micros(at));
        let expected = core.decide(&policy, Duration::from_micros(at), 1);
        assert_eq!(store.decide_now(1u64, &policy), expected, "at {at} µs");
    }
    assert!(!store.decide_now(1u64, &policy).is_allowed());
    assert_eq!(store.key_count::<u64>(), 1);
}

#[test]
fn a_long_limit_outlives_a_short_one_by_days() {
    // At 50 days the 1 ms window is 2³² windows behind while the 60-day one
    // still counts both requests.
    for algorithm in [Algorithm::SlidingCounter, Algorithm::FixedWindow] {
        let limits = [
            Limit::new(1000, Duration::from_millis(1)).unwrap(),
            Limit::new(2, Duration::from_secs(60 * 86_400)).unwrap(),
        ];
        let policy = Policy::new(algorithm, limits).unwrap();
        let clock = ManualClock::new();
        let store = MemoryStore::with_clock(clock.clone());
        let mut core = KeyState::new(policy.algorithm());
        for at in [0, 0, 0, 50 * 86_400, 50 * 86_400, 59 * 86_400] {
            let at = Duration::from_secs(at);
            clock.set(at);
            let expected = core.decide(&policy, at, 1);
            assert_eq!(
                store.decide_now(1u64, &policy),
                expected,
                "{algorithm:?} at {at:?}"
            );
        }
    }
}

#[test]
fn the_end_of_time_is_judged_as_any_other_time() {
    for algorithm in [
        Algorithm::SlidingCounter,
        Algorithm::FixedWindow,
        Algorithm::SlidingLog,
    ] {
        let policy =
            Policy::new(algorithm, [Limit::new(2, Duration::from_secs(1)).unwrap()]).unwrap();
        let clock = ManualClock::new();
        let store = MemoryStore::with_clock(clock.clone());
        clock.set(Duration::MAX);
        let accepted = (0..5)
            .filter(|_| store.decide_now(1u64, &policy).is_allowed())
            .count();
        assert_eq!(accepted, 2, "{algorithm:?}");
    }
}

/// A limit whose window has long gone by while its key lives on (another
/// limit still counts), then a clock stepping back: each decision is made
/// at the time the core makes it.
#[test]
fn an_expired_slot_does_not_hold_a_clock_stepping_back() {
    const REACH: u64 = 1 << 31;
    let limits = [
        Limit::new(1, Duration::from_secs(24 * 3600)).unwrap(),
        Limit::new(1, Duration::from_micros(1)).unwrap(),
    ];
    for algorithm in [Algorithm::SlidingCounter, Algorithm::FixedWindow] {
        let policy = Policy::new(algorithm, limits).unwrap();
        let clock = ManualClock::new();
        let store = MemoryStore::with_clock(clock.clone());
        let mut core = KeyState::new(policy.algorithm());
        let start = 4 * REACH;
        // Accepted; then refused by the daily limit 2³¹ µs and more later,
        // then judged with the clock stepped back.
        for (at, allowed) in [
            (start, true),
            (start + REACH + REACH / 4, false),
            (start + REACH / 8, false),
        ] {
            clock.set(Duration::from_micros(at));
            let expected = core.decide(&policy, Duration::from_micros(at), 1);
            assert_eq!(expected.is_allowed(), allowed, "{algorithm:?} at {at}");
            assert_eq!(
                store.decide_now(1u64, &policy),
                expected,
                "{algorithm:?} at {at}"
            );
        }
    }
}

/// A key of one limit past 16 bits also keeps its state through a
/// refusal: after a refusal in the next window, a clock stepping back is
/// judged in the window the requests were counted in, as by the core.
#[test]
fn a_refusal_leaves_a_key_as_it_was() {
    let max = u32::from(u16::MAX) + 1;
    let policy = Policy::new(
        Algorithm::SlidingCounter,
        [Limit::new(max, Duration::from_secs(1)).unwrap()],
    )
    .unwrap();
    let clock = ManualClock::new();
    let store = MemoryStore::with_clock(clock.clone());
    let mut core = KeyState::new(policy.algorithm());
    let mut both = |at: u64| {
        clock.set(Duration::from_micros(at));
        let expected = core.decide(&policy, Duration::from_micros(at), 1);
        assert_eq!(store.decide_now(1u64, &policy), expected, "at {at} µs");
        expected
    };
    for _ in 0..max {
        assert!(both(500_000).is_allowed());
    }
    // At the next window's start the full one still weighs whole: refused,
    // and a clock stepping back is judged back in the first window.
    assert!(!both(1_000_000).is_allowed());
    assert_eq!(both(900_000).decided_at(), Duration::from_micros(900_000));
}

/// A key in and out of its penalty is judged as its `KeyState` judges it
/// throughout, and counted once.
#[test]
fn a_key_serving_penalties_is_judged_as_its_key_state() {
    for algorithm in [
        Algorithm::SlidingCounter,
        Algorithm::FixedWindow,
        Algorithm::TokenBucket,
    ] {
        for limits in [vec![(3, 1)], vec![(3, 1), (5, 60)]] {
            let limits = limits
                .into_iter()
                .map(|(max, secs)| Limit::new(max, Duration::from_secs(secs)).unwrap());
            let policy = Policy::new(algorithm, limits)
                .unwrap()
                .with_penalty(Duration::from_millis(1_500));
            let clock = ManualClock::new();
            let store = MemoryStore::with_clock(clock.clone());
            let mut state = KeyState::new(algorithm);
            let mut penalties = 0;
            for step in 0..400u64 {
                let decision = store.decide_now(7u64, &policy);
                let expected = state.decide(&policy, clock.now(), 1);
                let said = |d: &tower_sliding_window::Decision| {
                    (d.is_allowed(), d.origin(), d.remaining(), d.retry_after())
                };
                assert_eq!(said(&decision), said(&expected), "{algorithm:?} {step}");
                penalties +=
                    usize::from(decision.origin() == tower_sliding_window::Origin::Penalty);
                assert_eq!(store.key_count::<u64>(), 1, "{algorithm:?} {step}");
                clock.advance(Duration::from_millis(40 + 70 * (step % 5)));
            }
            assert!(
                penalties > 10,
                "{algorithm:?}: the sequence served penalties"
            );
        }
    }
}
