//! One key's state under a policy: the sans-IO core a store is built on.
//! On Redis, `store/redis/lua/state.lua` follows its part above the
//! algorithms (the arguments every script reads, and the penalty).

mod packed;

use std::time::Duration;

use crate::algorithm::leases::{free_after_taking, fresh_id, Lease, Leases};
use crate::algorithm::{
    Algorithm, Decision, FixedWindow, Origin, Settlement, SlidingCounter, SlidingLog, TokenBucket,
};
use crate::clock::micros;
#[cfg(feature = "redis")]
use crate::limit::Limit;
use crate::policy::{Policy, Weighed};
use crate::store::{StoreError, StoreErrorKind};

pub(crate) use self::packed::PackedRecord;

/// Everything one key's state holds under one [`Policy`]: its
/// algorithm's counts or stamps and the end of any penalty, judged on
/// times a store hands in and kept as bytes between calls.
///
/// It decides exactly as [`MemoryStore`](crate::MemoryStore) decides for
/// the same key — costs, settling, penalties and peeks included — so a
/// store that keeps bytes somewhere (a database, a cache, a key-value
/// service) only has to load them, call [`decide`](KeyState::decide),
/// and write them back atomically. See [`Store`](crate::Store), "Writing
/// a store".
///
/// Times are the store's clock, with one zero for every call on the
/// state: for state shared between processes, one every process agrees
/// on, such as Unix time or the database server's. The clock may step
/// back, and is then judged as the crate's stores judge it: never before
/// the newest stamp a log holds, nor before the start of the latest
/// window a counter or fixed window counted in.
///
/// **A store keeps one state per (policy value, key)**, named by the key
/// and the policy's [name](Policy::name) and [signature](Policy::signature)
/// (as [`CasStore`](crate::CasStore) names them). A state given a policy of
/// another algorithm than its own judges as a fresh key would, but one
/// judged under other windows of the same algorithm reads its window
/// indices against the wrong length, and may be judged far in the future.
///
/// ```
/// use std::time::Duration;
/// use tower_sliding_window::{Algorithm, KeyState, Limit, Policy};
///
/// let policy = Policy::new(Algorithm::SlidingLog, [Limit::new(2, Duration::from_secs(10))?])?;
/// let mut state = KeyState::new(policy.algorithm());
/// assert!(state.decide(&policy, Duration::from_secs(1), 1).is_allowed());
/// assert!(state.decide(&policy, Duration::from_secs(2), 1).is_allowed());
///
/// // Between calls the state is bytes: two stamps and a header.
/// let bytes = state.to_bytes();
/// let mut state = KeyState::from_bytes(&bytes)?;
/// let refused = state.decide(&policy, Duration::from_secs(3), 1);
/// assert_eq!(refused.retry_after(), Duration::from_micros(8_000_001));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Debug)]
pub struct KeyState {
    counts: Counts,
    held: Held,
}

/// What a key holds besides its counts, while it holds any: boxed, so
/// that the many keys holding neither pay one pointer for it.
#[derive(Clone, Debug, Default)]
struct Held(Option<Box<HeldParts>>);

#[derive(Clone, Debug, Default)]
struct HeldParts {
    /// Until when (µs) a penalty shuts the key out; 0 for none.
    penalty_until: u64,
    /// The requests in flight, under a policy with a cap.
    leases: Leases,
}

impl Held {
    fn new(penalty_until: u64, leases: Leases) -> Self {
        let mut held = Held(Some(Box::new(HeldParts {
            penalty_until,
            leases,
        })));
        held.tidy();
        held
    }

    #[inline]
    fn penalty_until(&self) -> u64 {
        self.0.as_ref().map_or(0, |held| held.penalty_until)
    }

    #[inline]
    fn set_penalty_until(&mut self, until: u64) {
        if until != self.penalty_until() {
            self.change_penalty(until);
        }
    }

    #[cold]
    fn change_penalty(&mut self, until: u64) {
        self.parts().penalty_until = until;
        self.tidy();
    }

    fn leases(&self) -> &Leases {
        static NONE: Leases = Leases::EMPTY;
        self.0.as_ref().map_or(&NONE, |held| &held.leases)
    }

    /// The leases, to change.
    fn leases_mut(&mut self) -> &mut Leases {
        &mut self.parts().leases
    }

    fn parts(&mut self) -> &mut HeldParts {
        self.0.get_or_insert_default()
    }

    /// Frees the box once it holds nothing, as a served penalty ends.
    fn tidy(&mut self) {
        if self
            .0
            .as_ref()
            .is_some_and(|held| held.penalty_until == 0 && held.leases.len() == 0)
        {
            self.0 = None;
        }
    }
}

/// How long a lease [`KeyState::decide`] takes lasts unless released or
/// renewed: as long as Redis's leases by default.
pub const DEFAULT_LEASE: Duration = Duration::from_secs(30);

/// An algorithm's own state.
#[derive(Clone, Debug)]
pub(crate) enum Counts {
    Counter(SlidingCounter),
    Log(SlidingLog),
    Fixed(FixedWindow),
    Bucket(TokenBucket),
}

impl Counts {
    /// An algorithm's numbers as [`KeyState::to_bytes`] writes them after
    /// its header: per limit the counter's window index and two counts,
    /// the fixed window's index and count or the bucket's arrival time
    /// (µs and a remainder), or a log's stamps in order. `None` for bytes
    /// that are not.
    pub(crate) fn from_body(algorithm: Algorithm, body: &[u8]) -> Option<Counts> {
        Some(match algorithm {
            Algorithm::SlidingCounter => {
                let records = records::<16>(body, Policy::MAX_LIMITS)?;
                Counts::Counter(SlidingCounter::from_parts(
                    records.map(|r| (le(&r[..8]), le(&r[8..12]) as u32, le(&r[12..]) as u32)),
                ))
            }
            Algorithm::FixedWindow => Counts::Fixed(FixedWindow::from_parts(read_pairs(body)?)),
            Algorithm::TokenBucket => Counts::Bucket(TokenBucket::from_parts(read_pairs(body)?)),
            Algorithm::SlidingLog => {
                let records = records::<8>(body, crate::algorithm::log::MAX_STAMPS)?;
                let stamps: Vec<u64> = records.map(|r| le(&r)).collect();
                if stamps.windows(2).any(|pair| pair[0] > pair[1]) {
                    return None;
                }
                Counts::Log(SlidingLog::holding(&stamps, stamps.len() as u32))
            }
        })
    }

    /// Whether every record is one a store writes under `limits`: whole
    /// numbers below 2^53 (what Lua's doubles hold exactly), counts at
    /// most their limit's max, a remainder below it. A log always is.
    #[cfg(feature = "redis")]
    pub(crate) fn fits(&self, limits: &[Limit]) -> bool {
        const WHOLE: u64 = 1 << 53;
        let max = |i: usize| limits.get(i).map_or(0, Limit::max);
        match self {
            Counts::Counter(counter) => counter
                .parts()
                .enumerate()
                .all(|(i, (w, p, c))| w < WHOLE && p <= max(i) && c <= max(i)),
            Counts::Fixed(fixed) => (fixed.parts().enumerate())
                .all(|(i, (window, count))| window < WHOLE && count <= max(i)),
            Counts::Bucket(bucket) => (bucket.parts().enumerate())
                .all(|(i, (micros, rem))| micros < WHOLE && rem < max(i)),
            Counts::Log(_) => true,
        }
    }

    /// Judges a request of `cost` units at `now` under every limit of
    /// `policy`, and records it if all have room: the algorithm's rule
    /// alone, with no penalty or cap.
    pub(crate) fn decide(&mut self, policy: &Policy, now: u64, cost: u32) -> Decision {
        self.decide_holding(policy, now, cost, 0)
    }

    /// [`decide`](Self::decide) for a chunk of local quota that may be
    /// spent over the next `hold` µs: the bucket charges it from the last
    /// moment it may be spent (`bucket::decide_holding`); the windows,
    /// whose chunks are spent in the window they are counted in, need no
    /// hold.
    pub(crate) fn decide_holding(
        &mut self,
        policy: &Policy,
        now: u64,
        cost: u32,
        hold: u64,
    ) -> Decision {
        let limits = policy.limits();
        match self {
            Counts::Counter(counter) => counter.decide_micros(now, limits, cost),
            Counts::Fixed(fixed) => fixed.decide_micros(now, limits, cost),
            Counts::Bucket(bucket) => bucket.decide_holding(now, limits, cost, hold),
            Counts::Log(log) => log.decide_micros(
                now,
                limits,
                policy.log_capacity(),
                policy.longest_window_micros(),
                cost,
            ),
        }
    }
}

impl KeyState {
    /// A fresh state: no request seen.
    pub fn new(algorithm: Algorithm) -> KeyState {
        let counts = match algorithm {
            Algorithm::SlidingCounter => Counts::Counter(SlidingCounter::new()),
            Algorithm::SlidingLog => Counts::Log(SlidingLog::new()),
            Algorithm::FixedWindow => Counts::Fixed(FixedWindow::new()),
            Algorithm::TokenBucket => Counts::Bucket(TokenBucket::new()),
        };
        KeyState {
            counts,
            held: Held::default(),
        }
    }

    /// A state holding `counts`, shut out until `penalty_until` (µs; 0
    /// for no penalty), with `leases` in flight: what a store read back
    /// from its own format.
    pub(crate) fn from_parts(counts: Counts, penalty_until: u64, leases: Leases) -> KeyState {
        KeyState {
            counts,
            held: Held::new(penalty_until, leases),
        }
    }

    /// The algorithm's own state, without the rest.
    #[cfg(feature = "redis")]
    pub(crate) fn into_counts(self) -> Counts {
        self.counts
    }

    /// The algorithm this state counts for.
    pub fn algorithm(&self) -> Algorithm {
        match self.counts {
            Counts::Counter(_) => Algorithm::SlidingCounter,
            Counts::Log(_) => Algorithm::SlidingLog,
            Counts::Fixed(_) => Algorithm::FixedWindow,
            Counts::Bucket(_) => Algorithm::TokenBucket,
        }
    }

    /// Judges a request of `cost` units at `now` under every limit of
    /// `policy`, penalty and [in-flight cap](Policy::with_in_flight)
    /// included, and records it if accepted, as the crate's stores do: a
    /// cost of 0 passes and records nothing, and a cost above some limit's
    /// `max` is refused with [`Origin::TooCostly`]. Under a cap, an
    /// accepted request holds a slot for [`DEFAULT_LEASE`] unless
    /// [released](KeyState::release) first; see
    /// [`decide_leased`](KeyState::decide_leased).
    pub fn decide(&mut self, policy: &Policy, now: Duration, cost: u32) -> Decision {
        self.decide_leased(policy, now, cost, DEFAULT_LEASE)
    }

    /// [`decide`](KeyState::decide), with a slot that lasts `lease` unless
    /// [released](KeyState::release) or [renewed](KeyState::renew): a
    /// state shared by instances gets its slots back within a lease of an
    /// instance's crash.
    pub fn decide_leased(
        &mut self,
        policy: &Policy,
        now: Duration,
        cost: u32,
        lease: Duration,
    ) -> Decision {
        let now = micros(now);
        self.decide_micros(policy, now, cost, now.saturating_add(micros(lease)))
    }

    /// [`decide`](KeyState::decide) at `now` µs, a slot taken lasting
    /// until `lease_until` µs.
    #[inline]
    pub(crate) fn decide_micros(
        &mut self,
        policy: &Policy,
        now: u64,
        cost: u32,
        lease_until: u64,
    ) -> Decision {
        if let Some(cap) = policy.in_flight() {
            return self.decide_capped(policy, now, cost, cap, lease_until);
        }
        match policy.weigh(cost) {
            Weighed::Judged => {
                self.fit(policy);
                self.decide_windows(policy, now, cost)
            }
            Weighed::Peek => self.peek_at(policy, now).costing_nothing(),
            Weighed::TooCostly => Decision::too_costly(policy.limits(), cost, now),
        }
    }

    /// [`decide_micros`](Self::decide_micros) under an in-flight cap: a
    /// request of any cost takes a slot if the windows let it through (one
    /// of no cost is a peek for them). Out of line, so that the uncapped
    /// path stays as small as it was.
    #[inline(never)]
    fn decide_capped(
        &mut self,
        policy: &Policy,
        now: u64,
        cost: u32,
        cap: u32,
        lease_until: u64,
    ) -> Decision {
        let weighed = policy.weigh(cost);
        if weighed == Weighed::TooCostly {
            return Decision::too_costly(policy.limits(), cost, now);
        }
        self.fit(policy);
        if self.held.leases_mut().is_full(now, cap) {
            return Decision::in_flight_full(policy.first_limit(), now);
        }
        let decision = if policy.limits().is_empty() {
            let free = free_after_taking(cap, self.held.leases().len());
            Decision::slot_only(policy.first_limit(), free, now)
        } else if weighed == Weighed::Peek {
            self.peek_at(policy, now).costing_nothing()
        } else {
            self.decide_windows(policy, now, cost)
        };
        if !decision.is_allowed() {
            return decision;
        }
        let id = fresh_id();
        self.held.leases_mut().take(Lease {
            id,
            until: lease_until,
        });
        decision.holding(id)
    }

    /// Judges a request by the policy's windows and penalty alone. Under a
    /// policy with no penalty, this is the algorithm's rule alone, which
    /// [`decide_packed`](Self::decide_packed) runs on packed records: a
    /// change here that reaches such policies changes it too.
    #[inline(always)]
    fn decide_windows(&mut self, policy: &Policy, now: u64, cost: u32) -> Decision {
        let counts = &mut self.counts;
        let mut penalty_until = self.held.penalty_until();
        let decision = with_penalty(&mut penalty_until, now, policy, || {
            counts.decide(policy, now, cost)
        });
        self.held.set_penalty_until(penalty_until);
        decision
    }

    /// Frees the slot `admitted` (this state's decision) took, if it took
    /// one and still holds it: the request ended.
    pub fn release(&mut self, admitted: &Decision) {
        // The box stays for the key's next request, which is likely to
        // take a slot again; `tidy` frees it with the penalty's end.
        self.held.leases_mut().release(admitted.lease);
    }

    /// Extends the slot `admitted` took, if still held, to last `lease`
    /// from `now`: its request is still running.
    pub fn renew(&mut self, admitted: &Decision, now: Duration, lease: Duration) {
        let until = micros(now).saturating_add(micros(lease));
        self.held.leases_mut().renew(admitted.lease, until);
    }

    /// What [`decide`](KeyState::decide) would answer for a request of
    /// one unit at `now`, recording nothing.
    pub fn peek(&self, policy: &Policy, now: Duration) -> Decision {
        self.peek_at(policy, micros(now))
    }

    pub(crate) fn peek_at(&self, policy: &Policy, now: u64) -> Decision {
        let mut decision = self.clone().decide_micros(policy, now, 1, now);
        decision.lease = 0;
        decision
    }

    /// Settles a request that `admitted` (this state's decision) counted
    /// for `cost` units and whose response says it used `used`, at `now`:
    /// gives back what it did not use while its window lasts, or charges
    /// the excess, as [`Store::settle_bound`](crate::Store::settle_bound)
    /// describes. Answers `admitted` with its quota moved by the
    /// difference; a decision that counted nothing comes back as it was.
    pub fn settle(
        &mut self,
        policy: &Policy,
        now: Duration,
        admitted: &Decision,
        cost: u32,
        used: u32,
    ) -> Decision {
        self.settle_micros(policy, micros(now), admitted, cost, used)
    }

    /// [`settle`](KeyState::settle) at `now` µs.
    pub(crate) fn settle_micros(
        &mut self,
        policy: &Policy,
        now: u64,
        admitted: &Decision,
        cost: u32,
        used: u32,
    ) -> Decision {
        if !admitted.needs_settling(cost, used) {
            return *admitted;
        }
        self.fit(policy);
        // A key with nothing recorded has nothing to give back, and stays
        // as it is, as a key the stores no longer hold does.
        if used < cost && self.is_fresh() {
            return admitted.settled(cost, used);
        }
        let settled = Settlement {
            at: admitted.at_micros,
            now,
            cost,
            used,
        };
        let limits = policy.limits();
        match &mut self.counts {
            Counts::Counter(counter) => counter.settle_micros(&settled, limits),
            Counts::Fixed(fixed) => fixed.settle_micros(&settled, limits),
            Counts::Bucket(bucket) => bucket.settle_micros(&settled, limits),
            Counts::Log(log) => log.settle_micros(
                &settled,
                policy.log_capacity(),
                policy.longest_window_micros(),
            ),
        }
        admitted.settled(cost, used)
    }

    /// How long after `now` the state, as judging left it, still matters
    /// under `policy`: from then on it judges as a fresh one would, so a
    /// remote store may let its bytes expire then (their TTL; round up to
    /// the store's unit). Zero for a state of another algorithm. A store
    /// whose clocks may read a little behind one another should keep the
    /// bytes a few seconds longer, as the crate's stores do.
    pub fn idle_after(&self, policy: &Policy, now: Duration) -> Duration {
        Duration::from_micros(self.idle_from_micros(policy).saturating_sub(micros(now)))
    }

    /// From when (µs) the state judges as a fresh one would under
    /// `policy`: at once for a state of another algorithm.
    pub(crate) fn idle_from_micros(&self, policy: &Policy) -> u64 {
        if self.algorithm() != policy.algorithm() {
            return 0;
        }
        let limits = policy.limits();
        let idle_from = match &self.counts {
            Counts::Counter(counter) => counter.idle_from_micros(limits),
            Counts::Fixed(fixed) => fixed.idle_from_micros(limits),
            Counts::Bucket(bucket) => bucket.idle_from_micros(limits),
            Counts::Log(log) => log.idle_from_micros(policy.longest_window_micros()),
        };
        idle_from
            .max(self.held.penalty_until())
            .max(self.held.leases().last_until())
    }

    /// Lets a log give back the room that stamps outside `policy`'s
    /// longest window no longer need, for a store that keeps states long.
    pub(crate) fn shed(&mut self, policy: &Policy) {
        if let Counts::Log(log) = &mut self.counts {
            log.shed_room(policy.longest_window_micros());
        }
    }

    /// Whether nothing is recorded: no count, stamp or penalty.
    pub(crate) fn is_fresh(&self) -> bool {
        let empty = match &self.counts {
            Counts::Counter(counter) => counter.parts().next().is_none(),
            Counts::Fixed(fixed) => fixed.parts().next().is_none(),
            Counts::Bucket(bucket) => bucket.parts().next().is_none(),
            Counts::Log(log) => log.stamps().next().is_none(),
        };
        empty && self.held.penalty_until() == 0 && self.held.leases().len() == 0
    }

    /// Starts afresh under a policy of another algorithm.
    fn fit(&mut self, policy: &Policy) {
        if self.algorithm() != policy.algorithm() {
            *self = KeyState::new(policy.algorithm());
        }
    }

    /// The state as compact bytes, with absolute times, to keep until the
    /// next call: two bytes of header, eight more while a penalty runs,
    /// four and sixteen a slot while requests are in flight under a cap
    /// (then the format is the second),
    /// then the algorithm's numbers (a log's are eight bytes a stamp, up
    /// to the largest limit's `max`).
    /// [`from_bytes`](KeyState::from_bytes) reads them back. The layout
    /// (docs/design.md, "Key state as bytes") is versioned by its first
    /// byte: a release that changes it writes a new version and still
    /// reads the old ones.
    pub fn to_bytes(&self) -> Vec<u8> {
        let penalty_until = self.held.penalty_until();
        let penalty = penalty_until > 0;
        let leases = self.held.leases().len();
        // Without slots, the layout of the first format, which every
        // release reads; slots make the second.
        let format = if leases > 0 { WITH_SLOTS } else { FORMAT };
        let mut bytes = vec![format, self.kind() | if penalty { PENALTY } else { 0 }];
        if penalty {
            bytes.extend(penalty_until.to_le_bytes());
        }
        if leases > 0 {
            bytes.extend((leases as u32).to_le_bytes());
            for lease in self.held.leases().iter() {
                bytes.extend(lease.id.to_le_bytes());
                bytes.extend(lease.until.to_le_bytes());
            }
        }
        match &self.counts {
            Counts::Counter(counter) => {
                for (window, previous, current) in counter.parts() {
                    bytes.extend(window.to_le_bytes());
                    bytes.extend(previous.to_le_bytes());
                    bytes.extend(current.to_le_bytes());
                }
            }
            Counts::Fixed(fixed) => write_pairs(&mut bytes, fixed.parts()),
            Counts::Bucket(bucket) => write_pairs(&mut bytes, bucket.parts()),
            Counts::Log(log) => {
                for stamp in log.stamps() {
                    bytes.extend(stamp.to_le_bytes());
                }
            }
        }
        bytes
    }

    /// Reads a state [`to_bytes`](KeyState::to_bytes) wrote.
    ///
    /// # Errors
    ///
    /// A [`StoreError`] of kind [`StoreErrorKind::Malformed`] for bytes it
    /// does not recognise: another format's, cut short, or a log whose
    /// stamps are out of order. It never panics, and any state it returns
    /// can be judged.
    pub fn from_bytes(bytes: &[u8]) -> Result<KeyState, StoreError> {
        let malformed = |what: &str| {
            StoreError::new(format!("malformed key state: {what}"), None)
                .with_kind(StoreErrorKind::Malformed)
        };
        let [format, kind, rest @ ..] = bytes else {
            return Err(malformed("shorter than its header"));
        };
        if *format != FORMAT && *format != WITH_SLOTS {
            return Err(malformed("an unknown format version"));
        }
        let (penalty_until, body) = if kind & PENALTY != 0 {
            let (until, body) = rest
                .split_first_chunk::<8>()
                .ok_or_else(|| malformed("a penalty cut short"))?;
            (u64::from_le_bytes(*until), body)
        } else {
            (0, rest)
        };
        let (leases, body) = if *format == WITH_SLOTS {
            read_leases(body).ok_or_else(|| malformed("in-flight slots cut short"))?
        } else {
            (Leases::default(), body)
        };
        let algorithm = match kind & !PENALTY {
            COUNTER => Algorithm::SlidingCounter,
            FIXED => Algorithm::FixedWindow,
            BUCKET => Algorithm::TokenBucket,
            LOG => Algorithm::SlidingLog,
            _ => return Err(malformed("an unknown algorithm")),
        };
        let counts = Counts::from_body(algorithm, body).ok_or_else(|| {
            malformed("the algorithm's numbers cut short, too many or out of order")
        })?;
        Ok(KeyState::from_parts(counts, penalty_until, leases))
    }

    fn kind(&self) -> u8 {
        match self.counts {
            Counts::Counter(_) => COUNTER,
            Counts::Log(_) => LOG,
            Counts::Fixed(_) => FIXED,
            Counts::Bucket(_) => BUCKET,
        }
    }
}

/// The first byte of every state's bytes: a release that changes the
/// layout gives it a new value, and reads the old ones.
const FORMAT: u8 = 1;
/// The second byte: the algorithm, with [`PENALTY`] set when the end of a
/// penalty follows.
const COUNTER: u8 = b'c';
const LOG: u8 = b'l';
const FIXED: u8 = b'f';
const BUCKET: u8 = b'b';
const PENALTY: u8 = 0x80;
/// The format of a state holding in-flight slots: the first one's, with
/// the slots after the penalty.
const WITH_SLOTS: u8 = 2;

/// Reads the slots [`KeyState::to_bytes`] wrote at the start of `body`:
/// a four-byte count, then each slot's id and expiry; and what follows.
fn read_leases(body: &[u8]) -> Option<(Leases, &[u8])> {
    let (count, rest) = body.split_first_chunk::<4>()?;
    let len = usize::try_from(u32::from_le_bytes(*count)).ok()?;
    let (slots, rest) = rest.split_at_checked(len.checked_mul(16)?)?;
    let mut leases = Leases::default();
    for slot in records::<16>(slots, usize::MAX)? {
        leases.take(Lease {
            id: le(&slot[..8]),
            until: le(&slot[8..]),
        });
    }
    Some((leases, rest))
}

/// `body` cut into records of `N` bytes, at most `most` of them; `None`
/// if it does not divide evenly or holds more.
fn records<const N: usize>(body: &[u8], most: usize) -> Option<impl Iterator<Item = [u8; N]> + '_> {
    let (records, rest) = body.as_chunks::<N>();
    (rest.is_empty() && records.len() <= most).then(|| records.iter().copied())
}

/// Writes a `u64` and a `u32` a limit: the fixed window's index and
/// count, the bucket's arrival time in whole µs and its remainder.
fn write_pairs(bytes: &mut Vec<u8>, pairs: impl Iterator<Item = (u64, u32)>) {
    for (word, count) in pairs {
        bytes.extend(word.to_le_bytes());
        bytes.extend(count.to_le_bytes());
    }
}

/// Reads what [`write_pairs`] wrote; `None` if `body` is not a whole
/// number of records, or holds more than a policy's limits.
fn read_pairs(body: &[u8]) -> Option<impl Iterator<Item = (u64, u32)> + '_> {
    Some(records::<12>(body, Policy::MAX_LIMITS)?.map(|r| (le(&r[..8]), le(&r[8..]) as u32)))
}

/// A little-endian number of up to eight bytes.
fn le(bytes: &[u8]) -> u64 {
    let mut word = [0; 8];
    word[..bytes.len()].copy_from_slice(bytes);
    u64::from_le_bytes(word)
}

/// Judges a request with `decide` unless a penalty that ends at `until`
/// (µs) still shuts the key out at `now`; a refusal by the limits starts
/// the policy's penalty, if it has one. Every store's penalty follows
/// this rule.
pub(crate) fn with_penalty(
    until: &mut u64,
    now: u64,
    policy: &Policy,
    decide: impl FnOnce() -> Decision,
) -> Decision {
    if now < *until {
        return Decision::in_penalty(policy.first_limit(), *until - now, now);
    }
    // A penalty served is forgotten, as Redis lets its key expire.
    *until = 0;
    let decision = decide();
    let penalty = policy.penalty_micros();
    if penalty == 0 || decision.is_allowed() || decision.origin() != Origin::Limits {
        return decision;
    }
    *until = now.saturating_add(penalty);
    decision.starting_penalty(penalty)
}
