//! The service: extracts the key, asks the store, and answers or passes on.

use std::sync::Arc;
use std::task::{Context, Poll};

use http::{Request, Response};
use tower::Service;

use super::body::ResponseBody;
use super::future::ResponseFuture;
use super::key::{KeyExtractor, MissingKey};
use super::layer::LayerConfig;
use super::response::{is_grpc, missing_key};
use crate::store::Store;

/// Rate-limits requests to the inner service `S`; built by
/// [`SlidingWindowLayer`](crate::SlidingWindowLayer).
///
/// `poll_ready` only asks the inner service: the decision is made when the
/// request arrives, so the service never parks a caller waiting for quota
/// and axum can treat it as always ready. Clones share the layer's store and
/// policy.
#[derive(Clone, Debug)]
pub struct SlidingWindow<S, E, St> {
    inner: S,
    extractor: E,
    store: St,
    config: Arc<LayerConfig>,
}

impl<S, E, St> SlidingWindow<S, E, St> {
    pub(crate) fn new(inner: S, extractor: E, store: St, config: Arc<LayerConfig>) -> Self {
        Self {
            inner,
            extractor,
            store,
            config,
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

impl<S, E, St, B, ResB> Service<Request<B>> for SlidingWindow<S, E, St>
where
    S: Service<Request<B>, Response = Response<ResB>> + Clone,
    E: KeyExtractor<B>,
    St: Store<E::Key>,
{
    type Response = Response<ResponseBody<ResB>>;
    type Error = S::Error;
    type Future = ResponseFuture<St::Future, S, B>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        // The service that was polled ready goes with this request; the
        // clone left behind will be polled before it is called.
        let clone = self.inner.clone();
        let inner = std::mem::replace(&mut self.inner, clone);
        let grpc = is_grpc(&request);
        match self.extractor.extract(&request) {
            Some(key) => {
                let check = self.store.decide(key, &self.config.policy);
                ResponseFuture::check(check, inner, request, Arc::clone(&self.config), grpc)
            }
            None => match self.config.missing_key {
                MissingKey::Allow => {
                    let mut inner = inner;
                    ResponseFuture::pass(inner.call(request), Arc::clone(&self.config))
                }
                MissingKey::Reject => {
                    ResponseFuture::answer(missing_key(grpc), Arc::clone(&self.config))
                }
            },
        }
    }
}
