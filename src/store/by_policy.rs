//! One map of key states per policy inside a store, found through the
//! policy itself so that a decision takes no lock to find it.
//!
//! Keeping each policy's keys apart means an entry need not say which
//! policy it belongs to: no pointer and no id in each key's entry, which is
//! what lets an entry shrink to a key and a few packed counts.

use std::any::Any;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError, Weak};

use crate::policy::Policy;

type AnyMap = Arc<dyn Any + Send + Sync>;

/// How many (store, key type) pairs a policy finds its map for without a
/// lock. A policy serves one store and one key type in practice; a test
/// suite reusing one policy over many stores takes the locked path after
/// the first two.
const CACHED: usize = 2;

/// The maps a policy holds for the stores it has been used with.
///
/// Holding them here ties a map's life to its policy's: when the last clone
/// of a policy goes (a configuration reload, say), its keys go with it,
/// though no request for them ever comes again to sweep them.
#[derive(Default)]
pub(crate) struct PolicyMaps {
    /// Filled in order, each once, under a store's registry lock; read
    /// without locking.
    cached: [OnceLock<(u64, AnyMap)>; CACHED],
}

impl std::fmt::Debug for PolicyMaps {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let held = self.cached.iter().filter(|slot| slot.get().is_some());
        f.debug_struct("PolicyMaps")
            .field("held", &held.count())
            .finish()
    }
}

impl PolicyMaps {
    fn find<T: Any>(&self, store: u64) -> Option<&T> {
        for slot in &self.cached {
            let (owner, map) = slot.get()?;
            if *owner == store {
                if let Some(map) = map.downcast_ref::<T>() {
                    return Some(map);
                }
            }
        }
        None
    }
}

/// A store's side: every map it made, by policy id, so that a policy's
/// clones built separately (see [`Policy::named`]) find the same windows.
pub(super) struct Registry {
    store: u64,
    maps: Mutex<Maps>,
}

#[derive(Default)]
struct Maps {
    /// Maps their policies hold; dead ones are pruned as new ones come.
    held: Vec<(u64, Weak<dyn Any + Send + Sync>)>,
    /// Maps no policy had room to hold: they live as long as the store.
    kept: Vec<(u64, AnyMap)>,
}

impl Default for Registry {
    fn default() -> Self {
        static NEXT_STORE: AtomicU64 = AtomicU64::new(1);
        Self {
            store: NEXT_STORE.fetch_add(1, Ordering::Relaxed),
            maps: Mutex::default(),
        }
    }
}

impl Registry {
    /// Runs `f` on `policy`'s `T` in this store, made by `make` if missing.
    pub(super) fn with<T, R>(
        &self,
        policy: &Policy,
        make: impl FnOnce() -> T,
        f: impl FnOnce(&T) -> R,
    ) -> R
    where
        T: Any + Send + Sync,
    {
        match policy.maps().find::<T>(self.store) {
            Some(map) => f(map),
            None => f(&self.find_or_make(policy, make)),
        }
    }

    fn find_or_make<T: Any + Send + Sync>(
        &self,
        policy: &Policy,
        make: impl FnOnce() -> T,
    ) -> Arc<T> {
        let mut maps = self.maps.lock().unwrap_or_else(PoisonError::into_inner);
        let id = policy.id();
        maps.held.retain(|(_, map)| map.strong_count() > 0);
        let held = maps.held.iter().filter_map(|(owner, map)| {
            let map = map.upgrade()?;
            (*owner == id).then_some(map)
        });
        let kept = maps.kept.iter().filter(|(owner, _)| *owner == id);
        let found = held
            .chain(kept.map(|(_, map)| map.clone()))
            .find_map(|map| map.downcast::<T>().ok());
        let registered = found.is_some();
        let map = found.unwrap_or_else(|| Arc::new(make()));
        let erased: AnyMap = map.clone();
        let free = policy
            .maps()
            .cached
            .iter()
            .find(|slot| slot.get().is_none());
        let cached = free.is_some_and(|slot| slot.set((self.store, erased.clone())).is_ok());
        let this = address(&erased);
        let in_kept = maps.kept.iter().any(|(_, map)| address(map) == this);
        if !cached && !in_kept {
            // Nothing else keeps it alive for this policy: the store must.
            maps.kept.push((id, erased));
        } else if cached && !registered {
            maps.held.push((id, Arc::downgrade(&erased)));
        }
        map
    }

    /// Runs `f` on every live `T` in this store.
    pub(super) fn for_each<T: Any>(&self, mut f: impl FnMut(&T)) {
        let maps = self.maps.lock().unwrap_or_else(PoisonError::into_inner);
        let held = maps.held.iter().filter_map(|(_, map)| map.upgrade());
        let mut seen = Vec::new();
        for map in held.chain(maps.kept.iter().map(|(_, map)| map.clone())) {
            // A map both held by a policy and kept is one map.
            if seen.contains(&address(&map)) {
                continue;
            }
            seen.push(address(&map));
            if let Some(map) = map.downcast_ref::<T>() {
                f(map);
            }
        }
    }
}

fn address(map: &AnyMap) -> *const () {
    Arc::as_ptr(map).cast()
}
