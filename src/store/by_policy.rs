//! One map of key states per policy inside a store, found through the
//! policy itself so that a decision takes no lock to find it.
//!
//! Keeping each policy's keys apart means an entry need not say which
//! policy it belongs to: no pointer and no id in each key's entry, which is
//! what lets an entry shrink to a key and a few packed counts.
//!
//! The policy holds its maps and the store only knows of them, so a map
//! lives exactly as long as some copy of its policy: when the last one goes
//! (a configuration reload, say), its keys go with it, though no request
//! for them ever comes again to sweep them.

use std::any::Any;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError, Weak};

use super::typed_any::TypedAny;
use crate::policy::Policy;

/// How many (store, key type) pairs a policy finds its map for without a
/// lock. A policy serves one store and one key type in practice; a test
/// suite reusing one policy over many stores takes a locked path after
/// the first two.
const CACHED: usize = 2;

/// The maps a policy holds, one per (store, key type) it has been used with.
#[derive(Default)]
pub(crate) struct PolicyMaps {
    /// Filled in order, each once; read without locking.
    cached: [OnceLock<(u64, TypedAny)>; CACHED],
    /// The rest, behind a lock; those of dropped stores are pruned.
    more: Mutex<Vec<Held>>,
}

#[derive(Clone)]
struct Held {
    store: u64,
    store_alive: Weak<()>,
    map: TypedAny,
}

impl std::fmt::Debug for PolicyMaps {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let cached = self.cached.iter().filter(|slot| slot.get().is_some());
        f.debug_struct("PolicyMaps")
            .field("held", &(cached.count() + self.more().len()))
            .finish()
    }
}

impl PolicyMaps {
    /// The same maps, for a copy of the policy made with a new name: it
    /// keeps the windows even if the original goes.
    pub(crate) fn share(&self) -> Self {
        let copy = Self::default();
        for (from, to) in self.cached.iter().zip(&copy.cached) {
            if let Some(held) = from.get() {
                let _ = to.set(held.clone());
            }
        }
        *copy.more() = self.more().clone();
        copy
    }

    fn more(&self) -> MutexGuard<'_, Vec<Held>> {
        self.more.lock().unwrap_or_else(PoisonError::into_inner)
    }

    #[inline]
    fn find_cached<T: Any>(&self, store: u64) -> Option<&T> {
        for slot in &self.cached {
            let (owner, map) = slot.get()?;
            if *owner == store {
                if let Some(map) = map.get::<T>() {
                    return Some(map);
                }
            }
        }
        None
    }

    /// The held map of type `T` for `store`, wherever it is held.
    fn find<T: Any + Send + Sync>(&self, store: u64) -> Option<Arc<T>> {
        let cached = self.cached.iter().filter_map(OnceLock::get);
        let more = self.more();
        let more = more.iter().map(|held| (held.store, held.map.clone()));
        cached
            .map(|(owner, map)| (*owner, map.clone()))
            .chain(more)
            .filter(|(owner, _)| *owner == store)
            .find_map(|(_, map)| map.to_arc::<T>())
    }

    /// Holds `map` for `store`: in a free cached slot if one is left.
    fn hold(&self, store: &Registry, map: TypedAny) {
        let mut held = Some((store.id, map));
        for slot in &self.cached {
            // Another store may fill this slot first; then try the next.
            if let Some(value) = held.take() {
                held = slot.set(value).err();
            }
        }
        if let Some((id, map)) = held {
            let mut more = self.more();
            more.retain(|held| held.store_alive.strong_count() > 0);
            more.push(Held {
                store: id,
                store_alive: Arc::downgrade(&store.alive),
                map,
            });
        }
    }
}

/// A store's side: every map made for it, by policy id, so that a policy's
/// copies made separately (see [`Policy::named`]) find the same windows.
pub(super) struct Registry {
    id: u64,
    /// Lets policies drop the maps they hold for this store once it is gone.
    alive: Arc<()>,
    maps: Mutex<Vec<(u64, Weak<dyn Any + Send + Sync>)>>,
}

impl Default for Registry {
    fn default() -> Self {
        static NEXT_STORE: AtomicU64 = AtomicU64::new(1);
        Self {
            id: NEXT_STORE.fetch_add(1, Ordering::Relaxed),
            alive: Arc::new(()),
            maps: Mutex::default(),
        }
    }
}

impl Registry {
    /// Runs `f` on `policy`'s `T` in this store, made by `make` if missing.
    #[inline]
    pub(super) fn with<T, R>(
        &self,
        policy: &Policy,
        make: impl FnOnce() -> T,
        f: impl FnOnce(&T) -> R,
    ) -> R
    where
        T: Any + Send + Sync,
    {
        match policy.maps().find_cached::<T>(self.id) {
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
        // Held already, or made by another thread since the lock-free look.
        if let Some(map) = policy.maps().find::<T>(self.id) {
            return map;
        }
        maps.retain(|(_, map)| map.strong_count() > 0);
        let id = policy.id();
        // Made for a copy of the policy with another name.
        let made = maps
            .iter()
            .filter(|(owner, _)| *owner == id)
            .filter_map(|(_, map)| map.upgrade()?.downcast::<T>().ok())
            .next();
        let map = made.unwrap_or_else(|| {
            let map = Arc::new(make());
            let erased: Arc<dyn Any + Send + Sync> = map.clone();
            maps.push((id, Arc::downgrade(&erased)));
            map
        });
        policy.maps().hold(self, TypedAny::new(map.clone()));
        map
    }

    /// Runs `f` on every live `T` in this store.
    pub(super) fn for_each<T: Any>(&self, mut f: impl FnMut(&T)) {
        let maps = self.maps.lock().unwrap_or_else(PoisonError::into_inner);
        for map in maps.iter().filter_map(|(_, map)| map.upgrade()) {
            if let Some(map) = map.downcast_ref::<T>() {
                f(map);
            }
        }
    }
}
