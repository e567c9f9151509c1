//! The scripts' replies, arrays of integers, turned into decisions through
//! the same algorithm code the memory store runs: the window and bucket
//! scripts send the state they judged, which [`Counts`] judges again. A reply that cannot be
//! true (the wrong length, a count over its limit, a stamp after now, a
//! remainder not below its limit's max, a verdict the algorithm would not
//! reach from the state sent) is a [`StoreError`], answered under the
//! failure policy.

use crate::algorithm::leases::free_after_taking;
use crate::algorithm::log::{blocked_for, quota};
use crate::algorithm::refusal::{tightest_known, Tally};
use crate::algorithm::{Algorithm, Decision, FixedWindow, SlidingCounter, TokenBucket};
use crate::limit::Limit;
use crate::policy::Policy;
use crate::state::Counts;
use crate::store::{StoreError, StoreErrorKind};

/// A reply's first integer.
const REFUSED: i64 = 0;
const ACCEPTED: i64 = 1;
const IN_PENALTY: i64 = 2;
const IN_FLIGHT_FULL: i64 = 3;

/// The decision `reply` gives a request of `cost` units under `policy`
/// (a peek is judged as a request of one), with the `hold` the call
/// passed: how long a chunk of the bucket's may be spent over, or how much
/// the log's windows are widened by under local quota.
pub(super) fn decision(
    policy: &Policy,
    reply: &[i64],
    cost: u32,
    hold: u64,
) -> Result<Decision, StoreError> {
    let malformed = || {
        StoreError::new(format!("unexpected script reply {reply:?}"), None)
            .with_kind(StoreErrorKind::Malformed)
    };
    let now = reply
        .get(1)
        .and_then(|&now| u64::try_from(now).ok())
        .ok_or_else(malformed)?;
    let decision = match reply[0] {
        // {2, now, the penalty's end}
        IN_PENALTY if reply.len() == 3 && policy.penalty_micros() > 0 => {
            let wait = u64::try_from(reply[2])
                .ok()
                .and_then(|until| until.checked_sub(now))
                .filter(|&wait| wait > 0);
            wait.map(|wait| Decision::in_penalty(policy.first_limit(), wait, now))
        }
        // {3, now}
        IN_FLIGHT_FULL if reply.len() == 2 && policy.in_flight().is_some() => {
            Some(Decision::in_flight_full(policy.first_limit(), now))
        }
        // {1, now, slots held before this request}
        ACCEPTED if policy.limits().is_empty() => {
            let cap = policy.in_flight().unwrap_or(0);
            let held = reply.get(2).and_then(|&held| usize::try_from(held).ok());
            let held = held.filter(|&held| held < cap as usize);
            held.map(|held| {
                Decision::slot_only(policy.first_limit(), free_after_taking(cap, held), now)
            })
        }
        REFUSED | ACCEPTED if policy.algorithm() == Algorithm::SlidingLog => {
            log_decision(policy, reply, now, hold)
        }
        REFUSED | ACCEPTED => judged(policy, &reply[2..], now).and_then(|mut counts| {
            let decision = counts.decide_holding(policy, now, cost, hold);
            (decision.is_allowed() == (reply[0] == ACCEPTED)).then_some(decision)
        }),
        _ => None,
    };
    decision.ok_or_else(malformed)
}

/// The state the window or bucket script judged the request against, in
/// the reply after its verdict and now: per limit the previous and current
/// counts, windows rolled to now's (the counter and the fixed window), or
/// how far its arrival time lay ahead of now, as µs and max-ths (the
/// bucket). `None` for numbers no state holds: the wrong count of them, a
/// count over its limit's max, a remainder not below it, an arrival time
/// past what a `u64` holds. The algorithm then decides afresh from it, and
/// must agree with the script.
fn judged(policy: &Policy, numbers: &[i64], now: u64) -> Option<Counts> {
    let (algorithm, limits) = (policy.algorithm(), policy.limits());
    if numbers.len() != 2 * limits.len() {
        return None;
    }
    let mut parts = Vec::with_capacity(limits.len());
    for (pair, limit) in numbers.chunks_exact(2).zip(limits) {
        let (first, second) = (u64::try_from(pair[0]).ok()?, u32::try_from(pair[1]).ok()?);
        parts.push(match algorithm {
            Algorithm::TokenBucket => (now.checked_add(first)?, 0, second),
            _ => (
                now / limit.window_micros(),
                u32::try_from(first).ok()?,
                second,
            ),
        });
    }
    let pairs = parts.iter().map(|&(word, _, last)| (word, last));
    let counts = match algorithm {
        Algorithm::SlidingCounter => {
            Counts::Counter(SlidingCounter::from_parts(parts.iter().copied()))
        }
        Algorithm::FixedWindow => Counts::Fixed(FixedWindow::from_parts(pairs)),
        _ => Counts::Bucket(TokenBucket::from_parts(pairs)),
    };
    counts.fits(limits).then_some(counts)
}

/// The log scripts' verdict, its windows widened by `widening` µs.
/// Refused: `{0, now, then per limit the stamp that blocks it, or -1}`.
/// Accepted: `{1, now, then per limit the stamps inside its window with
/// this request's, and the oldest of them}`. The decision names the
/// policy's own limit.
fn log_decision(policy: &Policy, reply: &[i64], now: u64, widening: u64) -> Option<Decision> {
    let widened: Vec<Limit>;
    let limits = if widening == 0 {
        policy.limits()
    } else {
        widened = policy
            .limits()
            .iter()
            .map(|l| l.widened(widening))
            .collect();
        &widened
    };
    let mut decision = judged_log(limits, reply, now)?;
    if let Some(index) = decision.limit_index() {
        decision.limit = policy.limits()[index];
    }
    Some(decision)
}

fn judged_log(limits: &[Limit], reply: &[i64], now: u64) -> Option<Decision> {
    if reply[0] == REFUSED {
        if reply.len() != 2 + limits.len() {
            return None;
        }
        let mut tally = Tally::default();
        for (index, limit) in limits.iter().enumerate() {
            let blocking = match reply[2 + index] {
                -1 => None,
                stamp => Some(u64::try_from(stamp).ok()?),
            };
            if let Some(wait) = blocking.and_then(|stamp| blocked_for(stamp, now, limit)) {
                tally.refuse(index, wait);
            }
        }
        return tally.refusal(limits, now);
    }
    if reply.len() != 2 + 2 * limits.len() {
        return None;
    }
    let mut quotas = Vec::with_capacity(limits.len());
    for (index, limit) in limits.iter().enumerate() {
        // This request is among the stamps, and no more are inside the
        // window than its limit allows; the oldest of them is inside it.
        let in_window = u32::try_from(reply[2 + 2 * index])
            .ok()
            .filter(|&n| n > 0 && n <= limit.max())?;
        let oldest = u64::try_from(reply[3 + 2 * index])
            .ok()
            .filter(|&oldest| oldest <= now && now - oldest <= limit.window_micros())?;
        quotas.push(quota(in_window, Some(oldest), now, limit));
    }
    Some(tightest_known(limits, now, &quotas))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::limit::Limit;

    fn policy(algorithm: Algorithm) -> Policy {
        let limit = |max, secs| Limit::new(max, Duration::from_secs(secs)).unwrap();
        Policy::new(algorithm, [limit(10, 1), limit(100, 60)]).unwrap()
    }

    fn summary(decision: &Decision) -> (bool, usize, u32, Duration) {
        (
            decision.is_allowed(),
            decision.limit_index().unwrap_or(usize::MAX),
            decision.remaining(),
            decision.retry_after(),
        )
    }

    #[test]
    fn a_window_reply_is_judged_again_by_the_algorithm() {
        let counter = policy(Algorithm::SlidingCounter);
        let now = 60_500_000;
        // Half of the previous second's 8 weigh 4, beside 5 now: one more fits.
        let accepted = decision(&counter, &[1, now, 8, 5, 0, 20], 1, 0).unwrap();
        assert!(accepted.is_allowed());
        assert_eq!(accepted.remaining(), 0);
        assert!(decision(&counter, &[0, now, 8, 6, 0, 20], 1, 0).is_ok());
        // The verdict the algorithm would not reach.
        assert!(decision(&counter, &[1, now, 8, 6, 0, 20], 1, 0).is_err());
        assert!(decision(&counter, &[0, now, 8, 5, 0, 20], 1, 0).is_err());
        // A count over its max, a negative one, a negative time, lengths
        // no reply has, verdicts no script sends.
        assert!(decision(&counter, &[0, now, 8, 11, 0, 20], 1, 0).is_err());
        assert!(decision(&counter, &[1, now, -1, 5, 0, 20], 1, 0).is_err());
        assert!(decision(&counter, &[1, -1, 8, 5, 0, 20], 1, 0).is_err());
        assert!(decision(&counter, &[1, now, 8, 5, 0], 1, 0).is_err());
        assert!(decision(&counter, &[1, now, 8, 5, 0, 20, 0], 1, 0).is_err());
        assert!(decision(&counter, &[3, now, 8, 5, 0, 20], 1, 0).is_err());
        assert!(decision(&counter, &[], 1, 0).is_err());
        // A cost judged as the script did.
        assert!(decision(&counter, &[0, now, 0, 8, 0, 20], 3, 0).is_ok());
        assert!(decision(
            &policy(Algorithm::FixedWindow),
            &[1, now, 0, 9, 0, 20],
            1,
            0
        )
        .is_ok());
    }

    #[test]
    fn a_bucket_reply_is_judged_again_by_the_algorithm() {
        // 10 a second and 100 a minute: a token every 100 ms and 600 ms.
        let bucket = policy(Algorithm::TokenBucket);
        let now = 1_780_000_000_000_000;
        let fresh = decision(&bucket, &[1, now, 0, 0, 0, 0], 1, 0).unwrap();
        assert_eq!(summary(&fresh), (true, 0, 9, Duration::ZERO));
        // 900 ms ahead: one more token fits exactly, one µs more does not.
        let last = decision(&bucket, &[1, now, 900_000, 0, 0, 0], 1, 0).unwrap();
        assert_eq!(summary(&last), (true, 0, 0, Duration::ZERO));
        let refused = decision(&bucket, &[0, now, 900_001, 0, 0, 0], 1, 0).unwrap();
        assert_eq!(summary(&refused), (false, 0, 0, Duration::from_micros(1)));
        // A cost judged as the script did: a whole bucket does not fit
        // behind a remainder just below max.
        assert!(decision(&bucket, &[1, now, 0, 0, 0, 0], 10, 0).is_ok());
        assert!(decision(&bucket, &[1, now, 0, 9, 0, 0], 10, 0).is_err());
        assert!(decision(&bucket, &[0, now, 0, 9, 0, 0], 10, 0).is_ok());
        // The verdict the algorithm would not reach.
        assert!(decision(&bucket, &[0, now, 900_000, 0, 0, 0], 1, 0).is_err());
        assert!(decision(&bucket, &[1, now, 900_001, 0, 0, 0], 1, 0).is_err());
        // A remainder not below its max, negative fields, lengths no reply
        // has.
        assert!(decision(&bucket, &[1, now, 0, 10, 0, 0], 1, 0).is_err());
        assert!(decision(&bucket, &[1, now, 0, 0, 0, 100], 1, 0).is_err());
        assert!(decision(&bucket, &[1, now, -1, 0, 0, 0], 1, 0).is_err());
        assert!(decision(&bucket, &[1, now, 0, -1, 0, 0], 1, 0).is_err());
        assert!(decision(&bucket, &[1, now, 0, 0, 0], 1, 0).is_err());
        assert!(decision(&bucket, &[1, now, 0, 0, 0, 0, 0], 1, 0).is_err());
        // Times at the edge of what fits are judged, not a panic.
        let _ = decision(&bucket, &[0, i64::MAX, i64::MAX, 9, i64::MAX, 99], 1, 0);
        let _ = decision(&bucket, &[1, 0, i64::MAX, 0, 0, 0], 1, 0);
    }

    #[test]
    fn a_log_reply_that_cannot_be_true_is_an_error() {
        let log = policy(Algorithm::SlidingLog);
        let now = 2_000_000;
        let accepted = decision(&log, &[1, now, 4, 1_500_000, 4, 1_500_000], 1, 0).unwrap();
        assert!(accepted.is_allowed());
        assert_eq!(accepted.remaining(), 6);
        let refused = decision(&log, &[0, now, 1_200_000, -1], 1, 0).unwrap();
        assert_eq!(
            summary(&refused),
            (false, 0, 0, Duration::from_micros(200_001))
        );
        // No stamp blocks, or one outside its window: no refusal.
        assert!(decision(&log, &[0, now, -1, -1], 1, 0).is_err());
        assert!(decision(&log, &[0, now, 999_999, -1], 1, 0).is_err());
        // No stamps, more than the limit, an oldest outside its window or
        // after now, a negative stamp.
        assert!(decision(&log, &[1, now, 0, now, 4, now], 1, 0).is_err());
        assert!(decision(&log, &[1, now, 11, now, 11, now], 1, 0).is_err());
        assert!(decision(&log, &[1, now, 4, 999_999, 4, now], 1, 0).is_err());
        assert!(decision(&log, &[1, now, 4, now + 1, 4, now], 1, 0).is_err());
        assert!(decision(&log, &[0, now, -2, -1], 1, 0).is_err());
        // A refusal's length for an acceptance, and the other way round.
        assert!(decision(&log, &[1, now, 4, now], 1, 0).is_err());
        assert!(decision(&log, &[0, now, 1_200_000, -1, -1, -1], 1, 0).is_err());
    }

    #[test]
    fn a_penalty_reply_needs_a_penalty_and_a_wait() {
        let plain = policy(Algorithm::SlidingLog);
        let penalised = plain.clone().with_penalty(Duration::from_secs(30));
        let now = 2_000_000;
        let refusal = decision(&penalised, &[2, now, now + 30_000_000], 1, 0).unwrap();
        assert_eq!(refusal.retry_after(), Duration::from_secs(30));
        assert!(decision(&plain, &[2, now, now + 30_000_000], 1, 0).is_err());
        assert!(decision(&penalised, &[2, now, now], 1, 0).is_err());
        assert!(decision(&penalised, &[2, now, now + 1, 0], 1, 0).is_err());
    }
}
