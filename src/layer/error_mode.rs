//! Error mode: refusals fail the call, for services of any request type.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll, Waker};

use pin_project_lite::pin_project;
use tower::{BoxError, Service};

use super::errors::{MissingKeyError, RateLimited};
use super::future::{judge, waited, Chosen, Settler, Verdict};
use super::key::{KeyExtractor, MissingKey};
use super::layer::LayerConfig;
use super::plan::Plan;
use super::service::{for_later, SlidingWindow};
use super::wait::Admission;
use super::weights::Weigh;
use crate::algorithm::Decision;
use crate::observe;
use crate::store::{Store, StoreError};

/// The mode of a layer whose refusals fail the call with an error, set by
/// [`SlidingWindowLayer::refuse_with_error`](crate::SlidingWindowLayer::refuse_with_error).
#[derive(Clone, Copy, Debug, Default)]
pub struct RefuseWithError;

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
        let config = &shared.config;
        let Some(key) = shared.extractor.extract(&request) else {
            return match config.missing_key {
                MissingKey::Allow => ErrorFuture::called(self.inner.call(request), None, None),
                MissingKey::Reject => ErrorFuture::failed(MissingKeyError.into()),
            };
        };
        let (binding, chosen) = shared.choose(&request, &key);
        let cost = shared.weights.cost(&request);
        let used = shared.weights.settles().then(|| {
            let weights = shared.weights.clone();
            move |response: &S::Response| weights.settle(response)
        });
        let (mut check, settler) = shared.reserve(key, binding, cost, used);
        let mut cx = Context::from_waker(Waker::noop());
        if let Poll::Ready(outcome) = Pin::new(&mut check).poll(&mut cx) {
            return match verdict(outcome, config, &chosen) {
                Ok(decision) => ErrorFuture::called(self.inner.call(request), decision, settler),
                Err(error) => ErrorFuture::failed(error),
            };
        }
        let inner = for_later(&mut self.inner, config.waits().is_some());
        ErrorFuture {
            state: State::Check {
                check,
                pending: Some(Box::new(Pending {
                    inner,
                    request,
                    config: Arc::clone(config),
                    chosen,
                    settler,
                })),
            },
        }
    }
}

/// What a request let through is called with (see [`Verdict::Pass`]), or
/// the error it fails with.
fn verdict(
    outcome: Result<Decision, StoreError>,
    config: &LayerConfig,
    chosen: &Chosen,
) -> Result<Option<Decision>, BoxError> {
    match judge(outcome, config, chosen) {
        Verdict::Pass(decision) => Ok(decision),
        Verdict::Refuse(decision) => Err(RateLimited::new(decision).into()),
        Verdict::Unavailable(error) => Err(error.into()),
    }
}

/// What a call waiting for the store's decision goes on with.
struct Pending<F, S: Service<R>, R> {
    inner: S,
    request: R,
    config: Arc<LayerConfig>,
    chosen: Chosen,
    settler: Option<Settler<S::Response, F>>,
}

pin_project! {
    /// Response future of a [`SlidingWindow`] in
    /// [error mode](crate::SlidingWindowLayer::refuse_with_error).
    pub struct ErrorFuture<F, S, R>
    where
        S: Service<R>,
    {
        #[pin]
        state: State<F, S, R>,
    }
}

pin_project! {
    #[project = StateProj]
    enum State<F, S, R>
    where
        S: Service<R>,
    {
        /// Waiting for the store, or for a turn.
        Check {
            check: Admission<F>,
            pending: Option<Box<Pending<F, S, R>>>,
        },
        /// Let through; waiting for the inner service to be ready.
        Ready {
            pending: Option<Box<Pending<F, S, R>>>,
            decision: Option<Decision>,
        },
        /// Let through; waiting for the inner service.
        Call {
            #[pin]
            call: S::Future,
            decision: Option<Decision>,
            settler: Option<Settler<S::Response, F>>,
        },
        /// Settling the request from its response, before handing it on.
        Settle {
            settling: F,
            response: Option<S::Response>,
        },
        /// Refused, or failed before the call.
        Failed {
            error: Option<BoxError>,
        },
    }
}

impl<F, S: Service<R>, R> ErrorFuture<F, S, R> {
    fn called(
        call: S::Future,
        decision: Option<Decision>,
        settler: Option<Settler<S::Response, F>>,
    ) -> Self {
        Self {
            state: State::Call {
                call,
                decision,
                settler,
            },
        }
    }

    fn failed(error: BoxError) -> Self {
        Self {
            state: State::Failed { error: Some(error) },
        }
    }
}

impl<F, S, R> Future for ErrorFuture<F, S, R>
where
    F: Future<Output = Result<Decision, StoreError>> + Unpin,
    S: Service<R>,
    S::Error: Into<BoxError>,
{
    type Output = Result<S::Response, BoxError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut state = self.project().state;
        loop {
            match state.as_mut().project() {
                StateProj::Check { check, pending } => {
                    let outcome = ready!(Pin::new(&mut *check).poll(cx));
                    let Some(pending) = pending.take() else {
                        unreachable!("a pending check still holds the service and request")
                    };
                    waited(check, &pending.config, &pending.chosen);
                    match verdict(outcome, &pending.config, &pending.chosen) {
                        Ok(decision) => state.set(State::Ready {
                            pending: Some(pending),
                            decision,
                        }),
                        Err(error) => state.set(State::Failed { error: Some(error) }),
                    }
                }
                StateProj::Ready { pending, decision } => {
                    let Some(waiting) = pending else {
                        unreachable!("a call being readied holds the service and request")
                    };
                    ready!(waiting.inner.poll_ready(cx)).map_err(Into::into)?;
                    let Some(pending) = pending.take() else {
                        unreachable!("a call being readied holds the service and request")
                    };
                    let Pending {
                        mut inner,
                        request,
                        settler,
                        ..
                    } = *pending;
                    let decision = *decision;
                    let call = inner.call(request);
                    state.set(State::Call {
                        call,
                        decision,
                        settler,
                    });
                }
                StateProj::Call {
                    call,
                    decision,
                    settler,
                } => {
                    let response = ready!(call.poll(cx)).map_err(Into::into)?;
                    let settling = match (settler.take(), decision) {
                        (Some(settle), Some(decision)) => settle(&response, decision),
                        _ => None,
                    };
                    let Some(settling) = settling else {
                        return Poll::Ready(Ok(response));
                    };
                    state.set(State::Settle {
                        settling,
                        response: Some(response),
                    });
                }
                StateProj::Settle { settling, response } => {
                    if let Err(error) = ready!(Pin::new(settling).poll(cx)) {
                        observe::settle_failed(&error);
                    }
                    let response = response
                        .take()
                        .expect("ErrorFuture polled after completion");
                    return Poll::Ready(Ok(response));
                }
                StateProj::Failed { error } => {
                    let error = error.take().expect("ErrorFuture polled after completion");
                    return Poll::Ready(Err(error));
                }
            }
        }
    }
}
