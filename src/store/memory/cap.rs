//! The store's cap on live keys: one count for every map of the store, so
//! that neither many policies nor many key types multiply it.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};

/// The least time (µs) between two sweeps of the whole store when it is
/// full: keys that go idle one by one must not make every new key scan
/// every map.
const FULL_SWEEP_GAP_MICROS: u64 = 100_000;

#[derive(Debug)]
pub(super) struct KeyCap {
    max: usize,
    live: AtomicUsize,
    /// No key may be dropped before this time: a lower bound, lowered by
    /// every key added and every sweep, so a full store need not be swept
    /// again until then.
    room_at: AtomicU64,
    /// A full store is not swept whole again before this time.
    next_full_sweep: AtomicU64,
}

impl KeyCap {
    pub(super) fn new(max: usize) -> Self {
        Self {
            max,
            live: AtomicUsize::new(0),
            room_at: AtomicU64::new(u64::MAX),
            next_full_sweep: AtomicU64::new(0),
        }
    }

    pub(super) fn max(&self) -> usize {
        self.max
    }

    /// Takes room for one new key, which may be dropped from `drop_from`
    /// on; false if the store is full.
    pub(super) fn take(&self, drop_from: u64) -> bool {
        let taken = self
            .live
            .fetch_update(Relaxed, Relaxed, |live| {
                (live < self.max).then_some(live + 1)
            })
            .is_ok();
        if taken {
            self.room_at.fetch_min(drop_from, Relaxed);
        }
        taken
    }

    /// Whether a new key would find no room now.
    pub(super) fn is_full(&self) -> bool {
        self.live.load(Relaxed) >= self.max
    }

    /// Gives back the room of `dropped` keys.
    pub(super) fn release(&self, dropped: usize) {
        if dropped > 0 {
            self.live.fetch_sub(dropped, Relaxed);
        }
    }

    /// A sweep found that no key it kept may be dropped before `earliest`.
    pub(super) fn swept(&self, earliest: u64) {
        self.room_at.fetch_min(earliest, Relaxed);
    }

    /// Claims the sweep of the whole store that a full store may run at
    /// `now`: once some key may be dropped, and at most every 100 ms. The
    /// caller sweeps every map, having reset the lower bound with this.
    pub(super) fn claim_full_sweep(&self, now: u64) -> bool {
        let next = self.next_full_sweep.load(Relaxed);
        if now < self.room_at.load(Relaxed) || now < next {
            return false;
        }
        let claimed = self
            .next_full_sweep
            .compare_exchange(
                next,
                now.saturating_add(FULL_SWEEP_GAP_MICROS),
                Relaxed,
                Relaxed,
            )
            .is_ok();
        if claimed {
            // Every map's sweep lowers it again to what it keeps.
            self.room_at.store(u64::MAX, Relaxed);
        }
        claimed
    }

    /// How long (µs) a new key refused at `now` should wait for room: no
    /// less than until the next sweep of the whole store may run, and no
    /// more than until the next after it while one is under way (it
    /// raises the lower bound to the end of time until it is done).
    pub(super) fn wait(&self, now: u64) -> u64 {
        let next = self.next_full_sweep.load(Relaxed);
        let room_at = match self.room_at.load(Relaxed) {
            u64::MAX => next,
            room_at => room_at.max(next),
        };
        room_at.saturating_sub(now).max(1)
    }
}
