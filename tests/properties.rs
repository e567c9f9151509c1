//! Property tests over random traffic: the algorithms against naive models,
//! the exactness of retry-after, and the memory store against the core.

use std::collections::HashMap;
use std::time::Duration;

use proptest::prelude::*;
use tower_sliding_window::algorithm::{FixedWindow, SlidingCounter, SlidingLog};
use tower_sliding_window::KeyState;
use tower_sliding_window::{Algorithm, Decision, Limit, ManualClock, MemoryStore, Policy};

/// One to three limits with small maxima and windows of 1 to 40 ms (in µs).
fn limits() -> impl Strategy<Value = Vec<Limit>> {
    limits_with(1u64..40_000)
}

/// As [`limits`], but windows also of a few µs and up to about 12 days, so
/// that one limit's window can be billions of another's, and a leap of
/// hours is 2³¹ of the shortest.
fn wide_limits() -> impl Strategy<Value = Vec<Limit>> {
    limits_with(prop_oneof![1u64..16, 1u64..40_000, 1u64..1 << 40])
}

fn limits_with(window: impl Strategy<Value = u64>) -> impl Strategy<Value = Vec<Limit>> {
    prop::collection::vec((1u32..6, window), 1..=3).prop_map(|specs| {
        specs
            .into_iter()
            .map(|(max, w)| Limit::new(max, Duration::from_micros(w)).unwrap())
            .collect()
    })
}

/// Up to three sets of limits for one log: some the same windows as the
/// first with other maxima (the ring's capacity changes alone), some
/// anything (windows and cursors change too).
fn changing_limits() -> impl Strategy<Value = Vec<Vec<Limit>>> {
    limits().prop_flat_map(|first| {
        let windows: Vec<Duration> = first.iter().map(Limit::window).collect();
        // Maxima up to 40, so that rings grow by doubling past their first
        // slots and shrink back.
        let same_windows = prop::collection::vec(1u32..40, windows.len()).prop_map(move |maxes| {
            maxes
                .iter()
                .zip(&windows)
                .map(|(&max, &window)| Limit::new(max, window).unwrap())
                .collect::<Vec<_>>()
        });
        let others = prop::collection::vec(prop_oneof![same_windows, limits()], 0..3);
        (Just(first), others).prop_map(|(first, mut others)| {
            others.insert(0, first);
            others
        })
    })
}

/// Any of the three algorithms.
fn algorithm() -> impl Strategy<Value = Algorithm> {
    prop_oneof![
        Just(Algorithm::SlidingLog),
        Just(Algorithm::SlidingCounter),
        Just(Algorithm::FixedWindow),
    ]
}

/// Gaps between arrivals in µs: many at one instant, some small, some long.
fn gaps() -> impl Strategy<Value = Vec<u64>> {
    prop::collection::vec(prop_oneof![Just(0u64), 0u64..2_000, 0u64..60_000], 1..300)
}

fn micros(t: u64) -> Duration {
    Duration::from_micros(t)
}

/// Replays `gaps` (µs between arrivals) against one key's state under
/// `policy`, handing `check` the state after each decision, its time and
/// the decision.
fn each_decision(
    policy: &Policy,
    gaps: Vec<u64>,
    mut check: impl FnMut(&KeyState, u64, Decision) -> Result<(), TestCaseError>,
) -> Result<(), TestCaseError> {
    let mut state = KeyState::new(policy.algorithm());
    let mut now = 0u64;
    for gap in gaps {
        now += gap;
        let decision = state.decide(policy, micros(now), 1);
        check(&state, now, decision)?;
    }
    Ok(())
}

/// Replays `traffic` (µs steps, some back) through two fresh states, one
/// judged under `limit` alone and one under it twice over, decision by
/// decision.
fn one_limit_agrees_with_the_general_path<S>(
    new: fn() -> S,
    decide: fn(&mut S, Duration, &[Limit]) -> Decision,
    limit: Limit,
    traffic: &[i64],
) -> Result<(), TestCaseError> {
    let (mut one, mut general) = (new(), new());
    let mut now = 100_000u64;
    for &step in traffic {
        now = now.saturating_add_signed(step);
        let decision = decide(&mut one, micros(now), &[limit]);
        prop_assert_eq!(
            decision,
            decide(&mut general, micros(now), &[limit, limit]),
            "at {} µs",
            now
        );
    }
    Ok(())
}

/// Judges by decision of a cloned state, so probing does not record anything.
fn probe(decide: impl FnOnce(Duration) -> Decision, at: u64) -> bool {
    decide(micros(at)).is_allowed()
}

proptest! {
    /// The log accepts exactly when every limit's closed window
    /// `[now - W, now]` holds fewer than `max` accepted requests.
    #[test]
    fn log_matches_a_naive_exact_count(limits in limits(), gaps in gaps()) {
        let mut log = SlidingLog::new();
        let mut accepted: Vec<u64> = Vec::new();
        let mut now = 0u64;
        for gap in gaps {
            now += gap;
            let fits = limits.iter().all(|l| {
                let w = l.window().as_micros() as u64;
                accepted.iter().filter(|&&t| t + w >= now).count() < l.max() as usize
            });
            let decision = log.decide(micros(now), &limits);
            prop_assert_eq!(decision.is_allowed(), fits, "at {} µs", now);
            if fits {
                accepted.push(now);
            }
        }
        // No closed window-length interval ever holds more than the limit.
        for l in &limits {
            let w = l.window().as_micros() as u64;
            for &start in &accepted {
                let inside = accepted.iter().filter(|&&t| t >= start && t <= start + w).count();
                prop_assert!(inside <= l.max() as usize);
            }
        }
    }

    /// The public algorithm may judge one log under different limits from one
    /// call to the next. It then keeps the newest stamps its largest limit
    /// allows, in order, and judges them exactly: a ring that wrapped and
    /// then grows, shrinks or gains a cursor loses nothing else. The clock
    /// also steps back, where the log judges at its newest stamp.
    #[test]
    fn a_log_judged_under_changing_limits_keeps_its_newest_stamps(
        shapes in changing_limits(),
        steps in prop::collection::vec(
            (0usize..4, prop_oneof![Just(0i64), 0i64..2_000, 0i64..60_000, -30_000i64..0]),
            1..300,
        ),
    ) {
        let mut log = SlidingLog::new();
        let mut kept: Vec<u64> = Vec::new();
        let mut clock = 100_000u64;
        for (shape, step) in steps {
            let limits = &shapes[shape % shapes.len()];
            clock = clock.saturating_add_signed(step);
            let now = kept.last().map_or(clock, |&newest| newest.max(clock));
            let capacity = limits.iter().map(|l| l.max() as usize).max().unwrap();
            kept.drain(..kept.len().saturating_sub(capacity));
            let in_window = |kept: &[u64], l: &Limit| {
                let w = l.window().as_micros() as u64;
                kept.iter().filter(|&&t| t + w >= now).count()
            };
            let fits = limits.iter().all(|l| in_window(&kept, l) < l.max() as usize);
            let decision = log.decide(micros(clock), limits);
            prop_assert_eq!(decision.is_allowed(), fits, "at {} µs under {:?}", now, limits);
            if fits {
                kept.push(now);
                let remaining = limits
                    .iter()
                    .map(|l| l.max() as usize - in_window(&kept, l))
                    .min()
                    .unwrap();
                prop_assert_eq!(decision.remaining() as usize, remaining, "at {} µs", now);
            } else {
                // The longest wait of the refusing limits: until the
                // max-th newest stamp leaves the window.
                let wait = limits
                    .iter()
                    .filter(|l| in_window(&kept, l) >= l.max() as usize)
                    .map(|l| kept[kept.len() - l.max() as usize] + l.window().as_micros() as u64 + 1 - now)
                    .max()
                    .unwrap();
                prop_assert_eq!(decision.retry_after(), micros(wait), "at {} µs", now);
            }
            kept.drain(..kept.len().saturating_sub(capacity));
            prop_assert_eq!(log.len(), kept.len());
        }
    }

    /// A log or fixed window of one limit takes a path of its own: it
    /// decides exactly as the general path does for that limit twice over
    /// (ties pick the first), with the clock stepping back too.
    #[test]
    fn the_one_limit_paths_decide_as_the_general_path(
        max in 1u32..40,
        window in prop_oneof![1u64..16, 1u64..40_000],
        traffic in prop::collection::vec(prop_oneof![3 => 0i64..5_000, 1 => -30_000i64..0], 1..300),
    ) {
        let limit = Limit::new(max, Duration::from_micros(window)).unwrap();
        one_limit_agrees_with_the_general_path(SlidingLog::new, SlidingLog::decide, limit, &traffic)?;
        one_limit_agrees_with_the_general_path(FixedWindow::new, FixedWindow::decide, limit, &traffic)?;
    }

    /// The counter accepts exactly when `(1 - x) * previous + current + 1 <= max`
    /// for every limit (computed here from a per-window tally), and after an
    /// acceptance the weighted estimate never exceeds the limit.
    #[test]
    fn counter_matches_a_naive_weighted_count(limits in limits(), gaps in gaps()) {
        let mut counter = SlidingCounter::new();
        let mut tallies: Vec<HashMap<u64, u128>> = vec![HashMap::new(); limits.len()];
        let mut now = 0u64;
        let weighted_times_w = |tally: &HashMap<u64, u128>, l: &Limit, now: u64, extra: u128| {
            let w = l.window().as_micros() as u64;
            let (k, e) = (now / w, now % w);
            let previous = if k == 0 { 0 } else { tally.get(&(k - 1)).copied().unwrap_or(0) };
            let current = tally.get(&k).copied().unwrap_or(0);
            previous * u128::from(w - e) + (current + extra) * u128::from(w)
        };
        for gap in gaps {
            now += gap;
            let fits = limits.iter().zip(&tallies).all(|(l, tally)| {
                let w = u128::from(l.window().as_micros() as u64);
                weighted_times_w(tally, l, now, 1) <= u128::from(l.max()) * w
            });
            let decision = counter.decide(micros(now), &limits);
            prop_assert_eq!(decision.is_allowed(), fits, "at {} µs", now);
            if fits {
                for (l, tally) in limits.iter().zip(tallies.iter_mut()) {
                    *tally.entry(now / l.window().as_micros() as u64).or_default() += 1;
                    let w = u128::from(l.window().as_micros() as u64);
                    prop_assert!(weighted_times_w(tally, l, now, 0) <= u128::from(l.max()) * w);
                }
            }
        }
    }

    /// A refusal's retry-after is exact for every algorithm: one microsecond
    /// earlier is still refused, and at retry-after the request fits.
    #[test]
    fn retry_after_is_the_first_instant_that_fits(
        limits in limits(),
        gaps in gaps(),
        algorithm in algorithm(),
    ) {
        let policy = Policy::new(algorithm, limits).unwrap();
        each_decision(&policy, gaps, |state, now, decision| {
            if !decision.is_allowed() {
                let wait = decision.retry_after().as_micros() as u64;
                prop_assert!(wait >= 1);
                prop_assert!(!probe(|t| state.clone().decide(&policy, t, 1), now + wait - 1), "{:?}", decision);
                prop_assert!(probe(|t| state.clone().decide(&policy, t, 1), now + wait), "{:?}", decision);
            } else if decision.remaining() < decision.limit().unwrap().max() {
                // `replenish_after` is when one more request than `remaining` fits.
                let later = now + decision.replenish_after().as_micros() as u64;
                let mut ahead = state.clone();
                for _ in 0..=decision.remaining() {
                    prop_assert!(ahead.decide(&policy, micros(later), 1).is_allowed(), "{:?}", decision);
                }
            }
            Ok(())
        })?;
    }

    /// An accepted decision's `remaining` is exact for every algorithm: that
    /// many more requests fit at the same instant, and not one more. (The
    /// counters work it out only when asked, from the counts they keep.)
    #[test]
    fn remaining_is_exactly_what_still_fits(
        limits in limits(),
        gaps in gaps(),
        algorithm in algorithm(),
    ) {
        let policy = Policy::new(algorithm, limits).unwrap();
        each_decision(&policy, gaps, |state, now, decision| {
            if decision.is_allowed() {
                let mut ahead = state.clone();
                for _ in 0..decision.remaining() {
                    prop_assert!(ahead.decide(&policy, micros(now), 1).is_allowed(), "{:?}", decision);
                }
                prop_assert!(!ahead.decide(&policy, micros(now), 1).is_allowed(), "{:?}", decision);
            }
            Ok(())
        })?;
    }

    /// The memory store decides exactly as the core does, key by key.
    #[test]
    fn memory_store_agrees_with_the_core(
        limits in limits(),
        traffic in prop::collection::vec((0u8..4, prop_oneof![Just(0u64), 0u64..20_000]), 1..300),
        algorithm in algorithm(),
    ) {
        let policy = Policy::new(algorithm, limits).unwrap();
        let clock = ManualClock::new();
        let store = MemoryStore::with_clock(clock.clone());
        let mut states: HashMap<u8, KeyState> = HashMap::new();
        let mut now = 0u64;
        for (key, gap) in traffic {
            now += gap;
            clock.set(micros(now));
            let expected = states.entry(key).or_insert_with(|| KeyState::new(policy.algorithm())).decide(&policy, micros(now), 1);
            prop_assert_eq!(store.decide_now(key, &policy), expected);
        }
    }

    /// A store's log lets a stamp outside its longest window go rather than
    /// grow its ring; the core's keeps its largest limit's newest stamps.
    /// Both decide alike, with maxima large enough that rings wrap at
    /// several sizes and grow from wrapped states, bursts, gaps longer than
    /// the windows or exactly as long, a clock that steps back, and leaps
    /// of seconds, so that the store's sweeps (every 5 s), which shrink
    /// rings, run between requests. The keys share one shard, so a sweep
    /// that one key's request sets off reaches the others' rings too.
    /// Keyed by a byte and by a `String`: each store's rings grow and shrink
    /// without a change in what it decides.
    /// (`src/algorithm/log.rs` tests shrinking itself at any point of traffic.)
    #[test]
    fn a_stores_log_that_forgets_decides_as_the_core_that_keeps(
        limits in prop::collection::vec(
            (1u32..40, prop_oneof![prop::sample::select(vec![1_000u64, 2_000]), 1u64..5_000]),
            1..=3,
        ),
        // Steps of whole windows too, so that stamps land exactly one
        // window old: the window is closed, and such a stamp still counts.
        traffic in prop::collection::vec(
            (0u8..3, prop_oneof![
                3 => Just(0i64),
                3 => 0i64..300,
                2 => prop::sample::select(vec![500i64, 1_000, 2_000]),
                2 => 0i64..12_000,
                1 => -3_000i64..0,
                1 => 1_000_000i64..5_010_000,
            ]),
            1..400,
        ),
    ) {
        let limits: Vec<Limit> = limits
            .into_iter()
            .map(|(max, window)| Limit::new(max, Duration::from_micros(window)).unwrap())
            .collect();
        let policy = Policy::new(Algorithm::SlidingLog, limits).unwrap();
        let clock = ManualClock::new();
        // Room for 16 keys: one shard.
        let by_byte = MemoryStore::with_clock(clock.clone()).with_max_keys(16).unwrap();
        let by_text = MemoryStore::with_clock(clock.clone()).with_max_keys(16).unwrap();
        let mut core: HashMap<u8, KeyState> = HashMap::new();
        let mut now = 10_000u64;
        for (key, step) in traffic {
            now = now.saturating_add_signed(step);
            clock.set(micros(now));
            let expected = core.entry(key).or_insert_with(|| KeyState::new(policy.algorithm())).decide(&policy, micros(now), 1);
            prop_assert_eq!(by_byte.decide_now(key, &policy), expected, "at {} µs", now);
            prop_assert_eq!(by_text.decide_now(format!("key {key}"), &policy), expected, "a String key at {} µs", now);
        }
    }

    /// A refused request changes nothing: a store that never saw the
    /// requests another refused decides every other request as it did,
    /// whatever the clock does (it steps back here). Optionally beside a
    /// third, wide limit, whose slots a state keeps on the heap.
    #[test]
    fn a_refusal_changes_nothing(
        limits in limits_with(1u64..40_000).prop_map(|mut l| { l.truncate(2); l }),
        wide in any::<bool>(),
        traffic in prop::collection::vec(
            (0u8..3, prop_oneof![3 => 0i64..20_000, 1 => -30_000i64..0]),
            1..300,
        ),
        algorithm in algorithm(),
    ) {
        let mut limits = limits;
        if wide {
            limits.push(Limit::new(70_000, Duration::from_secs(3600)).unwrap());
        }
        let policy = Policy::new(algorithm, limits).unwrap();
        let clock = ManualClock::new();
        let (all, accepted_only) = (MemoryStore::with_clock(clock.clone()), MemoryStore::with_clock(clock.clone()));
        let mut core: HashMap<u8, KeyState> = HashMap::new();
        let mut now = 50_000u64;
        for (key, step) in traffic {
            now = now.saturating_add_signed(step);
            clock.set(micros(now));
            let decision = all.decide_now(key, &policy);
            let state = core.entry(key).or_insert_with(|| KeyState::new(policy.algorithm()));
            let before = format!("{state:?}");
            prop_assert_eq!(state.decide(&policy, micros(now), 1), decision, "the core at {}", now);
            if decision.is_allowed() {
                prop_assert_eq!(accepted_only.decide_now(key, &policy), decision, "at {}", now);
            } else {
                prop_assert_eq!(accepted_only.peek_now(&key, &policy), decision, "peek at {}", now);
                prop_assert_eq!(format!("{state:?}"), before, "the core's state at {}", now);
            }
        }
    }

    /// The same far from the clock's zero, with leaps ahead of up to 2³⁶ µs
    /// and steps back of up to 2³⁰ µs. One difference is allowed, and
    /// checked: the store drops keys that have gone idle, so a clock
    /// stepping back behind a dropped key's last window finds it fresh
    /// where the core still remembers it. A live key is never forgotten.
    #[test]
    fn memory_store_agrees_with_the_core_far_from_zero_and_across_leaps(
        limits in wide_limits(),
        start in prop_oneof![Just(0u64), Just((1 << 31) - 50), 0u64..1 << 45, Just(1u64 << 62)],
        traffic in prop::collection::vec(
            (0u8..4, prop_oneof![
                4 => 0i64..20_000,
                1 => (1i64 << 29)..(1 << 36),
                1 => -(1i64 << 30)..0,
            ]),
            1..200,
        ),
        algorithm in algorithm(),
    ) {
        let policy = Policy::new(algorithm, limits).unwrap();
        let clock = ManualClock::new();
        let store = MemoryStore::with_clock(clock.clone());
        let mut states: HashMap<u8, KeyState> = HashMap::new();
        let mut now = start;
        let mut latest = start;
        for (key, step) in traffic {
            now = now.saturating_add_signed(step);
            clock.set(micros(now));
            let state = states.entry(key).or_insert_with(|| KeyState::new(policy.algorithm()));
            let remembered = state.clone();
            let expected = state.decide(&policy, micros(now), 1);
            let decided = store.decide_now(key, &policy);
            if decided != expected {
                let mut fresh = KeyState::new(policy.algorithm());
                let idle_at_latest = remembered.clone().decide(&policy, micros(latest), 1)
                    == fresh.clone().decide(&policy, micros(latest), 1);
                prop_assert!(idle_at_latest, "at {}: a live key was forgotten", now);
                prop_assert_eq!(decided, fresh.decide(&policy, micros(now), 1), "at {}", now);
                *state = fresh;
            }
            latest = latest.max(now);
        }
    }
}

#[test]
fn fixed_window_resets_at_the_boundary() {
    let limits = [Limit::new(2, Duration::from_secs(10)).unwrap()];
    let mut fixed = FixedWindow::new();
    assert!(fixed.decide(Duration::from_secs(9), &limits).is_allowed());
    assert!(fixed.decide(Duration::from_secs(9), &limits).is_allowed());
    let refused = fixed.decide(Duration::from_secs(9), &limits);
    assert_eq!(refused.retry_after(), Duration::from_secs(1));
    assert!(fixed.decide(Duration::from_secs(10), &limits).is_allowed());
}

#[test]
fn the_public_core_takes_more_limits_than_a_policy_without_panicking() {
    let limits: Vec<Limit> = (1..=12)
        .map(|i| Limit::new(i, Duration::from_secs(u64::from(i))).unwrap())
        .collect();
    let mut log = SlidingLog::new();
    let mut counter = SlidingCounter::new();
    let mut fixed = FixedWindow::new();
    for t in 0..30 {
        let now = Duration::from_millis(t * 100);
        log.decide(now, &limits);
        counter.decide(now, &limits);
        fixed.decide(now, &limits);
    }
    // The 1-per-second limit decides: at most one per second gets through.
    assert!(!log
        .decide(Duration::from_millis(2_950), &limits)
        .is_allowed());
}
