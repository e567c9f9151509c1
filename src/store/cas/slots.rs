//! `CasStore`'s in-flight slots: releases that count before the store's
//! next call on their key, and the renewal of the slots held (the lease
//! book it shares with the Redis store).

use std::collections::HashMap;
use std::sync::Weak;

use parking_lot::Mutex;

use super::{CasStore, CompareAndSwap, Inner};
use crate::algorithm::Decision;
use crate::clock::Clock;
use crate::policy::Policy;
use crate::state::KeyState;
use crate::store::lease_book::Renew;
use crate::store::send_now;

/// Releases not yet written back, by key name: every update of that name
/// applies them first, so a release counts before any later call of this
/// store, whether or not its own write landed.
#[derive(Default)]
pub(super) struct Releasing(Mutex<HashMap<String, Vec<Decision>>>);

impl Releasing {
    /// The releases of `name` not yet written back.
    pub(super) fn of(&self, name: &str) -> Vec<Decision> {
        self.0.lock().get(name).cloned().unwrap_or_default()
    }

    /// Releases `released` were written back under `name`.
    pub(super) fn written(&self, name: &str, released: &[Decision]) {
        let mut releasing = self.0.lock();
        if let Some(pending) = releasing.get_mut(name) {
            pending.retain(|admitted| !released.iter().any(|r| r.lease == admitted.lease));
            if pending.is_empty() {
                releasing.remove(name);
            }
        }
    }
}

/// Where a slot is held: its key's name, the policy and the decision that
/// took it.
pub(super) type Place = (String, Policy, Decision);

/// Renews a store's slots, one update per key.
pub(super) struct Renewal<S, C>(pub(super) Weak<Inner<S, C>>);

impl<S: CompareAndSwap, C: Clock> Renew for Renewal<S, C> {
    type Place = Place;

    async fn renew(&self, held: Vec<(u64, Place)>) {
        let Some(inner) = self.0.upgrade() else {
            return;
        };
        let store = CasStore { inner };
        let mut by_key: HashMap<String, (Policy, Vec<Decision>)> = HashMap::new();
        for (_, (name, policy, admitted)) in held {
            by_key
                .entry(name)
                .or_insert((policy, Vec::new()))
                .1
                .push(admitted);
        }
        let lease = store.inner.lease;
        for (name, (policy, held)) in by_key {
            let renew = move |state: &mut KeyState, _: &Policy, now| {
                for admitted in &held {
                    state.renew(admitted, now, lease);
                }
                held[0].holding(0)
            };
            let _ = store.clone().update(name, policy, renew).await;
        }
    }
}

impl<S: CompareAndSwap, C: Clock> CasStore<S, C> {
    /// Frees the slot `admitted` took in `name`'s state: counted by this
    /// store's next update of the name at once, and written back now.
    pub(super) fn release(&self, name: String, policy: Policy, admitted: Decision) {
        self.inner.leases.release(admitted.lease);
        let releasing = &self.inner.releasing;
        releasing
            .0
            .lock()
            .entry(name.clone())
            .or_default()
            .push(admitted);
        // The update's own answer holds no slot: one that fails is not
        // released again.
        let update = self
            .clone()
            .update(name, policy, move |_, _, _| admitted.holding(0));
        send_now(async move {
            let _ = update.await;
        });
    }
}
