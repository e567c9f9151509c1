//! Error mode: refusals fail the call, for services of any request type.

use std::task::{Context, Poll};

use tower::{BoxError, Service};

use super::body::RefuseWithError;
use super::future::ResponseFuture;
use super::key::KeyExtractor;
use super::plan::Plan;
use super::service::SlidingWindow;
use super::weights::Weigh;
use crate::store::Store;

impl<S, E, St, P, W, R> Service<R> for SlidingWindow<S, E, St, P, RefuseWithError, W>
where
    S: Service<R> + Clone,
    S::Error: Into<BoxError>,
    E: KeyExtractor<R>,
    E::Key: Clone + Send + 'static,
    St: Store<E::Key>,
    P: Plan<R, E::Key>,
    W: Weigh<R, S::Response> + Clone + Send + 'static,
{
    type Response = S::Response;
    type Error = BoxError;
    type Future = ErrorFuture<St::Future, S, R>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, request: R) -> Self::Future {
        let shared = &*self.shared;
        let used = shared.weights.settles().then(|| {
            let weights = shared.weights.clone();
            move |response: &S::Response| weights.settle(response)
        });
        self.limit(request, used)
    }
}

/// Response future of a [`SlidingWindow`] in
/// [error mode](crate::SlidingWindowLayer::refuse_with_error): the inner
/// service's response, or the error a refused call fails with.
pub type ErrorFuture<F, S, R> = ResponseFuture<F, S, R, RefuseWithError>;
