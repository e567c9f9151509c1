//! The service: extracts the key, asks the store, and answers or passes on.

use std::any::Any;
use std::borrow::Cow;
use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll, Waker};

use http::{Request, Response};
use tower::Service;

use super::body::{BodyMode, HttpMode, WrapBody};
use super::config::{Chosen, LayerConfig};
use super::ending::Ending;
use super::future::{After, ResponseFuture, Settler};
use super::key::{KeyExtractor, MissingKey};
use super::plan::{Plan, SinglePolicy};
use super::slot::Hold;
use super::view::PolicyView;
use super::wait::Admission;
use super::weights::{Weigh, Weights};
use crate::algorithm::Decision;
use crate::store::{Store, StoreError, StoreErrorKind};

/// Rate-limits requests to the inner service `S`; built by
/// [`SlidingWindowLayer`](crate::SlidingWindowLayer).
///
/// `poll_ready` only asks the inner service: the decision is made when the
/// request arrives, so the service never parks a caller waiting for quota
/// and axum can treat it as always ready (a call under
/// [`wait_up_to`](crate::SlidingWindowLayer::wait_up_to) waits in its own
/// future). Clones share the layer's store and policy.
///
/// It is a `Service<http::Request<B>>` in the HTTP modes and a
/// `Service<R>` for any `R` in [error mode](crate::SlidingWindowLayer::refuse_with_error).
/// Its type can be written out, for a struct field, but for a closure
/// key extractor: key by a named extractor, or by a function cast to its
/// pointer type (`fn(&Job) -> Option<String>`).
///
/// ```
/// use tower::util::BoxCloneService;
/// use tower_sliding_window::extract::HeaderKey;
/// use tower_sliding_window::layer::{CostFn, PlanByKey, WrapBody, Weights};
/// use tower_sliding_window::{MemoryStore, SlidingWindow};
///
/// type Inner = BoxCloneService<http::Request<String>, http::Response<String>, std::convert::Infallible>;
///
/// struct Api {
///     // Per API key, a plan per customer, requests costed by their body.
///     limited: SlidingWindow<Inner, HeaderKey, MemoryStore, PlanByKey<String>, WrapBody, Weights<CostFn<http::Request<String>>>>,
/// }
/// ```
#[derive(Debug)]
pub struct SlidingWindow<S, E, St, P = SinglePolicy, M = WrapBody, W = Weights> {
    pub(super) inner: S,
    pub(super) shared: Arc<Shared<E, St, P, W>>,
    body: PhantomData<fn() -> M>,
}

/// What the clones of one service share. axum clones the service for every
/// request (its routes are boxed, cloneable services), so everything but
/// the inner service sits behind one reference count: a clone costs one
/// increment (and a decrement when dropped). The price: the service is
/// `Send` only if its extractor and plan are also `Sync`, as an `Arc` asks.
#[derive(Debug)]
pub(super) struct Shared<E, St, P, W> {
    pub(super) extractor: E,
    pub(super) store: St,
    plan: P,
    pub(super) weights: W,
    pub(super) config: Arc<LayerConfig>,
    bindings: Arc<Bindings>,
}

/// The layer's binding of its own policy to its store, shared by the
/// services it makes, so that a router applying the layer anew for each
/// request binds nothing anew. A policy a plan chooses is bound for its
/// request alone: per-tenant limits then need no cache that grows or
/// thrashes, and binding is cheap in every store.
#[derive(Debug, Default)]
pub(crate) struct Bindings {
    /// The binding's type depends on the key type, which is known only
    /// once a request arrives.
    own: OnceLock<Box<dyn Any + Send + Sync>>,
}

impl<E, St, P, W> Shared<E, St, P, W> {
    /// The binding of the layer's own policy for keys of type `K`.
    #[inline]
    fn own_binding<K>(&self) -> Cow<'_, St::Binding>
    where
        St: Store<K>,
    {
        let own = self
            .bindings
            .own
            .get_or_init(|| Box::new(self.store.bind(&self.config.own.policy)));
        match own.downcast_ref::<St::Binding>() {
            Some(binding) => Cow::Borrowed(binding),
            // An extractor with another key type for another request type.
            None => Cow::Owned(self.store.bind(&self.config.own.policy)),
        }
    }
}

impl<S: Clone, E, St, P, M, W> Clone for SlidingWindow<S, E, St, P, M, W> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
            shared: Arc::clone(&self.shared),
            body: PhantomData,
        }
    }
}

impl<S, E, St, P, M, W> SlidingWindow<S, E, St, P, M, W> {
    pub(crate) fn new(
        inner: S,
        extractor: E,
        store: St,
        plan: P,
        weights: W,
        config: Arc<LayerConfig>,
        bindings: Arc<Bindings>,
    ) -> Self {
        Self {
            inner,
            shared: Arc::new(Shared {
                extractor,
                store,
                plan,
                weights,
                config,
                bindings,
            }),
            body: PhantomData,
        }
    }

    /// The inner service.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// The inner service, mutably.
    pub fn get_mut(&mut self) -> &mut S {
        &mut self.inner
    }

    /// The inner service, unwrapped.
    pub fn into_inner(self) -> S {
        self.inner
    }
}

/// A request's admission, and what follows it: settling once its response
/// is in, freeing its in-flight slot once the response is over.
type Reservation<F, Res> = (Admission<F>, After<Res, F>);

impl<E, St, P, W> Shared<E, St, P, W> {
    /// The policy `request` is judged by, bound to the store, and which it
    /// is to the layer.
    #[inline(always)]
    pub(super) fn choose<R>(&self, request: &R, key: &E::Key) -> (Cow<'_, St::Binding>, Chosen)
    where
        E: KeyExtractor<R>,
        St: Store<E::Key>,
        P: Plan<R, E::Key>,
    {
        let config = &self.config;
        let own = &config.own.policy;
        match self.plan.policy(request, key, own) {
            // The layer's own policy, as every request under no plan and
            // most under one get: known by its address before its value,
            // whether the plan lent it or built it anew.
            policy if std::ptr::eq(&*policy, own) || *policy == *own => {
                (self.own_binding::<E::Key>(), Chosen::Layer)
            }
            policy => {
                let binding = Cow::Owned(self.store.bind(&policy));
                let view = PolicyView::planned(policy.into_owned(), config.quota_unit);
                (binding, Chosen::Plan(Box::new(view)))
            }
        }
    }

    /// Asks the store to admit a request of `cost` units for `key`: its
    /// admission (waiting if the layer waits); if `used` reads what a
    /// response used, what settles the request once its response is in;
    /// and if the policy is `capped`, what frees its slot.
    #[inline(always)]
    pub(super) fn reserve<K, Res, U>(
        &self,
        key: K,
        binding: Cow<'_, St::Binding>,
        cost: u32,
        capped: bool,
        used: Option<U>,
    ) -> Reservation<St::Future, Res>
    where
        K: Clone + Send + 'static,
        St: Store<K>,
        U: FnOnce(&Res) -> Option<u32> + Send + 'static,
    {
        let config = &self.config;
        let waits = config.waits();
        let hold = if capped {
            let (store, key) = (self.store.clone(), key.clone());
            let binding = binding.clone().into_owned();
            Hold::Pending(Box::new(move |admitted: &Decision| {
                store.release_bound(key, &binding, admitted)
            }))
        } else {
            Hold::None
        };
        if used.is_none() && waits.is_none() {
            let check = self.store.decide_cost_bound(key, &binding, cost);
            return (
                Admission::once(check),
                After {
                    settler: None,
                    hold,
                },
            );
        }
        let binding = binding.into_owned();
        let check = self.store.decide_cost_bound(key.clone(), &binding, cost);
        let admission = match waits {
            Some(bound) => {
                let asked = (self.store.clone(), key.clone(), binding.clone());
                let (store, key, binding) = asked.clone();
                let again = move || store.decide_cost_bound(key.clone(), &binding, cost);
                let (store, key, binding) = asked;
                let signal = move || store.slot_freed(&key, &binding);
                Admission::waiting(check, Box::new(again), Box::new(signal), bound)
            }
            None => Admission::once(check),
        };
        let settler = used.map(|used| {
            let store = self.store.clone();
            let settle: Settler<Res, St::Future> =
                Box::new(move |response: &Res, admitted: &Decision| {
                    let used = used(response)?;
                    admitted
                        .needs_settling(cost, used)
                        .then(|| store.settle_bound(key, &binding, admitted, cost, used))
                });
            settle
        });
        (admission, After { settler, hold })
    }
}

impl<S, E, St, P, M, W, B, ResB> Service<Request<B>> for SlidingWindow<S, E, St, P, M, W>
where
    S: Service<Request<B>, Response = Response<ResB>> + Clone,
    E: KeyExtractor<Request<B>>,
    E::Key: Clone + Send + 'static,
    St: Store<E::Key>,
    P: Plan<Request<B>, E::Key>,
    M: HttpMode + BodyMode<ResB>,
    W: Weigh<Request<B>, Response<ResB>> + Clone + Send + 'static,
{
    type Response = Response<M::Body>;
    type Error = S::Error;
    type Future = ResponseFuture<St::Future, S, Request<B>, M>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    #[inline]
    fn call(&mut self, request: Request<B>) -> Self::Future {
        let shared = &*self.shared;
        let config = &shared.config;
        let used = (config.count_only.is_some() || shared.weights.settles()).then(|| {
            let (config, weights) = (Arc::clone(config), shared.weights.clone());
            // `count_only`: a response that does not match gives its unit back.
            move |response: &Response<ResB>| match &config.count_only {
                Some(counts) if !counts.matches(response.status(), response.headers()) => Some(0),
                _ => weights.settle(response),
            }
        });
        self.limit(request, used)
    }
}

impl<S, E, St, P, M, W> SlidingWindow<S, E, St, P, M, W> {
    /// Every mode's call: the key, the policy, the store's decision, and
    /// the request passed on or answered; `used` reads what a response
    /// used, where the request is to be settled.
    #[inline(always)]
    pub(super) fn limit<R, U>(
        &mut self,
        request: R,
        used: Option<U>,
    ) -> ResponseFuture<St::Future, S, R, M>
    where
        S: Service<R> + Clone,
        E: KeyExtractor<R>,
        E::Key: Clone + Send + 'static,
        St: Store<E::Key>,
        P: Plan<R, E::Key>,
        M: Ending<R, S>,
        W: Weigh<R, S::Response>,
        U: FnOnce(&S::Response) -> Option<u32> + Send + 'static,
    {
        let shared = &*self.shared;
        let config = &shared.config;
        let Some(key) = shared.extractor.extract(&request) else {
            return self.keyless(request);
        };
        let (binding, chosen) = shared.choose(&request, &key);
        let capped = chosen.get(config).policy.in_flight().is_some();
        if capped && !shared.store.holds_slots() {
            return self.no_slots::<R, E::Key>(request, chosen);
        }
        let cost = shared.weights.cost(&request);
        let (mut check, after) = shared.reserve(key, binding, cost, capped, used);
        // A store that answers at once (the memory store always does) lets
        // the request go straight on to the service that was polled ready.
        let mut cx = Context::from_waker(Waker::noop());
        let inner = &mut self.inner;
        match Pin::new(&mut check).poll(&mut cx) {
            Poll::Ready(outcome) => {
                ResponseFuture::decided(outcome, inner, request, config, chosen, after)
            }
            Poll::Pending => self.pending(check, request, chosen, after),
        }
    }

    /// A request that carries no key: passed on, or answered, as the layer
    /// was told.
    #[cold]
    fn keyless<R, F>(&mut self, request: R) -> ResponseFuture<F, S, R, M>
    where
        S: Service<R>,
        M: Ending<R, S>,
    {
        let config = &self.shared.config;
        match config.missing_key {
            MissingKey::Allow => ResponseFuture::pass(self.inner.call(request)),
            MissingKey::Reject => ResponseFuture::no_key(&request, config),
        }
    }

    /// A request whose store has not answered yet: its future waits for the
    /// answer, then for the inner service (see `for_later`).
    fn pending<R, F>(
        &mut self,
        check: Admission<F>,
        request: R,
        chosen: Chosen,
        after: After<S::Response, F>,
    ) -> ResponseFuture<F, S, R, M>
    where
        S: Service<R> + Clone,
        M: Ending<R, S>,
    {
        let config = &self.shared.config;
        let inner = for_later(&mut self.inner, config.waits().is_some());
        ResponseFuture::check(check, inner, request, Arc::clone(config), chosen, after)
    }
}

impl<S, E, St, P, M, W> SlidingWindow<S, E, St, P, M, W> {
    /// What a layer answers when its policy caps requests in flight and its
    /// store keeps no caps: an error every request shows, never a cap that
    /// silently lets everything through.
    #[cold]
    fn no_slots<R, K>(&mut self, request: R, chosen: Chosen) -> ResponseFuture<St::Future, S, R, M>
    where
        St: Store<K>,
        S: Service<R>,
        M: Ending<R, S>,
    {
        let error = StoreError::new(
            "the policy caps requests in flight, and this store keeps no in-flight caps",
            None,
        )
        .with_kind(StoreErrorKind::Config);
        let config = &self.shared.config;
        let after = After {
            settler: None,
            hold: Hold::None,
        };
        ResponseFuture::decided(Err(error), &mut self.inner, request, config, chosen, after)
    }
}

/// The inner service for a request the store could not judge at once, to
/// be called once the store lets it through; a clone stays behind, to be
/// polled ready before the next call.
///
/// A layer that does not wait hands on the ready service. One that waits
/// hands on an unpolled clone (made ready once the request may pass) and
/// drops the ready one: what its readiness reserved (a `Buffer`'s slot, a
/// concurrency permit) is given back for the wait rather than held by it.
pub(super) fn for_later<S: Clone>(ready: &mut S, waits: bool) -> S {
    let clone = ready.clone();
    if waits {
        *ready = clone.clone();
        clone
    } else {
        std::mem::replace(ready, clone)
    }
}
