//! The layer: configuration, cheap to clone, that wraps services.

use std::sync::Arc;
use std::time::Duration;

use tower_layer::Layer;

use super::body::{InnerBody, RefuseWithError, WrapBody};
use super::config::LayerConfig;
use super::key::MissingKey;
use super::reader::{Costed, Planned, PlannedByRequest, Settled};
use super::rejection::Rejection;
use super::response::QuotaUnit;
use super::service::{
    Bindings, Shared, SlidingWindow, SlidingWindowRefuseWithError, SlidingWindowWrapBody,
};
use super::view::PolicyView;
use crate::algorithm::Algorithm;
use crate::limit::Limit;
use crate::policy::Policy;
use crate::store::MemoryStore;

/// Applies sliding-window rate limiting to a service; see the
/// [crate docs](crate) for a full example.
///
/// Built from a first [`Limit`] and a key extractor, then refined:
///
/// ```
/// use std::time::Duration;
/// use tower_sliding_window::{Algorithm, Limit, SlidingWindowLayer};
///
/// let layer = SlidingWindowLayer::new(Limit::per_second(10), |req: &http::Request<()>| {
///     req.headers().get("x-api-key").and_then(|v| v.to_str().ok()).map(str::to_owned)
/// })
/// .limit(Limit::per_minute(100)) // judged together with 10/s, all-or-nothing
/// .algorithm(Algorithm::SlidingLog);
/// assert_eq!(layer.policy().limits().len(), 2);
/// ```
///
/// Clones share one [`Policy`] and one store, so cloning the layer (as
/// `axum::Router::layer` does for each route) never opens a new window. A
/// layer built separately with an equal policy counts together with this
/// one if it is given the same store, and apart on its own default
/// [`MemoryStore`] (see [`Store`](crate::Store)).
///
/// `E` reads each request: a [`KeyExtractor`](crate::KeyExtractor), which
/// [`plan`](Self::plan), [`cost`](Self::cost) and [`settle`](Self::settle)
/// wrap. `St` is the store. `M` is the behaviour, which picks the service:
/// [`InnerBody`] (the default, [`SlidingWindow`]), [`WrapBody`]
/// ([`SlidingWindowWrapBody`]) or [`RefuseWithError`]
/// ([`SlidingWindowRefuseWithError`]).
#[derive(Clone, Debug)]
pub struct SlidingWindowLayer<E, St = MemoryStore, M = InnerBody> {
    extractor: E,
    store: St,
    pub(super) config: Arc<LayerConfig>,
    /// The store's bindings, shared by every service this layer makes.
    bindings: Arc<Bindings>,
    behaviour: M,
}

impl<E> SlidingWindowLayer<E> {
    /// A layer allowing `limit` per key, keys taken from requests by
    /// `extractor`, counted by [`Algorithm::SlidingCounter`] in a new
    /// [`MemoryStore`] on the system clock.
    pub fn new(limit: Limit, extractor: E) -> Self {
        let policy = match Policy::new(Algorithm::default(), [limit]) {
            Ok(policy) => policy,
            Err(err) => unreachable!("one valid limit always makes a policy: {err}"),
        };
        Self::with_policy(policy, extractor)
    }

    /// A layer judging by a ready-made `policy` (see [`Policy::new`] for the
    /// fallible way to build one from a list).
    pub fn with_policy(policy: Policy, extractor: E) -> Self {
        Self {
            extractor,
            store: MemoryStore::new(),
            bindings: Arc::default(),
            behaviour: InnerBody,
            config: Arc::new(LayerConfig {
                own: Arc::new(PolicyView::own(policy, QuotaUnit::default())),
                quota_unit: QuotaUnit::default(),
                headers_on_success: true,
                headers_asked: None,
                shadow: false,
                decision_extension: false,
                extension_asked: None,
                missing_key: MissingKey::default(),
                rejection: Rejection::default(),
                count_only: None,
                wait: None,
                in_flight_retry: crate::algorithm::leases::RETRY_AFTER,
            }),
        }
    }

    /// A layer with no rate limit that lets each key have at most `max`
    /// requests in flight at once (see
    /// [`in_flight`](SlidingWindowLayer::in_flight)); add rate limits with
    /// [`limit`](SlidingWindowLayer::limit).
    ///
    /// ```
    /// use tower_sliding_window::{extract::HeaderKey, SlidingWindowLayer};
    ///
    /// // At most 4 expensive queries per API key at a time.
    /// let layer = SlidingWindowLayer::in_flight_only(4, HeaderKey::new("x-api-key"));
    /// assert_eq!(layer.policy().in_flight(), Some(4));
    /// assert!(layer.policy().limits().is_empty());
    /// ```
    ///
    /// # Panics
    ///
    /// If `max` is 0, which would refuse every request.
    pub fn in_flight_only(max: u32, extractor: E) -> Self {
        Self::with_policy(Policy::in_flight_only(max), extractor)
    }
}

impl<E, St, M> SlidingWindowLayer<E, St, M> {
    /// Adds another limit to the policy; a request must fit every limit and
    /// is counted in all of them or in none.
    ///
    /// This makes a new policy value, with windows of its own.
    ///
    /// # Panics
    ///
    /// If the policy would hold more than [`Policy::MAX_LIMITS`] limits; use
    /// [`Policy::new`] and [`with_policy`](SlidingWindowLayer::with_policy)
    /// to get an error instead.
    pub fn limit(self, limit: Limit) -> Self {
        let policy = self.policy();
        let limits = policy.limits().iter().copied().chain([limit]);
        match policy.with_rules(policy.algorithm(), limits) {
            Ok(policy) => self.replace_policy(policy),
            Err(err) => panic!("cannot add limit: {err}"),
        }
    }

    /// Counts with `algorithm` (default [`Algorithm::SlidingCounter`]).
    ///
    /// This makes a new policy value, with windows of its own.
    pub fn algorithm(self, algorithm: Algorithm) -> Self {
        let limits = self.policy().limits().to_vec();
        match self.policy().with_rules(algorithm, limits) {
            Ok(policy) => self.replace_policy(policy),
            Err(err) => unreachable!("the limits came from a valid policy: {err}"),
        }
    }

    /// Names the policy (see [`Policy::named`]): its label in metrics and
    /// logs, and part of its value, so that layers with equal limits on one
    /// shared store (per-route limits, say) keep windows of their own.
    pub fn named(self, name: impl Into<String>) -> Self {
        let policy = self.policy().clone().named(name);
        self.replace_policy(policy)
    }

    /// Shuts a key out for `penalty` once it is refused, against abusive
    /// clients that would otherwise get straight back in as the window
    /// slides (see [`Policy::with_penalty`]): that refusal answers
    /// `Retry-After` with the whole penalty, and every request during it is
    /// refused with the time left, records nothing and does not extend it.
    /// Refusals during a penalty have [`Origin::Penalty`](crate::Origin::Penalty).
    pub fn penalty(self, penalty: Duration) -> Self {
        let policy = self.policy().clone().with_penalty(penalty);
        self.replace_policy(policy)
    }

    /// Lets a key have at most `max` requests admitted and not yet over at
    /// once, beside the rate limits, judged with them all-or-nothing (see
    /// [`Policy::with_in_flight`]). A request refused for it gets a 429
    /// with [`Origin::InFlight`](crate::Origin::InFlight) (in error mode, a
    /// [`RateLimited`](crate::layer::RateLimited)) and a `Retry-After` of
    /// one second, as no store can know when a slot frees (see
    /// [`in_flight_retry_after`](SlidingWindowLayer::in_flight_retry_after)).
    /// `RateLimit-Policy` announces the cap in the draft's
    /// `concurrent-requests` unit.
    ///
    /// A request's slot is freed when its response body ends, fails or is
    /// dropped, so a stream counts for as long as it streams, in either
    /// HTTP body. In error mode, whose responses pass through as they are,
    /// it is freed as soon as the inner service's future resolves. An
    /// upgraded connection (101) frees its slot
    /// with the response. A cancelled request, an inner error and a panic
    /// free it too. [`wait_up_to`](SlidingWindowLayer::wait_up_to) waits
    /// for a slot, asking again every 25 to 50 ms (the memory store wakes
    /// it as soon as a slot frees).
    ///
    /// # Panics
    ///
    /// If `max` is 0, which would refuse every request.
    pub fn in_flight(self, max: u32) -> Self {
        let policy = self.policy().clone().with_in_flight(max);
        self.replace_policy(policy)
    }

    /// The `Retry-After` a refusal for requests in flight names (default
    /// one second, the header's smallest unit): how soon a client should
    /// expect a slot to free on this endpoint.
    pub fn in_flight_retry_after(mut self, retry: Duration) -> Self {
        Arc::make_mut(&mut self.config).in_flight_retry = retry;
        self
    }

    /// Keeps state in `store` instead of a private [`MemoryStore`].
    pub fn store<St2>(self, store: St2) -> SlidingWindowLayer<E, St2, M> {
        SlidingWindowLayer {
            extractor: self.extractor,
            store,
            config: self.config,
            bindings: Arc::default(),
            behaviour: self.behaviour,
        }
    }

    /// Refused calls fail with an error instead of an HTTP answer, for a
    /// service of any request type: a job consumer, a client of another
    /// service, a tonic or HTTP client.
    ///
    /// The service's error is then `tower::BoxError`, as from tower's
    /// `timeout` and `load_shed`: a refused call fails with
    /// [`RateLimited`](crate::RateLimited) (with the exact
    /// [`retry_after`](crate::RateLimited::retry_after) and the
    /// [`Decision`](crate::Decision)), a keyless one with
    /// [`MissingKeyError`](crate::MissingKeyError) unless
    /// [`MissingKey::Allow`], a store failure the failure policy does not
    /// let through with the [`StoreError`](crate::StoreError), and the
    /// inner service's own errors pass through unchanged, to be found with
    /// `downcast_ref`. The HTTP options (headers, rejection style, body
    /// type, decision extension, `count_only`) are not offered after this
    /// call, and any set before it is ignored.
    ///
    /// ```
    /// use tower::{service_fn, BoxError, Service, ServiceBuilder, ServiceExt};
    /// use tower_sliding_window::{Limit, RateLimited, SlidingWindowLayer};
    ///
    /// /// A job for the background workers: tenants share them fairly.
    /// struct Job {
    ///     tenant: String,
    ///     pages: u32,
    /// }
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let per_tenant = SlidingWindowLayer::new(Limit::per_minute(100), |job: &Job| Some(job.tenant.clone()))
    ///     .cost(|job: &Job| job.pages) // pages per minute, not jobs
    ///     .refuse_with_error();
    /// let mut worker = ServiceBuilder::new()
    ///     .layer(per_tenant)
    ///     .service(service_fn(|job: Job| async move { Ok::<_, BoxError>(job.pages) }));
    ///
    /// let big = Job { tenant: "acme".into(), pages: 80 };
    /// assert_eq!(worker.ready().await.unwrap().call(big).await.unwrap(), 80);
    /// let another = Job { tenant: "acme".into(), pages: 30 };
    /// let error = worker.ready().await.unwrap().call(another).await.unwrap_err();
    /// assert!(error.is::<RateLimited>()); // 80 + 30 pages is over 100 a minute
    /// # }
    /// ```
    pub fn refuse_with_error(self) -> SlidingWindowLayer<E, St, RefuseWithError> {
        self.with_behaviour(RefuseWithError)
    }

    /// A refused request whose turn comes within `bound` of its arrival
    /// waits for it, on tokio's timer, and is judged again (and again,
    /// while its turn stays within the bound); any other is refused at
    /// once. Refusals no wait can cure (a cost above a limit's `max`, a
    /// full store) and store failures are never waited on. For outbound
    /// calls held to a provider's limits, where "not yet" should mean
    /// "in a moment", and for servers that would rather delay a burst than
    /// refuse it (as nginx's `limit_req … delay`).
    ///
    /// A waiting request holds its own resources (its connection, its
    /// memory, its caller) for up to `bound`, though none of the inner
    /// service's capacity (a place in a `Buffer`, a concurrency permit, taken only
    /// once it may pass), and a waiting client is not told why it waits:
    /// keep the bound short where requests are cheap to send, and below
    /// the deadlines callers set (a gRPC client's `grpc-timeout` runs on
    /// while its call waits). Shadow mode never waits. A request that
    /// waits is judged each time as a new one: if others take the turn
    /// first, it waits again within the same bound, so it is not served in
    /// order of arrival. How long requests waited shows in the `metrics`
    /// histogram `tower_sliding_window_wait_seconds{policy}` (feature
    /// `metrics`) and a `tracing` event (feature `tracing`).
    ///
    /// Of stacked layers, let only the outermost wait. An outer layer
    /// counts a call as it lets it through; an inner one that then holds
    /// the call back sends it later than the outer one counted it, and a
    /// provider that counts calls as they arrive can see more than the
    /// outer limit. `examples/outbound.rs` has the inner layer refuse at
    /// once, the outer give the call back, and the caller wait the turn.
    ///
    /// Waiting needs a tokio runtime with its timer, as `#[tokio::main]`
    /// builds: polled outside any tokio runtime, the layer refuses at once
    /// (with a `tracing` warning, once), and in a runtime built without
    /// `enable_time` tokio panics at the first wait. A call let through
    /// after waiting whose inner service then fails to get ready keeps its
    /// reservation. The store judges on its own clock: under tokio's paused
    /// time in tests, give the store a [`TokioClock`](crate::TokioClock)
    /// so that the sleeps and the store see one time.
    pub fn wait_up_to(mut self, bound: Duration) -> Self {
        Arc::make_mut(&mut self.config).wait = Some(bound);
        self
    }

    /// Judges each request by the policy `choose` picks for its key (plans
    /// per tier, or limits read per customer); the layer's own policy is
    /// then unused. The closure may build its policy on every request: equal
    /// values share windows. See [`Planned`](crate::layer::Planned).
    pub fn plan<K, F>(self, choose: F) -> SlidingWindowLayer<Planned<E, K>, St, M>
    where
        F: Fn(&K) -> Policy + Send + Sync + 'static,
    {
        self.with_extractor(|extractor| Planned::new(extractor, choose))
    }

    /// Like [`plan`](SlidingWindowLayer::plan), choosing from the request
    /// (of type `R`) too.
    pub fn plan_by_request<R, K, F>(
        self,
        choose: F,
    ) -> SlidingWindowLayer<PlannedByRequest<E, R, K>, St, M>
    where
        F: Fn(&R, &K) -> Policy + Send + Sync + 'static,
    {
        self.with_extractor(|extractor| PlannedByRequest::new(extractor, choose))
    }

    /// Shadow mode, for rolling a new limit out: every request is judged
    /// and recorded exactly as enforcement would record it (a request that
    /// would be refused is not recorded), so the figures predict
    /// enforcement, but **nothing is refused**: no 429, no `Retry-After`,
    /// no gRPC error, no error in error mode, no wait, and a store that
    /// fails lets requests through too.
    ///
    /// What would have been refused shows: a `tracing` event (feature
    /// `tracing`), the `metrics` counter
    /// `tower_sliding_window_decisions_total{outcome="shadow_rejected"}`
    /// (feature `metrics`), and, in the HTTP modes, the
    /// [`Decision`](crate::Decision) in the request's extensions, whose
    /// [`is_shadow`](crate::Decision::is_shadow) is true. Accepted HTTP
    /// responses carry no `RateLimit` headers, which would advertise a
    /// limit that is not enforced, unless
    /// [`rate_limit_headers(true)`](Self::rate_limit_headers) asks for them.
    pub fn shadow_mode(mut self, on: bool) -> Self {
        let config = Arc::make_mut(&mut self.config);
        config.shadow = on;
        config.headers_on_success = config.headers_asked.unwrap_or(!on);
        config.decision_extension = config.extension_asked.unwrap_or(on);
        self
    }

    /// What to do with requests the extractor finds no key in (default
    /// [`MissingKey::Reject`]).
    pub fn on_missing_key(mut self, missing: MissingKey) -> Self {
        Arc::make_mut(&mut self.config).missing_key = missing;
        self
    }

    /// The policy requests are judged by (unless a plan picks another).
    pub fn policy(&self) -> &Policy {
        &self.config.own.policy
    }

    /// Charges each request `cost(request)` units instead of one: tokens,
    /// bytes, query complexity. A request is accepted iff every limit
    /// still has room for all its units, and records them all or none. A
    /// cost of 0 always passes (even for a spent key, or one serving a
    /// penalty) and records nothing; a cost larger than any one limit's
    /// `max` can never pass and is answered `413 Content Too Large` (gRPC
    /// `INVALID_ARGUMENT`) with `RateLimit-Policy` but no `Retry-After`,
    /// whatever the rejection style (in error mode, a
    /// [`RateLimited`](crate::RateLimited) of origin
    /// [`TooCostly`](crate::Origin::TooCostly), never waited on). The
    /// `RateLimit` header's remaining quota is in units.
    ///
    /// A cost read from the request is chosen by the client: clamp it
    /// (`.clamp(1, most)`), or a client asking for 0 passes a spent limit.
    /// The closure names the request type: any type in error mode,
    /// `http::Request<axum::body::Body>` on axum,
    /// `http::Request<tonic::body::Body>` on tonic. The sliding log keeps one stamp
    /// per unit (8 bytes each, up to its largest limit per key): for limits
    /// in the thousands of units, the sliding counter keeps two integers
    /// whatever the cost.
    pub fn cost<R, F>(self, cost: F) -> SlidingWindowLayer<Costed<E, R>, St, M>
    where
        F: Fn(&R) -> u32 + Send + Sync + 'static,
    {
        self.with_extractor(|extractor| Costed::new(extractor, cost))
    }

    /// Settles each accepted request once its response is known:
    /// `settle(response)` gives the units it really used (`None` keeps its
    /// reservation). What it did not use is given back; an excess is
    /// charged even past the limit, as far as a full window, so the key is
    /// refused until that drains. A settle that changes nothing costs no
    /// store call; one that does costs one (in Redis one script call,
    /// atomic), made before the response is handed on. The response's
    /// `RateLimit` header then shows the quota the admission left, moved by
    /// the difference: exact unless other requests for the key came and
    /// went meanwhile.
    ///
    /// It sees the response's head as the inner service made it: usage
    /// known only at the end of a streamed body, or in gRPC trailers, has
    /// to be settled another way. The reservation stands when the response
    /// future is dropped before the response (the client went away), when
    /// the inner service answers `Err`, when the store fails to settle
    /// (logged as a `tracing` warning), and for requests a failure policy
    /// let through. The closure names the inner service's response type:
    /// any type in error mode (an outbound client settles from the
    /// provider's reported usage), `.settle(|res: &http::Response<Body>| …)`
    /// on axum.
    pub fn settle<Res, F>(self, settle: F) -> SlidingWindowLayer<Settled<E, Res>, St, M>
    where
        F: Fn(&Res) -> Option<u32> + Send + Sync + 'static,
    {
        self.with_extractor(|extractor| Settled::new(extractor, settle))
    }
}

/// The builders' plumbing: a new policy, extractor or behaviour.
impl<E, St, M> SlidingWindowLayer<E, St, M> {
    fn replace_policy(mut self, policy: Policy) -> Self {
        let config = Arc::make_mut(&mut self.config);
        config.own = Arc::new(PolicyView::own(policy, config.quota_unit));
        self.bindings = Arc::default();
        self
    }

    fn with_extractor<E2>(self, wrap: impl FnOnce(E) -> E2) -> SlidingWindowLayer<E2, St, M> {
        SlidingWindowLayer {
            extractor: wrap(self.extractor),
            store: self.store,
            config: self.config,
            bindings: self.bindings,
            behaviour: self.behaviour,
        }
    }

    pub(super) fn with_behaviour<M2>(self, behaviour: M2) -> SlidingWindowLayer<E, St, M2> {
        SlidingWindowLayer {
            extractor: self.extractor,
            store: self.store,
            config: self.config,
            bindings: self.bindings,
            behaviour,
        }
    }
}

impl<E: Clone, St: Clone, M> SlidingWindowLayer<E, St, M> {
    /// What the services this layer makes share.
    fn shared(&self) -> Arc<Shared<E, St>> {
        Arc::new(Shared {
            extractor: self.extractor.clone(),
            store: self.store.clone(),
            config: Arc::clone(&self.config),
            bindings: Arc::clone(&self.bindings),
        })
    }
}

impl<S, E: Clone, St: Clone> Layer<S> for SlidingWindowLayer<E, St, InnerBody> {
    type Service = SlidingWindow<S, E, St>;

    fn layer(&self, inner: S) -> Self::Service {
        SlidingWindow::new(inner, self.shared())
    }
}

impl<S, E: Clone, St: Clone> Layer<S> for SlidingWindowLayer<E, St, WrapBody> {
    type Service = SlidingWindowWrapBody<S, E, St>;

    fn layer(&self, inner: S) -> Self::Service {
        SlidingWindowWrapBody::new(inner, self.shared())
    }
}

impl<S, E: Clone, St: Clone> Layer<S> for SlidingWindowLayer<E, St, RefuseWithError> {
    type Service = SlidingWindowRefuseWithError<S, E, St>;

    fn layer(&self, inner: S) -> Self::Service {
        SlidingWindowRefuseWithError::new(inner, self.shared())
    }
}
