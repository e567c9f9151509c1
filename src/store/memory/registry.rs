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
use super::stored::Packed;
use crate::policy::Policy;
use crate::state::KeyState;

/// The maps of some key type, the type erased.
trait AnyMaps: Send + Sync {
    fn as_any(&self) -> &dyn Any;
    fn key_count(&self) -> usize;
    fn sweep_all(&self, now: u64);
}

/// The maps of one key type: one for states kept whole, and one for
/// states packed in each number of records.
pub(super) struct Maps<K> {
    whole: Arc<Shards<K, KeyState>>,
    one: Arc<Shards<K, Packed<1>>>,
    two: Arc<Shards<K, Packed<2>>>,
}

/// The map a policy's keys live in.
pub(super) enum Table<K> {
    Whole(Arc<Shards<K, KeyState>>),
    One(Arc<Shards<K, Packed<1>>>),
    Two(Arc<Shards<K, Packed<2>>>),
}

impl<K: Hash + Eq + Send + Sync + 'static> Maps<K> {
    fn new(cap: &Arc<KeyCap>) -> Self {
        Self {
            whole: Arc::new(Shards::new(Arc::clone(cap))),
            one: Arc::new(Shards::new(Arc::clone(cap))),
            two: Arc::new(Shards::new(Arc::clone(cap))),
        }
    }

    /// The map for keys under `policy`: its records alone where they tell
    /// its state whole.
    pub(super) fn table(&self, policy: &Policy) -> Table<K> {
        match KeyState::packs(policy) {
            Some(1) => Table::One(Arc::clone(&self.one)),
            Some(2) => Table::Two(Arc::clone(&self.two)),
            _ => Table::Whole(Arc::clone(&self.whole)),
        }
    }
}

impl<K> Clone for Table<K> {
    fn clone(&self) -> Self {
        match self {
            Self::Whole(shards) => Self::Whole(Arc::clone(shards)),
            Self::One(shards) => Self::One(Arc::clone(shards)),
            Self::Two(shards) => Self::Two(Arc::clone(shards)),
        }
    }
}

impl<K: Hash + Eq + Send + Sync + 'static> AnyMaps for Arc<Maps<K>> {
    fn as_any(&self) -> &dyn Any {
        self
    }

    fn key_count(&self) -> usize {
        self.whole.len() + self.one.len() + self.two.len()
    }

    fn sweep_all(&self, now: u64) {
        self.whole.sweep_all(now);
        self.one.sweep_all(now);
        self.two.sweep_all(now);
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

    /// The maps holding keys of type `K`, made if new.
    pub(super) fn maps<K>(&self) -> Arc<Maps<K>>
    where
        K: Hash + Eq + Send + Sync + 'static,
    {
        let found = |maps: &dyn AnyMaps| {
            let shards = maps.as_any().downcast_ref::<Arc<Maps<K>>>();
            Arc::clone(shards.expect("the map found by a key type's id holds that key type"))
        };
        if let Some(maps) = self.by_key_type.read().get(&TypeId::of::<K>()) {
            return found(&**maps);
        }
        let mut by_key_type = self.by_key_type.write();
        let maps = by_key_type
            .entry(TypeId::of::<K>())
            .or_insert_with(|| Box::new(Arc::new(Maps::<K>::new(&self.cap))));
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
