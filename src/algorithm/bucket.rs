//! Token bucket, as GCRA: one theoretical arrival time per limit.

use std::time::Duration;

use super::decision::{Decision, Quota, Settlement};
use super::per_limit::PerLimit;
use super::refusal::{accepted, refused, tightest, Tally};
use crate::clock::micros;
use crate::limit::Limit;

/// A limit's theoretical arrival time (TAT): `micros` and `rem / max` of a
/// microsecond, `rem` below the limit's `max`. A limit of `max` per `W`
/// refills one token every `W / max`, rarely a whole number of
/// microseconds; keeping the fraction as a remainder keeps the bucket
/// exact without ever multiplying a time by `max`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Tat {
    pub(crate) micros: u64,
    pub(crate) rem: u32,
}

impl Tat {
    /// The instant `micros`, with no fraction.
    fn at(micros: u64) -> Self {
        Self { micros, rem: 0 }
    }

    /// This time with its remainder below `limit`'s `max`. Only bytes
    /// written under another limit (or by no store) hold a larger one:
    /// they are read as the next whole microsecond, as
    /// [`ceil`](Self::ceil) and so a state's idle time read them.
    #[inline]
    fn normalized(self, limit: &Limit) -> Self {
        if self.rem < limit.max() {
            return self;
        }
        Self::at(self.ceil())
    }

    /// This time (its remainder below `max`) plus `n` tokens' refill
    /// under `limit`.
    #[inline]
    fn plus(self, n: u32, limit: &Limit) -> Self {
        let (whole, rem) = tokens(n, limit);
        // Both remainders are below `max`: their sum carries at most one.
        let (rem, carry) = match self.rem.checked_add(rem) {
            Some(sum) if sum < limit.max() => (sum, 0),
            _ => (self.rem.wrapping_sub(limit.max()).wrapping_add(rem), 1),
        };
        Self {
            micros: self.micros.saturating_add(whole).saturating_add(carry),
            rem,
        }
    }

    /// This time less `other`, or zero if `other` is later.
    fn minus(self, other: Tat, limit: &Limit) -> Self {
        if self <= other {
            return Self::default();
        }
        if self.rem >= other.rem {
            Self {
                micros: self.micros - other.micros,
                rem: self.rem - other.rem,
            }
        } else {
            // A whole µs borrowed. Subtracting first keeps the sum below
            // max, which may be past 2^31: `self.rem + max` may not fit.
            Self {
                micros: self.micros - other.micros - 1,
                rem: self.rem + (limit.max() - other.rem),
            }
        }
    }

    /// The first whole microsecond at or after this time.
    fn ceil(self) -> u64 {
        self.micros.saturating_add(u64::from(self.rem > 0))
    }
}

/// `n` tokens' refill time under `limit`, `n · W / max`, as whole
/// microseconds and a remainder in `max`-ths of one: one division when
/// `n · W` fits 64 bits, as it does for any request of one unit.
#[inline]
fn tokens(n: u32, limit: &Limit) -> (u64, u32) {
    let max = u64::from(limit.max());
    match u64::from(n).checked_mul(limit.window_micros()) {
        Some(total) => (total / max, (total % max) as u32),
        None => {
            let total = u128::from(n) * u128::from(limit.window_micros());
            let whole = u64::try_from(total / u128::from(max)).unwrap_or(u64::MAX);
            (whole, (total % u128::from(max)) as u32)
        }
    }
}

/// The arrival time after a request of `cost` units at `now`: charged
/// from the stored one, or from `now` if the bucket has since refilled.
fn charged(tat: Tat, now: u64, cost: u32, limit: &Limit) -> Tat {
    tat.normalized(limit).max(Tat::at(now)).plus(cost, limit)
}

/// How long until a request that would move the arrival time to `next`
/// fits `limit` at `now`, if it does not fit now: until `next` is at most
/// one window ahead, rounded up to the microsecond.
fn wait(next: Tat, now: u64, limit: &Limit) -> Option<u64> {
    let ahead = next.micros - now;
    let w = limit.window_micros();
    (ahead > w || (ahead == w && next.rem > 0)).then(|| ahead - w + u64::from(next.rem > 0))
}

/// State of the token bucket for every limit of a policy.
///
/// A limit of `max` per `W` is a bucket of `max` tokens, full for a new
/// key and refilled one token every `W / max`. A request of cost `c`
/// passes if every limit's bucket holds `c` tokens, and then takes them
/// from all: a burst of `max` at once passes, and then one more every
/// `W / max`. In any closed interval of one window's length a bucket
/// passes at most twice its `max` (a full burst and a window's refill).
///
/// A clock that steps back needs no rule of its own: the arrival times
/// never move back as it judges, so an earlier time only judges more strictly.
#[derive(Clone, Debug, Default)]
pub struct TokenBucket {
    records: PerLimit<Tat>,
}

impl TokenBucket {
    /// A bucket that has seen nothing: full.
    pub fn new() -> Self {
        Self::default()
    }

    /// A bucket holding one `(micros, rem)` arrival time per limit, as a
    /// stored state reports them.
    pub(crate) fn from_parts(records: impl IntoIterator<Item = (u64, u32)>) -> Self {
        Self::from_records(records.into_iter().map(|(micros, rem)| Tat { micros, rem }))
    }

    /// A bucket holding `records`, one arrival time per limit.
    pub(crate) fn from_records(records: impl IntoIterator<Item = Tat>) -> Self {
        Self {
            records: records.into_iter().collect(),
        }
    }

    /// Its arrival times, one per limit.
    pub(crate) fn records(&self) -> &[Tat] {
        &self.records
    }

    /// One `(micros, rem)` per limit, as [`from_parts`](Self::from_parts) takes them.
    pub(crate) fn parts(&self) -> impl Iterator<Item = (u64, u32)> + '_ {
        self.records.iter().map(|tat| (tat.micros, tat.rem))
    }

    /// Judges a request at `now` (since the clock's zero) against every
    /// limit, taking a token from each if all have one. A different number
    /// of limits than last time starts with full buckets.
    ///
    /// # Panics
    ///
    /// If `limits` is empty: a decision needs a limit to report. A
    /// [`Policy`](crate::Policy) always has one.
    pub fn decide(&mut self, now: Duration, limits: &[Limit]) -> Decision {
        self.decide_micros(micros(now), limits, 1)
    }

    /// Judges a request of `cost` units, from 1 to every limit's `max`.
    pub(crate) fn decide_micros(&mut self, now: u64, limits: &[Limit], cost: u32) -> Decision {
        decide(self.records.fit(limits.len()), now, limits, cost)
    }

    /// Judges a chunk of local quota as [`decide_holding`] does.
    pub(crate) fn decide_holding(
        &mut self,
        now: u64,
        limits: &[Limit],
        cost: u32,
        hold: u64,
    ) -> Decision {
        decide_holding(self.records.fit(limits.len()), now, limits, cost, hold)
    }

    pub(crate) fn idle_from_micros(&self, _limits: &[Limit]) -> u64 {
        idle_from(&self.records)
    }

    /// Settles a request as [`settle`] does.
    pub(crate) fn settle_micros(&mut self, settled: &Settlement, limits: &[Limit]) {
        settle(self.records.fit(limits.len()), settled, limits);
    }
}

/// Judges a request of `cost` units at `now` against every limit, and
/// takes the tokens from every bucket if all hold them; a refusal changes
/// nothing.
pub(crate) fn decide(records: &mut [Tat], now: u64, limits: &[Limit], cost: u32) -> Decision {
    decide_holding(records, now, limits, cost, 0)
}

/// [`decide`] for a chunk of local quota, `cost` units that may be spent
/// over the next `hold` µs: judged at `now`, when it is granted, and
/// charged from `now + hold` if the bucket has refilled past that, as if
/// every unit were taken at the last moment it may be (docs/design.md,
/// "Local quota").
pub(crate) fn decide_holding(
    records: &mut [Tat],
    now: u64,
    limits: &[Limit],
    cost: u32,
    hold: u64,
) -> Decision {
    if let ([record], [limit]) = (&mut *records, limits) {
        return decide_one(record, now, limit, cost, hold);
    }
    let mut tally = Tally::default();
    for (index, (tat, limit)) in records.iter().zip(limits).enumerate() {
        if let Some(wait) = wait(charged(*tat, now, cost, limit), now, limit) {
            tally.refuse(index, wait);
        }
    }
    if let Some(refusal) = tally.refusal(limits, now) {
        return refusal;
    }
    for (tat, limit) in records.iter_mut().zip(limits) {
        *tat = charged(*tat, now.saturating_add(hold), cost, limit);
    }
    let quota_of = |index: usize| quota_ahead(records[index], now);
    tightest(
        limits,
        now,
        |index| quota_of(index).resolve(&limits[index], now).0,
        quota_of,
    )
}

/// [`decide_holding`] for one limit, the common case.
#[inline]
pub(crate) fn decide_one(tat: &mut Tat, now: u64, limit: &Limit, cost: u32, hold: u64) -> Decision {
    let limits = std::slice::from_ref(limit);
    let next = charged(*tat, now, cost, limit);
    if let Some(wait) = wait(next, now, limit) {
        return refused(limits, now, 0, wait);
    }
    *tat = if hold == 0 {
        next
    } else {
        charged(*tat, now.saturating_add(hold), cost, limit)
    };
    accepted(limits, now, 0, quota_ahead(*tat, now))
}

/// The quota of a bucket whose arrival time is `tat` (no earlier than
/// `now`), kept as how far ahead of `now` it lies.
fn quota_ahead(tat: Tat, now: u64) -> Quota {
    Quota::Bucket {
        micros: tat.micros - now,
        rem: tat.rem,
    }
}

/// Whole tokens left, and the time until the next one, for a bucket whose
/// arrival time lies `micros` and `rem` `max`-ths ahead of now (at most
/// one window). Tokens left: `floor((W - ahead) / (W / max))`.
pub(crate) fn quota(micros: u64, rem: u32, limit: &Limit) -> (u32, u64) {
    let (w, max) = (u128::from(limit.window_micros()), u128::from(limit.max()));
    // `ahead` in max-ths of a microsecond.
    let ahead = u128::from(micros) * max + u128::from(rem);
    let room = (w * max).saturating_sub(ahead);
    let left = room / w;
    if left >= max {
        return (limit.max(), 0);
    }
    // The next token: once `ahead` has shrunk to W - (left + 1) · W / max.
    let next = ahead + (left + 1) * w - w * max;
    let replenish = next.div_ceil(max);
    (left as u32, u64::try_from(replenish).unwrap_or(u64::MAX))
}

/// Settles a request taken at `settled.at` for `settled.cost` units that
/// really used `settled.used`: gives back the unused tokens' time, but
/// never the part of the request's charge that time has refilled already
/// (`min((c − u)·T, max(0, at + c·T − now))`); or charges the excess from
/// the later of the arrival time and now, never past an empty bucket.
pub(crate) fn settle(records: &mut [Tat], settled: &Settlement, limits: &[Limit]) {
    let (cost, used, now) = (settled.cost, settled.used, settled.now);
    for (tat, limit) in records.iter_mut().zip(limits) {
        let current = tat.normalized(limit);
        *tat = if used < cost {
            let unused = Tat::default().plus(cost - used, limit);
            // A request of more than `max` units was never taken whole
            // (it is refused unjudged): its charge was at most `max`'s.
            let unrefilled = Tat::at(settled.at)
                .plus(cost.min(limit.max()), limit)
                .minus(Tat::at(now), limit);
            current.minus(unused.min(unrefilled), limit)
        } else {
            let empty = Tat::at(now.saturating_add(limit.window_micros()));
            charged(current, now, used - cost, limit).min(empty.max(current))
        };
    }
}

/// From when (µs) every bucket is full again, judging as a fresh one.
pub(crate) fn idle_from(records: &[Tat]) -> u64 {
    records.iter().map(|tat| tat.ceil()).max().unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_held_chunk_is_judged_now_and_charged_from_the_end_of_its_hold() {
        // 10 a second: a token every 100 ms.
        let limit = Limit::new(10, Duration::from_secs(1)).unwrap();
        let limits = [limit];
        let now = 5_000_000;
        let mut tat = [Tat::default()];
        assert!(decide_holding(&mut tat, now, &limits, 3, 50_000).is_allowed());
        assert_eq!(tat[0], Tat::at(now + 50_000 + 300_000));
        // A whole bucket held for a second passes (judged now), and then
        // nothing passes until the hold and the refill are over.
        let mut tat = [Tat::default()];
        assert!(decide_holding(&mut tat, now, &limits, 10, 1_000_000).is_allowed());
        let next = decide_holding(&mut tat, now + 1_000_000, &limits, 1, 0);
        assert_eq!(next.retry_after(), Duration::from_millis(100));
        // With no hold it is the request's own rule.
        let (mut held, mut plain) = ([Tat::default()], [Tat::default()]);
        for at in [now, now + 10, now + 250_000] {
            let a = decide_holding(&mut held, at, &limits, 2, 0);
            let b = decide(&mut plain, at, &limits, 2);
            assert_eq!((a, held), (b, plain));
        }
    }
}
