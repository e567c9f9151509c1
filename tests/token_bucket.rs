//! The token bucket against a naive exact model (every time multiplied by
//! its limit's `max`, in 128 bits) on random traffic with costs, settles
//! and two limits, at small times and at Unix-epoch ones; and the bound it
//! promises: no closed interval of one window's length passes more than
//! twice the limit.

use std::time::Duration;

use proptest::prelude::*;
use tower_sliding_window::{Algorithm, Decision, KeyState, Limit, Policy};

/// One limit of the model: its arrival time times `max`.
#[derive(Clone, Debug)]
struct Bucket {
    max: u128,
    w: u128,
    tat: u128,
}

impl Bucket {
    fn new(limit: &Limit) -> Self {
        Self {
            max: u128::from(limit.max()),
            w: limit.window().as_micros(),
            tat: 0,
        }
    }

    /// The arrival time after `cost` units at `now`.
    fn next(&self, now: u128, cost: u128) -> u128 {
        self.tat.max(now * self.max) + cost * self.w
    }

    /// The wait before `cost` units fit at `now`, rounded up; 0 if they fit.
    fn wait(&self, now: u128, cost: u128) -> u128 {
        let over = self
            .next(now, cost)
            .saturating_sub((now + self.w) * self.max);
        over.div_ceil(self.max)
    }

    /// Whole tokens left at `now`.
    fn remaining(&self, now: u128) -> u128 {
        let ahead = self.tat.max(now * self.max) - now * self.max;
        (self.w * self.max - ahead) / self.w
    }

    fn settle(&mut self, at: u128, now: u128, cost: u128, used: u128) {
        if used == cost {
            return;
        }
        if used < cost {
            let unrefilled = (at * self.max + cost * self.w).saturating_sub(now * self.max);
            self.tat = self
                .tat
                .saturating_sub(((cost - used) * self.w).min(unrefilled));
        } else {
            let charged = self.tat.max(now * self.max) + (used - cost) * self.w;
            self.tat = charged.min(((now + self.w) * self.max).max(self.tat));
        }
    }
}

/// Judges `cost` units at `now` by the model: (allowed, retry-after µs,
/// tokens left under the tightest limit).
fn model_decide(buckets: &mut [Bucket], now: u128, cost: u128) -> (bool, u128, u128) {
    if cost == 0 {
        // Passes, taking nothing, and is told what one unit would be
        // (docs/design.md, "A peek"): one token fewer than are there.
        let (fits, _, left) = model_decide(&mut buckets.to_vec(), now, 1);
        return (true, 0, if fits { left } else { 0 });
    }
    let wait = buckets.iter().map(|b| b.wait(now, cost)).max().unwrap();
    if wait > 0 {
        return (false, wait, 0);
    }
    for bucket in buckets.iter_mut() {
        bucket.tat = bucket.next(now, cost);
    }
    let left = buckets.iter().map(|b| b.remaining(now)).min().unwrap();
    (true, 0, left)
}

fn policy() -> impl Strategy<Value = Policy> {
    // Small maxima, and some past 2^26, where Redis splits its products.
    let max = prop_oneof![4 => 1u32..12, 1 => 1u32 << 26..u32::MAX];
    let limit = (
        max,
        prop_oneof![1u64..100, 1_000u64..10_000_000, 1u64..1 << 36],
    );
    prop::collection::vec(limit, 1..=2).prop_map(|limits| {
        let limits = limits
            .into_iter()
            .map(|(max, w)| Limit::new(max, Duration::from_micros(w)).unwrap());
        Policy::new(Algorithm::TokenBucket, limits).unwrap()
    })
}

#[derive(Clone, Debug)]
enum Step {
    Decide(u32),
    Settle(u32),
    Forward(u64),
    Back(u64),
}

fn steps() -> impl Strategy<Value = Vec<Step>> {
    prop::collection::vec(
        prop_oneof![
            5 => prop_oneof![3 => Just(1u32), 1 => 0u32..8, 1 => 1u32 << 26..u32::MAX].prop_map(Step::Decide),
            2 => (0u32..16).prop_map(Step::Settle),
            4 => prop_oneof![0u64..50, 0u64..2_000_000, 0u64..1 << 34].prop_map(Step::Forward),
            1 => (0u64..1_000_000).prop_map(Step::Back),
        ],
        1..150,
    )
}

/// Microseconds since the Unix epoch around 2026: `now · max` passes 2^53.
const EPOCH_2026: u64 = 1_780_000_000_000_000;

/// Whatever judges one key under a policy: `KeyState`, or a store.
trait Judge {
    fn decide(&mut self, policy: &Policy, now: u64, cost: u32) -> Decision;
    fn settle(&mut self, policy: &Policy, now: u64, admitted: &Decision, cost: u32, used: u32);
}

impl Judge for KeyState {
    fn decide(&mut self, policy: &Policy, now: u64, cost: u32) -> Decision {
        KeyState::decide(self, policy, Duration::from_micros(now), cost)
    }

    fn settle(&mut self, policy: &Policy, now: u64, admitted: &Decision, cost: u32, used: u32) {
        KeyState::settle(
            self,
            policy,
            Duration::from_micros(now),
            admitted,
            cost,
            used,
        );
    }
}

/// Replays `steps` against `judge` and the model, decision for decision.
fn agrees_with_the_model(
    judge: &mut impl Judge,
    policy: &Policy,
    steps: Vec<Step>,
    start: u64,
) -> Result<(), TestCaseError> {
    let mut buckets: Vec<Bucket> = policy.limits().iter().map(Bucket::new).collect();
    let mut now = start;
    let mut last: Option<(Decision, u32)> = None;
    for step in steps {
        match step {
            Step::Decide(cost) => {
                let decision = judge.decide(policy, now, cost);
                let smallest = policy.limits().iter().map(Limit::max).min().unwrap();
                if cost > smallest {
                    prop_assert!(!decision.is_allowed());
                    continue;
                }
                let (allowed, wait, left) =
                    model_decide(&mut buckets, u128::from(now), u128::from(cost));
                prop_assert_eq!(decision.is_allowed(), allowed, "at {}", now);
                prop_assert_eq!(decision.retry_after().as_micros(), wait, "at {}", now);
                prop_assert_eq!(u128::from(decision.remaining()), left, "at {}", now);
                if allowed {
                    last = Some((decision, cost));
                }
            }
            Step::Settle(used) => {
                let Some((admitted, cost)) = last.take() else {
                    continue;
                };
                judge.settle(policy, now, &admitted, cost, used);
                let judged_at = admitted.decided_at().as_micros();
                for bucket in &mut buckets {
                    bucket.settle(
                        judged_at,
                        u128::from(now),
                        u128::from(cost),
                        u128::from(used),
                    );
                }
            }
            Step::Forward(by) => now += by,
            Step::Back(by) => now = now.saturating_sub(by),
        }
    }
    Ok(())
}

/// Checks that no closed interval of `limit`'s window holds more than
/// twice its `max` of the units `passed` at each time.
fn never_twice_the_limit(passed: &[(u64, f64)], limit: &Limit) -> Result<(), TestCaseError> {
    let w = limit.window().as_micros() as u64;
    for &(from, _) in passed {
        let inside: f64 = passed
            .iter()
            .filter(|(t, _)| *t >= from && *t <= from + w)
            .map(|(_, n)| n)
            .sum();
        prop_assert!(
            inside <= 2.0 * f64::from(limit.max()) + 1e-3,
            "{} units in [{}, {}] under {:?}",
            inside,
            from,
            from + w,
            limit
        );
    }
    Ok(())
}

fn one_limit() -> impl Strategy<Value = Policy> {
    (1u32..10, 1u64..1_000_000).prop_map(|(max, w)| {
        let limit = Limit::new(max, Duration::from_micros(w)).unwrap();
        Policy::new(Algorithm::TokenBucket, [limit]).unwrap()
    })
}

/// Arrivals: (gap in µs, cost, units the response says it used).
fn arrivals() -> impl Strategy<Value = Vec<(u64, u32, u32)>> {
    prop::collection::vec((0u64..300_000, 1u32..4, 0u32..8), 1..200)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn the_bucket_decides_as_the_exact_model(policy in policy(), steps in steps(), epoch in any::<bool>()) {
        let start = if epoch { EPOCH_2026 } else { 0 };
        agrees_with_the_model(&mut KeyState::new(Algorithm::TokenBucket), &policy, steps, start)?;
    }

    /// Each request settled at once, giving back or charging more; what it
    /// took is read from the arrival time in the state's bytes. A bucket
    /// refilled since is charged from now: what lies behind now was given
    /// back by time, not taken.
    #[test]
    fn no_window_passes_more_than_twice_the_limit(policy in one_limit(), arrivals in arrivals()) {
        let limit = policy.limits()[0];
        let refill_rate = f64::from(limit.max()) / limit.window().as_micros() as f64;
        let mut state = KeyState::new(Algorithm::TokenBucket);
        let mut passed = Vec::new();
        let mut now = 0;
        for (gap, cost, used) in arrivals {
            now += gap;
            let before = tokens_taken(&state, &policy).max(now as f64 * refill_rate);
            let decision = Judge::decide(&mut state, &policy, now, cost);
            if decision.is_allowed() {
                Judge::settle(&mut state, &policy, now, &decision, cost, used);
                passed.push((now, tokens_taken(&state, &policy) - before));
            }
        }
        never_twice_the_limit(&passed, &limit)?;
    }
}

/// The tokens a bucket's arrival time stands for, read from its bytes
/// (docs/design.md, "Key state as bytes"): the arrival time in tokens.
fn tokens_taken(state: &KeyState, policy: &Policy) -> f64 {
    let bytes = state.to_bytes();
    let limit = policy.limits()[0];
    let Some(record) = bytes.get(2..14) else {
        return 0.0;
    };
    let micros = u64::from_le_bytes(record[..8].try_into().unwrap());
    let rem = u32::from_le_bytes(record[8..].try_into().unwrap());
    let tat = micros as f64 + f64::from(rem) / f64::from(limit.max());
    tat * f64::from(limit.max()) / limit.window().as_micros() as f64
}

/// A give-back that borrows a whole µs under a limit past 2^31, where a
/// remainder plus `max` does not fit 32 bits, leaves the bucket exactly
/// as the model does.
#[test]
fn a_give_back_borrows_exactly_under_a_limit_past_2_to_the_31() {
    // T = 7,999,999,999 / 4e9 µs: a µs and 3,999,999,999 4e9-ths of one.
    let limit = Limit::new(4_000_000_000, Duration::from_micros(7_999_999_999)).unwrap();
    let policy = Policy::new(Algorithm::TokenBucket, [limit]).unwrap();
    let mut state = KeyState::new(Algorithm::TokenBucket);
    let mut buckets = vec![Bucket::new(&limit)];
    let now = EPOCH_2026;
    let at = Duration::from_micros(now);
    let admitted = state.decide(&policy, at, 2);
    assert!(model_decide(&mut buckets, now.into(), 2).0);
    // Two tokens' time ends 3,999,999,998 4e9-ths into a µs; giving one
    // back (a µs and 3,999,999,999) borrows.
    state.settle(&policy, at, &admitted, 2, 1);
    buckets[0].settle(now.into(), now.into(), 2, 1);
    for cost in [3_999_999_999, 4_000_000_000] {
        let decision = state.clone().decide(&policy, at, cost);
        let (allowed, wait, left) = model_decide(&mut buckets.clone(), now.into(), cost.into());
        assert_eq!(decision.is_allowed(), allowed, "cost {cost}");
        assert_eq!(decision.retry_after().as_micros(), wait, "cost {cost}");
        assert_eq!(u128::from(decision.remaining()), left, "cost {cost}");
    }
}

#[cfg(feature = "redis")]
#[path = "support/redis_server.rs"]
mod redis_server;
#[cfg(feature = "redis")]
#[path = "support/stores.rs"]
mod stores;

/// The same on Redis, with Unix-epoch times as the client's clock: the
/// script's arithmetic must stay exact where `now · max` passes 2^53.
#[cfg(feature = "redis")]
mod on_redis {
    use tokio::runtime::Runtime;
    use tower_sliding_window::{ManualClock, RedisStore, Store};

    use super::*;
    use crate::redis_server::shared_url;
    use crate::stores::redis_store;

    /// One key on a Redis store whose clock the test sets.
    struct OnRedis {
        runtime: Runtime,
        store: RedisStore,
        clock: ManualClock,
    }

    impl OnRedis {
        fn new() -> Self {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            let clock = ManualClock::new();
            let store = runtime.block_on(redis_store(&shared_url(), "bucket", &clock));
            Self {
                runtime,
                store,
                clock,
            }
        }
    }

    impl Judge for OnRedis {
        fn decide(&mut self, policy: &Policy, now: u64, cost: u32) -> Decision {
            self.clock.set(Duration::from_micros(now));
            let decision = self.store.decide_cost("k".to_owned(), policy, cost);
            self.runtime.block_on(decision).unwrap()
        }

        fn settle(&mut self, policy: &Policy, now: u64, admitted: &Decision, cost: u32, used: u32) {
            self.clock.set(Duration::from_micros(now));
            let binding = Store::<String>::bind(&self.store, policy);
            let settled = self
                .store
                .settle_bound("k".to_owned(), &binding, admitted, cost, used);
            self.runtime.block_on(settled).unwrap();
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        #[test]
        fn redis_decides_as_the_exact_model(policy in policy(), steps in steps()) {
            agrees_with_the_model(&mut OnRedis::new(), &policy, steps, EPOCH_2026)?;
        }

        /// Settles that give back, counting what each request used.
        #[test]
        fn redis_never_passes_twice_the_limit(policy in one_limit(), arrivals in arrivals()) {
            let mut redis = OnRedis::new();
            let mut passed = Vec::new();
            let mut now = EPOCH_2026;
            for (gap, cost, used) in arrivals {
                now += gap;
                let used = used.min(cost);
                let decision = redis.decide(&policy, now, cost);
                if decision.is_allowed() {
                    redis.settle(&policy, now, &decision, cost, used);
                    passed.push((now, f64::from(used)));
                }
            }
            never_twice_the_limit(&passed, &policy.limits()[0])?;
        }
    }
}
