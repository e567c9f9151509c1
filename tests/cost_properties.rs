//! Property tests of costs and settling in the memory store, against naive
//! models that keep every accepted unit: the store accepts exactly what
//! the model accepts, the log's waits are exact, and after an acceptance no
//! limit holds more than it allows.

use std::collections::HashMap;
use std::time::Duration;

use proptest::prelude::*;
use tower_sliding_window::{Algorithm, Decision, Limit, ManualClock, MemoryStore, Policy, Store};

/// One step: time passes, a request of some cost arrives, and if it is
/// accepted its response may settle it at some other use.
#[derive(Clone, Debug)]
struct Step {
    advance: u64,
    cost: u32,
    settle: Option<u32>,
    settle_after: u64,
}

fn steps() -> impl Strategy<Value = Vec<Step>> {
    let step = (
        prop_oneof![Just(0u64), 0u64..3_000, 0u64..30_000],
        0u32..14,
        prop::option::of(0u32..16),
        0u64..2_000,
    )
        .prop_map(|(advance, cost, settle, settle_after)| Step {
            advance,
            cost,
            settle,
            settle_after,
        });
    prop::collection::vec(step, 1..120)
}

/// One or two limits of maxima up to 12 and windows of 1 to 20 ms (in µs).
fn limits() -> impl Strategy<Value = Vec<Limit>> {
    prop::collection::vec((1u32..13, 1_000u64..20_000), 1..=2).prop_map(|specs| {
        specs
            .into_iter()
            .map(|(max, w)| Limit::new(max, Duration::from_micros(w)).unwrap())
            .collect()
    })
}

/// Every unit accepted, as the algorithms count them.
#[derive(Default)]
struct Model {
    /// The log's stamps, oldest first, one a unit.
    stamps: Vec<u64>,
    /// The windows' counts by limit and window index, for the counter and
    /// the fixed window.
    counts: HashMap<(usize, u64), u32>,
}

impl Model {
    fn count(&self, limit: usize, window: u64) -> u32 {
        self.counts.get(&(limit, window)).copied().unwrap_or(0)
    }

    /// Adds `units` (or takes them back), keeping the count within 0 and `max`.
    fn add(&mut self, limit: usize, window: u64, units: i64, max: u32) {
        let count = self.counts.entry((limit, window)).or_insert(0);
        *count = (i64::from(*count) + units).clamp(0, i64::from(max)) as u32;
    }

    /// Whether `cost` units fit every limit at `now`; for the log, also the
    /// exact wait of a refusal.
    fn fits(&self, algorithm: Algorithm, limits: &[Limit], now: u64, cost: u32) -> (bool, u64) {
        let mut wait = 0;
        let mut fits = true;
        for (i, limit) in limits.iter().enumerate() {
            let (max, w) = (u64::from(limit.max()), micros(limit));
            let cost = u64::from(cost);
            match algorithm {
                Algorithm::SlidingLog => {
                    let inside: Vec<u64> = self
                        .stamps
                        .iter()
                        .copied()
                        .filter(|&s| s + w >= now)
                        .collect();
                    if cost > max {
                        fits = false;
                    } else if inside.len() as u64 + cost > max {
                        fits = false;
                        // The (max - cost + 1)-th newest must leave.
                        let blocking = inside[inside.len() - (max - cost + 1) as usize];
                        wait = wait.max(blocking + w + 1 - now);
                    }
                }
                Algorithm::FixedWindow => {
                    if u64::from(self.count(i, now / w)) + cost > max {
                        fits = false;
                        wait = wait.max(w - now % w);
                    }
                }
                Algorithm::SlidingCounter => {
                    let (k, e) = (now / w, now % w);
                    let previous = k.checked_sub(1).map_or(0, |p| self.count(i, p));
                    let current = self.count(i, k);
                    let lhs = u128::from(previous) * u128::from(w - e)
                        + u128::from(u64::from(current) + cost) * u128::from(w);
                    if lhs > u128::from(max) * u128::from(w) {
                        fits = false;
                    }
                }
                other => unimplemented!("no model of {other:?}"),
            }
        }
        (fits, wait)
    }

    fn record(&mut self, algorithm: Algorithm, limits: &[Limit], now: u64, units: u32) {
        match algorithm {
            Algorithm::SlidingLog => {
                self.stamps.extend(std::iter::repeat_n(now, units as usize));
                let capacity = limits.iter().map(Limit::max).max().unwrap() as usize;
                let over = self.stamps.len().saturating_sub(capacity);
                self.stamps.drain(..over);
            }
            _ => {
                for (i, limit) in limits.iter().enumerate() {
                    let window = now / micros(limit);
                    self.add(i, window, i64::from(units), limit.max());
                }
            }
        }
    }

    /// Gives back `units` of a request recorded at `at`, judged from `now`.
    fn give_back(&mut self, algorithm: Algorithm, limits: &[Limit], at: u64, now: u64, units: u32) {
        match algorithm {
            Algorithm::SlidingLog => {
                for _ in 0..units {
                    if let Some(i) = self.stamps.iter().rposition(|&s| s == at) {
                        self.stamps.remove(i);
                    }
                }
            }
            _ => {
                for (i, limit) in limits.iter().enumerate() {
                    let w = micros(limit);
                    let (counted_in, current) = (at / w, now / w);
                    // Only the current window, and the counter's previous one,
                    // still hold what a request counted.
                    let held = counted_in == current
                        || (algorithm == Algorithm::SlidingCounter && counted_in + 1 == current);
                    if held {
                        self.add(i, counted_in, -i64::from(units), limit.max());
                    }
                }
            }
        }
    }

    /// After an acceptance, no limit holds more than it allows.
    fn within_limits(&self, algorithm: Algorithm, limits: &[Limit], now: u64) -> bool {
        limits.iter().enumerate().all(|(i, limit)| {
            let (max, w) = (u64::from(limit.max()), micros(limit));
            match algorithm {
                Algorithm::SlidingLog => {
                    self.stamps.iter().filter(|&&s| s + w >= now).count() as u64 <= max
                }
                Algorithm::FixedWindow => u64::from(self.count(i, now / w)) <= max,
                Algorithm::SlidingCounter => {
                    let (k, e) = (now / w, now % w);
                    let previous = k.checked_sub(1).map_or(0, |p| self.count(i, p));
                    u128::from(previous) * u128::from(w - e)
                        + u128::from(self.count(i, k)) * u128::from(w)
                        <= u128::from(max) * u128::from(w)
                }
                other => unimplemented!("no model of {other:?}"),
            }
        })
    }
}

fn algorithms() -> impl Strategy<Value = Algorithm> {
    prop_oneof![
        Just(Algorithm::SlidingLog),
        Just(Algorithm::SlidingCounter),
        Just(Algorithm::FixedWindow),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn costs_and_settling_match_a_model_that_keeps_every_unit(
        algorithm in algorithms(),
        limits in limits(),
        steps in steps(),
    ) {
        let clock = ManualClock::new();
        let store = MemoryStore::with_clock(clock.clone());
        let policy = Policy::new(algorithm, limits.iter().copied()).unwrap();
        let binding = store.bind::<&str>(&policy);
        let smallest = limits.iter().map(Limit::max).min().unwrap();
        let mut model = Model::default();
        let mut now = 1_000_000;
        let mut overcharged = false;
        for step in steps {
            now += step.advance;
            clock.set(Duration::from_micros(now));
            let decision: Decision = store.decide_cost_bound("k", &binding, step.cost).into_inner().unwrap();
            let (fits, wait) = model.fits(algorithm, &limits, now, step.cost);
            let expected = step.cost == 0 || (step.cost <= smallest && fits);
            prop_assert_eq!(decision.is_allowed(), expected, "at {} cost {}", now, step.cost);
            if !decision.is_allowed() && step.cost <= smallest && algorithm != Algorithm::SlidingCounter {
                prop_assert_eq!(decision.retry_after(), Duration::from_micros(wait));
            }
            if !decision.is_allowed() || step.cost == 0 && step.settle.is_none() {
                continue;
            }
            model.record(algorithm, &limits, now, step.cost);
            if !overcharged {
                prop_assert!(model.within_limits(algorithm, &limits, now), "over a limit at {}", now);
            }
            if let Some(used) = step.settle {
                now += step.settle_after;
                clock.set(Duration::from_micros(now));
                store.settle_bound("k", &binding, &decision, step.cost, used).into_inner().unwrap();
                if used < step.cost {
                    model.give_back(algorithm, &limits, now - step.settle_after, now, step.cost - used);
                } else if used > step.cost {
                    model.record(algorithm, &limits, now, used - step.cost);
                    overcharged = true;
                }
            }
            // What a fixed window holds is the sum of what its requests
            // really used (as far as a full window).
            if let (Algorithm::FixedWindow, [limit]) = (algorithm, limits.as_slice()) {
                let peek = store.peek_now(&"k", &policy);
                if peek.is_allowed() {
                    let held = model.count(0, now / micros(limit));
                    prop_assert_eq!(peek.remaining(), limit.max() - held - 1, "at {}", now);
                }
            }
        }
    }
}

fn micros(limit: &Limit) -> u64 {
    limit.window().as_micros() as u64
}
