//! The services, one per behaviour: each extracts the key, asks the store,
//! and answers or passes on, the same way; they differ only in how a
//! request ends.

use std::any::Any;
use std::borrow::Cow;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll, Waker};

use http::{Request, Response};
use tower::{BoxError, Service};

use super::answers::{Ending, Http};
use super::body::{AnswerBody, InnerBody, RefuseWithError, ResponseBody, WrapBody};
use super::config::{Chosen, LayerConfig};
use super::future::{After, ErrorFuture, Judged, Parked, ResponseFuture, Settler, WrapBodyFuture};
use super::key::{KeyExtractor, MissingKey};
use super::slot::Hold;
use super::view::PolicyView;
use super::wait::Admission;
use crate::algorithm::Decision;
use crate::store::{MemoryStore, Store, StoreError, StoreErrorKind};

/// What the clones of one service share. axum clones the service for every
/// request (its routes are boxed, cloneable services), so everything but
/// the inner service sits behind one reference count: a clone costs one
/// increment (and a decrement when dropped). The price: the service is
/// `Send` only if its extractor is also `Sync`, as an `Arc` asks.
#[derive(Debug)]
pub(crate) struct Shared<E, St> {
    pub(crate) extractor: E,
    pub(crate) store: St,
    pub(crate) config: Arc<LayerConfig>,
    pub(crate) bindings: Arc<Bindings>,
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

/// Declares one behaviour's service: the inner service `S` and what every
/// clone shares.
macro_rules! behaviour_service {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Debug)]
        pub struct $name<S, E, St = MemoryStore> {
            inner: S,
            shared: Arc<Shared<E, St>>,
        }

        impl<S: Clone, E, St> Clone for $name<S, E, St> {
            fn clone(&self) -> Self {
                let shared = Arc::clone(&self.shared);
                Self { inner: self.inner.clone(), shared }
            }
        }

        impl<S, E, St> $name<S, E, St> {
            pub(crate) fn new(inner: S, shared: Arc<Shared<E, St>>) -> Self {
                Self { inner, shared }
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
    };
}

behaviour_service! {
    /// Rate-limits requests to the inner service `S`; built by
    /// [`SlidingWindowLayer`](crate::SlidingWindowLayer). It answers in the
    /// inner service's own body type, an [`AnswerBody`] (axum's and
    /// tonic's); [`SlidingWindowWrapBody`] answers around any other, and
    /// [`SlidingWindowRefuseWithError`] fails refused calls with errors.
    ///
    /// `poll_ready` only asks the inner service: the decision is made when
    /// the request arrives, so the service never parks a caller waiting
    /// for quota and axum can treat it as always ready (a call under
    /// [`wait_up_to`](crate::SlidingWindowLayer::wait_up_to) waits in its
    /// own future). Clones share the layer's store and policy.
    ///
    /// Its type can be written out, for a struct field, but for a closure
    /// key extractor: key by a named extractor, or by a function cast to
    /// its pointer type (`fn(&Job) -> Option<String>`). A plan, a cost or
    /// a settle wraps the extractor in a type that names what it reads:
    ///
    /// ```
    /// # #[cfg(feature = "axum")] {
    /// use axum::body::Body;
    /// use tower_sliding_window::extract::HeaderKey;
    /// use tower_sliding_window::layer::{Costed, Planned};
    /// use tower_sliding_window::SlidingWindow;
    ///
    /// struct Api {
    ///     // Per API key, a plan per customer, requests costed by their body.
    ///     limited: SlidingWindow<axum::routing::Route, Costed<Planned<HeaderKey, String>, http::Request<Body>>>,
    /// }
    /// # }
    /// ```
    SlidingWindow
}

behaviour_service! {
    /// [`SlidingWindow`] for any response body type: responses carry a
    /// [`ResponseBody`](crate::layer::ResponseBody) around the inner
    /// service's body; built by
    /// [`wrap_body`](crate::SlidingWindowLayer::wrap_body).
    SlidingWindowWrapBody
}

behaviour_service! {
    /// [`SlidingWindow`] for a service of any request type, whose refused
    /// calls fail with an error; built by
    /// [`refuse_with_error`](crate::SlidingWindowLayer::refuse_with_error).
    SlidingWindowRefuseWithError
}

impl<S, E, St, B, ResB> Service<Request<B>> for SlidingWindow<S, E, St>
where
    S: Service<Request<B>, Response = Response<ResB>> + Clone,
    E: KeyExtractor<Request<B>, Response<ResB>>,
    E::Key: Clone + Send + 'static,
    St: Store<E::Key>,
    ResB: AnswerBody + 'static,
{
    type Response = Response<ResB>;
    type Error = S::Error;
    type Future = ResponseFuture<St::Future, S, Request<B>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    #[inline]
    fn call(&mut self, request: Request<B>) -> Self::Future {
        let used = http_used(&self.shared);
        limit::<_, _, _, _, Http<InnerBody>, _>(&mut self.inner, &self.shared, request, used).into()
    }
}

impl<S, E, St, B, ResB> Service<Request<B>> for SlidingWindowWrapBody<S, E, St>
where
    S: Service<Request<B>, Response = Response<ResB>> + Clone,
    E: KeyExtractor<Request<B>, Response<ResB>>,
    E::Key: Clone + Send + 'static,
    St: Store<E::Key>,
    ResB: 'static,
{
    type Response = Response<ResponseBody<ResB>>;
    type Error = S::Error;
    type Future = WrapBodyFuture<St::Future, S, Request<B>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    #[inline]
    fn call(&mut self, request: Request<B>) -> Self::Future {
        let used = http_used(&self.shared);
        limit::<_, _, _, _, Http<WrapBody>, _>(&mut self.inner, &self.shared, request, used).into()
    }
}

impl<S, E, St, R> Service<R> for SlidingWindowRefuseWithError<S, E, St>
where
    S: Service<R> + Clone,
    S::Response: 'static,
    S::Error: Into<BoxError>,
    E: KeyExtractor<R, S::Response>,
    E::Key: Clone + Send + 'static,
    St: Store<E::Key>,
{
    type Response = S::Response;
    type Error = BoxError;
    type Future = ErrorFuture<St::Future, S, R>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, request: R) -> Self::Future {
        let used = self.shared.extractor.settle().cloned();
        let used = used.map(|used| move |response: &S::Response| used(response));
        let limiter = &self.shared;
        limit::<_, _, _, _, RefuseWithError, _>(&mut self.inner, limiter, request, used).into()
    }
}

/// What reads the units an HTTP response used, where one is read: the
/// settle, and `count_only`, under which a response that does not match
/// gives its units back.
#[inline(always)]
fn http_used<E, St, B, ResB: 'static>(
    shared: &Shared<E, St>,
) -> Option<impl FnOnce(&Response<ResB>) -> Option<u32> + Send + 'static>
where
    E: KeyExtractor<Request<B>, Response<ResB>>,
{
    let config = &shared.config;
    let settle = shared.extractor.settle();
    (config.count_only.is_some() || settle.is_some()).then(|| {
        let (config, settle) = (Arc::clone(config), settle.cloned());
        move |response: &Response<ResB>| match &config.count_only {
            Some(counts) if !counts.matches(response.status(), response.headers()) => Some(0),
            _ => settle.and_then(|settle| settle(response)),
        }
    })
}

/// Every behaviour's call: the key, the policy, the store's decision, and
/// the request passed on or answered; `used` reads what a response used,
/// where the request is to be settled.
#[inline(always)]
fn limit<S, E, St, R, M, U>(
    inner: &mut S,
    shared: &Shared<E, St>,
    request: R,
    used: Option<U>,
) -> Judged<St::Future, S, R, M::Answer>
where
    S: Service<R> + Clone,
    E: KeyExtractor<R, S::Response>,
    E::Key: Clone + Send + 'static,
    St: Store<E::Key>,
    M: Ending<R, S>,
    U: FnOnce(&S::Response) -> Option<u32> + Send + 'static,
{
    let config = &shared.config;
    let Some(key) = shared.extractor.extract(&request) else {
        return match config.missing_key {
            MissingKey::Allow => Judged::pass(inner.call(request)),
            MissingKey::Reject => Judged::no_key::<M>(&request, config),
        };
    };
    let (binding, chosen) = shared.choose(&request, &key);
    let capped = chosen.get(config).policy.in_flight().is_some();
    if capped && !shared.store.holds_slots() {
        let outcome = Err(no_slots());
        return Judged::decided::<M>(outcome, inner, request, config, chosen, After::nothing());
    }
    let cost = shared.extractor.cost(&request);
    let (mut admission, after) = shared.reserve(key, binding, cost, capped, used);
    // A store that answers at once (the memory store always does) lets
    // the request go straight on to the service that was polled ready.
    let mut cx = Context::from_waker(Waker::noop());
    match Pin::new(&mut admission).poll(&mut cx) {
        Poll::Ready(outcome) => {
            Judged::decided::<M>(outcome, inner, request, config, chosen, after)
        }
        Poll::Pending => {
            let inner = for_later(inner, config.waits().is_some());
            let parked = Parked { inner, request };
            Judged::judging(admission, parked, Arc::clone(config), chosen, after)
        }
    }
}

/// What a layer answers when its policy caps requests in flight and its
/// store keeps no caps: an error every request shows, never a cap that
/// silently lets everything through.
#[cold]
fn no_slots() -> StoreError {
    StoreError::new(
        "the policy caps requests in flight, and this store keeps no in-flight caps",
        None,
    )
    .with_kind(StoreErrorKind::Config)
}

impl<E, St> Shared<E, St> {
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

    /// The policy `request` is judged by, bound to the store, and which it
    /// is to the layer.
    #[inline(always)]
    fn choose<R, Res>(&self, request: &R, key: &E::Key) -> (Cow<'_, St::Binding>, Chosen)
    where
        E: KeyExtractor<R, Res>,
        St: Store<E::Key>,
    {
        let config = &self.config;
        let own = &config.own.policy;
        match self.extractor.policy(request, key, own) {
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
    fn reserve<K, Res, U>(
        &self,
        key: K,
        binding: Cow<'_, St::Binding>,
        cost: u32,
        capped: bool,
        used: Option<U>,
    ) -> (Admission<St::Future>, After<Res, St::Future>)
    where
        K: Clone + Send + 'static,
        St: Store<K>,
        U: FnOnce(&Res) -> Option<u32> + Send + 'static,
    {
        let waits = self.config.waits();
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
            let after = After {
                settler: None,
                hold,
            };
            return (Admission::once(check), after);
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

/// The inner service for a request the store could not judge at once, to
/// be called once the store lets it through; a clone stays behind, to be
/// polled ready before the next call.
///
/// A layer that does not wait hands on the ready service. One that waits
/// hands on an unpolled clone (made ready once the request may pass) and
/// drops the ready one: what its readiness reserved (a place in a `Buffer`, a
/// concurrency permit) is given back for the wait rather than held by it.
fn for_later<S: Clone>(ready: &mut S, waits: bool) -> S {
    let clone = ready.clone();
    if waits {
        *ready = clone.clone();
        clone
    } else {
        std::mem::replace(ready, clone)
    }
}
