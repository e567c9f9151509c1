//! A memory store's maps: one per key type, made the first time a key of
//! that type arrives, all under one cap. Policies are values in the
//! entries, so their number makes no more maps.

use std::any::{Any, TypeId};
use std::hash::Hash;
use std::sync::Arc;

use foldhash::fast::RandomState;
use hashbrown::HashMap;
use parking_lot::RwLock;

use super::cap::KeyCap;
use super::shards::Shards;

/// The map of some key type, the type erased.
trait AnyShards: Send + Sync {
    fn as_any(&self) -> &dyn Any;
    fn key_count(&self) -> usize;
    fn sweep_all(&self, now: u64);
}

impl<K: Hash + Eq + Send + Sync + 'static> AnyShards for Arc<Shards<K>> {
    fn as_any(&self) -> &dyn Any {
        self
    }

    fn key_count(&self) -> usize {
        self.len()
    }

    fn sweep_all(&self, now: u64) {
        Shards::sweep_all(self, now);
    }
}

/// Every map of one store, and the cap they share.
pub(super) struct Registry {
    by_key_type: RwLock<HashMap<TypeId, Box<dyn AnyShards>, RandomState>>,
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

    /// The map holding keys of type `K`, made if new.
    pub(super) fn shards<K>(&self) -> Arc<Shards<K>>
    where
        K: Hash + Eq + Send + Sync + 'static,
    {
        let found = |maps: &dyn AnyShards| {
            let shards = maps.as_any().downcast_ref::<Arc<Shards<K>>>();
            Arc::clone(shards.expect("the map found by a key type's id holds that key type"))
        };
        if let Some(maps) = self.by_key_type.read().get(&TypeId::of::<K>()) {
            return found(&**maps);
        }
        let mut by_key_type = self.by_key_type.write();
        let maps = by_key_type
            .entry(TypeId::of::<K>())
            .or_insert_with(|| Box::new(Arc::new(Shards::<K>::new(Arc::clone(&self.cap)))));
        found(&**maps)
    }

    /// Drops every key idle at `now`, in every map.
    pub(super) fn sweep_all(&self, now: u64) {
        for maps in self.by_key_type.read().values() {
            maps.sweep_all(now);
        }
    }

    /// The keys of type `K` held, live or not yet swept.
    pub(super) fn key_count<K: 'static>(&self) -> usize {
        let by_key_type = self.by_key_type.read();
        by_key_type
            .get(&TypeId::of::<K>())
            .map_or(0, |maps| maps.key_count())
    }
}
