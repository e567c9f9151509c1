//! A key's state told by its records alone, packed in two words a limit,
//! for a store that keeps many keys of the common policies: what such a
//! state holds is its algorithm's numbers and nothing else, and the policy
//! says which algorithm and how many limits.

use super::{Counts, Held, KeyState};
use crate::algorithm::{Algorithm, FixedWindow, SlidingCounter, SlidingLog, TokenBucket};
use crate::policy::Policy;

/// One limit's record in two words: the counter's window index and its
/// two counts (the previous one in the high half), the fixed window's
/// index and count, or the bucket's arrival time (µs, and the remainder).
/// All zeros is a record that has seen nothing.
pub(crate) type PackedRecord = [u64; 2];

impl KeyState {
    /// How many records tell a state under `policy` whole, if they do: one
    /// or two limits of the counter, the fixed window or the bucket, with no
    /// penalty and no cap, so that the state never holds anything else. A
    /// log's stamps are no records.
    pub(crate) fn packs(policy: &Policy) -> Option<usize> {
        let plain = policy.algorithm() != Algorithm::SlidingLog
            && policy.penalty_micros() == 0
            && policy.in_flight().is_none();
        let limits = policy.limits().len();
        (plain && (1..=2).contains(&limits)).then_some(limits)
    }

    /// The state `records` tell under `policy`, a policy the state
    /// [`packs`](Self::packs) for.
    #[inline]
    pub(crate) fn unpack(policy: &Policy, records: &[PackedRecord]) -> KeyState {
        let low = |word: u64| word as u32;
        let counts = match policy.algorithm() {
            Algorithm::SlidingCounter => Counts::Counter(SlidingCounter::from_parts(
                (records.iter())
                    .map(|&[window, counts]| (window, (counts >> 32) as u32, low(counts))),
            )),
            Algorithm::FixedWindow => Counts::Fixed(FixedWindow::from_parts(
                (records.iter()).map(|&[window, count]| (window, low(count))),
            )),
            Algorithm::TokenBucket => Counts::Bucket(TokenBucket::from_parts(
                (records.iter()).map(|&[micros, rem]| (micros, low(rem))),
            )),
            Algorithm::SlidingLog => Counts::Log(SlidingLog::new()),
        };
        KeyState {
            counts,
            held: Held::default(),
        }
    }

    /// Writes the state's records into `records`; those it does not hold
    /// are written as records that have seen nothing.
    #[inline]
    pub(crate) fn pack(&self, records: &mut [PackedRecord]) {
        records.fill([0, 0]);
        let pairs = records.iter_mut();
        match &self.counts {
            Counts::Counter(counter) => {
                for (record, (window, previous, current)) in pairs.zip(counter.parts()) {
                    *record = [window, u64::from(previous) << 32 | u64::from(current)];
                }
            }
            Counts::Fixed(fixed) => {
                for (record, (window, count)) in pairs.zip(fixed.parts()) {
                    *record = [window, u64::from(count)];
                }
            }
            Counts::Bucket(bucket) => {
                for (record, (micros, rem)) in pairs.zip(bucket.parts()) {
                    *record = [micros, u64::from(rem)];
                }
            }
            Counts::Log(_) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::limit::Limit;

    #[test]
    fn packed_records_tell_the_state_whole() {
        let limits = [Limit::per_second(3), Limit::per_minute(5)];
        for algorithm in [
            Algorithm::SlidingCounter,
            Algorithm::FixedWindow,
            Algorithm::TokenBucket,
        ] {
            let policy = Policy::new(algorithm, limits).unwrap();
            assert_eq!(KeyState::packs(&policy), Some(2));
            let mut whole = KeyState::new(algorithm);
            let mut records = [[0; 2]; 2];
            for step in 0..40u64 {
                let now = Duration::from_millis(step * 450);
                let cost = 1 + (step % 2) as u32;
                let mut packed = KeyState::unpack(&policy, &records);
                let expected = whole.decide(&policy, now, cost);
                let decision = packed.decide(&policy, now, cost);
                assert_eq!(
                    decision.is_allowed(),
                    expected.is_allowed(),
                    "{algorithm:?} {step}"
                );
                assert_eq!(decision.remaining(), expected.remaining());
                assert_eq!(decision.retry_after(), expected.retry_after());
                packed.pack(&mut records);
                assert_eq!(packed.to_bytes(), whole.to_bytes(), "{algorithm:?} {step}");
            }
        }
    }

    #[test]
    fn only_plain_policies_pack() {
        let one = |algorithm| Policy::new(algorithm, [Limit::per_second(3)]).unwrap();
        assert_eq!(KeyState::packs(&one(Algorithm::TokenBucket)), Some(1));
        assert_eq!(KeyState::packs(&one(Algorithm::SlidingLog)), None);
        let penalised = one(Algorithm::SlidingCounter).with_penalty(Duration::from_secs(1));
        assert_eq!(KeyState::packs(&penalised), None);
        let capped = one(Algorithm::FixedWindow).with_in_flight(2);
        assert_eq!(KeyState::packs(&capped), None);
        let three = [
            Limit::per_second(1),
            Limit::per_minute(2),
            Limit::per_hour(3),
        ];
        let three = Policy::new(Algorithm::SlidingCounter, three).unwrap();
        assert_eq!(KeyState::packs(&three), None);
    }
}
