//! Picking the limit that speaks for a multi-limit decision.

use super::decision::{Decision, Origin, Quota};
use crate::limit::Limit;

/// The tally of per-limit verdicts: a refusal names the longest wait, an
/// acceptance the limit with the least quota left.
#[derive(Default)]
pub(crate) struct Tally {
    refusal: Option<(usize, u64)>,
}

impl Tally {
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
        self.refusal
            .map(|(index, retry_after)| refused(limits, now, index, retry_after))
    }
}

/// A refusal that limit `index` speaks for, until `retry_after` has passed.
pub(crate) fn refused(limits: &[Limit], now: u64, index: usize, retry_after: u64) -> Decision {
    let quota = Quota::Known {
        remaining: 0,
        replenish_micros: retry_after,
    };
    Decision {
        allowed: false,
        retry_after_micros: retry_after,
        ..accepted(limits, now, index, quota)
    }
}

/// The accepted decision for the limit with the least remaining quota (of
/// those, the one that takes longest to grow, so that the policy as a whole
/// has more quota once it has). `remaining` yields a limit's remaining
/// quota; `quota` its quota as the decision keeps it, asked only of the
/// limits that could decide, so that a lone tightest limit's time to grow is
/// worked out only if someone reads it.
pub(crate) fn tightest(
    limits: &[Limit],
    now: u64,
    mut remaining: impl FnMut(usize) -> u32,
    mut quota: impl FnMut(usize) -> Quota,
) -> Decision {
    let (mut index, mut least, mut tied) = (0, remaining(0), false);
    for candidate in 1..limits.len() {
        let left = remaining(candidate);
        if left < least {
            (index, least, tied) = (candidate, left, false);
        } else if left == least {
            tied = true;
        }
    }
    let mut chosen = quota(index);
    if tied {
        let mut longest = chosen.resolve(&limits[index], now).1;
        for (candidate, limit) in limits.iter().enumerate().skip(index + 1) {
            if remaining(candidate) != least {
                continue;
            }
            let other = quota(candidate);
            let wait = other.resolve(limit, now).1;
            if wait > longest {
                (index, longest, chosen) = (candidate, wait, other);
            }
        }
    }
    accepted(limits, now, index, chosen)
}

/// [`tightest`] when every limit's remaining quota and time to grow are
/// already worked out: `quotas[index]` is limit `index`'s
/// `(remaining, replenish_micros)`, as a log counts them.
pub(crate) fn tightest_known(limits: &[Limit], now: u64, quotas: &[(u32, u64)]) -> Decision {
    tightest(
        limits,
        now,
        |index| quotas[index].0,
        |index| Quota::Known {
            remaining: quotas[index].0,
            replenish_micros: quotas[index].1,
        },
    )
}

/// An acceptance that limit `index` speaks for, with its `quota`.
pub(crate) fn accepted(limits: &[Limit], now: u64, index: usize, quota: Quota) -> Decision {
    Decision {
        allowed: true,
        limit_index: u16::try_from(index).unwrap_or(u16::MAX),
        limit: limits[index],
        quota,
        retry_after_micros: 0,
        at_micros: now,
        origin: Origin::Limits,
        shadow: false,
        lease: 0,
        chunk: 0,
    }
}
