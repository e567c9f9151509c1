//! `CasStore`'s in-flight slots: releases that count before the store's
//! next call on their key, slots whose write went unseen, and the renewal
//! of the slots held.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};

use parking_lot::Mutex;

use super::{CasStore, CompareAndSwap, Inner};
use crate::algorithm::Decision;
use crate::clock::Clock;
use crate::policy::Policy;
use crate::state::KeyState;
use crate::store::send_now;

/// What one store knows of the slots it took.
#[derive(Default)]
pub(super) struct Slots {
    /// Released and not yet written back, by key name: every update of
    /// that name applies them first, so a release counts before any later
    /// call of this store, whether or not its own write landed.
    releasing: Mutex<HashMap<String, Vec<Decision>>>,
    /// Held, by lease id: what the renewal renews.
    held: Mutex<HashMap<u64, (String, Policy, Decision)>>,
    /// Whether the renewal task runs.
    renewing: AtomicBool,
}

impl Slots {
    /// The releases of `name` not yet written back.
    pub(super) fn releasing(&self, name: &str) -> Vec<Decision> {
        self.releasing.lock().get(name).cloned().unwrap_or_default()
    }

    /// Releases `released` were written back under `name`.
    pub(super) fn written(&self, name: &str, released: &[Decision]) {
        let mut releasing = self.releasing.lock();
        if let Some(pending) = releasing.get_mut(name) {
            pending.retain(|admitted| !released.iter().any(|r| r.lease == admitted.lease));
            if pending.is_empty() {
                releasing.remove(name);
            }
        }
    }
}

impl<S: CompareAndSwap, C: Clock> CasStore<S, C> {
    /// Keeps the slot `admitted` took in `name`'s state renewed until it
    /// is released.
    pub(super) fn hold(&self, name: String, policy: Policy, admitted: Decision) {
        let slots = &self.inner.slots;
        slots
            .held
            .lock()
            .insert(admitted.lease, (name, policy, admitted));
        if slots.renewing.swap(true, Ordering::Relaxed) {
            return;
        }
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => drop(runtime.spawn(renew(Arc::downgrade(&self.inner)))),
            Err(_) => slots.renewing.store(false, Ordering::Relaxed),
        }
    }

    /// Frees the slot `admitted` took in `name`'s state: counted by this
    /// store's next update of the name at once, and written back now.
    pub(super) fn release(&self, name: String, policy: Policy, admitted: Decision) {
        let slots = &self.inner.slots;
        slots.held.lock().remove(&admitted.lease);
        let mut releasing = slots.releasing.lock();
        releasing.entry(name.clone()).or_default().push(admitted);
        drop(releasing);
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

/// Renews the slots a store holds every third of a lease, one update per
/// key, until the store is dropped. A task dropped with its runtime lets
/// the store's next slot start another.
async fn renew<S: CompareAndSwap, C: Clock>(inner: Weak<Inner<S, C>>) {
    let _running = Running(inner.clone());
    loop {
        let Some(every) = inner.upgrade().map(|inner| inner.lease / 3) else {
            return;
        };
        tokio::time::sleep(every).await;
        let Some(inner) = inner.upgrade() else {
            return;
        };
        let store = CasStore { inner };
        let mut by_key: HashMap<String, (Policy, Vec<Decision>)> = HashMap::new();
        for (name, policy, admitted) in store.inner.slots.held.lock().values() {
            let key = by_key
                .entry(name.clone())
                .or_insert((policy.clone(), Vec::new()));
            key.1.push(*admitted);
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

/// The renewal task's mark on its store, taken off when the task ends.
struct Running<S, C>(Weak<Inner<S, C>>);

impl<S, C> Drop for Running<S, C> {
    fn drop(&mut self) {
        if let Some(inner) = self.0.upgrade() {
            inner.slots.renewing.store(false, Ordering::Relaxed);
        }
    }
}

/// A slot taken by a write whose outcome was not seen: released if the
/// update ends before it is.
pub(super) struct Unseen<'a, S: CompareAndSwap, C: Clock>(pub(super) Option<Taken<'a, S, C>>);

type Taken<'a, S, C> = (&'a CasStore<S, C>, &'a String, &'a Policy, Decision);

impl<S: CompareAndSwap, C: Clock> Drop for Unseen<'_, S, C> {
    fn drop(&mut self) {
        if let Some((store, name, policy, admitted)) = self.0.take() {
            store.release(name.clone(), policy.clone(), admitted);
        }
    }
}
