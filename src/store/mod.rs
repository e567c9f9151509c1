//! Stores keep each key's state and judge requests against it atomically.
//!
//! The layer asks a [`Store`] for a [`Decision`] once per request. A store
//! owns its state, its caches, its concurrency (no two concurrent requests
//! for one key may both read a stale count) and its persistence; the
//! algorithms themselves live in [`crate::algorithm`].

mod cas;
mod error;
mod lease_book;
mod memory;
mod names;
#[cfg(feature = "redis")]
mod redis;

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Waker};

pub use self::cas::{CasBinding, CasStore, CompareAndSwap};
pub use self::error::{StoreError, StoreErrorKind};
pub use self::memory::{MemoryBinding, MemoryStore};
#[cfg(feature = "redis-tls")]
pub use self::redis::RedisTls;
#[cfg(feature = "redis")]
pub use self::redis::{FailurePolicy, RedisBinding, RedisStore};
use crate::algorithm::Decision;
use crate::policy::Policy;

/// Judges and records one request for `key` under every limit of a policy,
/// in one atomic step.
///
/// **A window belongs to (store, policy value, key).** Two policies are the
/// same value when their algorithm, limits, [name](Policy::named) and
/// [penalty](Policy::with_penalty) are equal, wherever and whenever they were built: layers built apart with
/// equal policies on one store (or one Redis prefix) count together, a
/// different name keeps them apart, and a plan that builds its policy from
/// data on every request finds the same windows each time. Every store
/// follows this rule, and the conformance suite holds each one to it.
///
/// A caller [binds](Store::bind) a policy to find what the store needs for
/// it (the memory store's map, the Redis store's key names) and may keep
/// the binding; the layer keeps the one of its own policy, and binds the
/// policy a plan chooses for each request. So binding must be cheap, and a
/// store must keep nothing per policy value that grows with their number:
/// limits per tenant are many policies. [`decide`](Store::decide) and
/// [`peek`](Store::peek) bind and judge in one call.
///
/// Implementations must make the check and the record indivisible per key
/// (one lock, one CAS loop or one server-side script), keep the windows of
/// different policy values apart even for equal keys, and never panic:
/// failures come back as [`StoreError`], and the layer answers them under
/// its documented policy. A store that finds nothing worth keeping per
/// policy can use the policy itself as its binding.
///
/// # Writing a store
///
/// [`KeyState`](crate::KeyState) is the whole judgement of one key under
/// one policy (every algorithm, costs, settling, penalties and peeks, as
/// [`MemoryStore`] decides them), kept as compact bytes between calls. So a
/// store over any key-value service with compare-and-swap or transactions
/// (DynamoDB, Postgres, etcd, memcached's `cas`…) only moves bytes, and
/// [`CasStore`] does the rest: implement [`CompareAndSwap`] (a read, and a
/// write that succeeds only if no one wrote first) for the service's
/// client, and hand it over.
///
/// ```
/// use std::collections::HashMap;
/// use std::sync::{Arc, Mutex};
/// use std::time::Duration;
/// use tower_sliding_window::{CasStore, CompareAndSwap, Limit, SlidingWindowLayer, StoreError};
///
/// /// Stands in for a database client; its expiry is left out.
/// #[derive(Clone, Default)]
/// struct Table(Arc<Mutex<HashMap<String, Vec<u8>>>>);
///
/// impl CompareAndSwap for Table {
///     async fn load(&self, name: &str) -> Result<Option<Vec<u8>>, StoreError> {
///         Ok(self.0.lock().unwrap().get(name).cloned())
///     }
///
///     async fn swap(&self, name: &str, old: Option<&[u8]>, new: Vec<u8>, _ttl: Duration) -> Result<bool, StoreError> {
///         let mut rows = self.0.lock().unwrap();
///         if rows.get(name).map(Vec::as_slice) != old {
///             return Ok(false);
///         }
///         rows.insert(name.to_owned(), new);
///         Ok(true)
///     }
/// }
///
/// let key = |req: &http::Request<()>| Some(req.uri().path().to_owned());
/// let layer = SlidingWindowLayer::new(Limit::per_minute(60), key).store(CasStore::new(Table::default()));
/// ```
///
/// A store of another shape (a script run inside the service, a cache in
/// front of it) implements this trait itself around
/// [`KeyState::decide`](crate::KeyState::decide),
/// [`settle`](crate::KeyState::settle) and
/// [`peek`](crate::KeyState::peek): name the state by the key and the
/// policy's value (its [`name`](Policy::name) and
/// [`signature`](Policy::signature)), judge on one clock every instance
/// shares ([`UnixClock`](crate::UnixClock), or the service's), and keep
/// the bytes for [`idle_after`](crate::KeyState::idle_after) and a few
/// seconds' grace. A failure policy of its own builds answers with
/// [`Decision::allow`] and [`Decision::refuse`], marked with
/// [`Decision::with_origin`]; [`StoreError::kind`] tells a time-out from a
/// lost connection or a malformed reply.
pub trait Store<K>: Clone + Send + Sync + 'static {
    /// A policy bound to this store: what the store found or made for it.
    type Binding: Clone + Send + Sync + 'static;

    /// The pending decision. It is polled once as soon as the request
    /// arrives, so a store that can answer at once (like [`MemoryStore`])
    /// costs no more than a function call; box it if it is not `Unpin`.
    type Future: Future<Output = Result<Decision, StoreError>> + Send + Unpin + 'static;

    /// Finds what the store needs to judge under `policy`: cheap, and
    /// keeping nothing per policy value.
    fn bind(&self, policy: &Policy) -> Self::Binding;

    /// Judges a request for `key` under the bound policy, recording it if
    /// accepted: a request of cost 1.
    fn decide_bound(&self, key: K, binding: &Self::Binding) -> Self::Future {
        self.decide_cost_bound(key, binding, 1)
    }

    /// Judges a request that costs `cost` units under the bound policy
    /// ([`SlidingWindowLayer::cost`](crate::SlidingWindowLayer::cost)),
    /// recording them all if every limit has room for them, none otherwise.
    /// A cost of 0 always passes and records nothing; a cost larger than
    /// some limit's `max` can never pass and is refused with
    /// [`Origin::TooCostly`](crate::Origin::TooCostly) and no time to
    /// retry at. [`decide_bound`](Store::decide_bound) is a cost of 1.
    fn decide_cost_bound(&self, key: K, binding: &Self::Binding, cost: u32) -> Self::Future;

    /// Settles a request that `admitted` let through for `cost` units, whose
    /// response says it used `used`
    /// ([`SlidingWindowLayer::settle`](crate::SlidingWindowLayer::settle)):
    /// gives back what it did not use, or charges the excess even past the
    /// limit (a window then holds at most its limit's `max`, so the key is
    /// refused until it drains), in one atomic step. Answers `admitted` with
    /// the deciding limit's quota moved by the difference. A request that
    /// was not counted (one whose `admitted` is not both
    /// [allowed](Decision::is_allowed) and of
    /// [`Origin::Limits`](crate::Origin::Limits): refused, or let through by
    /// a failure policy, the fallback store's included) has nothing to
    /// settle, and `admitted` comes back as it was.
    fn settle_bound(
        &self,
        key: K,
        binding: &Self::Binding,
        admitted: &Decision,
        cost: u32,
        used: u32,
    ) -> Self::Future;

    /// Judges a request as [`decide_bound`](Store::decide_bound) would,
    /// remaining quota included, but records nothing: what a request of
    /// cost 0 is told.
    fn peek_bound(&self, key: K, binding: &Self::Binding) -> Self::Future;

    /// Whether the store keeps in-flight caps
    /// ([`Policy::with_in_flight`]): judges them with the limits and
    /// [releases](Store::release_bound) slots. A layer whose policy has a
    /// cap answers every request with a [`Config`](StoreErrorKind::Config)
    /// error on a store that does not, rather than let the cap pass
    /// unenforced. No, unless the store says so.
    fn holds_slots(&self) -> bool {
        false
    }

    /// Frees the in-flight slot that `admitted` (this store's decision
    /// for `key` under the bound policy) took, once its request is over:
    /// a decision that [holds no slot](Decision::holds_slot) frees
    /// nothing. It does not wait: a remote store sends the release before
    /// any later call of its own, so a client that sends its next request
    /// once one ends is never refused by the one that ended. A release
    /// that fails is lost, and its slot comes back when its lease ends.
    fn release_bound(&self, key: K, binding: &Self::Binding, admitted: &Decision) {
        let _ = (key, binding, admitted);
    }

    /// A future that resolves when a slot of `key` under the bound policy
    /// may have freed, for a request that
    /// [waits](crate::SlidingWindowLayer::wait_up_to) for one: it is
    /// judged again then. `None` (the default) leaves the waiter to ask
    /// again every 25 to 50 ms, as a remote store's must, since no
    /// store there can tell it.
    fn slot_freed(&self, key: &K, binding: &Self::Binding) -> Option<SlotFreed> {
        let _ = (key, binding);
        None
    }

    /// Binds `policy` and judges a request for `key` under it.
    fn decide(&self, key: K, policy: &Policy) -> Self::Future {
        self.decide_bound(key, &self.bind(policy))
    }

    /// Binds `policy` and judges a request of `cost` units for `key` under it.
    fn decide_cost(&self, key: K, policy: &Policy, cost: u32) -> Self::Future {
        self.decide_cost_bound(key, &self.bind(policy), cost)
    }

    /// Binds `policy` and judges a request for `key` under it, recording
    /// nothing.
    fn peek(&self, key: K, policy: &Policy) -> Self::Future {
        self.peek_bound(key, &self.bind(policy))
    }
}

/// What [`Store::slot_freed`] gives: resolves once a slot may have freed.
pub type SlotFreed = Pin<Box<dyn Future<Output = ()> + Send>>;

/// Starts a store's call that nobody waits for (a release) at once, so
/// that it goes out before any later call of the same store, and lets it
/// finish on the tokio runtime if it cannot finish now. Outside a runtime
/// what is left of it is dropped: a lease that was not released ends on
/// its own.
pub(crate) fn send_now(call: impl Future<Output = ()> + Send + 'static) {
    let mut call = Box::pin(call);
    if call
        .as_mut()
        .poll(&mut Context::from_waker(Waker::noop()))
        .is_pending()
    {
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(call);
        }
    }
}
