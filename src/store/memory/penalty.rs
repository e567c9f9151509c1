//! A key's state under a policy with a penalty: the instant its penalty
//! ends beside the algorithm's state.

use super::layouts::EntryState;
use crate::algorithm::Units;
use crate::algorithm::{Decision, Origin, Settlement};
use crate::policy::Policy;

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
        if now < self.until {
            return Decision::in_penalty(policy.limits()[0], self.until - now, now);
        }
        let decision = self.state.decide(now, cost, policy, anchor);
        if decision.is_allowed() || decision.origin() != Origin::Limits {
            return decision;
        }
        let penalty = policy.penalty_micros();
        self.until = now.saturating_add(penalty);
        decision.starting_penalty(penalty)
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
