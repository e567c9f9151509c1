//! A store over any key-value service that can compare and swap: the
//! service moves bytes, [`KeyState`] judges them.

mod slots;

use std::fmt::{self, Display};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use self::slots::{Place, Releasing, Renewal};

use super::lease_book::{LeaseBook, Unseen};
use super::names::{escape, escape_into, key_name};
use super::{Store, StoreError};
use crate::algorithm::Decision;
use crate::clock::{Clock, UnixClock};
use crate::policy::Policy;
use crate::state::{KeyState, DEFAULT_LEASE};

/// What [`CasStore`] needs of a key-value service (DynamoDB, Postgres,
/// etcd, memcached, a Redis of your own…): read a key's bytes, and write
/// them only if no one else wrote them since.
///
/// Implement it with `async fn`s. Errors are the service's, as
/// [`StoreError`]s of the [kind](super::StoreErrorKind) that fits; the
/// layer answers them as it answers any store's.
pub trait CompareAndSwap: Clone + Send + Sync + 'static {
    /// The bytes stored under `name`, or `None` if there are none (or
    /// they expired).
    fn load(&self, name: &str) -> impl Future<Output = Result<Option<Vec<u8>>, StoreError>> + Send;

    /// Stores `new` under `name`, to expire after `ttl`, if `name` still
    /// holds `old` (`None`: nothing): true if it did, false if someone
    /// else wrote it first.
    fn swap(
        &self,
        name: &str,
        old: Option<&[u8]>,
        new: Vec<u8>,
        ttl: Duration,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;
}

/// A [`Store`] over a [`CompareAndSwap`] service: each decision reads the
/// key's [`KeyState`], judges it and writes it back if no one wrote it
/// meanwhile, else tries again with what they wrote. It decides exactly
/// as [`MemoryStore`](crate::MemoryStore) does, and shares windows
/// between every instance on one service and prefix.
///
/// * **Names** are `prefix:{key}:name/signature`, the key escaped as the
///   Redis store escapes it (and digested past 256 bytes): one state per
///   (policy value, key). Keys must implement `Display`.
/// * **Time** is [`UnixClock`] by default: every instance must judge on
///   one clock, and Unix time is one, as far as the machines' clocks agree.
/// * **Expiry**: each write asks the service to keep the bytes for as long
///   as they matter ([`KeyState::idle_after`]) and five seconds more.
/// * **Contention**: a write beaten 16 times in a row on one key fails
///   with a [`StoreError`], rather than retrying without end.
/// * **In-flight caps** ([`Policy::with_in_flight`]): the slots are
///   leases kept in the key's bytes, each lasting
///   [`with_lease`](CasStore::with_lease) (30 s) unless released first, and
///   renewed while their request runs, so that a crashed instance's slots
///   come back within a lease.
pub struct CasStore<S, C = UnixClock> {
    inner: Arc<Inner<S, C>>,
}

struct Inner<S, C> {
    service: S,
    clock: C,
    prefix: String,
    /// How long a slot lasts unless released or renewed.
    lease: Duration,
    releasing: Releasing,
    leases: Arc<LeaseBook<Renewal<S, C>, Place>>,
}

impl<S, C> Clone for CasStore<S, C> {
    fn clone(&self) -> Self {
        Self {
            inner: Arc::clone(&self.inner),
        }
    }
}

impl<S, C> fmt::Debug for CasStore<S, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CasStore")
            .field("prefix", &self.inner.prefix)
            .finish_non_exhaustive()
    }
}

/// How much longer than its state matters a key's bytes are kept: an
/// instance whose clock reads a little behind must still find them.
const GRACE: Duration = Duration::from_secs(5);

/// Tries at a write before a key counts as too contended to judge.
const ATTEMPTS: usize = 16;

impl<S: CompareAndSwap> CasStore<S> {
    /// A store over `service`, on Unix time, with the prefix `tsw`.
    pub fn new(service: S) -> Self {
        Self::with_clock(service, UnixClock)
    }
}

impl<S: CompareAndSwap, C: Clock> CasStore<S, C> {
    /// A store over `service` reading time from `clock` (a
    /// [`ManualClock`](crate::ManualClock) in tests).
    pub fn with_clock(service: S, clock: C) -> Self {
        Self::built(service, clock, String::from("tsw"), DEFAULT_LEASE)
    }

    /// Names every key `prefix:{…}:…`. Configure before cloning: the result
    /// is a new store.
    pub fn with_prefix(self, prefix: &str) -> Self {
        self.rebuilt(escape(prefix), self.inner.lease)
    }

    /// How long an in-flight slot lasts (default [`DEFAULT_LEASE`], 30 s)
    /// if the instance holding it dies without releasing it. While its
    /// request runs, the store renews it every third of a lease, one
    /// compare-and-swap per key. Configure before cloning: the result is a
    /// new store.
    ///
    /// # Panics
    ///
    /// If `lease` is shorter than 30 ms, too short to renew in time.
    pub fn with_lease(self, lease: Duration) -> Self {
        assert!(
            lease >= Duration::from_millis(30),
            "CasStore::with_lease: a lease must be at least 30 ms, got {lease:?}"
        );
        self.rebuilt(self.inner.prefix.clone(), lease)
    }

    fn rebuilt(&self, prefix: String, lease: Duration) -> Self {
        let Inner { service, clock, .. } = &*self.inner;
        Self::built(service.clone(), clock.clone(), prefix, lease)
    }

    fn built(service: S, clock: C, prefix: String, lease: Duration) -> Self {
        let inner = Arc::new_cyclic(|inner| Inner {
            service,
            clock,
            prefix,
            lease,
            releasing: Releasing::default(),
            leases: LeaseBook::new(Renewal(inner.clone()), lease),
        });
        Self { inner }
    }

    /// Reads `name`'s state, applies the releases not yet written, lets
    /// `judge` change it, and writes it back if no one else wrote it
    /// meanwhile, else starts again. A slot `judge` took whose write may
    /// have landed unseen (the call failed or was dropped) is released.
    async fn update(
        self,
        name: String,
        policy: Policy,
        judge: impl Fn(&mut KeyState, &Policy, Duration) -> Decision + Send,
    ) -> Result<Decision, StoreError> {
        let service = &self.inner.service;
        for _ in 0..ATTEMPTS {
            // Taken before the load: a release written back meanwhile is
            // then either in the bytes loaded or in this list.
            let released = self.inner.releasing.of(&name);
            let now = self.inner.clock.now();
            let old = service.load(&name).await?;
            let mut state = state_of(&policy, old.as_deref())?;
            for admitted in &released {
                state.release(admitted);
            }
            let decision = judge(&mut state, &policy, now);
            let idle_after = state.idle_after(&policy, now);
            let new = state.to_bytes();
            // Nothing to write: a refusal, or a key that holds nothing; the
            // releases applied had nothing left to free.
            if old.as_deref() == Some(&new[..]) || (old.is_none() && idle_after.is_zero()) {
                self.inner.releasing.written(&name, &released);
                return Ok(decision);
            }
            let unseen = Unseen::new(decision.holds_slot().then_some(|| {
                self.release(name.clone(), policy.clone(), decision);
            }));
            let swapped = service.swap(&name, old.as_deref(), new, idle_after + GRACE);
            let swapped = swapped.await?;
            unseen.seen();
            if swapped {
                self.inner.releasing.written(&name, &released);
                return Ok(decision);
            }
        }
        Err(StoreError::new(
            format!("{name} changed under each of {ATTEMPTS} attempts to write it"),
            None,
        ))
    }

    async fn peek_at(self, name: String, policy: Policy) -> Result<Decision, StoreError> {
        let released = self.inner.releasing.of(&name);
        let now = self.inner.clock.now();
        let old = self.inner.service.load(&name).await?;
        let mut state = state_of(&policy, old.as_deref())?;
        for admitted in &released {
            state.release(admitted);
        }
        Ok(state.peek(&policy, now))
    }
}

/// The state `bytes` hold, or a fresh one.
fn state_of(policy: &Policy, bytes: Option<&[u8]>) -> Result<KeyState, StoreError> {
    match bytes {
        Some(bytes) => KeyState::from_bytes(bytes),
        None => Ok(KeyState::new(policy.algorithm())),
    }
}

/// A policy bound to a [`CasStore`]: the policy and its part of every
/// key's name.
#[derive(Clone, Debug)]
pub struct CasBinding {
    policy: Policy,
    suffix: Arc<str>,
}

/// A decision on its way from the service.
type Pending = Pin<Box<dyn Future<Output = Result<Decision, StoreError>> + Send>>;

impl<K, S, C> Store<K> for CasStore<S, C>
where
    K: Display + Send + 'static,
    S: CompareAndSwap,
    C: Clock,
{
    type Binding = CasBinding;
    type Future = Pending;

    fn bind(&self, policy: &Policy) -> CasBinding {
        let mut suffix = String::new();
        escape_into(&mut suffix, policy.name(), policy.signature());
        CasBinding {
            policy: policy.clone(),
            suffix: suffix.into(),
        }
    }

    fn decide_cost_bound(&self, key: K, binding: &CasBinding, cost: u32) -> Pending {
        let name = key_name(&self.inner.prefix, &key, &binding.suffix);
        let lease = self.inner.lease;
        let judge = move |state: &mut KeyState, policy: &Policy, now| {
            state.decide_leased(policy, now, cost, lease)
        };
        let policy = binding.policy.clone();
        let store = self.clone();
        Box::pin(async move {
            let decision = store
                .clone()
                .update(name.clone(), policy.clone(), judge)
                .await?;
            if decision.holds_slot() {
                let place = (name, policy, decision);
                store.inner.leases.hold(decision.lease, place);
            }
            Ok(decision)
        })
    }

    fn settle_bound(
        &self,
        key: K,
        binding: &CasBinding,
        admitted: &Decision,
        cost: u32,
        used: u32,
    ) -> Pending {
        if !admitted.needs_settling(cost, used) {
            return Box::pin(std::future::ready(Ok(*admitted)));
        }
        let name = key_name(&self.inner.prefix, &key, &binding.suffix);
        let admitted = *admitted;
        let judge = move |state: &mut KeyState, policy: &Policy, now| {
            state.settle(policy, now, &admitted, cost, used)
        };
        Box::pin(self.clone().update(name, binding.policy.clone(), judge))
    }

    fn peek_bound(&self, key: K, binding: &CasBinding) -> Pending {
        let name = key_name(&self.inner.prefix, &key, &binding.suffix);
        Box::pin(self.clone().peek_at(name, binding.policy.clone()))
    }

    fn holds_slots(&self) -> bool {
        true
    }

    fn release_bound(&self, key: K, binding: &CasBinding, admitted: &Decision) {
        if !admitted.holds_slot() {
            return;
        }
        let name = key_name(&self.inner.prefix, &key, &binding.suffix);
        self.release(name, binding.policy.clone(), *admitted);
    }
}
