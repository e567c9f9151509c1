//! The in-memory store: sharded, atomic per key, self-cleaning, capped.

mod cap;
mod registry;
mod shards;
mod stored;
mod waiters;

use std::future::{ready, Ready};
use std::hash::Hash;
use std::sync::Arc;

use self::registry::Registry;
use self::shards::Shards;
use self::stored::{Form, Packed};
use self::waiters::Waiters;
use super::{SlotFreed, Store, StoreError};
use crate::algorithm::Decision;
use crate::clock::{Clock, SystemClock};
use crate::error::ConfigError;
use crate::policy::Policy;
use crate::state::KeyState;

/// State for every key in this process's memory.
///
/// * **Atomic per key.** Each map's keys are spread over up to 64 shards, each behind its
///   own short lock held only for one decision, so concurrent requests for a
///   key are judged one after another and never over-admit, while requests
///   for different keys rarely meet.
/// * **Shared by clones.** Clones share all state, so one store can serve many
///   layers. A window belongs to (store, policy value, key): layers built
///   apart with equal policies on one store count together, and a
///   different [name](Policy::named) keeps them apart (see [`Store`]).
/// * **Policies are data.** The store keeps one map per key type, whatever
///   the number of policies; an entry holds its key, a reference to its
///   policy and its state: the [`KeyState`](crate::KeyState) every store
///   judges with, or, under one or two limits of the counter, the fixed
///   window or the bucket with no penalty and no cap, only that state's
///   records (32 bytes an entry for a `u64` key and one limit). A key under a policy of its own costs that policy's
///   value beside it (about 140 bytes); keys share one value when a plan
///   hands out the same [`Policy`] (cloned from a map of tenants), while a
///   plan building a new one per request may pay it per key.
/// * **Self-cleaning.** A key whose windows have all gone by for five seconds
///   is dropped at its shard's next sweep, run every five seconds of use
///   (and over the whole store when it is full); no clean-up call is
///   needed. The five seconds spare a request read a little behind the
///   clock (a settle timed before taking the key's shard, or a clock that
///   stepped back) a fresh window it should not get. A sliding log's ring
///   gives back its slots at a sweep once its traffic falls.
/// * **Capped.** At most [`max_keys`](MemoryStore::with_max_keys) live keys
///   (one million by default) in the whole store, whatever their policies
///   and key types. A *new* key arriving at a full store is refused — a
///   429 whose [`Origin`](crate::Origin) is `StoreFull` and whose
///   retry-after is the time until some key may be dropped. Live keys are
///   never evicted early, so a flood of fresh keys cannot reset anyone's
///   window; but it does refuse new keys on every route that shares the
///   store. Routes that must not share that budget take stores of their
///   own (a layer built without [`store`](crate::SlidingWindowLayer::store)
///   has one).
///
/// The store keeps each live key's value as it is, so a key taken from
/// text a client chooses costs what the client chose: bound it with
/// [`bound_key`](crate::bound_key) in the key closure, as
/// [`HeaderKey`](crate::extract::HeaderKey) does, or the cap on keys bounds
/// their number but not their memory.
///
/// Fixed windows (used by the counter) are aligned to the clock's zero.
#[derive(Clone)]
pub struct MemoryStore<C = SystemClock> {
    inner: Arc<Inner<C>>,
}

struct Inner<C> {
    clock: C,
    maps: Registry,
    /// Requests waiting for an in-flight slot.
    waiters: Waiters,
}

/// A policy bound to a [`MemoryStore`]: the policy and the map its keys
/// live in, found once (see [`Store::bind`]). Cheap to clone; use it with
/// the store that made it.
pub struct MemoryBinding<K> {
    shards: Arc<Shards<K>>,
    policy: Policy,
    /// How the policy's keys are kept: picked once, when bound.
    form: Form,
}

/// Runs `$body` with `$V` naming the type `$binding`'s keys are kept as.
macro_rules! in_form {
    ($binding:expr, $V:ident => $body:expr) => {
        match $binding.form {
            Form::Whole => {
                type $V = KeyState;
                $body
            }
            Form::One => {
                type $V = Packed<1>;
                $body
            }
            Form::Two => {
                type $V = Packed<2>;
                $body
            }
        }
    };
}

impl<K> Clone for MemoryBinding<K> {
    fn clone(&self) -> Self {
        Self {
            shards: Arc::clone(&self.shards),
            policy: self.policy.clone(),
            form: self.form,
        }
    }
}

impl<K> std::fmt::Debug for MemoryBinding<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryBinding").finish_non_exhaustive()
    }
}

impl<C> std::fmt::Debug for MemoryStore<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryStore")
            .field("max_keys", &self.inner.maps.cap().max())
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
    /// The default number of live keys a store holds.
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
                maps: Registry::new(max_keys),
                waiters: Waiters::default(),
            }),
        }
    }

    /// The clock the store reads.
    pub fn clock(&self) -> &C {
        &self.inner.clock
    }

    /// `policy` with the map its keys of type `K` live in, made if new.
    pub fn bind<K>(&self, policy: &Policy) -> MemoryBinding<K>
    where
        K: Hash + Eq + Send + Sync + 'static,
    {
        MemoryBinding {
            shards: self.inner.maps.shards(),
            policy: policy.clone(),
            form: Form::of(policy),
        }
    }

    /// Judges a request for `key` under `policy` right now (no future involved).
    pub fn decide_now<K>(&self, key: K, policy: &Policy) -> Decision
    where
        K: Hash + Eq + Send + Sync + 'static,
    {
        self.decide_bound_now(key, &self.bind(policy))
    }

    /// Judges a request for `key` under the policy `binding` holds.
    #[inline]
    pub fn decide_bound_now<K>(&self, key: K, binding: &MemoryBinding<K>) -> Decision
    where
        K: Hash + Eq + Send + Sync + 'static,
    {
        self.decide_cost_bound_now(key, binding, 1)
    }

    /// Judges a request of `cost` units for `key` under the policy
    /// `binding` holds, as [`Store::decide_cost_bound`] describes: what
    /// that future holds, ready.
    #[inline]
    pub(crate) fn decide_cost_bound_now<K>(
        &self,
        key: K,
        binding: &MemoryBinding<K>,
        cost: u32,
    ) -> Decision
    where
        K: Hash + Eq + Send + Sync + 'static,
    {
        let clock = || self.inner.clock.now_micros();
        let full = |key, now| self.make_room(key, now, binding, cost);
        let (shards, policy) = (&binding.shards, &binding.policy);
        in_form!(binding, V => shards.decide::<V>(key, policy, clock, cost, full))
    }

    /// A new key found the store full: sweeps the whole store if that is
    /// due and judges the key again, else refuses it.
    #[cold]
    fn make_room<K>(&self, key: K, now: u64, binding: &MemoryBinding<K>, cost: u32) -> Decision
    where
        K: Hash + Eq + Send + Sync + 'static,
    {
        let (shards, policy) = (&binding.shards, &binding.policy);
        let maps = &self.inner.maps;
        if !maps.cap().claim_full_sweep(now) {
            return shards.no_room(policy, now);
        }
        maps.sweep_all(now);
        let no_room = |_, now| shards.no_room(policy, now);
        in_form!(binding, V => shards.decide::<V>(key, policy, || now, cost, no_room))
    }

    /// Settles a request as [`Store::settle_bound`] describes, right now.
    pub(crate) fn settle_bound_now<K>(
        &self,
        key: K,
        binding: &MemoryBinding<K>,
        admitted: &Decision,
        cost: u32,
        used: u32,
    ) -> Decision
    where
        K: Hash + Eq + Send + Sync + 'static,
    {
        if !admitted.needs_settling(cost, used) {
            return *admitted;
        }
        let now = self.inner.clock.now_micros();
        let (shards, policy) = (&binding.shards, &binding.policy);
        in_form!(binding, V => shards.settle::<V>(key, policy, now, admitted, cost, used));
        admitted.settled(cost, used)
    }

    /// Judges a request for `key` under `policy` right now as
    /// [`decide_now`](MemoryStore::decide_now) would, recording nothing.
    pub fn peek_now<K>(&self, key: &K, policy: &Policy) -> Decision
    where
        K: Hash + Eq + Send + Sync + 'static,
    {
        self.peek_bound_now(key, &self.bind(policy))
    }

    /// [`peek_now`](MemoryStore::peek_now) under the policy `binding` holds.
    pub(crate) fn peek_bound_now<K>(&self, key: &K, binding: &MemoryBinding<K>) -> Decision
    where
        K: Hash + Eq + Send + Sync + 'static,
    {
        let now = self.inner.clock.now_micros();
        in_form!(binding, V => binding.shards.peek::<V>(key, &binding.policy, now))
    }

    /// The number of keys of type `K` held, live or not yet swept.
    pub fn key_count<K>(&self) -> usize
    where
        K: Hash + Eq + Send + Sync + 'static,
    {
        self.inner.maps.key_count::<K>()
    }
}

impl<K, C> Store<K> for MemoryStore<C>
where
    K: Hash + Eq + Send + Sync + 'static,
    C: Clock,
{
    type Binding = MemoryBinding<K>;
    type Future = Ready<Result<Decision, StoreError>>;

    fn bind(&self, policy: &Policy) -> MemoryBinding<K> {
        MemoryStore::bind(self, policy)
    }

    #[inline]
    fn decide_cost_bound(&self, key: K, binding: &MemoryBinding<K>, cost: u32) -> Self::Future {
        ready(Ok(self.decide_cost_bound_now(key, binding, cost)))
    }

    fn settle_bound(
        &self,
        key: K,
        binding: &MemoryBinding<K>,
        admitted: &Decision,
        cost: u32,
        used: u32,
    ) -> Self::Future {
        ready(Ok(self.settle_bound_now(key, binding, admitted, cost, used)))
    }

    fn peek_bound(&self, key: K, binding: &MemoryBinding<K>) -> Self::Future {
        ready(Ok(self.peek_bound_now(&key, binding)))
    }

    fn holds_slots(&self) -> bool {
        true
    }

    fn release_bound(&self, key: K, binding: &MemoryBinding<K>, admitted: &Decision) {
        if admitted.holds_slot() {
            let now = self.inner.clock.now_micros();
            let (shards, policy) = (&binding.shards, &binding.policy);
            in_form!(binding, V => shards.release::<V>(&key, policy, now, admitted));
            self.inner.waiters.wake_one(shards.hash(&key, policy));
        }
    }

    fn slot_freed(&self, key: &K, binding: &MemoryBinding<K>) -> Option<SlotFreed> {
        let hash = binding.shards.hash(key, &binding.policy);
        Some(self.inner.waiters.wait(hash))
    }
}
