//! Sliding window counter: two counts per limit, the previous window's
//! weighted by how much of it the sliding window still covers.

use std::time::Duration;

use super::decision::{Decision, Origin, Quota, Settlement};
use super::per_limit::PerLimit;
use super::refusal::{accepted, refused, tightest, Tally};
use crate::clock::micros;
use crate::limit::Limit;

/// Counts for one limit: accepted requests in the fixed window `window` and
/// in the one before it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Record {
    pub(crate) window: u64,
    pub(crate) previous: u32,
    pub(crate) current: u32,
}

impl Record {
    /// Moves the record to fixed window `k` (never backwards).
    fn roll_to(&mut self, k: u64) {
        if k == self.window {
            return;
        }
        self.previous = if Some(k) == self.window.checked_add(1) {
            self.current
        } else {
            0
        };
        self.current = 0;
        self.window = k;
    }
}

/// Where `now` falls for a window of `w` microseconds: the fixed window's
/// index and the time elapsed in it. Callers clamp `now` to the record's
/// window first; a time before it would take the division.
///
/// Requests mostly land in the record's own window or the next, which a
/// multiplication settles; only a longer gap pays for a division.
fn split(record: &Record, now: u64, w: u64) -> (u64, u64) {
    if let Some(start) = record.window.checked_mul(w) {
        let since = now.wrapping_sub(start);
        if now >= start && since < w {
            return (record.window, since);
        }
        if now >= start && since - w < w {
            return (record.window + 1, since - w);
        }
    }
    (now / w, now % w)
}

/// State of the sliding window counter for every limit of a policy.
///
/// With `x` the elapsed fraction of the current fixed window, a request of
/// cost `c` (1 for a plain request) is accepted iff
/// `(1 - x) * previous + current + c <= max`. The comparison is done in
/// integers, multiplied through by the window length:
/// `previous * (W - elapsed) + (current + c) * W <= max * W`, so boundary
/// instants (accept at exactly 36 s in the spec's vector Q) come out exact.
///
/// A clock that steps back is judged at the start of the latest fixed window
/// already counted in, never earlier, so it cannot reopen a window; within
/// one window an earlier time only weighs the previous count more.
#[derive(Clone, Debug, Default)]
pub struct SlidingCounter {
    records: PerLimit<Record>,
}

impl SlidingCounter {
    /// A counter that has seen nothing.
    pub fn new() -> Self {
        Self::default()
    }

    /// A counter holding one `(window, previous, current)` per limit, as a
    /// remote store reports them.
    pub(crate) fn from_parts(records: impl IntoIterator<Item = (u64, u32, u32)>) -> Self {
        Self::from_records(
            records
                .into_iter()
                .map(|(window, previous, current)| Record {
                    window,
                    previous,
                    current,
                }),
        )
    }

    /// A counter holding `records`, one per limit.
    pub(crate) fn from_records(records: impl IntoIterator<Item = Record>) -> Self {
        Self {
            records: records.into_iter().collect(),
        }
    }

    /// Its records, one per limit.
    pub(crate) fn records(&self) -> &[Record] {
        &self.records
    }

    /// One `(window, previous, current)` per limit, as [`from_parts`](Self::from_parts) takes them.
    pub(crate) fn parts(&self) -> impl Iterator<Item = (u64, u32, u32)> + '_ {
        self.records
            .iter()
            .map(|record| (record.window, record.previous, record.current))
    }

    /// Judges a request at `now` (since the clock's zero) against every limit,
    /// counting it if all accept. A different number of limits than last time
    /// starts the counts afresh.
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
        self.records.fit(limits.len()).unless_refused(|records| {
            decide::<{ super::INLINE_LIMITS }>(records, now, limits, cost)
        })
    }

    pub(crate) fn idle_from_micros(&self, limits: &[Limit]) -> u64 {
        idle_from(&self.records, limits)
    }

    /// Settles a request as [`settle`] does.
    /// A different number of limits than last time starts the counts
    /// afresh, as a decision would.
    pub(crate) fn settle_micros(&mut self, settled: &Settlement, limits: &[Limit]) {
        settle(self.records.fit(limits.len()), settled, limits);
    }
}

/// Settles a request counted at `settled.at` for `settled.cost` units
/// that really used `settled.used`, with the records rolled to
/// `settled.now` as a decision there would roll them: gives the
/// difference back to the window it was counted in, if that is still the
/// current or the previous one; or charges the excess to the current
/// window, as far as the limit.
pub(crate) fn settle(records: &mut [Record], settled: &Settlement, limits: &[Limit]) {
    let (cost, used) = (settled.cost, settled.used);
    let now = settled
        .now
        .max(counted_since(records.iter().map(|s| s.window), limits));
    for (record, limit) in records.iter_mut().zip(limits) {
        let (k, _) = split(record, now, limit.window_micros());
        record.roll_to(k);
        let counted_in = settled.at / limit.window_micros();
        if used > cost {
            record.current = record.current.saturating_add(used - cost).min(limit.max());
        } else if record.window == counted_in {
            record.current = record.current.saturating_sub(cost - used);
        } else if counted_in.checked_add(1) == Some(record.window) {
            record.previous = record.previous.saturating_sub(cost - used);
        }
    }
}

/// `N` is the most limits judged on the stack; more spill to the heap.
///
/// Rolls the records in place even when it refuses: callers that keep state
/// judge on a copy, or restore it (see [`PerLimit::unless_refused`]).
///
/// Out of line, so that the one-limit path stays as small as the single
/// limit needs.
#[inline(never)]
pub(crate) fn decide<const N: usize>(
    records: &mut [Record],
    now: u64,
    limits: &[Limit],
    cost: u32,
) -> Decision {
    if let ([record], [limit]) = (&mut *records, limits) {
        return decide_one(record, now, limit, cost);
    }
    let now = now.max(counted_since(records.iter().map(|s| s.window), limits));
    // Per limit: the time into its window, kept for the decision.
    let mut inline = [0; N];
    let mut spilled = Vec::new();
    let elapsed: &mut [u64] = if limits.len() <= inline.len() {
        &mut inline[..limits.len()]
    } else {
        spilled.resize(limits.len(), 0);
        &mut spilled
    };
    let mut tally = Tally::default();
    for (index, (record, limit)) in records.iter_mut().zip(limits).enumerate() {
        let (k, e) = split(record, now, limit.window_micros());
        record.roll_to(k);
        if !fits(record, limit, e, cost) {
            tally.refuse(index, wait_for(record, limit, e, cost));
        }
        elapsed[index] = e;
    }
    if let Some(refusal) = tally.refusal(limits, now) {
        return refusal;
    }
    for record in records.iter_mut() {
        record.current = record.current.saturating_add(cost);
    }
    let sliding = |index: usize| Quota::Sliding {
        previous: records[index].previous,
        current: records[index].current,
        elapsed: elapsed[index],
    };
    if let Some(index) = clearly_tightest(records, limits) {
        return accepted(limits, now, index, sliding(index));
    }
    tightest(
        limits,
        now,
        |index| remaining(&records[index], &limits[index], elapsed[index]),
        sliding,
    )
}

/// The limit with the least remaining quota when bounds alone settle it,
/// without the divisions that make each quota exact.
///
/// A limit's remaining quota lies between `max - current - previous` and
/// `max - current`, since the previous window weighs a fraction of its
/// count. When one limit's upper bound is below every other's lower bound
/// it is strictly the tightest, with no tie to break. A per-second limit
/// beside a per-minute one is usually that far apart.
#[inline]
fn clearly_tightest(records: &[Record], limits: &[Limit]) -> Option<usize> {
    let bounds = |record: &Record, limit: &Limit| {
        let most = limit.max().saturating_sub(record.current);
        (most.saturating_sub(record.previous), most)
    };
    let (mut best, (mut best_least, mut best_most)) = (0, bounds(&records[0], &limits[0]));
    let mut others_least = u32::MAX;
    for (index, (record, limit)) in (1..).zip(records[1..].iter().zip(&limits[1..])) {
        let (least, most) = bounds(record, limit);
        if most < best_most {
            others_least = others_least.min(best_least);
            (best, best_least, best_most) = (index, least, most);
        } else {
            others_least = others_least.min(least);
        }
    }
    (best_most < others_least).then_some(best)
}

/// [`decide`] for the commonest policy, a single limit: no choosing
/// between limits, and the quota left to be worked out if it is read.
fn decide_one(record: &mut Record, now: u64, limit: &Limit, cost: u32) -> Decision {
    let w = limit.window_micros();
    let now = now.max(record.window.saturating_mul(w));
    let (k, elapsed) = split(record, now, w);
    // Judged on a copy: a refusal leaves the state as it was (see
    // `PerLimit::unless_refused`).
    let mut rolled = *record;
    rolled.roll_to(k);
    if !fits(&rolled, limit, elapsed, cost) {
        return refuse_one(&rolled, now, limit, elapsed, cost);
    }
    rolled.current = rolled.current.saturating_add(cost);
    *record = rolled;
    Decision {
        allowed: true,
        limit_index: 0,
        limit: *limit,
        quota: Quota::Sliding {
            previous: record.previous,
            current: record.current,
            elapsed,
        },
        retry_after_micros: 0,
        at_micros: now,
        origin: Origin::Limits,
        shadow: false,
        lease: 0,
        chunk: 0,
    }
}

/// [`decide_one`]'s refusal, out of its way, so that the accepting path,
/// which nearly every request takes, carries none of the wait's work.
#[cold]
#[inline(never)]
fn refuse_one(rolled: &Record, now: u64, limit: &Limit, elapsed: u64, cost: u32) -> Decision {
    let wait = wait_for(rolled, limit, elapsed, cost);
    refused(std::slice::from_ref(limit), now, 0, wait)
}

/// Whether `cost` more units fit: `previous * (W - e) + (current + cost) *
/// W <= max * W`, multiplied out rather than divided, since multiplying is
/// cheaper and every request asks.
fn fits(record: &Record, limit: &Limit, elapsed: u64, cost: u32) -> bool {
    let Some(room) = limit
        .max()
        .checked_sub(record.current)
        .and_then(|r| r.checked_sub(cost))
    else {
        return false;
    };
    if record.previous == 0 {
        return true;
    }
    let w = limit.window_micros();
    let carried = u128::from(record.previous) * u128::from(w - elapsed);
    carried <= u128::from(room) * u128::from(w)
}

/// Requests the record still accepts `elapsed` into its window:
/// `max - current - ceil(previous * (W - e) / W)`, or 0.
fn remaining(record: &Record, limit: &Limit, elapsed: u64) -> u32 {
    let left = limit.max().saturating_sub(record.current);
    if record.previous == 0 {
        return left;
    }
    let w = limit.window_micros();
    // At most `previous`, since `w - elapsed <= w`: it fits in a u32.
    let carried = mul_div(u64::from(record.previous), w - elapsed, w, true);
    left.saturating_sub(u32::try_from(carried).unwrap_or(u32::MAX))
}

/// Remaining quota and time until it grows, for counts `previous` and
/// `current` (this request included) `elapsed` into the window.
pub(crate) fn quota(previous: u32, current: u32, elapsed: u64, limit: &Limit) -> (u32, u64) {
    let record = Record {
        window: 0,
        previous,
        current,
    };
    let left = remaining(&record, limit, elapsed);
    let replenish = if left >= limit.max() {
        0
    } else {
        wait_for(&record, limit, elapsed, left + 1)
    };
    (left, replenish)
}

pub(crate) fn idle_from(records: &[Record], limits: &[Limit]) -> u64 {
    records
        .iter()
        .zip(limits)
        .map(|(record, limit)| {
            let windows_left = if record.current > 0 {
                2
            } else if record.previous > 0 {
                1
            } else {
                0
            };
            record
                .window
                .saturating_add(windows_left)
                .saturating_mul(limit.window_micros())
        })
        .max()
        .unwrap_or(0)
}

/// The start of the latest fixed window any limit has counted in: the
/// earliest time a decision may be made at.
pub(crate) fn counted_since(windows: impl Iterator<Item = u64>, limits: &[Limit]) -> u64 {
    windows
        .zip(limits)
        .map(|(window, limit)| window.saturating_mul(limit.window_micros()))
        .max()
        .unwrap_or(0)
}

/// `a * b / d`, rounded down or up: in `u64` when the product fits (windows
/// under about an hour, the common case and four times cheaper), in `u128`
/// otherwise. Exact either way.
fn mul_div(a: u64, b: u64, d: u64, round_up: bool) -> u128 {
    let (product, d) = match a.checked_mul(b) {
        Some(p) => {
            let q = p / d;
            return u128::from(if round_up && q * d != p { q + 1 } else { q });
        }
        None => (u128::from(a) * u128::from(b), u128::from(d)),
    };
    let q = product / d;
    if round_up && q * d != product {
        q + 1
    } else {
        q
    }
}

/// Time from `elapsed` into the record's window until `n` more requests fit
/// (`1 <= n <= max`): later in this window as the previous count fades, in
/// the next one (where this window's count is the one fading), or at the
/// latest two windows on, when both counts have gone.
fn wait_for(record: &Record, limit: &Limit, elapsed: u64, n: u32) -> u64 {
    let w = limit.window_micros();
    // previous * (w - e) <= slack * w  <=>  e >= w - floor(slack * w / previous)
    let earliest_in = |previous: u32, current: u32| -> Option<u64> {
        let slack = limit.max().checked_sub(current)?.checked_sub(n)?;
        if previous == 0 {
            return Some(0);
        }
        let fade = mul_div(u64::from(slack), w, u64::from(previous), false);
        let earliest = u128::from(w).saturating_sub(fade) as u64;
        (earliest < w).then_some(earliest)
    };
    if let Some(e) = earliest_in(record.previous, record.current) {
        return e.saturating_sub(elapsed);
    }
    let to_next = w - elapsed;
    match earliest_in(record.current, 0) {
        Some(e) => to_next + e,
        None => to_next + w,
    }
}
