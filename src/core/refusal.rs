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
    pub(crate) fn refusal(&self, limits: &[Limit], now: u64) -> Option<Decision> {
        self.refusal.map(|(index, retry_after)| Decision {
            allowed: false,
            limit_index: u16::try_from(index).unwrap_or(u16::MAX),
            limit: limits[index],
            remaining: 0,
            retry_after_micros: retry_after,
            replenish_micros: retry_after,
            at_micros: now,
            origin: Origin::Limits,
        })
    }
}

/// The accepted decision for the limit with the least remaining quota (of
/// those, the one that takes longest to grow, so that the policy as a whole
/// has more quota once it has). `remaining` yields a limit's remaining
/// quota; `replenish` how long until that grows, asked only of the limits
/// that could decide, since it is the dearer of the two.
pub(crate) fn tightest(
    limits: &[Limit],
    now: u64,
    mut remaining: impl FnMut(usize) -> u32,
    mut replenish: impl FnMut(usize, u32) -> u64,
) -> Decision {
    // `remaining` is a lookup for every caller, so it is simply asked twice.
    let mut least = u32::MAX;
    for index in 0..limits.len() {
        least = least.min(remaining(index));
    }
    let (mut index, mut longest) = (0, 0);
    let mut found = false;
    for candidate in 0..limits.len() {
        if remaining(candidate) == least {
            let wait = replenish(candidate, least);
            if !found || wait > longest {
                (index, longest, found) = (candidate, wait, true);
            }
        }
    }
    let replenish = longest;
    Decision {
        allowed: true,
        limit_index: u16::try_from(index).unwrap_or(u16::MAX),
        limit: limits[index],
        remaining: least,
        retry_after_micros: 0,
        replenish_micros: replenish,
        at_micros: now,
        origin: Origin::Limits,
    }
}
