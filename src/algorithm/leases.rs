//! A key's in-flight slots: the requests admitted and not yet over, each
//! holding a lease. A lease ends when its request does (the layer releases
//! it), or at its expiry if the instance holding it died first; a store
//! that outlives its requests' instances renews the leases they still hold.
//!
//! `lua/lease.lua` runs the same rule on a Redis sorted set, with the same
//! names: `is_full`, `take`, `release`, `renew`.

use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::LazyLock;
use std::time::Duration;

/// What an in-flight refusal names as its retry time: no store can know
/// when a slot frees, so a client is told to try again shortly.
pub(crate) const RETRY_AFTER: Duration = Duration::from_secs(1);

/// One request's hold on a slot: its id, and until when (µs on the store's
/// clock) it counts if never released.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Lease {
    pub(crate) id: u64,
    pub(crate) until: u64,
}

/// The leases a key holds.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Leases(Vec<Lease>);

impl Leases {
    pub(crate) const EMPTY: Leases = Leases(Vec::new());

    /// Drops the leases that expired by `now`, then says whether `cap` or
    /// more are still held.
    pub(crate) fn is_full(&mut self, now: u64, cap: u32) -> bool {
        self.keep(|lease| lease.until > now);
        self.len() >= cap as usize
    }

    /// Holds `lease`.
    pub(crate) fn take(&mut self, lease: Lease) {
        self.0.push(lease);
    }

    /// Gives back the lease `id`, if still held.
    pub(crate) fn release(&mut self, id: u64) {
        self.keep(|lease| lease.id != id);
    }

    /// Moves the expiry of the lease `id`, if still held, to `until`.
    pub(crate) fn renew(&mut self, id: u64, until: u64) {
        for lease in self.0.iter_mut().filter(|lease| lease.id == id) {
            lease.until = lease.until.max(until);
        }
    }

    /// How many are held, expired or not.
    pub(crate) fn len(&self) -> usize {
        self.0.len()
    }

    /// The latest expiry held; 0 for none.
    pub(crate) fn last_until(&self) -> u64 {
        self.iter().map(|lease| lease.until).max().unwrap_or(0)
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = Lease> + '_ {
        self.0.iter().copied()
    }

    fn keep(&mut self, keep: impl FnMut(&Lease) -> bool) {
        self.0.retain(keep);
    }
}

/// The slots of `cap` still free once a request takes one where `held`
/// were held: what a policy with only a cap reports as remaining.
pub(crate) fn free_after_taking(cap: u32, held: usize) -> u32 {
    let held = u32::try_from(held).unwrap_or(u32::MAX);
    cap.saturating_sub(held.saturating_add(1))
}

/// A lease id no other request of any instance picks: a random start per
/// process, counted up, never 0 (which stands for no lease).
pub(crate) fn fresh_id() -> u64 {
    static NEXT: LazyLock<AtomicU64> = LazyLock::new(|| {
        let mut seed = std::collections::hash_map::RandomState::new().build_hasher();
        seed.write_u32(std::process::id());
        AtomicU64::new(seed.finish())
    });
    loop {
        let id = NEXT.fetch_add(1, Ordering::Relaxed);
        if id != 0 {
            return id;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_set_frees_a_slot_on_release_or_expiry() {
        let mut leases = Leases::default();
        leases.take(Lease { id: 1, until: 100 });
        leases.take(Lease { id: 2, until: 200 });
        assert!(leases.is_full(50, 2));
        leases.release(1);
        assert!(!leases.is_full(50, 2));
        leases.take(Lease { id: 3, until: 150 });
        assert!(leases.is_full(149, 2));
        assert!(!leases.is_full(150, 2), "lease 3 expired at 150");
        leases.renew(2, 400);
        assert_eq!(leases.last_until(), 400);
        leases.release(2);
        assert_eq!(
            leases,
            Leases::default(),
            "an empty set holds no allocation"
        );
    }

    #[test]
    fn ids_differ_and_are_never_zero() {
        let (a, b) = (fresh_id(), fresh_id());
        assert!(a != b && a != 0 && b != 0);
    }
}
