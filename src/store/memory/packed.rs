//! The counter's and the fixed window's state for one or two limits in
//! eight bytes a limit: each window index cut to its low 32 bits, beside
//! the counts. Fewer bytes a key keep more keys in cache; the store bench's
//! counter rows over many keys guard the layout.
//!
//! A cut index is read back as the index nearest the shard's anchor with
//! those low bits. That is exact while every window a state holds lies
//! within 2³¹ windows of every time its shard judges at, which the shard's
//! anchor keeps true (see [`ANCHOR_REACH_MICROS`]).

use super::layouts::EntryState;
use crate::algorithm::Units;
use crate::algorithm::{counter, fixed, Decision, Settlement};
use crate::limit::Limit;
use crate::policy::Policy;

/// How far (µs) from its shard's anchor a packed state is judged. A
/// window written at a judged time then lies within 2²⁹ + 1 windows of
/// the anchor's, even for a window of one microsecond, well inside what a
/// cut index reads back; a time outside the reach moves the anchor first
/// ([`EntryState::rebase`]).
pub(super) const ANCHOR_REACH_MICROS: u64 = 1 << 29;

/// The full window index nearest `reference` whose low 32 bits are `low`.
fn nearest(reference: u64, low: u32) -> u64 {
    let delta = low.wrapping_sub(reference as u32) as i32;
    reference.wrapping_add_signed(i64::from(delta))
}

/// One limit's part of a packed state, and how it maps to the algorithm's
/// own slot, whose window index is whole.
pub(super) trait PackedSlot: Copy + Default + Send + Sync + 'static {
    /// The algorithm's slot.
    type Whole: Copy + Default;

    /// The window index's low 32 bits.
    fn low_window(&self) -> u32;

    /// Whether the slot counts no request.
    fn counts_nothing(&self) -> bool;

    /// Whether the slot is a fresh one: no counts, and the window cut to
    /// zero. A slot a settle emptied keeps its window, which still holds
    /// back a clock stepping back; one whose window's low bits are all
    /// zero reads as fresh, so that such a clock is judged at its own
    /// time instead, once in 2³² windows.
    fn is_fresh(&self) -> bool {
        self.counts_nothing() && self.low_window() == 0
    }

    fn unpack(self, window: u64) -> Self::Whole;

    /// `whole` packed. The caller has checked that its counts fit (see
    /// [`fits`](Self::fits)).
    fn pack(whole: &Self::Whole) -> Self;

    fn window(whole: &Self::Whole) -> u64;

    /// Whether every count a state under `policy` can reach fits the slot.
    fn fits(policy: &Policy) -> bool;

    /// Judges a request of `cost` units as the algorithm does, rolling
    /// `slots` even when it refuses.
    fn decide<const N: usize>(
        slots: &mut [Self::Whole; N],
        now: u64,
        limits: &[Limit],
        cost: impl Units,
    ) -> Decision;

    fn settle(slots: &mut [Self::Whole], settled: &Settlement, limits: &[Limit]);

    fn idle_from(slots: &[Self::Whole], limits: &[Limit]) -> u64;
}

/// The counter's counts in 16 bits each: a count never exceeds its limit's
/// `max`, so this serves every policy whose `max` is at most 65,535.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct CounterSlot {
    window: u32,
    previous: u16,
    current: u16,
}

impl PackedSlot for CounterSlot {
    type Whole = counter::Slot;

    fn low_window(&self) -> u32 {
        self.window
    }

    fn counts_nothing(&self) -> bool {
        self.previous == 0 && self.current == 0
    }

    fn unpack(self, window: u64) -> counter::Slot {
        counter::Slot {
            window,
            previous: self.previous.into(),
            current: self.current.into(),
        }
    }

    fn pack(whole: &counter::Slot) -> Self {
        debug_assert!(whole.previous.max(whole.current) <= u32::from(u16::MAX));
        Self {
            window: whole.window as u32,
            previous: whole.previous as u16,
            current: whole.current as u16,
        }
    }

    fn window(whole: &counter::Slot) -> u64 {
        whole.window
    }

    fn fits(policy: &Policy) -> bool {
        policy.largest_max() <= u32::from(u16::MAX)
    }

    fn decide<const N: usize>(
        slots: &mut [counter::Slot; N],
        now: u64,
        limits: &[Limit],
        cost: impl Units,
    ) -> Decision {
        counter::decide_inline(slots, now, limits, cost)
    }

    fn settle(slots: &mut [counter::Slot], settled: &Settlement, limits: &[Limit]) {
        counter::settle(slots, settled, limits);
    }

    fn idle_from(slots: &[counter::Slot], limits: &[Limit]) -> u64 {
        counter::idle_from(slots, limits)
    }
}

/// The fixed window's count, all 32 bits of it.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct FixedSlot {
    window: u32,
    count: u32,
}

impl PackedSlot for FixedSlot {
    type Whole = fixed::Slot;

    fn low_window(&self) -> u32 {
        self.window
    }

    fn counts_nothing(&self) -> bool {
        self.count == 0
    }

    fn unpack(self, window: u64) -> fixed::Slot {
        fixed::Slot {
            window,
            count: self.count,
        }
    }

    fn pack(whole: &fixed::Slot) -> Self {
        Self {
            window: whole.window as u32,
            count: whole.count,
        }
    }

    fn window(whole: &fixed::Slot) -> u64 {
        whole.window
    }

    fn fits(_: &Policy) -> bool {
        true
    }

    fn decide<const N: usize>(
        slots: &mut [fixed::Slot; N],
        now: u64,
        limits: &[Limit],
        cost: impl Units,
    ) -> Decision {
        fixed::decide(slots, now, limits, cost)
    }

    fn settle(slots: &mut [fixed::Slot], settled: &Settlement, limits: &[Limit]) {
        fixed::settle(slots, settled, limits);
    }

    fn idle_from(slots: &[fixed::Slot], limits: &[Limit]) -> u64 {
        fixed::idle_from(slots, limits)
    }
}

/// The state of exactly `N` limits, each in one packed slot.
#[derive(Clone, Copy, Debug)]
pub(super) struct Packed<P, const N: usize> {
    slots: [P; N],
}

impl<P: PackedSlot, const N: usize> Default for Packed<P, N> {
    fn default() -> Self {
        Self {
            slots: [P::default(); N],
        }
    }
}

impl<P: PackedSlot, const N: usize> Packed<P, N> {
    /// The algorithm's slots, read against the shard's `anchor`.
    fn unpack(&self, anchor: u64, limits: &[Limit]) -> [P::Whole; N] {
        std::array::from_fn(|index| {
            let packed = self.slots[index];
            if packed.is_fresh() {
                return P::Whole::default();
            }
            let reference = anchor / limits[index].window_micros();
            packed.unpack(nearest(reference, packed.low_window()))
        })
    }

    fn pack(&mut self, slots: &[P::Whole; N]) {
        for (packed, whole) in self.slots.iter_mut().zip(slots) {
            *packed = P::pack(whole);
        }
    }
}

/// For policies of exactly `N` limits whose counts fit `P`.
impl<P: PackedSlot, const N: usize> EntryState for Packed<P, N> {
    const ANCHORED: bool = true;

    /// A slot's window must lie within 2³¹ windows of the anchor's to be
    /// read against it. One about that far behind the new anchor counts
    /// only for a clock thrown back as far, and starts afresh; one 2³¹
    /// windows or more ahead of it (a clock thrown back that far) cannot
    /// be read, and the state is lost. Every other slot is kept whole, so
    /// that a clock stepping back later finds its windows as they were.
    fn rebase(&mut self, from: u64, to: u64, policy: &Policy) -> bool {
        const HALF_SPAN: u64 = 1 << 31;
        let limits = policy.limits();
        let mut slots = self.unpack(from, limits);
        for (slot, (packed, limit)) in slots.iter_mut().zip(self.slots.iter().zip(limits)) {
            if packed.is_fresh() {
                continue;
            }
            let reference = to / limit.window_micros();
            let window = P::window(slot);
            if window.saturating_sub(reference) >= HALF_SPAN {
                return false;
            }
            if reference.saturating_sub(window) >= HALF_SPAN - 2 {
                *slot = P::Whole::default();
            }
        }
        self.pack(&slots);
        true
    }

    fn decide(&mut self, now: u64, cost: impl Units, policy: &Policy, anchor: u64) -> Decision {
        let limits = policy.limits();
        debug_assert!(limits.len() == N);
        let mut slots = self.unpack(anchor, limits);
        let decision = P::decide(&mut slots, now, limits, cost);
        // A refusal leaves the state as it was, as in the algorithm.
        if decision.is_allowed() {
            self.pack(&slots);
        }
        decision
    }

    fn settle(&mut self, settled: &Settlement, policy: &Policy, anchor: u64) {
        let mut slots = self.unpack(anchor, policy.limits());
        P::settle(&mut slots, settled, policy.limits());
        self.pack(&slots);
    }

    fn idle_from(&self, policy: &Policy, anchor: u64) -> u64 {
        P::idle_from(&self.unpack(anchor, policy.limits()), policy.limits())
    }
}

/// The counter's state for exactly `N` limits whose counts are too wide to
/// pack: the algorithm's own slots, inline beside the key rather than
/// behind the algorithm's list. The store bench's wide counter guards it.
#[derive(Clone, Copy, Debug)]
pub(super) struct WideCounter<const N: usize> {
    slots: [counter::Slot; N],
}

impl<const N: usize> Default for WideCounter<N> {
    fn default() -> Self {
        Self {
            slots: [counter::Slot::default(); N],
        }
    }
}

impl<const N: usize> EntryState for WideCounter<N> {
    fn decide(&mut self, now: u64, cost: impl Units, policy: &Policy, _: u64) -> Decision {
        let limits = policy.limits();
        debug_assert_eq!(limits.len(), N);
        // A refusal leaves the state as it was: one limit's path writes
        // nothing then, and several limits are judged on a copy.
        if N == 1 {
            return counter::decide_inline(&mut self.slots, now, limits, cost);
        }
        let mut slots = self.slots;
        let decision = counter::decide_inline(&mut slots, now, limits, cost);
        if decision.is_allowed() {
            self.slots = slots;
        }
        decision
    }

    fn settle(&mut self, settled: &Settlement, policy: &Policy, _: u64) {
        counter::settle(&mut self.slots, settled, policy.limits());
    }

    fn idle_from(&self, policy: &Policy, _: u64) -> u64 {
        counter::idle_from(&self.slots, policy.limits())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_limit_takes_eight_bytes() {
        assert_eq!(size_of::<Packed<CounterSlot, 1>>(), 8);
        assert_eq!(size_of::<Packed<CounterSlot, 2>>(), 16);
        assert_eq!(size_of::<Packed<FixedSlot, 2>>(), 16);
        assert_eq!(size_of::<WideCounter<1>>(), 16);
    }

    #[test]
    fn a_cut_index_reads_back_as_the_nearest_with_its_low_bits() {
        let reference = 5u64 << 32 | 10;
        assert_eq!(nearest(reference, 10), reference);
        assert_eq!(nearest(reference, 7), reference - 3);
        assert_eq!(nearest(reference, 12), reference + 2);
        // Across a carry into the high bits, either way.
        assert_eq!(nearest(5 << 32, u32::MAX), (5 << 32) - 1);
        assert_eq!(nearest((5 << 32) - 1, 0), 5 << 32);
    }
}
