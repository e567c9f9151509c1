//! Sliding window counter: two counts per limit, the previous window's
//! weighted by how much of it the sliding window still covers.

use std::time::Duration;

use super::refusal::{tightest, Verdict};
use crate::clock::micros;
use crate::decision::Decision;
use crate::limit::Limit;

/// Counts for one limit: accepted requests in the fixed window `window` and
/// in the one before it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Slot {
    window: u64,
    previous: u32,
    current: u32,
}

impl Slot {
    /// Moves the slot to fixed window `k` (never backwards).
    fn roll_to(&mut self, k: u64) {
        if k == self.window {
            return;
        }
        self.previous = if k == self.window + 1 {
            self.current
        } else {
            0
        };
        self.current = 0;
        self.window = k;
    }
}

/// Where `now` falls for a window of `w` microseconds: the fixed window's
/// index and the time elapsed in it.
fn split(now: u64, w: u64) -> (u64, u64) {
    (now / w, now % w)
}

/// State of the sliding window counter for every limit of a policy.
///
/// With `x` the elapsed fraction of the current fixed window, a request is
/// accepted iff `(1 - x) * previous + current + 1 <= max`. The comparison is
/// done in integers, multiplied through by the window length:
/// `previous * (W - elapsed) + (current + 1) * W <= max * W`, so boundary
/// instants (accept at exactly 36 s in the spec's vector Q) come out exact.
///
/// A clock that steps back is judged at the start of the latest fixed window
/// already counted in, never earlier, so it cannot reopen a window; within
/// one window an earlier time only weighs the previous count more.
#[derive(Clone, Debug, Default)]
pub struct SlidingCounter {
    slots: Box<[Slot]>,
}

impl SlidingCounter {
    /// A counter that has seen nothing.
    pub fn new() -> Self {
        Self::default()
    }

    #[cfg(feature = "redis")]
    /// A counter holding one `(window, previous, current)` per limit, as a
    /// remote store reports them.
    pub(crate) fn from_parts(slots: impl IntoIterator<Item = (u64, u32, u32)>) -> Self {
        Self {
            slots: slots
                .into_iter()
                .map(|(window, previous, current)| Slot {
                    window,
                    previous,
                    current,
                })
                .collect(),
        }
    }

    /// Judges a request at `now` (since the clock's zero) against every limit,
    /// counting it if all accept. A different number of limits than last time
    /// starts the counts afresh.
    pub fn decide(&mut self, now: Duration, limits: &[Limit]) -> Decision {
        self.decide_micros(micros(now), limits)
    }

    pub(crate) fn decide_micros(&mut self, now: u64, limits: &[Limit]) -> Decision {
        if self.slots.len() != limits.len() {
            self.slots = vec![Slot::default(); limits.len()].into_boxed_slice();
        }
        let now = now.max(counted_since(self.slots.iter().map(|s| s.window), limits));
        let mut verdict = Verdict::default();
        for (index, (slot, limit)) in self.slots.iter_mut().zip(limits).enumerate() {
            let w = limit.window_micros();
            let (k, elapsed) = split(now, w);
            slot.roll_to(k);
            if weighted_fits(slot, limit, elapsed, 1).is_none() {
                verdict.refuse(index, wait_for(slot, limit, elapsed, 1));
            }
        }
        if let Some(refusal) = verdict.refusal(limits) {
            return refusal;
        }
        for slot in self.slots.iter_mut() {
            slot.current = slot.current.saturating_add(1);
        }
        let slots = &self.slots;
        tightest(limits, |index| {
            let (slot, limit) = (&slots[index], &limits[index]);
            let elapsed = split(now, limit.window_micros()).1;
            let remaining = weighted_fits(slot, limit, elapsed, 0).unwrap_or(0);
            let replenish = if remaining >= limit.max() {
                0
            } else {
                wait_for(slot, limit, elapsed, remaining + 1)
            };
            (remaining, replenish)
        })
    }

    pub(crate) fn idle_from_micros(&self, limits: &[Limit]) -> u64 {
        self.slots
            .iter()
            .zip(limits)
            .map(|(slot, limit)| {
                let windows_left = if slot.current > 0 {
                    2
                } else if slot.previous > 0 {
                    1
                } else {
                    0
                };
                (slot.window + windows_left).saturating_mul(limit.window_micros())
            })
            .max()
            .unwrap_or(0)
    }
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

/// If `extra` more requests fit now, how many more would fit after them
/// (`Some(spare)`); `None` if they do not fit.
fn weighted_fits(slot: &Slot, limit: &Limit, elapsed: u64, extra: u32) -> Option<u32> {
    let w = u128::from(limit.window_micros());
    let carried = u128::from(slot.previous) * (w - u128::from(elapsed));
    let used = carried + (u128::from(slot.current) + u128::from(extra)) * w;
    let capacity = u128::from(limit.max()) * w;
    let spare = capacity.checked_sub(used)? / w;
    Some(u32::try_from(spare).unwrap_or(u32::MAX))
}

/// Time from `elapsed` into the slot's window until `n` more requests fit
/// (`1 <= n <= max`): later in this window as the previous count fades, in
/// the next one (where this window's count is the one fading), or at the
/// latest two windows on, when both counts have gone.
fn wait_for(slot: &Slot, limit: &Limit, elapsed: u64, n: u32) -> u64 {
    let w = limit.window_micros();
    let max = u128::from(limit.max());
    let n = u128::from(n);
    // previous * (w - e) <= slack  <=>  e >= w - floor(slack / previous)
    let earliest_in = |previous: u32, current: u32| -> Option<u64> {
        let slack = max.checked_sub(u128::from(current) + n)? * u128::from(w);
        if previous == 0 {
            return Some(0);
        }
        let fade = slack / u128::from(previous);
        let earliest = u128::from(w).saturating_sub(fade) as u64;
        (earliest < w).then_some(earliest)
    };
    if let Some(e) = earliest_in(slot.previous, slot.current) {
        return e.saturating_sub(elapsed);
    }
    let to_next = w - elapsed;
    match earliest_in(slot.current, 0) {
        Some(e) => to_next + e,
        None => to_next + w,
    }
}
