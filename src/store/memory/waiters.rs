//! Requests waiting for an in-flight slot, woken one at a time as slots
//! free. Only keys somebody waits on have an entry, so a store with caps
//! but no waiting layer keeps nothing here.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};

use parking_lot::Mutex;
use tokio::sync::Notify;

use crate::store::SlotFreed;

/// The waiters of each key, by the hash the key's entry is found by:
/// two keys that share one only wake each other now and then.
#[derive(Default)]
pub(super) struct Waiters {
    keys: Mutex<HashMap<u64, Weak<Notify>>>,
    /// Whether any key has had a waiter since the map was last empty: a
    /// release with nobody waiting anywhere takes no lock. A waiter that
    /// registers just after a release it missed asks again at its poll.
    any: AtomicBool,
}

/// Past this many keys, the ones nobody waits on any more are dropped.
const TIDY_ABOVE: usize = 1024;

impl Waiters {
    /// Resolves once a slot of the key `hash` frees, or at once if one
    /// freed since the last waiter was woken.
    pub(super) fn wait(&self, hash: u64) -> SlotFreed {
        let mut waiters = self.keys.lock();
        self.any.store(true, Ordering::Relaxed);
        if waiters.len() > TIDY_ABOVE {
            waiters.retain(|_, notify| notify.strong_count() > 0);
        }
        let notify = match waiters.get(&hash).and_then(Weak::upgrade) {
            Some(notify) => notify,
            None => {
                let notify = Arc::new(Notify::new());
                waiters.insert(hash, Arc::downgrade(&notify));
                notify
            }
        };
        Box::pin(notify.notified_owned())
    }

    /// A slot of the key `hash` freed: wakes one of its waiters, if any.
    pub(super) fn wake_one(&self, hash: u64) {
        if !self.any.load(Ordering::Relaxed) {
            return;
        }
        let mut waiters = self.keys.lock();
        match waiters.get(&hash).map(Weak::upgrade) {
            Some(Some(notify)) => notify.notify_one(),
            Some(None) => drop(waiters.remove(&hash)),
            None => {}
        }
        if waiters.is_empty() {
            self.any.store(false, Ordering::Relaxed);
        }
    }
}
