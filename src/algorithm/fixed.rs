//! Fixed window: one count per block of the clock; the baseline the sliding
//! algorithms improve on.

use std::time::Duration;

use super::counter::counted_since;
use super::decision::{Decision, Quota, Settlement};
use super::refusal::{accepted, refused, tightest, Tally};
use super::slots::Slots;
use crate::clock::micros;
use crate::limit::Limit;

/// The count for one limit: accepted requests in the fixed window `window`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Slot {
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
    slots: Slots<Slot>,
}

impl FixedWindow {
    /// A fixed window that has seen nothing.
    pub fn new() -> Self {
        Self::default()
    }

    /// A fixed window holding one `(window, count)` per limit, as a remote
    /// store reports them.
    pub(crate) fn from_parts(slots: impl IntoIterator<Item = (u64, u32)>) -> Self {
        Self {
            slots: slots
                .into_iter()
                .map(|(window, count)| Slot { window, count })
                .collect(),
        }
    }

    /// One `(window, count)` per limit, as [`from_parts`](Self::from_parts) takes them.
    pub(crate) fn parts(&self) -> impl Iterator<Item = (u64, u32)> + '_ {
        self.slots.iter().map(|slot| (slot.window, slot.count))
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
        self.slots
            .fit(limits.len())
            .unless_refused(|slots| decide(slots, now, limits, cost))
    }

    pub(crate) fn idle_from_micros(&self, limits: &[Limit]) -> u64 {
        idle_from(&self.slots, limits)
    }

    /// Settles a request as [`settle`] does.
    /// A different number of limits than last time starts the counts
    /// afresh, as a decision would.
    pub(crate) fn settle_micros(&mut self, settled: &Settlement, limits: &[Limit]) {
        settle(self.slots.fit(limits.len()), settled, limits);
    }
}

/// Settles a request counted at `settled.at`, with the slots moved to the
/// blocks of `settled.now` as a decision there would move them: gives the
/// difference back if its block is still the current one, or charges the
/// excess to the current block, as far as the limit.
pub(crate) fn settle(slots: &mut [Slot], settled: &Settlement, limits: &[Limit]) {
    let (cost, used) = (settled.cost, settled.used);
    let now = settled
        .now
        .max(counted_since(slots.iter().map(|s| s.window), limits));
    for (slot, limit) in slots.iter_mut().zip(limits) {
        let k = now / limit.window_micros();
        if slot.window != k {
            *slot = Slot {
                window: k,
                count: 0,
            };
        }
        if used > cost {
            slot.count = slot.count.saturating_add(used - cost).min(limit.max());
        } else if k == settled.at / limit.window_micros() {
            slot.count = slot.count.saturating_sub(cost - used);
        }
    }
}

/// Moves the slots to `now`'s windows in place even when it refuses:
/// callers that keep state judge on a copy, or restore it (see
/// [`Slots::unless_refused`]).
#[inline]
pub(crate) fn decide(slots: &mut [Slot], now: u64, limits: &[Limit], cost: u32) -> Decision {
    if let ([slot], [limit]) = (&mut *slots, limits) {
        return decide_one(slot, now, limit, cost);
    }
    // A clock that stepped back is judged in the latest block counted in.
    let now = now.max(counted_since(slots.iter().map(|s| s.window), limits));
    let mut tally = Tally::default();
    for (index, (slot, limit)) in slots.iter_mut().zip(limits).enumerate() {
        let w = limit.window_micros();
        // Still in the slot's window, mostly: settled without a division.
        let same = slot
            .window
            .checked_mul(w)
            .is_some_and(|start| now >= start && now - start < w);
        let k = if same { slot.window } else { now / w };
        if slot.window != k {
            *slot = Slot {
                window: k,
                count: 0,
            };
        }
        if !fits(slot.count, limit, cost) {
            tally.refuse(index, until_next_window(now, limit));
        }
    }
    if let Some(refusal) = tally.refusal(limits, now) {
        return refusal;
    }
    for slot in slots.iter_mut() {
        slot.count += cost;
    }
    tightest(
        limits,
        now,
        |index| limits[index].max() - slots[index].count,
        |index| Quota::Fixed {
            count: slots[index].count,
        },
    )
}

/// [`decide`] for one limit, the common case, without the bookkeeping that
/// picks one limit among several. It moves the slot only when it accepts.
fn decide_one(slot: &mut Slot, now: u64, limit: &Limit, cost: u32) -> Decision {
    let limits = std::slice::from_ref(limit);
    let w = limit.window_micros();
    // A clock that stepped back is judged in the latest block counted in.
    let now = now.max(slot.window.saturating_mul(w));
    let same = slot
        .window
        .checked_mul(w)
        .is_some_and(|start| now - start < w);
    let (window, count) = if same {
        (slot.window, slot.count)
    } else {
        (now / w, 0)
    };
    if !fits(count, limit, cost) {
        return refused(limits, now, 0, until_next_window(now, limit));
    }
    *slot = Slot {
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

pub(crate) fn idle_from(slots: &[Slot], limits: &[Limit]) -> u64 {
    slots
        .iter()
        .zip(limits)
        .filter(|(slot, _)| slot.count > 0)
        .map(|(slot, limit)| {
            slot.window
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
