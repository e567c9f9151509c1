//! A memory store's maps: one per layout and key type, made the first
//! time a policy needs it, so that their number is bounded whatever the
//! number of policies. A policy rebuilt from data on every request finds
//! the same map, and in it its keys' states by value.

use std::any::{Any, TypeId};
use std::hash::Hash;
use std::sync::{Arc, OnceLock};

use foldhash::fast::RandomState;
use hashbrown::HashMap;
use parking_lot::RwLock;

use super::cap::KeyCap;
use super::layouts::Layout;
use crate::policy::Policy;

/// The maps of one key type, one per layout, each made when first needed.
struct KeyMaps<K> {
    layouts: Box<[OnceLock<Layout<K>>]>,
}

/// The maps of some key type, the type erased.
trait AnyMaps: Send + Sync {
    fn as_any(&self) -> &dyn Any;
    fn key_count(&self) -> usize;
    fn sweep_all(&self, now: u64);
}

impl<K: Hash + Eq + Send + Sync + 'static> AnyMaps for KeyMaps<K> {
    fn as_any(&self) -> &dyn Any {
        self
    }

    fn key_count(&self) -> usize {
        self.layouts
            .iter()
            .flat_map(OnceLock::get)
            .map(Layout::len)
            .sum()
    }

    fn sweep_all(&self, now: u64) {
        for layout in self.layouts.iter().flat_map(OnceLock::get) {
            layout.sweep_all(now);
        }
    }
}

/// Every map of one store, and the cap they share.
pub(super) struct Registry {
    by_key_type: RwLock<HashMap<TypeId, Box<dyn AnyMaps>, RandomState>>,
    cap: Arc<KeyCap>,
}

impl Registry {
    pub(super) fn new(max_keys: usize) -> Self {
        Self {
            by_key_type: RwLock::default(),
            cap: Arc::new(KeyCap::new(max_keys)),
        }
    }

    pub(super) fn cap(&self) -> &KeyCap {
        &self.cap
    }

    /// The map holding keys of type `K` under `policy`, made if new.
    pub(super) fn layout<K>(&self, policy: &Policy) -> Layout<K>
    where
        K: Hash + Eq + Send + Sync + 'static,
    {
        let index = Layout::<K>::index_of(policy);
        if let Some(maps) = self.by_key_type.read().get(&TypeId::of::<K>()) {
            return self.in_maps(&**maps, index);
        }
        let mut by_key_type = self.by_key_type.write();
        let maps = by_key_type.entry(TypeId::of::<K>()).or_insert_with(|| {
            Box::new(KeyMaps::<K> {
                layouts: (0..Layout::<K>::COUNT).map(|_| OnceLock::new()).collect(),
            })
        });
        self.in_maps(&**maps, index)
    }

    fn in_maps<K>(&self, maps: &dyn AnyMaps, index: usize) -> Layout<K>
    where
        K: Hash + Eq + Send + Sync + 'static,
    {
        let maps = maps.as_any().downcast_ref::<KeyMaps<K>>();
        let maps = maps.expect("the maps found by a key type's id hold that key type");
        maps.layouts[index]
            .get_or_init(|| Layout::new(index, &self.cap))
            .clone()
    }

    /// Drops every key idle at `now`, in every map.
    pub(super) fn sweep_all(&self, now: u64) {
        for maps in self.by_key_type.read().values() {
            maps.sweep_all(now);
        }
    }

    /// The keys of type `K` held in every map, live or not yet swept.
    pub(super) fn key_count<K: 'static>(&self) -> usize {
        let by_key_type = self.by_key_type.read();
        by_key_type
            .get(&TypeId::of::<K>())
            .map_or(0, |maps| maps.key_count())
    }
}
