//! A key's state told by its records alone, packed in two words a limit,
//! for a store that keeps many keys of the common policies: what such a
//! state holds is its algorithm's numbers and nothing else, and the policy
//! says which algorithm and how many limits.

use super::{Counts, Held, KeyState};
use crate::algorithm::bucket::{self, Tat};
use crate::algorithm::{counter, fixed, Decision};
use crate::algorithm::{Algorithm, FixedWindow, SlidingCounter, SlidingLog, TokenBucket};
use crate::policy::{Policy, Weighed};

/// One limit's record in two words: the counter's window index and its
/// two counts (the previous one in the high half), the fixed window's
/// index and count, or the bucket's arrival time (µs, and the remainder).
/// All zeros is a record that has seen nothing.
pub(crate) type PackedRecord = [u64; 2];

/// The most limits whose records are packed.
const MOST_LIMITS: usize = 2;

/// An algorithm's record for one limit, packed and unpacked.
trait Packs: Copy + Default {
    fn unpacked(words: PackedRecord) -> Self;
    fn packed(self) -> PackedRecord;
}

impl Packs for counter::Record {
    fn unpacked([window, counts]: PackedRecord) -> Self {
        let (previous, current) = ((counts >> 32) as u32, counts as u32);
        Self {
            window,
            previous,
            current,
        }
    }

    fn packed(self) -> PackedRecord {
        let counts = u64::from(self.previous) << 32 | u64::from(self.current);
        [self.window, counts]
    }
}

impl Packs for fixed::Record {
    fn unpacked([window, count]: PackedRecord) -> Self {
        let count = count as u32;
        Self { window, count }
    }

    fn packed(self) -> PackedRecord {
        [self.window, u64::from(self.count)]
    }
}

impl Packs for Tat {
    fn unpacked([micros, rem]: PackedRecord) -> Self {
        let rem = rem as u32;
        Self { micros, rem }
    }

    fn packed(self) -> PackedRecord {
        [self.micros, u64::from(self.rem)]
    }
}

fn read_records<R: Packs>(words: &[PackedRecord]) -> impl Iterator<Item = R> + '_ {
    words.iter().map(|&words| R::unpacked(words))
}

/// Writes `records` into `words`, and records that have seen nothing
/// past them.
fn write_records<R: Packs>(records: &[R], words: &mut [PackedRecord]) {
    for (at, words) in words.iter_mut().enumerate() {
        *words = records.get(at).map_or([0, 0], |record| record.packed());
    }
}

/// Runs an algorithm's `decide` on the records in `words`, unpacked on
/// the stack, and packs them back only if the request was accepted: a
/// refusal leaves a state as it was.
#[inline(always)]
fn judge<R: Packs>(
    words: &mut [PackedRecord],
    decide: impl FnOnce(&mut [R]) -> Decision,
) -> Decision {
    let mut records = [R::default(); MOST_LIMITS];
    let records = &mut records[..words.len()];
    for (record, &words) in records.iter_mut().zip(words.iter()) {
        *record = R::unpacked(words);
    }
    let decision = decide(records);
    if decision.is_allowed() {
        write_records(records, words);
    }
    decision
}

impl KeyState {
    /// How many records tell a state under `policy` whole, if they do: one
    /// or two limits of the counter, the fixed window or the bucket, with no
    /// penalty and no cap, so that the state never holds anything else. A
    /// log's stamps are no records.
    pub(crate) fn packed_limits(policy: &Policy) -> Option<usize> {
        let records_only = matches!(
            policy.algorithm(),
            Algorithm::SlidingCounter | Algorithm::FixedWindow | Algorithm::TokenBucket
        );
        let plain = records_only && policy.penalty_micros() == 0 && policy.in_flight().is_none();
        let limits = policy.limits().len();
        (plain && (1..=MOST_LIMITS).contains(&limits)).then_some(limits)
    }

    /// The state `records` tell under `policy`, a policy the state
    /// [`packed_limits`](Self::packed_limits) for.
    pub(crate) fn unpack(policy: &Policy, records: &[PackedRecord]) -> KeyState {
        let counts = match policy.algorithm() {
            Algorithm::SlidingCounter => {
                Counts::Counter(SlidingCounter::from_records(read_records(records)))
            }
            Algorithm::FixedWindow => {
                Counts::Fixed(FixedWindow::from_records(read_records(records)))
            }
            Algorithm::TokenBucket => {
                Counts::Bucket(TokenBucket::from_records(read_records(records)))
            }
            Algorithm::SlidingLog => Counts::Log(SlidingLog::new()),
        };
        KeyState {
            counts,
            held: Held::default(),
        }
    }

    /// Writes the state's records into `records`; those it does not hold
    /// are written as records that have seen nothing.
    pub(crate) fn pack(&self, records: &mut [PackedRecord]) {
        match &self.counts {
            Counts::Counter(counter) => write_records(counter.records(), records),
            Counts::Fixed(fixed) => write_records(fixed.records(), records),
            Counts::Bucket(bucket) => write_records(bucket.records(), records),
            Counts::Log(_) => records.fill([0, 0]),
        }
    }

    /// Judges a request of `cost` units at `now` on the packed `records`
    /// of a state under `policy`, as [`decide_micros`](Self::decide_micros)
    /// would on the state they tell. A request the windows judge goes
    /// straight to its algorithm's rule, as `decide_micros` sends it there
    /// for a policy with no penalty and no cap; any other (of no cost, or
    /// too costly) goes through the whole state.
    #[inline]
    pub(crate) fn decide_packed(
        policy: &Policy,
        records: &mut [PackedRecord],
        now: u64,
        cost: u32,
    ) -> Decision {
        let limits = policy.limits();
        match (policy.weigh(cost), policy.algorithm()) {
            (Weighed::Judged, Algorithm::SlidingCounter) => judge(records, |records| {
                counter::decide::<MOST_LIMITS>(records, now, limits, cost)
            }),
            (Weighed::Judged, Algorithm::FixedWindow) => {
                judge(records, |records| fixed::decide(records, now, limits, cost))
            }
            (Weighed::Judged, Algorithm::TokenBucket) => judge(records, |records| {
                bucket::decide(records, now, limits, cost)
            }),
            _ => {
                let mut state = Self::unpack(policy, records);
                let decision = state.decide_micros(policy, now, cost, now);
                state.pack(records);
                decision
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::limit::Limit;

    /// Judges the same requests on packed records and on a whole state,
    /// at `times` (ms), and checks that they answer and record alike.
    fn judged_alike(limits: &[Limit], times: impl Iterator<Item = u64> + Clone) {
        for algorithm in [
            Algorithm::SlidingCounter,
            Algorithm::FixedWindow,
            Algorithm::TokenBucket,
        ] {
            let policy = Policy::new(algorithm, limits.iter().copied()).unwrap();
            assert_eq!(KeyState::packed_limits(&policy), Some(limits.len()));
            let mut whole = KeyState::new(algorithm);
            let mut records = vec![[0; 2]; limits.len()];
            // Costs of one and two units, of none, and too costly.
            let costs = [1, 2, 1, 0, 1, 9].into_iter().cycle();
            for (step, (millis, cost)) in times.clone().zip(costs).enumerate() {
                let now = Duration::from_millis(millis);
                let expected = whole.decide(&policy, now, cost);
                let micros = now.as_micros() as u64;
                let decision = KeyState::decide_packed(&policy, &mut records, micros, cost);
                let said =
                    |d: &Decision| (d.is_allowed(), d.origin(), d.remaining(), d.retry_after());
                assert_eq!(said(&decision), said(&expected), "{algorithm:?} {step}");
                let state = KeyState::unpack(&policy, &records);
                assert_eq!(state.to_bytes(), whole.to_bytes(), "{algorithm:?} {step}");
                let mut again = vec![[0; 2]; limits.len()];
                state.pack(&mut again);
                assert_eq!(again, records);
            }
        }
    }

    #[test]
    fn packed_records_judge_as_the_whole_state() {
        let forward = (0..60).map(|step| step * 450);
        // A clock that steps back a window's length now and then.
        let stepping_back =
            (0..60).map(|step: u64| (step * 450).saturating_sub(1_000 * (step % 7)));
        for times in [forward.clone().collect::<Vec<_>>(), stepping_back.collect()] {
            judged_alike(&[Limit::per_second(3)], times.iter().copied());
            judged_alike(
                &[Limit::per_second(3), Limit::per_minute(5)],
                times.iter().copied(),
            );
        }
    }

    #[test]
    fn only_plain_policies_pack() {
        let one = |algorithm| Policy::new(algorithm, [Limit::per_second(3)]).unwrap();
        assert_eq!(
            KeyState::packed_limits(&one(Algorithm::TokenBucket)),
            Some(1)
        );
        assert_eq!(KeyState::packed_limits(&one(Algorithm::SlidingLog)), None);
        let penalised = one(Algorithm::SlidingCounter).with_penalty(Duration::from_secs(1));
        assert_eq!(KeyState::packed_limits(&penalised), None);
        let capped = one(Algorithm::FixedWindow).with_in_flight(2);
        assert_eq!(KeyState::packed_limits(&capped), None);
        let three = [
            Limit::per_second(1),
            Limit::per_minute(2),
            Limit::per_hour(3),
        ];
        let three = Policy::new(Algorithm::SlidingCounter, three).unwrap();
        assert_eq!(KeyState::packed_limits(&three), None);
    }
}
