//! Fixed window: one count per block of the clock; the baseline the sliding
//! algorithms improve on.

use std::time::Duration;

use super::counter::counted_since;
use super::decision::{Decision, Quota, Settlement};
use super::per_limit::PerLimit;
use super::refusal::{accepted, refused, tightest, Tally};
use crate::clock::micros;
use crate::limit::Limit;

/// The count for one limit: accepted requests in the fixed window `window`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Record {
    pub(crate) window: u64,
    pub(crate) count: u32,
}

/// State of the fixed window for every limit of a policy.
///
/// Windows are `[kW, (k+1)W)` from the clock's zero; a request of cost `c`
/// (1 for a plain request) is accepted iff the current block has counted
/// at most `max - c`. A burst straddling two
/// blocks can get up to twice the limit through in one window's length, which
/// is what the sliding algorithms exist to prevent.
#[derive(Clone, Debug, Default)]
pub struct FixedWindow {
    records: PerLimit<Record>,
}

impl FixedWindow {
    /// A fixed window that has seen nothing.
    pub fn new() -> Self {
        Self::default()
    }

    /// A fixed window holding one `(window, count)` per limit, as a remote
    /// store reports them.
    pub(crate) fn from_parts(records: impl IntoIterator<Item = (u64, u32)>) -> Self {
        Self::from_records(
            records
                .into_iter()
                .map(|(window, count)| Record { window, count }),
        )
    }

    /// A fixed window holding `records`, one per limit.
    pub(crate) fn from_records(records: impl IntoIterator<Item = Record>) -> Self {
        Self {
            records: records.into_iter().collect(),
        }
    }

    /// Its records, one per limit.
    pub(crate) fn records(&self) -> &[Record] {
        &self.records
    }

    /// One `(window, count)` per limit, as [`from_parts`](Self::from_parts) takes them.
    pub(crate) fn parts(&self) -> impl Iterator<Item = (u64, u32)> + '_ {
        self.records
            .iter()
            .map(|record| (record.window, record.count))
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
    #[inline]
    pub(crate) fn decide_micros(&mut self, now: u64, limits: &[Limit], cost: u32) -> Decision {
        self.records
            .fit(limits.len())
            .unless_refused(|records| decide(records, now, limits, cost))
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

/// Settles a request counted at `settled.at`, with the records moved to the
/// blocks of `settled.now` as a decision there would move them: gives the
/// difference back if its block is still the current one, or charges the
/// excess to the current block, as far as the limit.
pub(crate) fn settle(records: &mut [Record], settled: &Settlement, limits: &[Limit]) {
    let (cost, used) = (settled.cost, settled.used);
    let now = settled
        .now
        .max(counted_since(records.iter().map(|s| s.window), limits));
    for (record, limit) in records.iter_mut().zip(limits) {
        let k = now / limit.window_micros();
        if record.window != k {
            *record = Record {
                window: k,
                count: 0,
            };
        }
        if used > cost {
            record.count = record.count.saturating_add(used - cost).min(limit.max());
        } else if k == settled.at / limit.window_micros() {
            record.count = record.count.saturating_sub(cost - used);
        }
    }
}

/// Moves the records to `now`'s windows in place even when it refuses:
/// callers that keep state judge on a copy, or restore it (see
/// [`PerLimit::unless_refused`]).
#[inline]
pub(crate) fn decide(records: &mut [Record], now: u64, limits: &[Limit], cost: u32) -> Decision {
    if let ([record], [limit]) = (&mut *records, limits) {
        return decide_one(record, now, limit, cost);
    }
    // A clock that stepped back is judged in the latest block counted in.
    let now = now.max(counted_since(records.iter().map(|s| s.window), limits));
    let mut tally = Tally::default();
    for (index, (record, limit)) in records.iter_mut().zip(limits).enumerate() {
        let w = limit.window_micros();
        // Still in the record's window, mostly: settled without a division.
        let same = record
            .window
            .checked_mul(w)
            .is_some_and(|start| now >= start && now - start < w);
        let k = if same { record.window } else { now / w };
        if record.window != k {
            *record = Record {
                window: k,
                count: 0,
            };
        }
        if !fits(record.count, limit, cost) {
            tally.refuse(index, until_next_window(now, limit));
        }
    }
    if let Some(refusal) = tally.refusal(limits, now) {
        return refusal;
    }
    for record in records.iter_mut() {
        record.count += cost;
    }
    tightest(
        limits,
        now,
        |index| limits[index].max() - records[index].count,
        |index| Quota::Fixed {
            count: records[index].count,
        },
    )
}

/// [`decide`] for one limit, the common case, without the bookkeeping that
/// picks one limit among several. It moves the record only when it accepts.
fn decide_one(record: &mut Record, now: u64, limit: &Limit, cost: u32) -> Decision {
    let limits = std::slice::from_ref(limit);
    let w = limit.window_micros();
    // A clock that stepped back is judged in the latest block counted in.
    let now = now.max(record.window.saturating_mul(w));
    let same = record
        .window
        .checked_mul(w)
        .is_some_and(|start| now - start < w);
    let (window, count) = if same {
        (record.window, record.count)
    } else {
        (now / w, 0)
    };
    if !fits(count, limit, cost) {
        return refused(limits, now, 0, until_next_window(now, limit));
    }
    *record = Record {
        window,
        count: count + cost,
    };
    accepted(
        limits,
        now,
        0,
        Quota::Fixed {
            count: count + cost,
        },
    )
}

/// Whether `cost` more units fit beside `count`. A cost of at most `max`
/// then waits for the next window at most.
fn fits(count: u32, limit: &Limit, cost: u32) -> bool {
    u64::from(count) + u64::from(cost) <= u64::from(limit.max())
}

/// Remaining quota and time until it grows, for `count` requests (this one
/// included) in the window around `at`.
pub(crate) fn quota(count: u32, at: u64, limit: &Limit) -> (u32, u64) {
    let remaining = limit.max().saturating_sub(count);
    let replenish = if count == 0 {
        0
    } else {
        until_next_window(at, limit)
    };
    (remaining, replenish)
}

pub(crate) fn idle_from(records: &[Record], limits: &[Limit]) -> u64 {
    records
        .iter()
        .zip(limits)
        .filter(|(record, _)| record.count > 0)
        .map(|(record, limit)| {
            record
                .window
                .saturating_add(1)
                .saturating_mul(limit.window_micros())
        })
        .max()
        .unwrap_or(0)
}

fn until_next_window(now: u64, limit: &Limit) -> u64 {
    let w = limit.window_micros();
    w - now % w
}
