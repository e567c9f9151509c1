//! A key's state under a policy with a penalty: the instant its penalty
//! ends beside the algorithm's state.

use super::layouts::{EntryState, Shape};
use crate::algorithm::Units;
use crate::algorithm::{Decision, Origin, Settlement};

/// `S`, and until when (µs) the key is shut out: 0 for never.
#[derive(Clone, Debug, Default)]
pub(super) struct Penalized<S> {
    until: u64,
    state: S,
}

impl<S: EntryState<Base = ()>> EntryState for Penalized<S> {
    type Base = ();
    type EntryAlign = ();

    fn decide(&mut self, now: u64, cost: impl Units, shape: &Shape, base: &()) -> Decision {
        if now < self.until {
            return Decision::in_penalty(shape.limits()[0], self.until - now, now);
        }
        let decision = self.state.decide(now, cost, shape, base);
        if decision.is_allowed() || decision.origin() != Origin::Limits {
            return decision;
        }
        let penalty = shape.penalty_micros();
        self.until = now.saturating_add(penalty);
        decision.starting_penalty(penalty)
    }

    fn settle(&mut self, settled: &Settlement, shape: &Shape, base: &()) {
        self.state.settle(settled, shape, base);
    }

    fn idle_from(&self, shape: &Shape, base: &()) -> u64 {
        self.state.idle_from(shape, base).max(self.until)
    }

    fn shed(&mut self, shape: &Shape) {
        self.state.shed(shape);
    }
}
