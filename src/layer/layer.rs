//! The layer: configuration, cheap to clone, that wraps services.

use std::sync::Arc;
use std::time::Duration;

use http::{HeaderMap, Request, StatusCode};
use tower_layer::Layer;

use super::body::{InnerBody, WrapBody};
use super::key::MissingKey;
use super::plan::{PlanByKey, PlanByRequest, SinglePolicy};
use super::rejection::Rejection;
use super::service::{Bindings, SlidingWindow};
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
#[derive(Clone, Debug)]
pub struct SlidingWindowLayer<E, St = MemoryStore, P = SinglePolicy, M = WrapBody> {
    extractor: E,
    store: St,
    plan: P,
    config: Arc<LayerConfig>,
    /// The store's bindings, shared by every service this layer makes.
    bindings: Arc<Bindings>,
    body: M,
}

/// What every service of one layer shares, behind one `Arc`.
#[derive(Clone, Debug)]
pub(crate) struct LayerConfig {
    /// The layer's own policy, and what the layer derives from it.
    pub(crate) own: Arc<PolicyView>,
    /// Whether accepted responses carry the headers: as asked, else unless
    /// in shadow mode.
    pub(crate) headers_on_success: bool,
    headers_asked: Option<bool>,
    /// Judge and record, but let every request through.
    pub(crate) shadow: bool,
    pub(crate) decision_extension: bool,
    pub(crate) missing_key: MissingKey,
    pub(crate) rejection: Rejection,
    pub(crate) count_only: Option<CountOnly>,
}

impl LayerConfig {
    /// Whether the future of an accepted request reads this configuration
    /// once the inner service has answered: for the RateLimit headers, or
    /// to match the response for `count_only`. Otherwise the future does
    /// without it, and the request takes no reference count.
    pub(crate) fn read_after_response(&self) -> bool {
        self.headers_on_success || self.count_only.is_some()
    }
}

type ResponseMatches = dyn Fn(StatusCode, &HeaderMap) -> bool + Send + Sync;

/// The predicate of [`SlidingWindowLayer::count_only`].
#[derive(Clone)]
pub(crate) struct CountOnly(Arc<ResponseMatches>);

impl CountOnly {
    pub(crate) fn matches(&self, status: StatusCode, headers: &HeaderMap) -> bool {
        (self.0)(status, headers)
    }
}

impl std::fmt::Debug for CountOnly {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CountOnly(..)")
    }
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
            plan: SinglePolicy,
            bindings: Arc::default(),
            body: WrapBody,
            config: Arc::new(LayerConfig {
                own: Arc::new(PolicyView::new(policy)),
                headers_on_success: true,
                headers_asked: None,
                shadow: false,
                decision_extension: true,
                missing_key: MissingKey::default(),
                rejection: Rejection::default(),
                count_only: None,
            }),
        }
    }
}

impl<E, St, P, M> SlidingWindowLayer<E, St, P, M> {
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

    /// Keeps state in `store` instead of a private [`MemoryStore`].
    pub fn store<St2>(self, store: St2) -> SlidingWindowLayer<E, St2, P, M> {
        SlidingWindowLayer {
            extractor: self.extractor,
            store,
            plan: self.plan,
            config: self.config,
            bindings: Arc::default(),
            body: self.body,
        }
    }

    /// Answers in the inner service's own body type instead of a
    /// [`ResponseBody`](crate::layer::ResponseBody) around it; the layer builds its
    /// own answers (429, 503, 400) from `Bytes`, so the body type must
    /// implement `From<Bytes>`, as `axum::body::Body` does.
    ///
    /// On axum this saves an allocation per request: axum boxes every
    /// response body that is not already its own `Body`. tonic's body type
    /// has no `From<Bytes>`, so tonic servers keep the default (the compiler
    /// says `InnerBody: BodyMode<…>` is not satisfied at `.layer()`).
    ///
    /// ```
    /// # #[cfg(feature = "axum")] {
    /// use axum::{routing::get, Router};
    /// use tower_sliding_window::{extract::PeerIp, Limit, SlidingWindowLayer};
    ///
    /// let app: Router = Router::new()
    ///     .route("/", get(|| async { "hello" }))
    ///     .layer(SlidingWindowLayer::new(Limit::per_second(10), PeerIp::new()).inner_body());
    /// # }
    /// ```
    pub fn inner_body(self) -> SlidingWindowLayer<E, St, P, InnerBody> {
        SlidingWindowLayer {
            extractor: self.extractor,
            store: self.store,
            plan: self.plan,
            config: self.config,
            bindings: self.bindings,
            body: InnerBody,
        }
    }

    /// Judges each request by the policy `choose` picks for its key (plans
    /// per tier, or limits read per customer); the layer's own policy is
    /// then unused. The closure may build its policy on every request: equal
    /// values share windows. See [`Plan`](crate::Plan).
    pub fn plan<K, F>(self, choose: F) -> SlidingWindowLayer<E, St, PlanByKey<F>, M>
    where
        F: Fn(&K) -> Policy,
    {
        self.with_plan(PlanByKey(choose))
    }

    /// Like [`plan`](SlidingWindowLayer::plan), choosing from the request too.
    pub fn plan_by_request<B, K, F>(
        self,
        choose: F,
    ) -> SlidingWindowLayer<E, St, PlanByRequest<F>, M>
    where
        F: Fn(&Request<B>, &K) -> Policy,
    {
        self.with_plan(PlanByRequest(choose))
    }

    fn with_plan<P2>(self, plan: P2) -> SlidingWindowLayer<E, St, P2, M> {
        SlidingWindowLayer {
            extractor: self.extractor,
            store: self.store,
            plan,
            config: self.config,
            bindings: self.bindings,
            body: self.body,
        }
    }

    /// Whether accepted responses carry `RateLimit-Policy` and `RateLimit`
    /// (default `true`, and `false` in [shadow mode](Self::shadow_mode)).
    /// Rejections always carry them.
    pub fn rate_limit_headers(mut self, on: bool) -> Self {
        let config = Arc::make_mut(&mut self.config);
        config.headers_asked = Some(on);
        config.headers_on_success = on;
        self
    }

    /// Shadow mode, for rolling a new limit out: every request is judged
    /// and recorded exactly as enforcement would record it (a request that
    /// would be refused is not recorded), so the figures predict
    /// enforcement, but **nothing is refused**: no 429, no `Retry-After`,
    /// no gRPC error, and a store that fails lets requests through too.
    ///
    /// What would have been refused shows: a `tracing` event (feature
    /// `tracing`), the `metrics` counter
    /// `tower_sliding_window_decisions_total{outcome="shadow_rejected"}`
    /// (feature `metrics`), and the [`Decision`](crate::Decision) in the
    /// request's extensions, whose
    /// [`is_shadow`](crate::Decision::is_shadow) is true. Accepted
    /// responses carry no `RateLimit` headers, which would advertise a
    /// limit that is not enforced, unless
    /// [`rate_limit_headers(true)`](Self::rate_limit_headers) asks for them.
    pub fn shadow_mode(mut self, on: bool) -> Self {
        let config = Arc::make_mut(&mut self.config);
        config.shadow = on;
        config.headers_on_success = config.headers_asked.unwrap_or(!on);
        self
    }

    /// Whether accepted requests carry their [`Decision`](crate::Decision)
    /// in their extensions for handlers to read (default `true`). Switching
    /// it off saves an allocation per request.
    pub fn decision_extension(mut self, on: bool) -> Self {
        Arc::make_mut(&mut self.config).decision_extension = on;
        self
    }

    /// What to do with requests the extractor finds no key in (default
    /// [`MissingKey::Reject`]).
    pub fn on_missing_key(mut self, missing: MissingKey) -> Self {
        Arc::make_mut(&mut self.config).missing_key = missing;
        self
    }

    /// How refused HTTP requests are answered (default
    /// [`Rejection::plain_text`]).
    pub fn rejection(mut self, rejection: Rejection) -> Self {
        Arc::make_mut(&mut self.config).rejection = rejection;
        self
    }

    /// Counts a request only when its response matches `counts` (given the
    /// status and headers), e.g. failed logins only:
    /// `.count_only(|status, _| status == StatusCode::UNAUTHORIZED)`.
    ///
    /// Every request is still judged first, so a key over its limit is
    /// refused before reaching the service; it is recorded only after its
    /// response came back and matched. That split is **not atomic**: requests
    /// in flight at the same time are all judged against the same count, so
    /// up to one more than the limit per concurrent in-flight request can get
    /// through before the first of them is recorded (a client sending 10 at
    /// once against a limit of 3 failures may see all 10 answered). Records
    /// beyond the limit are dropped, so the count itself never exceeds it.
    ///
    /// Recording adds one store call to matching responses, which are handed
    /// on once it is done; if the response future is dropped meanwhile (the
    /// client went away), the record may be lost. The predicate sees the
    /// response as the inner service made it, plus the rate-limit headers;
    /// gRPC failures travel as HTTP 200 with the status in trailers, which it
    /// cannot see. `RateLimit` on a counted response reflects the count with
    /// this request in it; on others, without.
    pub fn count_only<F>(mut self, counts: F) -> Self
    where
        F: Fn(StatusCode, &HeaderMap) -> bool + Send + Sync + 'static,
    {
        Arc::make_mut(&mut self.config).count_only = Some(CountOnly(Arc::new(counts)));
        self
    }

    /// The policy requests are judged by (unless a plan picks another).
    pub fn policy(&self) -> &Policy {
        &self.config.own.policy
    }

    /// The store holding the windows.
    pub fn store_ref(&self) -> &St {
        &self.store
    }

    fn replace_policy(mut self, policy: Policy) -> Self {
        Arc::make_mut(&mut self.config).own = Arc::new(PolicyView::new(policy));
        self.bindings = Arc::default();
        self
    }
}

impl<S, E: Clone, St: Clone, P: Clone, M> Layer<S> for SlidingWindowLayer<E, St, P, M> {
    type Service = SlidingWindow<S, E, St, P, M>;

    fn layer(&self, inner: S) -> Self::Service {
        SlidingWindow::new(
            inner,
            self.extractor.clone(),
            self.store.clone(),
            self.plan.clone(),
            Arc::clone(&self.config),
            Arc::clone(&self.bindings),
        )
    }
}
