//! The counter's and the fixed window's state for one or two limits in
//! eight bytes a limit: each window as a 32-bit offset from its shard's
//! [`WindowBase`], beside the counts. Fewer bytes a key keep more keys in
//! cache; the store bench's counter cases over many keys guard the layout.

use super::layouts::{EntryState, Shape};
use super::window_base::WindowBase;
use crate::algorithm::Units;
use crate::algorithm::{counter, fixed, Decision, Settlement};
use crate::limit::Limit;

/// One limit's part of a packed state, and how it maps to the algorithm's
/// own slot, whose window index is whole.
pub(super) trait PackedSlot: Copy + Default + Send + Sync + 'static {
    /// The algorithm's slot.
    type Whole: Copy;

    /// The window's offset from the shard's base.
    fn offset_mut(&mut self) -> &mut u32;

    /// Whether the slot counts no request: its window says nothing then.
    fn counts_nothing(&self) -> bool;

    fn unpack(self, window: u64) -> Self::Whole;

    /// `whole` packed with its window at `offset`. The caller has checked
    /// that its counts fit (see [`fits`](Self::fits)).
    fn pack(whole: &Self::Whole, offset: u32) -> Self;

    fn window(whole: &Self::Whole) -> u64;

    /// Whether every count a state under `shape` can reach fits the slot.
    fn fits(shape: &Shape) -> bool;

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
    offset: u32,
    previous: u16,
    current: u16,
}

impl PackedSlot for CounterSlot {
    type Whole = counter::Slot;

    fn offset_mut(&mut self) -> &mut u32 {
        &mut self.offset
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

    fn pack(whole: &counter::Slot, offset: u32) -> Self {
        debug_assert!(whole.previous.max(whole.current) <= u32::from(u16::MAX));
        Self {
            offset,
            previous: whole.previous as u16,
            current: whole.current as u16,
        }
    }

    fn window(whole: &counter::Slot) -> u64 {
        whole.window
    }

    fn fits(shape: &Shape) -> bool {
        shape.largest_max() <= u32::from(u16::MAX)
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
    offset: u32,
    count: u32,
}

impl PackedSlot for FixedSlot {
    type Whole = fixed::Slot;

    fn offset_mut(&mut self) -> &mut u32 {
        &mut self.offset
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

    fn pack(whole: &fixed::Slot, offset: u32) -> Self {
        Self {
            offset,
            count: whole.count,
        }
    }

    fn window(whole: &fixed::Slot) -> u64 {
        whole.window
    }

    fn fits(_: &Shape) -> bool {
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
    fn unpack(&self, base: &WindowBase<N>) -> [P::Whole; N] {
        std::array::from_fn(|index| {
            let mut packed = self.slots[index];
            let window = base.window(index, *packed.offset_mut());
            packed.unpack(window)
        })
    }
}

/// For policies of exactly `N` limits whose counts fit `P`, judged at
/// times the base covers.
impl<P: PackedSlot, const N: usize> EntryState for Packed<P, N> {
    type Base = WindowBase<N>;
    type EntryAlign = ();

    fn base_around(now: u64, shape: &Shape) -> WindowBase<N> {
        WindowBase::around(now, shape.limits())
    }

    fn rebase(&mut self, from: &WindowBase<N>, to: &WindowBase<N>, shape: &Shape) -> bool {
        from.move_slots(
            to,
            &mut self.slots,
            P::offset_mut,
            P::counts_nothing,
            shape.limits(),
        )
    }

    fn decide(
        &mut self,
        now: u64,
        cost: impl Units,
        shape: &Shape,
        base: &WindowBase<N>,
    ) -> Decision {
        let limits = shape.limits();
        debug_assert!(limits.len() == N && base.covers(now));
        let mut slots = self.unpack(base);
        let decision = P::decide(&mut slots, now, limits, cost);
        // A refusal leaves the state as it was, as in the algorithm.
        if !decision.is_allowed() {
            return decision;
        }
        for (index, (packed, whole)) in self.slots.iter_mut().zip(&slots).enumerate() {
            *packed = P::pack(whole, base.offset_of(index, P::window(whole)));
        }
        decision
    }

    fn settle(&mut self, settled: &Settlement, shape: &Shape, base: &WindowBase<N>) {
        let mut slots = self.unpack(base);
        P::settle(&mut slots, settled, shape.limits());
        for (index, (packed, whole)) in self.slots.iter_mut().zip(&slots).enumerate() {
            *packed = P::pack(whole, base.offset_of(index, P::window(whole)));
        }
    }

    fn idle_from(&self, shape: &Shape, base: &WindowBase<N>) -> u64 {
        P::idle_from(&self.unpack(base), shape.limits())
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
    type Base = ();
    type EntryAlign = ();

    fn decide(&mut self, now: u64, cost: impl Units, shape: &Shape, _: &()) -> Decision {
        let limits = shape.limits();
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

    fn settle(&mut self, settled: &Settlement, shape: &Shape, _: &()) {
        counter::settle(&mut self.slots, settled, shape.limits());
    }

    fn idle_from(&self, shape: &Shape, _: &()) -> u64 {
        counter::idle_from(&self.slots, shape.limits())
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
}
