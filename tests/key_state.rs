//! `KeyState`, the public core a store is written on: the memory store
//! against it over bytes on random traffic, decision for decision, and
//! `from_bytes` fed bytes it never wrote.

use std::collections::HashMap;
use std::time::Duration;

use proptest::prelude::*;
use tower_sliding_window::{
    Algorithm, Decision, KeyState, Limit, ManualClock, MemoryStore, Policy, Store, StoreErrorKind,
};

fn algorithm() -> impl Strategy<Value = Algorithm> {
    prop_oneof![
        Just(Algorithm::SlidingLog),
        Just(Algorithm::SlidingCounter),
        Just(Algorithm::FixedWindow),
        Just(Algorithm::TokenBucket),
    ]
}

/// One to three limits of small maxima, windows from a microsecond to an
/// hour, and a penalty now and then.
fn policy() -> impl Strategy<Value = Policy> {
    let window = prop_oneof![1u64..50, 1_000u64..2_000_000, 1u64..3_600_000_000];
    let limits = prop::collection::vec((1u32..8, window), 1..=3);
    let penalty = prop_oneof![3 => Just(0u64), 1 => 1u64..3_000_000];
    (algorithm(), limits, penalty).prop_map(|(algorithm, limits, penalty)| {
        let limits = limits
            .into_iter()
            .map(|(max, w)| Limit::new(max, Duration::from_micros(w)).unwrap());
        let policy = Policy::new(algorithm, limits).unwrap();
        match penalty {
            0 => policy,
            p => policy.with_penalty(Duration::from_micros(p)),
        }
    })
}

/// What happens next on one of three keys, or to the clock.
#[derive(Clone, Debug)]
enum Step {
    /// A request of this cost (0, and more than a limit holds, included).
    Decide {
        key: u8,
        cost: u32,
    },
    /// The key's last admitted request, settled at this many units.
    Settle {
        key: u8,
        used: u32,
    },
    Peek {
        key: u8,
    },
    Forward(u64),
    /// Back by this much, but never more than the memory store's grace
    /// behind the latest time, past which it may have forgotten a key
    /// `KeyState` still holds.
    Back(u64),
}

fn steps() -> impl Strategy<Value = Vec<Step>> {
    let key = 0u8..3;
    let step = prop_oneof![
        6 => (key.clone(), prop_oneof![4 => Just(1u32), 1 => 0u32..10]).prop_map(|(key, cost)| Step::Decide { key, cost }),
        2 => (key.clone(), 0u32..10).prop_map(|(key, used)| Step::Settle { key, used }),
        1 => key.prop_map(|key| Step::Peek { key }),
        4 => prop_oneof![0u64..100, 0u64..500_000, 0u64..20_000_000].prop_map(Step::Forward),
        1 => (0u64..6_000_000).prop_map(Step::Back),
    ];
    prop::collection::vec(step, 1..200)
}

/// The memory store's grace for a key idle past its windows (µs).
const GRACE: u64 = 5_000_000;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn the_memory_store_decides_as_key_state_over_bytes(policy in policy(), steps in steps(), start in 0u64..1 << 40) {
        let clock = ManualClock::new();
        let store = MemoryStore::with_clock(clock.clone());
        let binding = store.bind::<u8>(&policy);
        let mut bytes: HashMap<u8, Vec<u8>> = HashMap::new();
        // Each key's last admitted request: the store's decision, its cost.
        let mut admitted: HashMap<u8, (Decision, u32)> = HashMap::new();
        let (mut now, mut latest) = (start, start);
        for step in steps {
            let at = Duration::from_micros(now);
            clock.set(at);
            let state = |key: &u8, bytes: &HashMap<u8, Vec<u8>>| match bytes.get(key) {
                Some(stored) => KeyState::from_bytes(stored).unwrap(),
                None => KeyState::new(policy.algorithm()),
            };
            match step {
                Step::Decide { key, cost } => {
                    let mut core = state(&key, &bytes);
                    let expected = core.decide(&policy, at, cost);
                    bytes.insert(key, core.to_bytes());
                    let decided = store.decide_cost_bound(key, &binding, cost).into_inner().unwrap();
                    prop_assert_eq!(decided, expected, "{:?} at {}", policy, now);
                    if decided.is_allowed() {
                        admitted.insert(key, (decided, cost));
                    }
                }
                Step::Settle { key, used } => {
                    let Some((decision, cost)) = admitted.remove(&key) else { continue };
                    let mut core = state(&key, &bytes);
                    // The memory store may or may not have dropped a key
                    // this idle: the expiry of idle keys is its own.
                    if core.idle_after(&policy, at).is_zero() {
                        continue;
                    }
                    let expected = core.settle(&policy, at, &decision, cost, used);
                    bytes.insert(key, core.to_bytes());
                    let settled = store.settle_bound(key, &binding, &decision, cost, used).into_inner().unwrap();
                    prop_assert_eq!(settled, expected, "{:?} at {}", policy, now);
                }
                Step::Peek { key } => {
                    let expected = state(&key, &bytes).peek(&policy, at);
                    prop_assert_eq!(store.peek_bound(key, &binding).into_inner().unwrap(), expected, "{:?} at {}", policy, now);
                }
                Step::Forward(by) => now += by,
                Step::Back(by) => now = now.saturating_sub(by).max(latest.saturating_sub(GRACE - 1)),
            }
            latest = latest.max(now);
        }
    }

    #[test]
    fn from_bytes_never_panics_and_what_it_reads_can_be_judged(
        bytes in prop_oneof![prop::collection::vec(any::<u8>(), 0..64), well_formed()],
        policy in policy(),
        times in prop::collection::vec(prop_oneof![any::<u64>(), 0u64..1 << 40], 1..6),
        cost in 0u32..10,
    ) {
        let Ok(mut state) = KeyState::from_bytes(&bytes) else { return Ok(()) };
        for t in times {
            let now = Duration::from_micros(t);
            let _ = state.peek(&policy, now);
            let _ = state.idle_after(&policy, now);
            let decision = state.decide(&policy, now, cost);
            state.settle(&policy, now, &decision, cost, cost / 2);
            state.settle(&policy, now, &decision, cost, cost + 3);
            let written = state.to_bytes();
            let read = KeyState::from_bytes(&written).unwrap();
            prop_assert_eq!(read.to_bytes(), written);
        }
    }
}

/// Bytes in the layout `to_bytes` writes, with any numbers in it: stamps
/// in order, counts and windows anywhere in their range.
fn well_formed() -> impl Strategy<Value = Vec<u8>> {
    let number = prop_oneof![any::<u64>(), 0u64..100, Just(u64::MAX)];
    let records = prop::collection::vec((number.clone(), number.clone(), number.clone()), 0..4);
    (
        prop_oneof![Just(b'c'), Just(b'f'), Just(b'l')],
        any::<bool>(),
        number,
        records,
    )
        .prop_map(|(kind, penalty, until, records)| {
            let mut bytes = vec![1, kind | if penalty { 0x80 } else { 0 }];
            if penalty {
                bytes.extend(until.to_le_bytes());
            }
            let mut stamps: Vec<u64> = records.iter().map(|r| r.0).collect();
            stamps.sort_unstable();
            for (record, stamp) in records.iter().zip(stamps) {
                match kind {
                    b'c' => {
                        bytes.extend(record.0.to_le_bytes());
                        bytes.extend((record.1 as u32).to_le_bytes());
                        bytes.extend((record.2 as u32).to_le_bytes());
                    }
                    b'f' | b'b' => {
                        bytes.extend(record.0.to_le_bytes());
                        bytes.extend((record.1 as u32).to_le_bytes());
                    }
                    _ => bytes.extend(stamp.to_le_bytes()),
                }
            }
            bytes
        })
}

#[test]
fn a_state_is_a_few_bytes_beside_its_numbers() {
    let counter = Policy::new(
        Algorithm::SlidingCounter,
        [Limit::per_second(5), Limit::per_minute(100)],
    )
    .unwrap();
    let log = Policy::new(Algorithm::SlidingLog, [Limit::per_second(5)]).unwrap();
    let fixed = Policy::new(Algorithm::FixedWindow, [Limit::per_second(5)]).unwrap();
    let after_three = |policy: &Policy| {
        let mut state = KeyState::new(policy.algorithm());
        for ms in [0, 10, 20] {
            assert!(state
                .decide(policy, Duration::from_millis(ms), 1)
                .is_allowed());
        }
        state.to_bytes().len()
    };
    // Two bytes of header; a window index and two counts a limit; a stamp a request; a window index and a count.
    assert_eq!(after_three(&counter), 2 + 2 * 16);
    assert_eq!(after_three(&log), 2 + 3 * 8);
    assert_eq!(after_three(&fixed), 2 + 12);
    assert_eq!(KeyState::new(Algorithm::SlidingLog).to_bytes().len(), 2);
}

#[test]
fn a_penalty_is_kept_in_the_bytes() {
    let policy = Policy::new(Algorithm::FixedWindow, [Limit::per_second(1)])
        .unwrap()
        .with_penalty(Duration::from_secs(60));
    let mut state = KeyState::new(policy.algorithm());
    assert!(state.decide(&policy, Duration::ZERO, 1).is_allowed());
    assert!(!state.decide(&policy, Duration::ZERO, 1).is_allowed());
    let state = KeyState::from_bytes(&state.to_bytes()).unwrap();
    let shut_out = state.peek(&policy, Duration::from_secs(30));
    assert_eq!(shut_out.retry_after(), Duration::from_secs(30));
    assert_eq!(
        state.idle_after(&policy, Duration::from_secs(30)),
        Duration::from_secs(30)
    );
}

#[test]
fn slots_in_flight_are_kept_in_the_bytes_of_the_second_format() {
    let policy = Policy::new(Algorithm::SlidingCounter, [Limit::per_minute(100)])
        .unwrap()
        .with_in_flight(2);
    let mut state = KeyState::new(policy.algorithm());
    let lease = Duration::from_secs(30);
    let first = state.decide_leased(&policy, Duration::ZERO, 1, lease);
    let second = state.decide_leased(&policy, Duration::ZERO, 1, lease);
    assert!(first.holds_slot() && second.holds_slot());
    let bytes = state.to_bytes();
    // Format 2: the header, a count of slots and sixteen bytes each, then
    // the counter's record.
    assert_eq!((bytes[0], bytes.len()), (2, 2 + 4 + 2 * 16 + 16));
    let mut state = KeyState::from_bytes(&bytes).unwrap();
    let full = state.decide(&policy, Duration::from_secs(1), 1);
    assert_eq!(full.origin(), tower_sliding_window::Origin::InFlight);
    // The counter matters for two windows, a slot for its lease.
    assert_eq!(
        state.idle_after(&policy, Duration::ZERO),
        Duration::from_secs(120)
    );
    let only = Policy::in_flight_only(1);
    let mut slot = KeyState::new(only.algorithm());
    assert!(slot
        .decide_leased(&only, Duration::ZERO, 1, lease)
        .holds_slot());
    assert_eq!(slot.idle_after(&only, Duration::ZERO), lease);
    // Released, the state is the first format's again.
    state.release(&first);
    state.release(&second);
    assert_eq!(state.to_bytes()[0], 1);
    // An expired slot frees itself: one taken by a process that died.
    let mut state = KeyState::from_bytes(&bytes).unwrap();
    assert!(state.decide(&policy, lease, 1).is_allowed());
    // Cut short, it is no state.
    let error = KeyState::from_bytes(&bytes[..20]).expect_err("cut short");
    assert_eq!(error.kind(), StoreErrorKind::Malformed);
}

#[test]
fn bytes_it_did_not_write_are_a_malformed_error() {
    for bytes in [
        &[][..],
        &[1],
        &[2, b'c'],
        &[1, b'x'],
        &[1, b'c', 0, 0, 0],
        &[1, b'l', 2, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0],
        &[1, b'f' | 0x80, 1, 2, 3],
    ] {
        let error = KeyState::from_bytes(bytes).expect_err("not a state");
        assert_eq!(error.kind(), StoreErrorKind::Malformed, "{bytes:?}");
    }
}

#[test]
fn a_state_given_another_algorithm_judges_as_a_fresh_key() {
    let log = Policy::new(Algorithm::SlidingLog, [Limit::per_second(1)]).unwrap();
    let counter = Policy::new(Algorithm::SlidingCounter, [Limit::per_second(1)]).unwrap();
    let mut state = KeyState::new(Algorithm::SlidingLog);
    assert!(state.decide(&log, Duration::ZERO, 1).is_allowed());
    assert!(!state.peek(&log, Duration::ZERO).is_allowed());
    let fresh = KeyState::new(Algorithm::SlidingCounter).peek(&counter, Duration::ZERO);
    assert_eq!(state.peek(&counter, Duration::ZERO), fresh);
    assert!(state.decide(&counter, Duration::ZERO, 1).is_allowed());
    assert_eq!(state.algorithm(), Algorithm::SlidingCounter);
}

#[test]
fn a_served_penalty_is_forgotten() {
    let policy = Policy::new(Algorithm::SlidingLog, [Limit::per_second(1)])
        .unwrap()
        .with_penalty(Duration::from_secs(10));
    let mut state = KeyState::new(policy.algorithm());
    assert!(state.decide(&policy, Duration::ZERO, 1).is_allowed());
    assert!(!state
        .decide(&policy, Duration::from_millis(500), 1)
        .is_allowed());
    let with_penalty = state.to_bytes().len();
    assert!(state
        .decide(&policy, Duration::from_millis(10_500), 1)
        .is_allowed());
    assert_eq!(
        state.to_bytes().len(),
        with_penalty - 8,
        "the penalty's end is no longer kept"
    );
    // A clock thrown back inside the served penalty finds it gone, and
    // is judged at the newest stamp instead.
    let back = state.decide(&policy, Duration::from_secs(5), 1);
    assert_eq!(back.origin(), tower_sliding_window::Origin::Limits);
    assert_eq!(back.decided_at(), Duration::from_millis(10_500));
}

#[test]
fn a_stand_in_acceptance_is_never_settled() {
    let limit = Limit::per_second(5);
    let open = Decision::allow(limit, Duration::from_secs(1));
    assert!(open.is_allowed());
    assert_eq!(open.origin(), tower_sliding_window::Origin::FailOpen);
    assert_eq!(open.remaining(), 5);
    assert!(!open.needs_settling(3, 1));
    let refused = Decision::refuse(limit, Duration::from_secs(2), Duration::from_secs(1))
        .with_origin(tower_sliding_window::Origin::StoreFull);
    assert_eq!(
        (refused.is_allowed(), refused.retry_after()),
        (false, Duration::from_secs(2))
    );
    let policy = Policy::new(Algorithm::FixedWindow, [limit]).unwrap();
    let mut state = KeyState::new(policy.algorithm());
    let admitted = state.decide(&policy, Duration::ZERO, 3);
    assert!(admitted.needs_settling(3, 1) && !admitted.needs_settling(3, 3));
    assert_eq!(state.settle(&policy, Duration::ZERO, &open, 3, 1), open);
    assert_eq!(
        state.peek(&policy, Duration::ZERO).remaining(),
        1,
        "the stand-in gave nothing back"
    );
}
