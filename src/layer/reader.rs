//! Key extractors that read more than the key: the policy a plan picks,
//! the cost, and the units a response settles at. [`plan`], [`cost`] and
//! [`settle`] wrap the layer's extractor in one, whose type names what its
//! closure reads (the key type, the request type, the response type), so
//! that the compiler checks the closure against the service the layer
//! wraps.
//!
//! [`plan`]: crate::SlidingWindowLayer::plan
//! [`cost`]: crate::SlidingWindowLayer::cost
//! [`settle`]: crate::SlidingWindowLayer::settle

use std::borrow::Cow;
use std::fmt;
use std::sync::Arc;

use super::key::{KeyExtractor, UnitsUsed};
use crate::policy::Policy;

/// An extractor `E` whose requests are judged by the policy a closure picks
/// from their key of type `K`; see
/// [`SlidingWindowLayer::plan`](crate::SlidingWindowLayer::plan). One
/// layer then serves every tier of a service:
///
/// ```
/// use std::sync::{Arc, RwLock};
/// use tower_sliding_window::{Algorithm, Limit, Policy, SlidingWindowLayer};
///
/// let free = Policy::new(Algorithm::SlidingCounter, [Limit::per_second(10), Limit::per_minute(100)])?.named("free");
/// let paid = Policy::new(Algorithm::SlidingCounter, [Limit::per_second(100), Limit::per_minute(5_000)])?.named("paid");
/// // Who pays can change while the service runs.
/// let paying: Arc<RwLock<Vec<String>>> = Arc::new(RwLock::new(vec!["acme".into()]));
///
/// let layer = SlidingWindowLayer::with_policy(free.clone(), |req: &http::Request<()>| {
///     req.headers().get("x-api-key")?.to_str().ok().map(str::to_owned)
/// })
/// .plan(move |key: &String| {
///     let is_paying = paying.read().map(|p| p.contains(key)).unwrap_or(false);
///     if is_paying { paid.clone() } else { free.clone() }
/// });
/// # Ok::<(), tower_sliding_window::ConfigError>(())
/// ```
///
/// A plan may build its policy on every request, from data: a policy is a
/// value, and equal values share windows in every store, so per-customer
/// limits read from a map limit as a policy built once would. No store
/// keeps anything per policy value, so a policy per tenant costs what its
/// keys cost. Metrics count an unnamed policy a plan chooses as `unnamed`;
/// to tell plans apart there, name their policies from a bounded set (a
/// tier, not a tenant id: a name is a label value). A key moved to a plan
/// with other limits starts afresh under them.
///
/// ```
/// use std::collections::HashMap;
/// use tower_sliding_window::{Algorithm, Limit, Policy, SlidingWindowLayer};
///
/// // Per-customer limits, as a configuration file would give them.
/// let per_minute: HashMap<String, Limit> = [("acme", "600/min"), ("initech", "60/min")]
///     .into_iter()
///     .map(|(customer, limit)| Ok((customer.to_owned(), limit.parse()?)))
///     .collect::<Result<_, tower_sliding_window::ConfigError>>()?;
/// let layer = SlidingWindowLayer::new(Limit::per_minute(10), |req: &http::Request<()>| {
///     req.headers().get("x-customer")?.to_str().ok().map(str::to_owned)
/// })
/// .plan(move |customer: &String| {
///     let limit = per_minute.get(customer).copied().unwrap_or(Limit::per_minute(10));
///     Policy::new(Algorithm::SlidingCounter, [limit]).expect("one limit makes a policy")
/// });
/// # Ok::<(), tower_sliding_window::ConfigError>(())
/// ```
pub struct Planned<E, K> {
    pub(crate) extractor: E,
    choose: Arc<dyn Fn(&K) -> Policy + Send + Sync>,
}

/// An extractor `E` whose requests are judged by the policy a closure picks
/// from the request of type `R` and its key of type `K`; see
/// [`SlidingWindowLayer::plan_by_request`](crate::SlidingWindowLayer::plan_by_request).
pub struct PlannedByRequest<E, R, K> {
    pub(crate) extractor: E,
    choose: Arc<ChooseByRequest<R, K>>,
}

type ChooseByRequest<R, K> = dyn Fn(&R, &K) -> Policy + Send + Sync;

/// An extractor `E` whose requests of type `R` cost what a closure says; see
/// [`SlidingWindowLayer::cost`](crate::SlidingWindowLayer::cost).
pub struct Costed<E, R> {
    pub(crate) extractor: E,
    cost: Arc<dyn Fn(&R) -> u32 + Send + Sync>,
}

/// An extractor `E` whose requests are settled at what a closure reads from
/// their response of type `Res`; see
/// [`SlidingWindowLayer::settle`](crate::SlidingWindowLayer::settle).
pub struct Settled<E, Res> {
    pub(crate) extractor: E,
    used: UnitsUsed<Res>,
}

impl<E, K> Planned<E, K> {
    pub(crate) fn new(extractor: E, choose: impl Fn(&K) -> Policy + Send + Sync + 'static) -> Self {
        let choose = Arc::new(choose);
        Self { extractor, choose }
    }
}

impl<E, R, K> PlannedByRequest<E, R, K> {
    pub(crate) fn new(
        extractor: E,
        choose: impl Fn(&R, &K) -> Policy + Send + Sync + 'static,
    ) -> Self {
        let choose = Arc::new(choose);
        Self { extractor, choose }
    }
}

impl<E, R> Costed<E, R> {
    pub(crate) fn new(extractor: E, cost: impl Fn(&R) -> u32 + Send + Sync + 'static) -> Self {
        let cost = Arc::new(cost);
        Self { extractor, cost }
    }
}

impl<E, Res> Settled<E, Res> {
    pub(crate) fn new(
        extractor: E,
        used: impl Fn(&Res) -> Option<u32> + Send + Sync + 'static,
    ) -> Self {
        let used = Arc::new(used);
        Self { extractor, used }
    }
}

/// Forwards every part of [`KeyExtractor`] that a wrapper does not read itself.
macro_rules! forward {
    (key) => {
        #[inline(always)]
        fn extract(&self, request: &R) -> Option<Self::Key> {
            self.extractor.extract(request)
        }
    };
    (policy) => {
        #[inline(always)]
        fn policy<'a>(&'a self, request: &R, key: &Self::Key, own: &'a Policy) -> Cow<'a, Policy> {
            self.extractor.policy(request, key, own)
        }
    };
    (cost) => {
        #[inline(always)]
        fn cost(&self, request: &R) -> u32 {
            self.extractor.cost(request)
        }
    };
    (settle) => {
        #[inline(always)]
        fn settle(&self) -> Option<&UnitsUsed<Res>> {
            self.extractor.settle()
        }
    };
}

impl<R, Res, E: KeyExtractor<R, Res, Key = K>, K> KeyExtractor<R, Res> for Planned<E, K> {
    type Key = K;
    forward!(key);
    forward!(cost);
    forward!(settle);

    fn policy<'a>(&'a self, _: &R, key: &K, _: &'a Policy) -> Cow<'a, Policy> {
        Cow::Owned((self.choose)(key))
    }
}

impl<R, Res, E: KeyExtractor<R, Res, Key = K>, K> KeyExtractor<R, Res>
    for PlannedByRequest<E, R, K>
{
    type Key = K;
    forward!(key);
    forward!(cost);
    forward!(settle);

    fn policy<'a>(&'a self, request: &R, key: &K, _: &'a Policy) -> Cow<'a, Policy> {
        Cow::Owned((self.choose)(request, key))
    }
}

impl<R, Res, E: KeyExtractor<R, Res>> KeyExtractor<R, Res> for Costed<E, R> {
    type Key = E::Key;
    forward!(key);
    forward!(policy);
    forward!(settle);

    fn cost(&self, request: &R) -> u32 {
        (self.cost)(request)
    }
}

impl<R, Res, E: KeyExtractor<R, Res>> KeyExtractor<R, Res> for Settled<E, Res> {
    type Key = E::Key;
    forward!(key);
    forward!(policy);
    forward!(cost);

    fn settle(&self) -> Option<&UnitsUsed<Res>> {
        Some(&self.used)
    }
}

/// `Clone` by a reference count (the closure need not be `Clone`), and a
/// `Debug` that shows the extractor wrapped.
macro_rules! shared_closure {
    ($name:ident<$($param:ident),+>, $field:ident) => {
        impl<E: Clone, $($param),+> Clone for $name<E, $($param),+> {
            fn clone(&self) -> Self {
                Self { extractor: self.extractor.clone(), $field: Arc::clone(&self.$field) }
            }
        }

        impl<E: fmt::Debug, $($param),+> fmt::Debug for $name<E, $($param),+> {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.debug_struct(stringify!($name)).field("extractor", &self.extractor).finish_non_exhaustive()
            }
        }
    };
}

shared_closure!(Planned<K>, choose);
shared_closure!(PlannedByRequest<R, K>, choose);
shared_closure!(Costed<R>, cost);
shared_closure!(Settled<Res>, used);
