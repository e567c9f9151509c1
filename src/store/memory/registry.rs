//! A memory store's maps, one per policy value and key type.
//!
//! Binding a policy finds its map here by value, so a policy rebuilt from
//! data on every request finds the same windows as the one built before it.
//! The store owns the maps: a map lives while some binding holds it, and
//! after that until every key in it has gone idle, when a later binding of
//! a new policy drops it. A map is never dropped with a live key in it,
//! which would hand that key a fresh window.

use std::any::Any;
use std::hash::Hash;

use foldhash::fast::RandomState;
use hashbrown::HashMap;
use parking_lot::RwLock;

use super::layouts::{Layout, Shape};
use crate::policy::Policy;

/// How often (µs of store time) binding a new policy looks for maps that
/// no binding holds and whose keys have all gone idle.
const PRUNE_EVERY_MICROS: u64 = 5_000_000;

/// A map of some key type, its type erased.
trait AnyLayout: Send + Sync {
    fn as_any(&self) -> &dyn Any;
    fn key_count(&self) -> usize;
    /// Whether the map can go: no binding holds it and no key in it is
    /// live at `now`.
    fn droppable(&self, now: u64) -> bool;
}

impl<K: Hash + Eq + Send + Sync + 'static> AnyLayout for Layout<K> {
    fn as_any(&self) -> &dyn Any {
        self
    }

    fn key_count(&self) -> usize {
        self.len()
    }

    fn droppable(&self, now: u64) -> bool {
        !self.is_bound() && !self.sweep_all(now)
    }
}

#[derive(Default)]
struct Maps {
    by_policy: HashMap<Policy, Vec<Box<dyn AnyLayout>>, RandomState>,
    next_prune: u64,
}

/// Every map of one store.
#[derive(Default)]
pub(super) struct Registry {
    maps: RwLock<Maps>,
}

impl Registry {
    /// The map for `policy` and keys of type `K`, made with room for
    /// `max_keys` if there is none yet.
    pub(super) fn bind<K>(&self, policy: &Policy, max_keys: usize, now: u64) -> Layout<K>
    where
        K: Hash + Eq + Send + Sync + 'static,
    {
        if let Some(layout) = find(&self.maps.read(), policy) {
            return layout;
        }
        let mut maps = self.maps.write();
        // Made by another thread since the look above.
        if let Some(layout) = find(&maps, policy) {
            return layout;
        }
        if now >= maps.next_prune {
            maps.by_policy.retain(|_, layouts| {
                layouts.retain(|layout| !layout.droppable(now));
                !layouts.is_empty()
            });
            maps.next_prune = now.saturating_add(PRUNE_EVERY_MICROS);
        }
        let layout = Layout::<K>::new(Shape::of(policy), max_keys);
        maps.by_policy
            .entry(policy.clone())
            .or_default()
            .push(Box::new(layout.clone()));
        layout
    }

    /// The keys of type `K` held in every map, live or not yet swept.
    pub(super) fn key_count<K: 'static>(&self) -> usize {
        let maps = self.maps.read();
        maps.by_policy
            .values()
            .flatten()
            .filter(|layout| layout.as_any().is::<Layout<K>>())
            .map(|layout| layout.key_count())
            .sum()
    }
}

fn find<K: 'static>(maps: &Maps, policy: &Policy) -> Option<Layout<K>> {
    maps.by_policy
        .get(policy)?
        .iter()
        .find_map(|layout| layout.as_any().downcast_ref::<Layout<K>>())
        .cloned()
}
