//! A key's state under a policy with a penalty: the instant its penalty
//! ends beside the algorithm's state.

use super::layouts::EntryState;
use crate::algorithm::{Decision, Settlement, Units};
use crate::policy::Policy;
use crate::state::with_penalty;

/// `S`, and until when (µs) the key is shut out: 0 for never.
#[derive(Clone, Debug, Default)]
pub(super) struct Penalized<S> {
    until: u64,
    state: S,
}

impl<S: EntryState> EntryState for Penalized<S> {
    const ANCHORED: bool = S::ANCHORED;

    fn rebase(&mut self, from: u64, to: u64, policy: &Policy) -> bool {
        self.state.rebase(from, to, policy)
    }

    fn decide(&mut self, now: u64, cost: impl Units, policy: &Policy, anchor: u64) -> Decision {
        let state = &mut self.state;
        with_penalty(&mut self.until, now, policy, || {
            state.decide(now, cost, policy, anchor)
        })
    }

    fn settle(&mut self, settled: &Settlement, policy: &Policy, anchor: u64) {
        self.state.settle(settled, policy, anchor);
    }

    fn idle_from(&self, policy: &Policy, anchor: u64) -> u64 {
        self.state.idle_from(policy, anchor).max(self.until)
    }

    fn shed(&mut self, policy: &Policy) {
        self.state.shed(policy);
    }
}
