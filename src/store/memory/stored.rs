//! What an entry of the memory store keeps of its key's state: the whole
//! [`KeyState`], or, under a policy whose state is its records alone, only
//! the records, packed, so that a map of many keys costs about what their
//! numbers cost. The policy an entry holds says which, and the rule that
//! judges is [`KeyState`]'s either way.

use crate::algorithm::Decision;
use crate::policy::Policy;
use crate::state::{KeyState, PackedRecord};

/// The form a policy's keys are kept in: their records alone where those
/// tell a state under it whole.
#[derive(Clone, Copy, Debug)]
pub(super) enum Form {
    Whole,
    One,
    Two,
}

impl Form {
    pub(super) fn of(policy: &Policy) -> Self {
        match KeyState::packed_limits(policy) {
            Some(1) => Self::One,
            Some(2) => Self::Two,
            _ => Self::Whole,
        }
    }
}

/// A key's state as an entry keeps it.
pub(super) trait Stored: Send + Sync + 'static {
    /// Keeps `state`, a state under a policy this form suits.
    fn keep(state: KeyState) -> Self;

    /// Judges a request of `cost` units at `now` under `policy`, as
    /// [`KeyState::decide_micros`] does, a slot it takes lasting until
    /// `lease_until`.
    fn decide(&mut self, policy: &Policy, now: u64, cost: u32, lease_until: u64) -> Decision;

    /// Runs `change` on the state under `policy`, and keeps what it leaves.
    fn change<T>(&mut self, policy: &Policy, change: impl FnOnce(&mut KeyState) -> T) -> T;

    /// Runs `read` on the state under `policy`.
    fn read<T>(&self, policy: &Policy, read: impl FnOnce(&KeyState) -> T) -> T;

    /// Lets the state give back memory it no longer needs under `policy`.
    fn shed(&mut self, policy: &Policy);
}

impl Stored for KeyState {
    fn keep(state: KeyState) -> Self {
        state
    }

    #[inline(always)]
    fn decide(&mut self, policy: &Policy, now: u64, cost: u32, lease_until: u64) -> Decision {
        self.decide_micros(policy, now, cost, lease_until)
    }

    #[inline(always)]
    fn change<T>(&mut self, _: &Policy, change: impl FnOnce(&mut KeyState) -> T) -> T {
        change(self)
    }

    #[inline(always)]
    fn read<T>(&self, _: &Policy, read: impl FnOnce(&KeyState) -> T) -> T {
        read(self)
    }

    fn shed(&mut self, policy: &Policy) {
        KeyState::shed(self, policy);
    }
}

/// The records of a state under a policy of `N` limits that
/// [`KeyState::packed_limits`] says are told whole by `N` records.
#[derive(Clone, Copy)]
pub(super) struct Packed<const N: usize>([PackedRecord; N]);

impl<const N: usize> Stored for Packed<N> {
    fn keep(state: KeyState) -> Self {
        let mut records = [[0; 2]; N];
        state.pack(&mut records);
        Self(records)
    }

    /// No slot is taken: the policy has no cap.
    #[inline(always)]
    fn decide(&mut self, policy: &Policy, now: u64, cost: u32, _: u64) -> Decision {
        KeyState::decide_packed(policy, &mut self.0, now, cost)
    }

    fn change<T>(&mut self, policy: &Policy, change: impl FnOnce(&mut KeyState) -> T) -> T {
        let mut state = KeyState::unpack(policy, &self.0);
        let outcome = change(&mut state);
        state.pack(&mut self.0);
        outcome
    }

    fn read<T>(&self, policy: &Policy, read: impl FnOnce(&KeyState) -> T) -> T {
        read(&KeyState::unpack(policy, &self.0))
    }

    fn shed(&mut self, _: &Policy) {}
}
