//! Choosing the policy per request: one for everyone, or plans per key.

use std::borrow::Cow;
use std::sync::Arc;

use super::weights::shared_closure;
use crate::policy::Policy;

/// Picks the [`Policy`] a request is judged by, from its key (and the
/// request, if need be). Lets one layer serve every tier of a service:
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
pub trait Plan<R, K> {
    /// The policy for this request; `default` is the layer's own, and
    /// returning it borrowed is the cheapest choice.
    fn policy<'a>(&'a self, request: &R, key: &K, default: &'a Policy) -> Cow<'a, Policy>;
}

/// Every request is judged by the layer's own policy.
#[derive(Clone, Copy, Debug, Default)]
pub struct SinglePolicy;

impl<R, K> Plan<R, K> for SinglePolicy {
    fn policy<'a>(&'a self, _: &R, _: &K, default: &'a Policy) -> Cow<'a, Policy> {
        Cow::Borrowed(default)
    }
}

/// Plans chosen by the key of type `K`, from a shared closure; see
/// [`SlidingWindowLayer::plan`](crate::SlidingWindowLayer::plan).
pub struct PlanByKey<K>(pub(crate) Arc<dyn Fn(&K) -> Policy + Send + Sync>);

impl<R, K> Plan<R, K> for PlanByKey<K> {
    fn policy<'a>(&'a self, _: &R, key: &K, _: &'a Policy) -> Cow<'a, Policy> {
        Cow::Owned((self.0)(key))
    }
}

/// Plans chosen from the request of type `R` and its key of type `K`, from
/// a shared closure; see
/// [`SlidingWindowLayer::plan_by_request`](crate::SlidingWindowLayer::plan_by_request).
pub struct PlanByRequest<R, K>(pub(crate) Arc<ChooseByRequest<R, K>>);

type ChooseByRequest<R, K> = dyn Fn(&R, &K) -> Policy + Send + Sync;

impl<R, K> Plan<R, K> for PlanByRequest<R, K> {
    fn policy<'a>(&'a self, request: &R, key: &K, _: &'a Policy) -> Cow<'a, Policy> {
        Cow::Owned((self.0)(request, key))
    }
}

shared_closure!(PlanByKey<K>);
shared_closure!(PlanByRequest<R, K>);
