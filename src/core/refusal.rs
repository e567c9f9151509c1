//! Picking the limit that speaks for a multi-limit decision.

use crate::decision::{Decision, Origin};
use crate::limit::Limit;

/// Collects per-limit verdicts: a refusal names the longest wait, an
/// acceptance the limit with the least quota left.
#[derive(Default)]
pub(crate) struct Verdict {
    refusal: Option<(usize, u64)>,
}

impl Verdict {
    /// Notes that limit `index` refuses until `retry_after` has passed.
    pub(crate) fn refuse(&mut self, index: usize, retry_after: u64) {
        if self
            .refusal
            .is_none_or(|(_, longest)| retry_after > longest)
        {
            self.refusal = Some((index, retry_after));
        }
    }

    /// The refusal with the longest wait, if any limit refused.
    pub(crate) fn refusal(&self, limits: &[Limit]) -> Option<Decision> {
        self.refusal.map(|(index, retry_after)| Decision {
            allowed: false,
            limit_index: index as u8,
            limit: limits[index],
            remaining: 0,
            retry_after_micros: retry_after,
            replenish_micros: retry_after,
            origin: Origin::Limits,
        })
    }
}

/// The accepted decision for the limit with the least remaining quota (of
/// those, the one that takes longest to grow, so that the policy as a whole
/// has more quota once it has); the closure yields `(remaining,
/// replenish_after)` for a limit's index.
pub(crate) fn tightest(limits: &[Limit], mut quota: impl FnMut(usize) -> (u32, u64)) -> Decision {
    let mut best = (0, quota(0));
    for index in 1..limits.len() {
        let candidate = quota(index);
        if candidate.0 < best.1 .0 || (candidate.0 == best.1 .0 && candidate.1 > best.1 .1) {
            best = (index, candidate);
        }
    }
    let (index, (remaining, replenish)) = best;
    Decision {
        allowed: true,
        limit_index: index as u8,
        limit: limits[index],
        remaining,
        retry_after_micros: 0,
        replenish_micros: replenish,
        origin: Origin::Limits,
    }
}
