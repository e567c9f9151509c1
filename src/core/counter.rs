//! Sliding window counter: two counts per limit, the previous window's
//! weighted by how much of it the sliding window still covers.

use std::time::Duration;

use super::refusal::{tightest, Verdict};
use super::slots::Slots;
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
    slots: Slots<Slot>,
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
    ///
    /// # Panics
    ///
    /// If `limits` is empty: a decision needs a limit to report. A
    /// [`Policy`](crate::Policy) always has one.
    pub fn decide(&mut self, now: Duration, limits: &[Limit]) -> Decision {
        self.decide_micros(micros(now), limits)
    }

    pub(crate) fn decide_micros(&mut self, now: u64, limits: &[Limit]) -> Decision {
        if self.slots.len() != limits.len() {
            self.slots = Slots::new(limits.len());
        }
        decide::<{ crate::policy::Policy::MAX_LIMITS }>(&mut self.slots, now, limits)
    }

    pub(crate) fn idle_from_micros(&self, limits: &[Limit]) -> u64 {
        idle_from(&self.slots, limits)
    }
}

/// A sliding counter for exactly `N` limits, stored inline: what the memory
/// store keeps per key for policies of one or two limits, so an entry stays
/// within a few words.
#[derive(Clone, Copy, Debug)]
pub(crate) struct CompactCounter<const N: usize> {
    slots: [Slot; N],
}

impl<const N: usize> Default for CompactCounter<N> {
    fn default() -> Self {
        Self {
            slots: [Slot::default(); N],
        }
    }
}

impl<const N: usize> CompactCounter<N> {
    /// Only for policies of exactly `N` limits; the store picks the type by
    /// the number of limits.
    pub(crate) fn decide_micros(&mut self, now: u64, limits: &[Limit]) -> Decision {
        debug_assert_eq!(limits.len(), N);
        decide::<N>(&mut self.slots, now, limits)
    }

    pub(crate) fn idle_from_micros(&self, limits: &[Limit]) -> u64 {
        idle_from(&self.slots, limits)
    }
}

/// `N` is the most limits judged on the stack; more spill to the heap.
fn decide<const N: usize>(slots: &mut [Slot], now: u64, limits: &[Limit]) -> Decision {
    let now = now.max(counted_since(slots.iter().map(|s| s.window), limits));
    // Per limit: the time into its window, and the quota left once this
    // request is counted (`None`: it does not fit). Kept for the decision,
    // so each limit's weighted count is computed once.
    let mut inline = [(0, None); N];
    let mut spilled = Vec::new();
    let judged: &mut [(u64, Option<u32>)] = if limits.len() <= inline.len() {
        &mut inline[..limits.len()]
    } else {
        spilled.resize(limits.len(), (0, None));
        &mut spilled
    };
    let mut verdict = Verdict::default();
    for (index, (slot, limit)) in slots.iter_mut().zip(limits).enumerate() {
        let (k, elapsed) = split(now, limit.window_micros());
        slot.roll_to(k);
        let spare = weighted_fits(slot, limit, elapsed, 1);
        if spare.is_none() {
            verdict.refuse(index, wait_for(slot, limit, elapsed, 1));
        }
        judged[index] = (elapsed, spare);
    }
    if let Some(refusal) = verdict.refusal(limits, now) {
        return refusal;
    }
    for slot in slots.iter_mut() {
        slot.current = slot.current.saturating_add(1);
    }
    tightest(
        limits,
        now,
        |index| judged[index].1.unwrap_or(0),
        |index, remaining| {
            let limit = &limits[index];
            if remaining >= limit.max() {
                0
            } else {
                wait_for(&slots[index], limit, judged[index].0, remaining + 1)
            }
        },
    )
}

fn idle_from(slots: &[Slot], limits: &[Limit]) -> u64 {
    slots
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
            slot.window
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

/// If `extra` more requests fit now, how many more would fit after them
/// (`Some(spare)`); `None` if they do not fit.
///
/// `previous * (W - e) + (current + extra) * W <= max * W` holds iff
/// `current + extra + ceil(previous * (W - e) / W) <= max`, since the other
/// terms are whole multiples of `W`.
fn weighted_fits(slot: &Slot, limit: &Limit, elapsed: u64, extra: u32) -> Option<u32> {
    let w = limit.window_micros();
    let carried = mul_div(u64::from(slot.previous), w - elapsed, w, true);
    let used = carried + u128::from(slot.current) + u128::from(extra);
    let spare = u128::from(limit.max()).checked_sub(used)?;
    Some(u32::try_from(spare).unwrap_or(u32::MAX))
}

/// Time from `elapsed` into the slot's window until `n` more requests fit
/// (`1 <= n <= max`): later in this window as the previous count fades, in
/// the next one (where this window's count is the one fading), or at the
/// latest two windows on, when both counts have gone.
fn wait_for(slot: &Slot, limit: &Limit, elapsed: u64, n: u32) -> u64 {
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
    if let Some(e) = earliest_in(slot.previous, slot.current) {
        return e.saturating_sub(elapsed);
    }
    let to_next = w - elapsed;
    match earliest_in(slot.current, 0) {
        Some(e) => to_next + e,
        None => to_next + w,
    }
}
