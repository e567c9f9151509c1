//! What every script shares (the TTL, the lines that read the time, the
//! per-limit lists), and the decoding of the scripts' replies into
//! decisions, through the same algorithm code the memory store runs.

use crate::algorithm::log::{blocked_for, quota};
use crate::algorithm::refusal::{tightest_known, Verdict};
use crate::algorithm::Algorithm;
use crate::algorithm::{Decision, FixedWindow, SlidingCounter};
use crate::limit::Limit;
use crate::policy::Policy;
use crate::store::StoreError;

use super::log_script;
use super::template::Vars;

/// What a script does with a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Mode {
    /// Judges a request of one unit, recording nothing.
    Peek,
    /// Judges a request of one unit and records it if accepted.
    Record,
    /// Judges a request of `ARGV[1]` units and records them if accepted;
    /// the time, if given, is then `ARGV[2]`.
    RecordCost,
    /// Settles a request judged at `ARGV[1]` for `ARGV[2]` units that used
    /// `ARGV[3]`; the time, if given, is then `ARGV[4]`.
    Settle,
}

impl Mode {
    pub(super) const ALL: usize = 4;

    /// Whether the script writes the state.
    pub(super) fn records(self) -> bool {
        self != Self::Peek
    }

    /// Arguments before the time.
    fn arguments(self) -> usize {
        match self {
            Self::Peek | Self::Record => 0,
            Self::RecordCost => 1,
            Self::Settle => 3,
        }
    }
}

/// What every script's template starts from: `kind` judged for `policy`
/// in `mode`, its TTL, the lines that read the time (`ARGV[1]`, or later
/// after a cost or a settling's arguments, the client's clock in µs, or
/// else the server's `TIME`), and those that refuse a key serving its
/// penalty.
pub(super) fn header(kind: &str, policy: &Policy, mode: Mode) -> Vars {
    let described = match mode {
        Mode::Peek => "judge only",
        Mode::Record => "judge and record",
        Mode::RecordCost => "judge and record a cost",
        Mode::Settle => "settle",
    };
    let now_at = format!("ARGV[{}]", mode.arguments() + 1);
    let now = include_str!("lua/now.lua").replace("ARGV[1]", &now_at);
    let penalty = policy.penalty_micros();
    Vars::default()
        // A settling request was let through: its key's penalty is no matter.
        .flag("penalty", penalty > 0 && mode != Mode::Settle)
        .value("penalty", penalty)
        .value("penalty_ttl", penalty.div_ceil(1_000).saturating_add(1))
        .value("kind", kind)
        .value("signature", policy.signature())
        .value("mode", described)
        .value("ttl", ttl_millis(policy))
        .value("now", now.trim_end())
        .value("penalty_check", include_str!("lua/penalty.lua").trim_end())
        .flag("record", mode.records())
        .flag("costed", mode == Mode::RecordCost)
        .flag("settle", mode == Mode::Settle)
}

/// `template` written once per limit, `#` standing for the limit's number
/// (from 1), the copies separated by commas: `per_limit(2, "c#")` is
/// `c1, c2`.
pub(super) fn per_limit(n: usize, template: &str) -> String {
    joined(n, ", ", template)
}

/// `template` written once per limit as [`per_limit`] writes it, the
/// copies separated by `separator`.
pub(super) fn joined(n: usize, separator: &str, template: &str) -> String {
    (1..=n)
        .map(|i| template.replace('#', &i.to_string()))
        .collect::<Vec<_>>()
        .join(separator)
}

/// How long a key's state is kept, in milliseconds, rounded up: the TTL
/// that lets idle clients vanish. The scripts renew it only now and then
/// (the window script when a window rolls, the log script when its newest
/// stamp enters a new span of the longest window), so it is twice the
/// longest window, which a state needs at most after the renewal; the fixed
/// window needs only one.
pub(super) fn ttl_millis(policy: &Policy) -> u64 {
    let longest = policy.longest_window_micros();
    let span = match policy.algorithm() {
        Algorithm::SlidingCounter | Algorithm::SlidingLog => longest.saturating_mul(2),
        Algorithm::FixedWindow => longest,
    };
    span.div_ceil(1_000).saturating_add(1)
}

/// A script's reply led by a verdict byte (every reply but the log's to a
/// recorded request): then little-endian words, the first of 8 bytes being
/// the time judged at.
struct Reply<'a> {
    bytes: &'a [u8],
}

impl<'a> Reply<'a> {
    fn new(bytes: &'a [u8], len: usize) -> Result<Self, StoreError> {
        let reply = Self { bytes };
        if bytes.len() != len || bytes.first().is_none_or(|&flag| flag > 1) {
            return Err(reply.malformed());
        }
        Ok(reply)
    }

    fn malformed(&self) -> StoreError {
        StoreError::new(format!("unexpected script reply {:02x?}", self.bytes), None)
    }

    fn allowed(&self) -> bool {
        self.bytes[0] == 1
    }

    fn bytes<const N: usize>(&self, at: usize) -> [u8; N] {
        let mut out = [0; N];
        out.copy_from_slice(&self.bytes[at..at + N]);
        out
    }

    /// The `i`th 8-byte word after the verdict.
    fn word(&self, i: usize) -> i64 {
        i64::from_le_bytes(self.bytes(1 + 8 * i))
    }

    fn now(&self) -> Result<u64, StoreError> {
        u64::try_from(self.word(0)).map_err(|_| self.malformed())
    }
}

/// The refusal of a key serving its penalty, from a reply of 17 bytes led
/// by the verdict 2 (then now and the penalty's end, 8 bytes each); `None`
/// for any other reply. The length tells it apart: the log's reply to a
/// recorded request is its trailer, whose first byte can be anything, but
/// which is never 17 bytes long.
pub(super) fn penalty_decision(
    policy: &Policy,
    bytes: &[u8],
) -> Result<Option<Decision>, StoreError> {
    if bytes.len() != 17 || bytes.first() != Some(&2) {
        return Ok(None);
    }
    let reply = Reply { bytes };
    let now = reply.now()?;
    let until = u64::try_from(reply.word(1)).map_err(|_| reply.malformed())?;
    let wait = until
        .checked_sub(now)
        .filter(|&wait| wait > 0)
        .ok_or_else(|| reply.malformed())?;
    Ok(Some(Decision::in_penalty(policy.limits()[0], wait, now)))
}

/// Turns the window script's reply (the verdict, the time judged at and the
/// state, windows rolled, counting the request if it was accepted and
/// `recorded`) into the decision the algorithm makes from the state the request
/// was judged against, and checks that both sides agree.
pub(super) fn window_decision(
    policy: &Policy,
    bytes: &[u8],
    recorded: bool,
    cost: u32,
) -> Result<Decision, StoreError> {
    let limits = policy.limits();
    let reply = Reply::new(bytes, 9 + 12 * limits.len())?;
    let now = reply.now()?;
    let count = |at: usize| u32::from_le_bytes(reply.bytes(at));
    // Having recorded an accepted request, the script sends what it stored,
    // this request counted in: the state it was judged against has its
    // cost less in each current window.
    let counted = if recorded && reply.allowed() { cost } else { 0 };
    let mut slots = Vec::with_capacity(limits.len());
    for (i, limit) in limits.iter().enumerate() {
        let at = 9 + 12 * i;
        // The script rolled every window to `now`'s, and sends its index
        // modulo 2^32 as it stores it.
        let window = now / limit.window_micros();
        let current = count(at + 8).checked_sub(counted);
        match current {
            Some(current) if window as u32 == count(at) => {
                slots.push((window, count(at + 4), current));
            }
            _ => return Err(reply.malformed()),
        }
    }
    let decision = match policy.algorithm() {
        Algorithm::FixedWindow => {
            FixedWindow::from_parts(slots.into_iter().map(|(window, _, count)| (window, count)))
                .decide_micros(now, limits, cost)
        }
        _ => SlidingCounter::from_parts(slots).decide_micros(now, limits, cost),
    };
    if decision.is_allowed() != reply.allowed() {
        return Err(StoreError::new(
            format!("the script and the algorithm disagree on {bytes:02x?}"),
            None,
        ));
    }
    Ok(decision)
}

/// Turns the log script's reply into a decision; a request accepted and
/// `recorded` is answered with the trailer the script wrote, after the
/// request's stamp where it wrote the two together.
pub(super) fn log_decision(
    policy: &Policy,
    bytes: &[u8],
    recorded: bool,
) -> Result<Decision, StoreError> {
    let limits = policy.limits();
    // No other reply has these lengths: a refusal takes 9 + 8 bytes a
    // limit, an acceptance judged only 9 + 16.
    let trailer = log_script::trailer_len(limits.len());
    if recorded && (bytes.len() == trailer || bytes.len() == 8 + trailer) {
        return log_recorded_decision(limits, bytes, bytes.len() - trailer);
    }
    let allowed = bytes.first() == Some(&1);
    // The recording script answers an acceptance with its trailer (after
    // the request's stamp or not), which was read above.
    if recorded && allowed {
        return Err(Reply { bytes }.malformed());
    }
    let words = if allowed {
        1 + 2 * limits.len()
    } else {
        1 + limits.len()
    };
    let reply = Reply::new(bytes, 1 + 8 * words)?;
    let now = reply.now()?;
    // -1 stands for "none"; any other negative is a broken reply.
    let optional = |i: usize| -> Result<Option<u64>, StoreError> {
        match reply.word(i) {
            -1 => Ok(None),
            word => u64::try_from(word).map(Some).map_err(|_| reply.malformed()),
        }
    };
    if !allowed {
        let mut verdict = Verdict::default();
        for (index, limit) in limits.iter().enumerate() {
            if let Some(wait) = optional(1 + index)?.and_then(|b| blocked_for(b, now, limit)) {
                verdict.refuse(index, wait);
            }
        }
        return verdict
            .refusal(limits, now)
            .ok_or_else(|| reply.malformed());
    }
    let mut quotas = Vec::with_capacity(limits.len());
    for (index, limit) in limits.iter().enumerate() {
        let in_window = u32::try_from(reply.word(1 + 2 * index)).map_err(|_| reply.malformed())?;
        let oldest = optional(2 + 2 * index)?;
        quotas.push(quota(in_window, oldest, now, limit));
    }
    Ok(tightest_known(limits, now, &quotas))
}

/// The decision for a request the log script accepted and recorded, from
/// the trailer the script wrote, found at `trailer` in its reply (8 where the
/// request's stamp comes first): now is the newest stamp, and each limit's
/// window holds the stamps from its cursor on (this request's among them),
/// the oldest being the cursor's stamp.
fn log_recorded_decision(
    limits: &[Limit],
    bytes: &[u8],
    trailer: usize,
) -> Result<Decision, StoreError> {
    let malformed = || Reply { bytes }.malformed();
    let word = |at: usize| -> Option<[u8; 8]> { bytes.get(at..at + 8)?.try_into().ok() };
    let count = |at: usize| -> Option<u32> {
        Some(u32::from_le_bytes(bytes.get(at..at + 4)?.try_into().ok()?))
    };
    // A stamp is never negative; -1 and -2 stand for none and unknown.
    let stamp = |at: usize| u64::try_from(i64::from_le_bytes(word(at)?)).ok();
    let len = count(trailer + 4).ok_or_else(malformed)?;
    let now = stamp(trailer + 8)
        .filter(|&now| trailer == 0 || stamp(0) == Some(now))
        .ok_or_else(malformed)?;
    let mut quotas = Vec::with_capacity(limits.len());
    for (index, limit) in limits.iter().enumerate() {
        let at = trailer + log_script::LIMITS_AT + log_script::PER_LIMIT * index;
        let cursor = count(at).ok_or_else(malformed)?;
        // The oldest stamp inside the window, and no more stamps there than
        // the limit allows, the request just recorded among them.
        let oldest = stamp(at + 4)
            .filter(|&oldest| oldest <= now && now - oldest <= limit.window_micros())
            .ok_or_else(malformed)?;
        let in_window = len
            .checked_sub(cursor)
            .filter(|&n| n > 0 && n <= limit.max())
            .ok_or_else(malformed)?;
        quotas.push(quota(in_window, Some(oldest), now, limit));
    }
    Ok(tightest_known(limits, now, &quotas))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    /// Every template, filled for policies that take each of its branches,
    /// leaves no placeholder or directive behind, and holds each limit's
    /// constants.
    #[test]
    fn the_templates_fill_whole_for_every_shape() {
        let ms = |max, ms| Limit::new(max, Duration::from_millis(ms)).unwrap();
        let shapes: Vec<Vec<Limit>> = vec![
            vec![ms(10, 1_000)],
            vec![ms(10, 1_000), ms(100, 60_000)],
            vec![ms(100_000, 1_000), ms(1_000_000, 60_000)],
            vec![ms(1_000_000, 60_000), ms(10_000_000, 3_600_000)],
            (1..=8).map(|i| ms(i * 5, u64::from(i) * 700)).collect(),
            vec![ms(33, 1_000)],
            vec![ms(5_000, 1_000)],
        ];
        for algorithm in [
            Algorithm::SlidingCounter,
            Algorithm::FixedWindow,
            Algorithm::SlidingLog,
        ] {
            for limits in &shapes {
                let policy = Policy::new(algorithm, limits.iter().copied()).unwrap();
                for mode in [Mode::Peek, Mode::Record, Mode::RecordCost] {
                    let source = super::super::script_source(&policy, mode);
                    assert!(
                        !source.contains("{{") && !source.contains("--@"),
                        "{policy:?}, {mode:?}:\n{source}"
                    );
                    for limit in limits {
                        assert!(source.contains(&limit.window_micros().to_string()));
                    }
                    let record = mode.records();
                    assert_eq!(source.contains("redis.call('SET"), record, "{policy:?}");
                }
            }
        }
    }

    fn log_policy() -> Policy {
        let limit = |max, secs| Limit::new(max, Duration::from_secs(secs)).unwrap();
        Policy::new(Algorithm::SlidingLog, [limit(100, 1), limit(1_000, 10)]).unwrap()
    }

    /// A recorded request's reply as the script packs it: the new stamp,
    /// then the trailer (head, length, newest, then per limit a cursor, its
    /// stamp and the next).
    fn written(stamp: i64, len: u32, newest: i64, limits: &[(u32, i64, i64)]) -> Vec<u8> {
        let mut bytes = Vec::new();
        bytes.extend_from_slice(&stamp.to_le_bytes());
        bytes.extend_from_slice(&0u32.to_le_bytes());
        bytes.extend_from_slice(&len.to_le_bytes());
        bytes.extend_from_slice(&newest.to_le_bytes());
        for &(cursor, stamp, next) in limits {
            bytes.extend_from_slice(&cursor.to_le_bytes());
            bytes.extend_from_slice(&stamp.to_le_bytes());
            bytes.extend_from_slice(&next.to_le_bytes());
        }
        bytes
    }

    fn summary(decision: &Decision) -> (bool, usize, u32, Duration, Duration) {
        (
            decision.is_allowed(),
            decision.limit_index(),
            decision.remaining(),
            decision.replenish_after(),
            decision.decided_at(),
        )
    }

    #[test]
    fn a_recorded_reply_decides_as_the_judging_reply_does() {
        let policy = log_policy();
        // Five stamps; the first limit's window holds the last three, the
        // second's all five.
        let recorded = written(
            2_000_000,
            5,
            2_000_000,
            &[(2, 1_500_000, 1_600_000), (0, 1_000_000, 1_100_000)],
        );
        let mut judged = vec![1];
        for word in [2_000_000i64, 3, 1_500_000, 5, 1_000_000] {
            judged.extend_from_slice(&word.to_le_bytes());
        }
        let from_recorded = log_decision(&policy, &recorded, true).unwrap();
        let from_judged = log_decision(&policy, &judged, false).unwrap();
        assert_eq!(summary(&from_recorded), summary(&from_judged));
        // The trailer alone, as a full ring's write away from its last
        // slot answers.
        let from_trailer = log_decision(&policy, &recorded[8..], true).unwrap();
        assert_eq!(summary(&from_trailer), summary(&from_judged));
        assert_eq!(
            summary(&from_recorded),
            (
                true,
                0,
                97,
                Duration::from_micros(500_001),
                Duration::from_secs(2)
            )
        );
    }

    #[test]
    fn a_recorded_reply_that_cannot_be_true_is_an_error() {
        let policy = log_policy();
        let fine = (0, 1_000_000, -1);
        let now = 2_000_000;
        let decide = |bytes: Vec<u8>| log_decision(&policy, &bytes, true);
        assert!(decide(written(now, 5, now, &[fine, fine])).is_ok());
        // A cursor past every stamp: the request just recorded is missing.
        assert!(decide(written(now, 5, now, &[(5, -1, -1), fine])).is_err());
        // A negative time, or a negative stamp under a cursor.
        assert!(decide(written(-1, 5, -1, &[fine, fine])).is_err());
        assert!(decide(written(now, 5, now, &[(4, -1, -1), fine])).is_err());
        // More stamps inside a window than its limit allows, and an oldest
        // stamp outside its window or after now.
        assert!(decide(written(now, 101, now, &[(0, 1_000_000, -1), fine])).is_err());
        assert!(decide(written(now, 5, now, &[(0, 999_999, -1), fine])).is_err());
        assert!(decide(written(now, 5, now, &[(0, now + 1, -1), fine])).is_err());
        // Lengths no reply has, whatever the first byte says: a refusal's
        // (25 bytes for two limits, the first limit blocked) is fine, one
        // byte more or less is not, nor is a trailer's length one byte off.
        let valid = written(now, 5, now, &[fine, fine]);
        let mut refusal = vec![0];
        for word in [now, now - 500_000, -1] {
            refusal.extend_from_slice(&word.to_le_bytes());
        }
        assert!(decide(refusal.clone()).is_ok());
        assert!(decide(refusal[..24].to_vec()).is_err());
        assert!(decide([refusal.as_slice(), &[0]].concat()).is_err());
        for len in [55, 57, 63] {
            for flag in [0, 1] {
                let mut bytes = valid[..len].to_vec();
                bytes[0] = flag;
                assert!(decide(bytes).is_err(), "{len} bytes, flag {flag}");
            }
        }
        assert!(decide([valid.as_slice(), &[0]].concat()).is_err());
        assert!(decide(Vec::new()).is_err());
        // A stamp that is not the trailer's newest.
        assert!(decide(written(now, 5, now - 1, &[fine, fine])).is_err());
        assert!(decide(written(now, 5, now, &[(5, -1, -1), fine])[8..].to_vec()).is_err());
        // The same bytes from a script that only judges are no reply of its,
        // and its acceptance none of the recording script's.
        assert!(log_decision(&policy, &valid, false).is_err());
        let mut judged = vec![1];
        for word in [now, 1, now, 1, now] {
            judged.extend_from_slice(&word.to_le_bytes());
        }
        assert!(log_decision(&policy, &judged, false).is_ok());
        assert!(log_decision(&policy, &judged, true).is_err());
    }

    #[test]
    fn a_log_trailer_led_by_a_two_is_no_penalty() {
        let policy = log_policy().with_penalty(Duration::from_secs(30));
        let fine = (0, 1_000_000, -1);
        let now = 2_000_000;
        for trailer in [
            written(now, 5, now, &[fine, fine]),
            written(now, 5, now, &[fine, fine])[8..].to_vec(),
        ] {
            let mut bytes = trailer;
            bytes[0] = 2;
            assert!(penalty_decision(&policy, &bytes).unwrap().is_none());
        }
        let mut penalty = vec![2];
        for word in [now, now + 30_000_000] {
            penalty.extend_from_slice(&word.to_le_bytes());
        }
        let refusal = penalty_decision(&policy, &penalty).unwrap().unwrap();
        assert_eq!(refusal.retry_after(), Duration::from_secs(30));
    }
}
