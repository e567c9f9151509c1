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
/// times for which every limit's current window has an offset.
#[derive(Clone, Copy, Debug)]
pub(crate) struct WindowBase<const N: usize> {
    windows: [u64; N],
    /// Times in `[from, until)` have every window index in reach.
    from: u64,
    until: u64,
}

/// Reaches no time at all: a shard rebases before its first decision,
/// when it holds nothing to move.
impl<const N: usize> Default for WindowBase<N> {
    fn default() -> Self {
        Self {
            windows: [0; N],
            from: u64::MAX,
            until: 0,
        }
    }
}

impl<const N: usize> WindowBase<N> {
    /// A base putting `now` in the middle of the reach of every limit, so
    /// that the clock can go as far back as forward before the next rebase.
    pub(crate) fn around(now: u64, limits: &[Limit]) -> Self {
        debug_assert_eq!(limits.len(), N);
        let mut base = Self {
            windows: [0; N],
            from: 0,
            until: u64::MAX,
        };
        for (window, limit) in base.windows.iter_mut().zip(limits) {
            let w = limit.window_micros();
            *window = (now / w).saturating_sub(HALF_SPAN);
            // The last index in reach is `window + 2 * HALF_SPAN - 1`.
            let end = window.saturating_add(2 * HALF_SPAN).saturating_mul(w);
            base.from = base.from.max(*window * w);
            base.until = base.until.min(end);
        }
        base
    }

    /// Whether a decision at `now` can store every window it may move to.
    /// A slot only moves to `now`'s window or stays on a later one it already
    /// has, so a time in reach keeps every offset in reach.
    pub(crate) fn covers(&self, now: u64) -> bool {
        now >= self.from && now < self.until
    }

    /// The full index of limit `index`'s window at `offset`.
    pub(crate) fn window(&self, index: usize, offset: u32) -> u64 {
        self.windows[index] + u64::from(offset)
    }

    /// The offset of full window index `window` for limit `index`, if in
    /// reach: after a decision at a time covered, always.
    pub(crate) fn offset(&self, index: usize, window: u64) -> Option<u32> {
        window
            .checked_sub(self.windows[index])
            .and_then(|offset| u32::try_from(offset).ok())
    }

    /// The offset under this base of a window a slot holds, if a decision
    /// at any covered time would keep it in reach: a slot's window start
    /// becomes the time it is judged at when the clock is behind it.
    pub(crate) fn reoffset(&self, index: usize, window: u64, limit: &Limit) -> Option<u32> {
        let start = window.saturating_mul(limit.window_micros());
        (start < self.until).then(|| self.offset(index, window))?
    }

    /// Moves offsets counted from this base to count from `to`; false if a
    /// window is out of `to`'s reach, and the state cannot be kept. Offsets
    /// are left half moved then: the caller drops the state.
    pub(crate) fn move_offsets<'a>(
        &self,
        to: &Self,
        offsets: impl Iterator<Item = &'a mut u32>,
        limits: &[Limit],
    ) -> bool {
        for (index, (offset, limit)) in offsets.zip(limits).enumerate() {
            match to.reoffset(index, self.window(index, *offset), limit) {
                Some(moved) => *offset = moved,
                None => return false,
            }
        }
        true
    }
}
