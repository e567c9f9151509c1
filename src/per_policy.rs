//! A cache of what its owner derives from a policy (header text, metric
//! keys, a store's binding, a Redis script), found by the policy's value.
//!
//! What it holds can always be derived again, so a full cache is emptied
//! rather than grown: a plan that builds a new policy value on every
//! request then costs a derivation per request, never unbounded memory.

use foldhash::fast::RandomState;
use hashbrown::HashMap;
use parking_lot::RwLock;

use crate::policy::Policy;

/// How many policies a cache holds before it starts afresh.
const HELD: usize = 1024;

pub(crate) struct PerPolicy<V> {
    held: RwLock<HashMap<Policy, V, RandomState>>,
}

impl<V> Default for PerPolicy<V> {
    fn default() -> Self {
        Self {
            held: RwLock::default(),
        }
    }
}

impl<V: Clone> PerPolicy<V> {
    /// What is held for `policy`, made by `make` if nothing is.
    pub(crate) fn get_or_make(&self, policy: &Policy, make: impl FnOnce() -> V) -> V {
        if let Some(value) = self.held.read().get(policy) {
            return value.clone();
        }
        let value = make();
        let mut held = self.held.write();
        if held.len() >= HELD {
            held.clear();
        }
        held.entry(policy.clone()).or_insert(value).clone()
    }
}

impl<V> std::fmt::Debug for PerPolicy<V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PerPolicy")
            .field("held", &self.held.read().len())
            .finish()
    }
}
