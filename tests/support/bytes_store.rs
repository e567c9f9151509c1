//! A store written as a user would write one over a key-value service,
//! from the crate's public API alone: each key's state is bytes in a map,
//! read, judged with `KeyState`, and written back only if no one wrote
//! the key in between (compare-and-swap), else tried again. The map
//! stands in for the service; nothing of `MemoryStore` is inside.

#![allow(dead_code)]

use std::collections::HashMap;
use std::future::{ready, Ready};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tower_sliding_window::{Clock, Decision, KeyState, Policy, Store, StoreError};

/// How much longer than its state matters a key is kept: a clock read a
/// little behind another must still find it.
const GRACE: Duration = Duration::from_secs(5);

/// A key's bytes and when they expire (their TTL), per (policy value, key).
type Map = HashMap<(Policy, String), (Vec<u8>, Duration)>;

#[derive(Clone)]
pub struct BytesStore<C> {
    map: Arc<Mutex<Map>>,
    clock: C,
    /// Writes lost to another writer and tried again.
    pub retries: Arc<AtomicUsize>,
}

impl<C: Clock> BytesStore<C> {
    pub fn new(clock: C) -> Self {
        Self {
            map: Arc::default(),
            clock,
            retries: Arc::default(),
        }
    }

    /// The bytes held for `id`, unless they expired by `now`: one read.
    fn load(&self, id: &(Policy, String), now: Duration) -> Option<Vec<u8>> {
        let map = self.map.lock().unwrap();
        map.get(id)
            .filter(|(_, expires)| *expires > now)
            .map(|(bytes, _)| bytes.clone())
    }

    /// Writes `new` for `id` if it still holds `old`: one compare-and-swap.
    fn swap(&self, id: &(Policy, String), old: &Option<Vec<u8>>, new: (Vec<u8>, Duration)) -> bool {
        let mut map = self.map.lock().unwrap();
        let now = self.clock.now();
        let current = map.get(id).filter(|(_, expires)| *expires > now);
        if current.map(|(bytes, _)| bytes) != old.as_ref() {
            return false;
        }
        map.insert(id.clone(), new);
        true
    }

    /// The key's state, as stored or fresh.
    fn state(policy: &Policy, bytes: &Option<Vec<u8>>) -> Result<KeyState, StoreError> {
        match bytes {
            Some(bytes) => KeyState::from_bytes(bytes),
            None => Ok(KeyState::new(policy.algorithm())),
        }
    }

    /// Reads `key`'s state, lets `judge` change it, and writes it back
    /// if no one else wrote it meanwhile, else starts again.
    fn update(
        &self,
        key: String,
        policy: &Policy,
        judge: impl Fn(&mut KeyState, Duration) -> Decision,
    ) -> Result<Decision, StoreError> {
        let id = (policy.clone(), key);
        loop {
            let now = self.clock.now();
            let old = self.load(&id, now);
            let mut state = Self::state(policy, &old)?;
            let decision = judge(&mut state, now);
            let expires = now + state.idle_after(policy, now) + GRACE;
            if self.swap(&id, &old, (state.to_bytes(), expires)) {
                return Ok(decision);
            }
            self.retries.fetch_add(1, Ordering::Relaxed);
        }
    }
}

impl<C: Clock> Store<String> for BytesStore<C> {
    /// Nothing to find per policy: the policy itself is the binding.
    type Binding = Policy;
    type Future = Ready<Result<Decision, StoreError>>;

    fn bind(&self, policy: &Policy) -> Policy {
        policy.clone()
    }

    fn decide_cost_bound(&self, key: String, policy: &Policy, cost: u32) -> Self::Future {
        ready(self.update(key, policy, |state, now| state.decide(policy, now, cost)))
    }

    fn settle_bound(
        &self,
        key: String,
        policy: &Policy,
        admitted: &Decision,
        cost: u32,
        used: u32,
    ) -> Self::Future {
        ready(self.update(key, policy, |state, now| {
            state.settle(policy, now, admitted, cost, used)
        }))
    }

    fn peek_bound(&self, key: String, policy: &Policy) -> Self::Future {
        let now = self.clock.now();
        let bytes = self.load(&(policy.clone(), key), now);
        ready(Self::state(policy, &bytes).map(|state| state.peek(policy, now)))
    }
}
