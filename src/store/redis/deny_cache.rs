//! Refusals remembered by one store instance, so that a key Redis has just
//! refused is answered locally until it could pass again.
//!
//! A refusal's wait is the earliest instant the key could pass, and nothing
//! this instance does meanwhile can bring that instant closer: a refused
//! request records nothing, and other instances only add traffic. So until
//! then Redis would refuse it again, and the call can be spared.

use foldhash::quality::RandomState;
use hashbrown::HashMap;
use parking_lot::Mutex;

use crate::algorithm::{Decision, Origin};

/// Refusals by Redis key name, at most `capacity` of them.
pub(super) struct DenyCache {
    held: Mutex<HashMap<Box<str>, Remembered, RandomState>>,
    capacity: usize,
    /// The longest a refusal is remembered (µs), however long its wait.
    longest: u64,
}

/// A refusal remembered, placed on the store's local clock.
#[derive(Clone, Copy)]
struct Remembered {
    decision: Decision,
    /// The local time the decision stands for: no later than the moment
    /// Redis judged it, so the refusal never outlasts Redis's own.
    from: u64,
    /// Until when it stands.
    until: u64,
}

impl DenyCache {
    pub(super) fn new(capacity: usize, longest: u64) -> Self {
        Self {
            held: Mutex::default(),
            capacity,
            longest,
        }
    }

    /// The refusal that still stands for `name` at local time `now` for a
    /// request of `cost` units, if any.
    ///
    /// Before `from` it answers nothing: a clock stepping back may find the
    /// key judged at another time than the refusal was. Only refusals of one
    /// unit are remembered, and they answer only requests of one unit
    /// (those of more would wait longer), but a penalty refuses any cost.
    pub(super) fn refusal(&self, name: &str, now: u64, cost: u32) -> Option<Decision> {
        let mut held = self.held.lock();
        let refusal = *held.get(name)?;
        if now >= refusal.until {
            held.remove(name);
            return None;
        }
        let answers = cost == 1 || (cost > 0 && refusal.decision.origin() == Origin::Penalty);
        (answers && now >= refusal.from).then(|| refusal.decision.refusal_later(now - refusal.from))
    }

    /// Remembers Redis's `decision` on `name`, a refusal standing for local
    /// time `from`.
    pub(super) fn remember(&self, name: String, decision: Decision, from: u64) {
        let until = from.saturating_add(decision.retry_after_micros.min(self.longest));
        let refusal = Remembered {
            decision,
            from,
            until,
        };
        let mut held = self.held.lock();
        if held.len() >= self.capacity && !held.contains_key(name.as_str()) {
            // Refusals that have run out go first; if that frees too little
            // for the next inserts to be cheap, everything goes: a refusal
            // forgotten costs one call to Redis, never a wrong answer.
            held.retain(|_, kept| kept.until > from);
            if held.len() > self.capacity / 2 {
                held.clear();
            }
        }
        held.insert(name.into_boxed_str(), refusal);
    }

    /// Forgets `name`'s refusal: a settling changed what it waits for.
    pub(super) fn forget(&self, name: &str) {
        self.held.lock().remove(name);
    }

    pub(super) fn len(&self) -> usize {
        self.held.lock().len()
    }
}
