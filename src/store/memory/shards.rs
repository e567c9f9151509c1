//! A sharded map from (policy, key) to the key's state, kept whole or as
//! its records (see `stored`) in a table of each form per shard, with idle
//! eviction under the store's cap on live keys.

use std::hash::{BuildHasher, Hash};
use std::sync::Arc;

use foldhash::quality::RandomState;
use hashbrown::HashTable;
use parking_lot::{Mutex, MutexGuard};

use super::cap::KeyCap;
use super::stored::{Packed, Stored};
use crate::algorithm::{Decision, Origin};
use crate::policy::{Policy, Weighed};
use crate::state::KeyState;

/// How often (in microseconds of store time) a shard in use looks for idle keys.
const SWEEP_EVERY_MICROS: u64 = 5_000_000;
/// Until when a slot of the memory store lasts: until released.
const FOREVER: u64 = u64::MAX;

/// How long a key is kept once it has gone idle. A clock read a little
/// behind another (a settle or a peek reads it before taking the lock, or
/// the clock stepped back) may still judge a request inside the key's last
/// window; dropping the key at once would give that request a fresh window.
const IDLE_GRACE_MICROS: u64 = 5_000_000;

/// When a state may be dropped: never for one idle only at the end of the
/// clock's range (a time past it saturates to the end).
fn droppable_from(state: &KeyState, policy: &Policy) -> u64 {
    state
        .idle_from_micros(policy)
        .saturating_add(IDLE_GRACE_MICROS)
}

/// One key's state under one policy, kept as `V`. The policy is the
/// entry's own, so that tenants with limits of their own share a map; it
/// is also how a sweep knows when the state goes idle.
pub(super) struct Entry<K, V> {
    key: K,
    policy: Policy,
    state: V,
}

impl<K: Eq, V> Entry<K, V> {
    /// Whether this is `key`'s entry under `policy`: the policy known by
    /// its address first, as a bound one is, else by its value.
    #[inline(always)]
    fn is(&self, key: &K, policy: &Policy) -> bool {
        self.key == *key && (self.policy.is(policy) || self.policy == *policy)
    }
}

/// A shard's entries, a table for each form a state is kept in.
pub(super) struct Tables<K> {
    whole: HashTable<Entry<K, KeyState>>,
    one: HashTable<Entry<K, Packed<1>>>,
    two: HashTable<Entry<K, Packed<2>>>,
}

/// A form of state, and its table in a shard.
pub(super) trait InShard: Stored + Sized {
    fn table<K>(tables: &mut Tables<K>) -> &mut HashTable<Entry<K, Self>>;
}

impl InShard for KeyState {
    fn table<K>(tables: &mut Tables<K>) -> &mut HashTable<Entry<K, Self>> {
        &mut tables.whole
    }
}

impl InShard for Packed<1> {
    fn table<K>(tables: &mut Tables<K>) -> &mut HashTable<Entry<K, Self>> {
        &mut tables.one
    }
}

impl InShard for Packed<2> {
    fn table<K>(tables: &mut Tables<K>) -> &mut HashTable<Entry<K, Self>> {
        &mut tables.two
    }
}

struct Shard<K> {
    tables: Tables<K>,
    /// The policy of the key added last, whose value a new key under an
    /// equal policy shares: a plan that builds its policy on every request
    /// then costs one copy of it, not one per key.
    last_policy: Option<Policy>,
    next_sweep: u64,
}

impl<K> Shard<K> {
    /// Drops entries idle for the grace period, in every table, lets the
    /// others give back memory they no longer need, and tells the cap when
    /// the earliest remaining one may be dropped.
    #[cold]
    #[inline(never)]
    fn sweep(&mut self, now: u64, cap: &KeyCap) {
        let mut earliest = u64::MAX;
        let tables = &mut self.tables;
        let dropped = sweep_table(&mut tables.whole, now, &mut earliest)
            + sweep_table(&mut tables.one, now, &mut earliest)
            + sweep_table(&mut tables.two, now, &mut earliest);
        cap.release(dropped);
        cap.swept(earliest);
        self.next_sweep = now.saturating_add(SWEEP_EVERY_MICROS);
    }

    fn len(&self) -> usize {
        let tables = &self.tables;
        tables.whole.len() + tables.one.len() + tables.two.len()
    }
}

/// Drops `table`'s entries idle at `now`, and lowers `earliest` to when
/// the first of the others may be dropped; how many it dropped.
fn sweep_table<K, V: Stored>(
    table: &mut HashTable<Entry<K, V>>,
    now: u64,
    earliest: &mut u64,
) -> usize {
    let before = table.len();
    table.retain(|entry| {
        let policy = &entry.policy;
        let drop_from = entry
            .state
            .read(policy, |state| droppable_from(state, policy));
        let kept = drop_from > now || drop_from == u64::MAX;
        if kept {
            *earliest = (*earliest).min(drop_from);
            entry.state.shed(policy);
        }
        kept
    });
    before - table.len()
}

/// A shard and its lock, aligned to a cache line so that two shards' locks
/// never share one: threads working on different shards do not slow each
/// other down.
#[repr(align(64))]
struct Padded<K>(Mutex<Shard<K>>);

/// Every key's state, under any policy, for keys of type `K`.
pub(super) struct Shards<K> {
    shards: Box<[Padded<K>]>,
    hasher: RandomState,
    cap: Arc<KeyCap>,
}

impl<K: Hash + Eq> Shards<K> {
    /// Enough shards for the cap's keys (at most 64).
    pub(super) fn new(cap: Arc<KeyCap>) -> Self {
        let count = (cap.max() / 16).clamp(1, 64).next_power_of_two();
        let shard = || {
            Padded(Mutex::new(Shard {
                tables: Tables {
                    whole: HashTable::new(),
                    one: HashTable::new(),
                    two: HashTable::new(),
                },
                last_policy: None,
                next_sweep: SWEEP_EVERY_MICROS,
            }))
        };
        Self {
            shards: (0..count).map(|_| shard()).collect(),
            hasher: RandomState::default(),
            cap,
        }
    }

    /// Judges a request of `cost` units for `key` under `policy` at the
    /// time `clock` gives, as [`KeyState::decide`] does. A new key is kept
    /// only if the decision recorded something; one that finds the store
    /// full goes, with the time, to `full`, once the shard is unlocked, so
    /// that it may make room and judge it again.
    ///
    /// The clock is read under the shard's lock, once the key's entry is
    /// found: decisions on one key are then judged in the order they are
    /// made, whatever the threads, and the entry's memory is on its way
    /// before the clock is read rather than after.
    // A slot taken here never expires: the layer releases it when its
    // request ends, and the slots end with the process.
    pub(super) fn decide<V: InShard>(
        &self,
        key: K,
        policy: &Policy,
        clock: impl FnOnce() -> u64,
        cost: u32,
        full: impl FnOnce(K, u64) -> Decision,
    ) -> Decision {
        let hash = self.hash(&key, policy);
        let mut guard = self.shard(hash).lock();
        let shard = &mut *guard;
        let mut found = V::table(&mut shard.tables).find_mut(hash, |e| e.is(&key, policy));
        let now = clock();
        if now >= shard.next_sweep {
            shard.sweep(now, &self.cap);
            found = V::table(&mut shard.tables).find_mut(hash, |e| e.is(&key, policy));
        }
        if let Some(entry) = found {
            return entry.state.decide(policy, now, cost, FOREVER);
        }
        let mut state = KeyState::new(policy.algorithm());
        let decision = state.decide_micros(policy, now, cost, FOREVER);
        if state.is_fresh() {
            // Nothing recorded: a request of no cost, which a full store
            // answers as it answers a peek, or one refused before counting.
            let no_room = policy.weigh(cost) == Weighed::Peek && self.cap.is_full();
            return if no_room {
                self.no_room(policy, now)
            } else {
                decision
            };
        }
        match self.insert::<V>(shard, hash, key, policy, state) {
            Ok(()) => decision,
            Err(key) => {
                drop(guard);
                full(key, now)
            }
        }
    }

    /// `key`'s hash under `policy`: its key's, mixed with its policy value's.
    #[inline(always)]
    pub(super) fn hash(&self, key: &K, policy: &Policy) -> u64 {
        self.hasher.hash_one(key) ^ policy.value_hash()
    }

    /// `key`'s hash and its shard, locked and swept if that is due at `now`.
    fn shard_for(&self, key: &K, policy: &Policy, now: u64) -> (u64, MutexGuard<'_, Shard<K>>) {
        let hash = self.hash(key, policy);
        let mut shard = self.shard(hash).lock();
        if now >= shard.next_sweep {
            shard.sweep(now, &self.cap);
        }
        (hash, shard)
    }

    /// The shard a key of this hash lives in.
    ///
    /// Its lock spins briefly before it parks: under contention on one hot
    /// key a decision is over before a parked thread would wake. It does
    /// not poison, which is sound here: a panic while holding it cannot
    /// leave a shard half-updated (every update is a plain store).
    #[inline(always)]
    fn shard(&self, hash: u64) -> &Mutex<Shard<K>> {
        // The middle bits pick the shard: the table itself uses the low bits
        // for buckets and the top seven as tags.
        &self.shards[(hash >> 32) as usize & (self.shards.len() - 1)].0
    }

    /// Adds a new key's state to its shard if the store has room for it,
    /// else gives the key back.
    fn insert<V: InShard>(
        &self,
        shard: &mut Shard<K>,
        hash: u64,
        key: K,
        policy: &Policy,
        state: KeyState,
    ) -> Result<(), K> {
        if !self.cap.take(droppable_from(&state, policy)) {
            return Err(key);
        }
        let policy = match &shard.last_policy {
            Some(last) if last == policy => last.clone(),
            _ => shard.last_policy.insert(policy.clone()).clone(),
        };
        let state = V::keep(state);
        let entry = Entry { key, policy, state };
        let hasher = &self.hasher;
        V::table(&mut shard.tables).insert_unique(hash, entry, |entry| {
            hasher.hash_one(&entry.key) ^ entry.policy.value_hash()
        });
        Ok(())
    }

    /// Settles a request for `key` that the map counted, as
    /// [`KeyState::settle`] does. A key no longer held (idle past its
    /// windows) has nothing to give back, but is charged an excess afresh,
    /// as a new key would be, if there is room.
    pub(super) fn settle<V: InShard>(
        &self,
        key: K,
        policy: &Policy,
        now: u64,
        admitted: &Decision,
        cost: u32,
        used: u32,
    ) {
        let (hash, mut guard) = self.shard_for(&key, policy, now);
        let shard = &mut *guard;
        if let Some(entry) = V::table(&mut shard.tables).find_mut(hash, |e| e.is(&key, policy)) {
            entry.state.change(policy, |state| {
                state.settle_micros(policy, now, admitted, cost, used)
            });
            return;
        }
        let mut state = KeyState::new(policy.algorithm());
        state.settle_micros(policy, now, admitted, cost, used);
        if !state.is_fresh() {
            // A store with no room keeps no excess either.
            let _ = self.insert::<V>(shard, hash, key, policy, state);
        }
    }

    /// Frees the in-flight slot `admitted` took for `key`, if its entry
    /// still holds it.
    pub(super) fn release<V: InShard>(
        &self,
        key: &K,
        policy: &Policy,
        now: u64,
        admitted: &Decision,
    ) {
        let (hash, mut shard) = self.shard_for(key, policy, now);
        let table = V::table(&mut shard.tables);
        if let Some(entry) = table.find_mut(hash, |e| e.is(key, policy)) {
            entry.state.change(policy, |state| state.release(admitted));
        }
    }

    /// Judges as [`decide`](Self::decide) would a request of one unit,
    /// recording nothing and adding no key.
    ///
    /// A new key at a full store is refused as `decide` would refuse it: a
    /// key the store could not record must not pass unlimited.
    pub(super) fn peek<V: InShard>(&self, key: &K, policy: &Policy, now: u64) -> Decision {
        let (hash, mut shard) = self.shard_for(key, policy, now);
        match V::table(&mut shard.tables).find(hash, |e| e.is(key, policy)) {
            Some(entry) => entry.state.read(policy, |state| state.peek_at(policy, now)),
            None if self.cap.is_full() => self.no_room(policy, now),
            None => KeyState::new(policy.algorithm()).peek_at(policy, now),
        }
    }

    /// The refusal of a new key when the store is full of live keys.
    ///
    /// Live keys are never dropped to make room: that would hand their
    /// owners a fresh window. A new key waits until one may be dropped.
    pub(super) fn no_room(&self, policy: &Policy, now: u64) -> Decision {
        let wait = self.cap.wait(now);
        let refusal =
            Decision::substitute(false, policy.first_limit(), wait, now, Origin::StoreFull);
        policy.stand_in(refusal)
    }

    /// Drops every key idle at `now`, as each shard's own sweep would.
    pub(super) fn sweep_all(&self, now: u64) {
        for shard in self.shards.iter() {
            shard.0.lock().sweep(now, &self.cap);
        }
    }

    pub(super) fn len(&self) -> usize {
        self.shards.iter().map(|shard| shard.0.lock().len()).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_packed_entry_is_its_key_policy_and_records() {
        assert_eq!(size_of::<Entry<u64, Packed<1>>>(), 32);
        assert_eq!(size_of::<Entry<u64, Packed<2>>>(), 48);
    }
}
