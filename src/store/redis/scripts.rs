//! The two server-side scripts and the decoding of their replies into
//! decisions, through the same core code the memory store runs.

use std::sync::LazyLock;

use redis::Script;

use crate::core::log::{blocked_for, quota};
use crate::core::refusal::{tightest, Verdict};
use crate::core::{FixedWindow, SlidingCounter};
use crate::decision::Decision;
use crate::policy::{Algorithm, Policy};
use crate::store::StoreError;

/// Sliding counter and fixed window.
pub(super) static WINDOW: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("window.lua")));
/// Sliding log.
pub(super) static LOG: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("log.lua")));

/// How long a key's state matters after its last accepted request, in
/// milliseconds, rounded up: the TTL that lets idle clients vanish.
pub(super) fn ttl_millis(policy: &Policy) -> u64 {
    let longest = policy.longest_window_micros();
    let span = match policy.algorithm() {
        // The current window's count weighs on the next window too.
        Algorithm::SlidingCounter => longest.saturating_mul(2),
        Algorithm::SlidingLog | Algorithm::FixedWindow => longest,
    };
    span.div_ceil(1_000).saturating_add(1)
}

fn malformed(reply: &[i64]) -> StoreError {
    StoreError::new(format!("unexpected script reply {reply:?}"), None)
}

fn number<T: TryFrom<i64>>(reply: &[i64], at: usize) -> Result<T, StoreError> {
    reply
        .get(at)
        .and_then(|&v| T::try_from(v).ok())
        .ok_or_else(|| malformed(reply))
}

/// Turns the window script's reply (the state judged, before counting the
/// request) into the decision the core makes from that state, and checks
/// that both sides agree on the verdict.
pub(super) fn window_decision(policy: &Policy, reply: &[i64]) -> Result<Decision, StoreError> {
    let limits = policy.limits();
    if reply.len() != 2 + 3 * limits.len() {
        return Err(malformed(reply));
    }
    let allowed = number::<u8>(reply, 0)? == 1;
    let now = number::<u64>(reply, 1)?;
    let mut slots = Vec::with_capacity(limits.len());
    for i in 0..limits.len() {
        let at = 2 + 3 * i;
        slots.push((
            number(reply, at)?,
            number(reply, at + 1)?,
            number(reply, at + 2)?,
        ));
    }
    let decision = match policy.algorithm() {
        Algorithm::FixedWindow => {
            FixedWindow::from_parts(slots.into_iter().map(|(window, _, count)| (window, count)))
                .decide_micros(now, limits)
        }
        _ => SlidingCounter::from_parts(slots).decide_micros(now, limits),
    };
    if decision.is_allowed() != allowed {
        return Err(StoreError::new(
            format!("the script and the core disagree on {reply:?}"),
            None,
        ));
    }
    Ok(decision)
}

/// Turns the log script's reply into a decision.
pub(super) fn log_decision(policy: &Policy, reply: &[i64]) -> Result<Decision, StoreError> {
    let limits = policy.limits();
    let allowed = number::<u8>(reply, 0)? == 1;
    let now = number::<u64>(reply, 1)?;
    let optional = |at: usize| -> Result<Option<u64>, StoreError> {
        match reply.get(at) {
            Some(-1) => Ok(None),
            _ => number(reply, at).map(Some),
        }
    };
    if !allowed {
        if reply.len() != 2 + limits.len() {
            return Err(malformed(reply));
        }
        let mut verdict = Verdict::default();
        for (index, limit) in limits.iter().enumerate() {
            if let Some(wait) = optional(2 + index)?.and_then(|b| blocked_for(b, now, limit)) {
                verdict.refuse(index, wait);
            }
        }
        return verdict.refusal(limits, now).ok_or_else(|| malformed(reply));
    }
    if reply.len() != 2 + 2 * limits.len() {
        return Err(malformed(reply));
    }
    let mut quotas = Vec::with_capacity(limits.len());
    for (index, limit) in limits.iter().enumerate() {
        let in_window = number::<u32>(reply, 2 + 2 * index)?;
        let oldest = optional(3 + 2 * index)?;
        quotas.push(quota(in_window, oldest, now, limit));
    }
    Ok(tightest(
        limits,
        now,
        |index| quotas[index].0,
        |index, _| quotas[index].1,
    ))
}
