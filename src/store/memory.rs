//! The in-memory store: sharded, atomic per key, self-cleaning, capped.

use std::future::{ready, Ready};
use std::hash::Hash;
use std::sync::Arc;

use super::by_policy::Registry;
use super::sharded::Shards;
use super::{Store, StoreError};
use crate::clock::{Clock, SystemClock};
use crate::core::{
    AlgorithmState, CompactCounter, CompactLog, FixedWindow, PackedCounter, PackedFixed,
    SlidingCounter, FEW_BESIDE_LARGER_KEYS, FEW_BESIDE_SMALL_KEYS,
};
use crate::decision::Decision;
use crate::error::ConfigError;
use crate::policy::{Algorithm, Policy};

/// Runs `$body` on the map for `policy`'s state layout: policies of one or
/// two limits keep their counts inline, packed when they fit, so that an
/// entry stays small enough for lookups to stay in cache; a sliding log
/// keeps as many stamps beside its key as fill half a cache line (a key of
/// up to 8 bytes) or a whole one (up to 24 bytes). A larger key gets two,
/// and its entry is padded to a multiple of 32 bytes.
macro_rules! by_layout {
    ($store:ident, $key:ty, $policy:expr, |$shards:ident| $body:expr) => {{
        macro_rules! run_in {
            ($state:ty) => {
                $store.with_shards::<$key, $state, _>($policy, |$shards| $body)
            };
        }
        let small = $policy.largest_max() <= PackedCounter::<1>::LARGEST_MAX;
        match ($policy.algorithm(), $policy.limits().len(), small) {
            (Algorithm::SlidingCounter, 1, true) => run_in!(PackedCounter<1>),
            (Algorithm::SlidingCounter, 2, true) => run_in!(PackedCounter<2>),
            (Algorithm::SlidingCounter, 1, false) => run_in!(CompactCounter<1>),
            (Algorithm::SlidingCounter, 2, false) => run_in!(CompactCounter<2>),
            (Algorithm::SlidingCounter, _, _) => run_in!(SlidingCounter),
            (Algorithm::FixedWindow, 1, _) => run_in!(PackedFixed<1>),
            (Algorithm::FixedWindow, 2, _) => run_in!(PackedFixed<2>),
            (Algorithm::FixedWindow, _, _) => run_in!(FixedWindow),
            (Algorithm::SlidingLog, _, _) if size_of::<$key>() <= 8 => {
                run_in!(CompactLog<FEW_BESIDE_SMALL_KEYS>)
            }
            (Algorithm::SlidingLog, _, _) if size_of::<$key>() <= 24 => {
                run_in!(CompactLog<FEW_BESIDE_LARGER_KEYS>)
            }
            (Algorithm::SlidingLog, _, _) => run_in!(CompactLog<FEW_BESIDE_SMALL_KEYS>),
        }
    }};
}

/// State for every key in this process's memory.
///
/// * **Atomic per key.** Keys are spread over up to 64 shards, each behind its
///   own short lock held only for one decision, so concurrent requests for a
///   key are judged one after another and never over-admit, while requests
///   for different keys rarely meet.
/// * **Shared by clones.** Clones share all state, so one store can serve many
///   layers. Windows belong to a [`Policy`] and its clones: two layers built
///   separately never share a window, even for equal keys.
/// * **Self-cleaning.** A key whose windows have all gone by for five seconds
///   is dropped at its shard's next sweep, run every five seconds of use (and
///   when the shard is full); no clean-up call is needed. The five seconds
///   spare a request read a little behind the clock (on another thread, or
///   after a step back) a fresh window it should not get. When the last
///   clone of a policy is dropped, its keys are dropped with it.
/// * **Capped.** At most [`max_keys`](MemoryStore::with_max_keys) live keys
///   (one million by default) per policy and key type, split evenly over the
///   shards (rounded down): stacked layers with two policies may hold twice
///   as many.
///   A *new* key arriving at a full shard is refused — a 429 whose
///   [`Origin`](crate::Origin) is `StoreFull` and whose retry-after is the
///   time until some key in that shard may be dropped. Live keys are never evicted
///   early, so a flood of fresh keys cannot reset anyone's window.
/// * **Compact.** A counter or fixed window of one or two limits keeps each
///   limit's state in eight bytes (16-bit counts for the counter, so only
///   when every `max` is at most 65,535), beside the key: the counter's
///   entry for a `u64` key is 16 bytes. Windows are kept as offsets that
///   reach 2³¹ windows either side of the time the shard was last
///   rebased: a key whose windows lie further ahead than that of a clock
///   thrown back (36 minutes for a 1 µs window, 68 years for a 1 s one)
///   starts afresh instead of being judged in its latest window. A
///   sliding log keeps a key's stamps beside it while few are inside the
///   policy's longest window (two for a key of up to 8 bytes, four for one
///   of up to 24, such as an IP address), and a ring only for a busier key.
///
/// Fixed windows (used by the counter) are aligned to the clock's zero.
#[derive(Clone)]
pub struct MemoryStore<C = SystemClock> {
    inner: Arc<Inner<C>>,
}

struct Inner<C> {
    clock: C,
    max_keys: usize,
    maps: Registry,
}

impl<C> std::fmt::Debug for MemoryStore<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryStore")
            .field("max_keys", &self.inner.max_keys)
            .finish_non_exhaustive()
    }
}

impl MemoryStore<SystemClock> {
    /// A store on the system's monotonic clock.
    pub fn new() -> Self {
        Self::with_clock(SystemClock)
    }
}

impl Default for MemoryStore<SystemClock> {
    fn default() -> Self {
        Self::new()
    }
}

impl<C: Clock> MemoryStore<C> {
    /// The default number of live keys a store holds per policy and key type.
    pub const DEFAULT_MAX_KEYS: usize = 1_000_000;

    /// A store reading time from `clock` (a [`ManualClock`](crate::ManualClock) in tests).
    pub fn with_clock(clock: C) -> Self {
        Self::build(clock, Self::DEFAULT_MAX_KEYS)
    }

    /// The same store configuration with room for at most `max_keys` live keys.
    ///
    /// Configure before cloning: the result is a new, empty store.
    ///
    /// # Errors
    ///
    /// [`ConfigError::Store`] if `max_keys` is zero.
    pub fn with_max_keys(self, max_keys: usize) -> Result<Self, ConfigError> {
        if max_keys == 0 {
            return Err(ConfigError::Store("max_keys must be at least 1".into()));
        }
        Ok(Self::build(self.inner.clock.clone(), max_keys))
    }

    fn build(clock: C, max_keys: usize) -> Self {
        Self {
            inner: Arc::new(Inner {
                clock,
                max_keys,
                maps: Registry::default(),
            }),
        }
    }

    /// The clock the store reads.
    pub fn clock(&self) -> &C {
        &self.inner.clock
    }

    /// Judges a request for `key` under `policy` right now (no future involved).
    pub fn decide_now<K>(&self, key: K, policy: &Policy) -> Decision
    where
        K: Hash + Eq + Send + Sync + 'static,
    {
        let now = self.inner.clock.now_micros();
        by_layout!(self, K, policy, |shards| shards.decide(key, policy, now))
    }

    /// Judges a request for `key` under `policy` right now as
    /// [`decide_now`](MemoryStore::decide_now) would, recording nothing.
    pub fn peek_now<K>(&self, key: &K, policy: &Policy) -> Decision
    where
        K: Hash + Eq + Send + Sync + 'static,
    {
        let now = self.inner.clock.now_micros();
        by_layout!(self, K, policy, |shards| shards.peek(key, policy, now))
    }

    /// The number of keys of type `K` held, live or not yet swept.
    pub fn key_count<K>(&self) -> usize
    where
        K: Hash + Eq + Send + Sync + 'static,
    {
        fn count<K, S, C>(store: &MemoryStore<C>) -> usize
        where
            K: Hash + Eq + Send + Sync + 'static,
            S: AlgorithmState,
        {
            let mut keys = 0;
            store
                .inner
                .maps
                .for_each(|shards: &Shards<K, S>| keys += shards.len());
            keys
        }
        count::<K, PackedCounter<1>, C>(self)
            + count::<K, PackedCounter<2>, C>(self)
            + count::<K, CompactCounter<1>, C>(self)
            + count::<K, CompactCounter<2>, C>(self)
            + count::<K, SlidingCounter, C>(self)
            + count::<K, PackedFixed<1>, C>(self)
            + count::<K, PackedFixed<2>, C>(self)
            + count::<K, FixedWindow, C>(self)
            + count::<K, CompactLog<FEW_BESIDE_SMALL_KEYS>, C>(self)
            + count::<K, CompactLog<FEW_BESIDE_LARGER_KEYS>, C>(self)
    }

    /// Runs `f` on `policy`'s map of `S` states for keys of type `K`.
    #[inline]
    fn with_shards<K, S, R>(&self, policy: &Policy, f: impl FnOnce(&Shards<K, S>) -> R) -> R
    where
        K: Hash + Eq + Send + Sync + 'static,
        S: AlgorithmState,
    {
        let max_keys = self.inner.max_keys;
        self.inner
            .maps
            .with(policy, || Shards::<K, S>::new(max_keys), f)
    }
}

impl<K, C> Store<K> for MemoryStore<C>
where
    K: Hash + Eq + Send + Sync + 'static,
    C: Clock,
{
    type Future = Ready<Result<Decision, StoreError>>;

    fn decide(&self, key: K, policy: &Policy) -> Self::Future {
        ready(Ok(self.decide_now(key, policy)))
    }

    fn peek(&self, key: K, policy: &Policy) -> Self::Future {
        ready(Ok(self.peek_now(&key, policy)))
    }
}
