//! Window indices stored as 32-bit offsets from a base that a whole shard
//! shares, so that a key's counts fit in eight bytes a limit.
//!
//! A fixed window's index (`now / W`) needs 64 bits in general, yet the keys
//! of one shard are all within a few windows of each other: idle ones are
//! swept. The shard keeps the full indices once, as its base, and each key
//! keeps only its distance from it.

use crate::limit::Limit;

/// How far from its base, in windows, a shard's offsets reach either way.
const HALF_SPAN: u64 = 1 << 31;

/// The window index per limit that a shard's offsets count from, and the
/// times at which a decision keeps every offset in reach.
#[derive(Clone, Copy, Debug)]
pub(super) struct WindowBase<const N: usize> {
    windows: [u64; N],
    /// Decisions are covered from `from` to `last`, both included.
    from: u64,
    last: u64,
}

/// Covers no time at all: a shard rebases before its first decision, when
/// it holds nothing to move.
impl<const N: usize> Default for WindowBase<N> {
    fn default() -> Self {
        Self {
            windows: [0; N],
            from: u64::MAX,
            last: 0,
        }
    }
}

/// What becomes of one limit's window when a shard moves its base.
enum Moved {
    /// Its offset under the new base.
    To(u32),
    /// Too far behind to reach, and too old to count at any covered time:
    /// the slot starts afresh.
    Expired,
    /// Too far ahead to reach: the clock was thrown back about 2³¹ windows.
    /// The key's state cannot be kept.
    Lost,
}

impl<const N: usize> WindowBase<N> {
    /// A base putting `now` in the middle of the reach of every limit, so
    /// that the clock can go as far back as forward before the next rebase.
    pub(super) fn around(now: u64, limits: &[Limit]) -> Self {
        debug_assert_eq!(limits.len(), N);
        let mut base = Self {
            windows: [0; N],
            from: 0,
            last: u64::MAX,
        };
        for (window, limit) in base.windows.iter_mut().zip(limits) {
            let w = limit.window_micros();
            *window = (now / w).saturating_sub(HALF_SPAN);
            // Covered times start two windows above the base, so that any
            // window below it is at least two windows old at a covered time,
            // and counts for nothing (see `Moved::Expired`). With the base at
            // zero, nothing is below it.
            if *window > 0 {
                base.from = base.from.max((*window + 2) * w);
            }
            // The first window out of reach is `window + 2 * HALF_SPAN`.
            if let Some(end) = (*window + 2 * HALF_SPAN).checked_mul(w) {
                base.last = base.last.min(end - 1);
            }
        }
        base
    }

    /// Whether a decision at `now` keeps every window in reach.
    ///
    /// A decision judges at `now`, or at the latest window start a slot has
    /// counted in if that is later. No stored window starts after `last` (a
    /// fresh slot's is the base, a moved one's is checked by `moved`, and a
    /// decision's is at most the time judged at), so the time judged at is
    /// covered too, and every limit's window at that time is in reach.
    pub(super) fn covers(&self, now: u64) -> bool {
        now >= self.from && now <= self.last
    }

    /// The full index of limit `index`'s window at `offset`.
    pub(super) fn window(&self, index: usize, offset: u32) -> u64 {
        self.windows[index] + u64::from(offset)
    }

    /// The offset of full window index `window` for limit `index`, for a
    /// window a decision at a covered time moved to: always in reach (see
    /// [`covers`](Self::covers)), so it is not checked on every decision.
    pub(super) fn offset_of(&self, index: usize, window: u64) -> u32 {
        debug_assert!(self.offset(index, window).is_some());
        window.wrapping_sub(self.windows[index]) as u32
    }

    /// The offset of full window index `window` for limit `index`, if in reach.
    fn offset(&self, index: usize, window: u64) -> Option<u32> {
        window
            .checked_sub(self.windows[index])
            .and_then(|offset| u32::try_from(offset).ok())
    }

    /// Moves one key's slots, each holding an offset from this base, to
    /// base `to`: a slot whose window expired starts afresh; false if one
    /// is lost, and the state cannot be kept.
    ///
    /// A slot without counts starts afresh too, at the new base: its window
    /// says nothing, except as the time a clock stepping back is judged at,
    /// and a slot reset by an earlier move sits at that move's base, later
    /// than any request it counted; kept, it would hold such a clock up.
    pub(super) fn move_slots<T: Default>(
        &self,
        to: &Self,
        slots: &mut [T],
        offset_of: impl Fn(&mut T) -> &mut u32,
        counts_nothing: impl Fn(&T) -> bool,
        limits: &[Limit],
    ) -> bool {
        for (index, (slot, limit)) in slots.iter_mut().zip(limits).enumerate() {
            if counts_nothing(slot) {
                *slot = T::default();
                continue;
            }
            match self.moved(to, index, *offset_of(slot), limit) {
                Moved::To(offset) => *offset_of(slot) = offset,
                Moved::Expired => *slot = T::default(),
                Moved::Lost => return false,
            }
        }
        true
    }

    /// Where the window at `offset` from this base goes under base `to`.
    fn moved(&self, to: &Self, index: usize, offset: u32, limit: &Limit) -> Moved {
        let window = self.window(index, offset);
        if window < to.windows[index] {
            return Moved::Expired;
        }
        // A window in reach also starts by `to.last`, as long as a key's
        // windows all move to one time together, which decisions do. Checked
        // anyway: it is what `covers` relies on, and moves are rare.
        let start = window.saturating_mul(limit.window_micros());
        match to.offset(index, window) {
            Some(offset) if start <= to.last => Moved::To(offset),
            _ => Moved::Lost,
        }
    }
}
