//! The token bucket as a store keeps it: one or two limits' arrival times
//! beside the key, with no length to read.

use super::layouts::EntryState;
use crate::algorithm::bucket::{decide, decide_one, idle_from, settle, Tat};
use crate::algorithm::{Decision, Settlement, Units};
use crate::policy::Policy;

/// The arrival times of a policy of exactly `N` limits.
#[derive(Clone, Copy, Debug)]
pub(super) struct Buckets<const N: usize>([Tat; N]);

impl<const N: usize> Default for Buckets<N> {
    fn default() -> Self {
        Self([Tat::default(); N])
    }
}

impl<const N: usize> EntryState for Buckets<N> {
    #[inline]
    fn decide(&mut self, now: u64, cost: impl Units, policy: &Policy, _: u64) -> Decision {
        match (&mut self.0[..], policy.limits()) {
            ([tat], [limit]) => decide_one(tat, now, limit, cost),
            (tats, limits) => decide(tats, now, limits, cost),
        }
    }

    fn settle(&mut self, settled: &Settlement, policy: &Policy, _: u64) {
        settle(&mut self.0, settled, policy.limits());
    }

    fn idle_from(&self, _: &Policy, _: u64) -> u64 {
        idle_from(&self.0)
    }
}
