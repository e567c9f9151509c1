//! A request's hold on an in-flight slot, from its admission until its
//! response is over: the layer's future holds it, then the response body
//! (in either HTTP behaviour), and whichever drops it last frees the slot,
//! however the request ends: a body that ends, fails or is dropped, a
//! future cancelled, an inner error, a panic unwinding.

use std::sync::Mutex;

use crate::algorithm::Decision;

/// Frees the slot the decision given took, in the store that took it.
pub(crate) type Releaser = Box<dyn FnOnce(&Decision) + Send>;

/// A request's way to an in-flight slot: how to free one, until the
/// store's decision says whether it took one.
pub(crate) enum Hold {
    /// The policy has no cap.
    None,
    /// Waiting for the decision.
    Pending(Releaser),
    /// The request holds a slot.
    Held(Slot),
}

impl Hold {
    /// Holds the slot `decision` took, if it took one.
    pub(crate) fn arm(&mut self, decision: &Decision) {
        *self = match std::mem::replace(self, Self::None) {
            Self::Pending(release) => Slot::held(release, decision).map_or(Self::None, Self::Held),
            unchanged => unchanged,
        };
    }

    /// The slot held, for the response to carry.
    pub(crate) fn take(&mut self) -> Option<Slot> {
        match std::mem::replace(self, Self::None) {
            Self::Held(slot) => Some(slot),
            _ => None,
        }
    }

    pub(crate) fn is_none(&self) -> bool {
        matches!(self, Self::None)
    }
}

/// A slot held, freed when dropped. Behind a lock only so that a body
/// carrying it stays `Sync` whatever the key type: it is never contended.
/// Boxed, so that a response body without one grows by a pointer.
pub struct Slot(Box<Mutex<Option<(Releaser, Decision)>>>);

impl Slot {
    fn held(release: Releaser, decision: &Decision) -> Option<Self> {
        decision
            .holds_slot()
            .then(|| Self(Box::new(Mutex::new(Some((release, *decision))))))
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let held = match self.0.get_mut() {
            Ok(held) => held.take(),
            Err(poisoned) => poisoned.into_inner().take(),
        };
        if let Some((release, decision)) = held {
            release(&decision);
        }
    }
}

impl std::fmt::Debug for Slot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Slot")
    }
}
