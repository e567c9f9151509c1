//! The response future: await the store's decision, then either answer the
//! request or call the inner service with it.

use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use bytes::Bytes;
use http::{Request, Response};
use pin_project_lite::pin_project;
use tower::Service;

use super::body::{BodyMode, WrapBody};
use super::layer::LayerConfig;
use super::response::{is_grpc, rejection, store_unavailable};
use super::view::PolicyView;
use super::wait::Admission;
use crate::algorithm::Decision;
use crate::observe;
use crate::store::StoreError;

/// Settles a request reserved by the decision given, from its response
/// `R`: the store's call `F`, if the response changes what it cost.
pub(crate) type Settler<R, F> = Box<dyn FnOnce(&R, &Decision) -> Option<F> + Send>;

/// The policy a request was judged by: the layer's own (no extra reference
/// count on the hot path), or one a plan picked, viewed for this request.
#[derive(Debug)]
pub(crate) enum Chosen {
    Layer,
    Plan(Box<PolicyView>),
}

impl Chosen {
    pub(crate) fn get<'a>(&'a self, config: &'a LayerConfig) -> &'a PolicyView {
        match self {
            Self::Layer => &config.own,
            Self::Plan(view) => view,
        }
    }
}

pin_project! {
    /// Response future of [`SlidingWindow`](crate::SlidingWindow).
    pub struct ResponseFuture<F, S, B, M = WrapBody>
    where
        S: Service<Request<B>>,
    {
        #[pin]
        kind: Kind<F, S, B>,
        body: PhantomData<fn() -> M>,
    }
}

pin_project! {
    #[project = KindProj]
    enum Kind<F, S, B>
    where
        S: Service<Request<B>>,
    {
        /// A request let through whose response needs nothing of the
        /// layer (no headers, nothing to settle), or one passed on without
        /// a key: the inner service's future alone, with nothing else to
        /// poll, move or drop.
        Pass {
            #[pin]
            call: S::Future,
        },
        /// Every other request.
        Full {
            #[pin]
            state: ServiceState<F, S, B>,
            // `None` where nothing reads it once the response is in (the
            // layer's own answers, and accepted requests with headers off):
            // no reference count taken and dropped, two atomic operations
            // a request fewer.
            config: Option<Arc<LayerConfig>>,
            chosen: Chosen,
            settler: Option<Settler<S::Response, F>>,
        },
    }
}

pin_project! {
    #[project = StateProj]
    enum State<F, S, SF, B, R> {
        /// Waiting for a store that could not answer at once (or for a
        /// turn), then for the inner service to be ready; holds what is
        /// needed to go on either way, boxed so that the common states keep
        /// the future small.
        Check {
            #[pin]
            check: Admission<F>,
            // With the verdict, once the store has answered, while the
            // service gets ready.
            pending: Option<Box<(S, Request<B>, Option<Verdict>)>>,
        },
        /// The request was let through; waiting for the inner service.
        Call {
            #[pin]
            call: SF,
            decision: Option<Decision>,
        },
        /// The layer answers by itself.
        Answer {
            response: Option<Box<Response<Bytes>>>,
        },
        /// Settling a request from its response, before handing it on.
        Settle {
            #[pin]
            settling: F,
            response: Option<R>,
            reserved: Decision,
        },
    }
}

/// The states of a request that is not a plain pass, for the inner
/// service `S`.
type ServiceState<F, S, B> =
    State<F, S, <S as Service<Request<B>>>::Future, B, <S as Service<Request<B>>>::Response>;

impl<F, S, B, M> ResponseFuture<F, S, B, M>
where
    S: Service<Request<B>>,
{
    fn full(
        state: ServiceState<F, S, B>,
        config: Option<Arc<LayerConfig>>,
        chosen: Chosen,
        settler: Option<Settler<S::Response, F>>,
    ) -> Self {
        Self {
            kind: Kind::Full {
                state,
                config,
                chosen,
                settler,
            },
            body: PhantomData,
        }
    }

    pub(crate) fn check(
        check: Admission<F>,
        inner: S,
        request: Request<B>,
        config: Arc<LayerConfig>,
        chosen: Chosen,
        settler: Option<Settler<S::Response, F>>,
    ) -> Self {
        let state = State::Check {
            check,
            pending: Some(Box::new((inner, request, None))),
        };
        Self::full(state, Some(config), chosen, settler)
    }

    /// A future for a request whose decision is already known: the inner
    /// service (polled ready) is called now if the request may pass. The
    /// service's `call` passes accepted requests on itself (see
    /// [`called`](Self::called)), so refusals and store errors come here.
    // Forced inline with `next_state`, a shape the layer bench's headers-on
    // case guards.
    #[inline(always)]
    pub(crate) fn decided(
        outcome: Result<Decision, StoreError>,
        inner: &mut S,
        request: Request<B>,
        config: Arc<LayerConfig>,
        chosen: Chosen,
        settler: Option<Settler<S::Response, F>>,
    ) -> Self {
        let verdict = judge(outcome, &config, &chosen);
        let state = next_state(verdict, inner, request, &config, &chosen);
        Self::full(state, Some(config), chosen, settler)
    }

    /// A future for a request the limits let through, already passed on.
    /// It keeps the decision and the layer's configuration only if the
    /// response needs them.
    #[inline(always)]
    pub(crate) fn called(
        call: S::Future,
        decision: Decision,
        config: &Arc<LayerConfig>,
        chosen: Chosen,
        settler: Option<Settler<S::Response, F>>,
    ) -> Self {
        if !config.read_after_response() && settler.is_none() {
            return Self::pass(call);
        }
        let state = State::Call {
            call,
            decision: Some(decision),
        };
        let config = config.read_after_response().then(|| Arc::clone(config));
        Self::full(state, config, chosen, settler)
    }

    pub(crate) fn pass(call: S::Future) -> Self {
        Self {
            kind: Kind::Pass { call },
            body: PhantomData,
        }
    }

    pub(crate) fn answer(response: Response<Bytes>) -> Self {
        let state = State::Answer {
            response: Some(Box::new(response)),
        };
        Self::full(state, None, Chosen::Layer, None)
    }
}

/// Readies a request the limits let through (or, in shadow mode, judged
/// at all) for the inner service.
#[inline(always)]
pub(crate) fn admit<B>(
    request: &mut Request<B>,
    decision: &mut Decision,
    config: &LayerConfig,
    chosen: &Chosen,
) {
    record(decision, config, chosen);
    carry(request, decision, config);
}

/// Marks a decision the store made as judged in shadow mode or not, and
/// counts it in events and metrics.
#[inline(always)]
fn record(decision: &mut Decision, config: &LayerConfig, chosen: &Chosen) {
    decision.shadow = config.shadow;
    observe::decided(&chosen.get(config).events, decision);
}

/// Puts a let-through request's decision in its extensions, if the layer
/// is to.
#[inline(always)]
fn carry<B>(request: &mut Request<B>, decision: &Decision, config: &LayerConfig) {
    if config.decision_extension {
        request.extensions_mut().insert(*decision);
    }
}

/// What the layer makes of the store's answer, in either mode, once
/// recorded in events and metrics.
pub(crate) enum Verdict {
    /// Call the inner service, with the decision that let the request
    /// through (none for a failed store in shadow mode).
    Pass(Option<Decision>),
    /// The limits refused it.
    Refuse(Decision),
    /// The store failed, and its failure policy let nothing through.
    Unavailable(StoreError),
}

/// Judges the store's answer for a request under the layer's `config`.
pub(crate) fn judge(
    outcome: Result<Decision, StoreError>,
    config: &LayerConfig,
    chosen: &Chosen,
) -> Verdict {
    match outcome {
        Ok(mut decision) => {
            record(&mut decision, config, chosen);
            if decision.is_allowed() || config.shadow {
                Verdict::Pass(Some(decision))
            } else {
                Verdict::Refuse(decision)
            }
        }
        Err(err) => {
            observe::unavailable(&chosen.get(config).events, &err);
            // Nothing is refused in shadow mode, not even by a failure.
            if config.shadow {
                Verdict::Pass(None)
            } else {
                Verdict::Unavailable(err)
            }
        }
    }
}

/// Reports how long a request the admission let through or refused had
/// waited, if it had.
pub(crate) fn waited<F>(admission: &Admission<F>, config: &LayerConfig, chosen: &Chosen) {
    let waited = admission.waited();
    if !waited.is_zero() {
        observe::waited(&chosen.get(config).events, waited);
    }
}

/// What follows a verdict: calling the inner service, or answering.
#[inline(always)]
fn next_state<F, S, B>(
    verdict: Verdict,
    inner: &mut S,
    mut request: Request<B>,
    config: &LayerConfig,
    chosen: &Chosen,
) -> State<F, S, S::Future, B, S::Response>
where
    S: Service<Request<B>>,
{
    let answer = match verdict {
        Verdict::Pass(decision) => {
            if let Some(decision) = decision {
                carry(&mut request, &decision, config);
            }
            return State::Call {
                call: inner.call(request),
                decision,
            };
        }
        Verdict::Refuse(decision) => rejection(
            &decision,
            chosen.get(config).headers(),
            &config.rejection,
            is_grpc(&request),
        ),
        Verdict::Unavailable(_) => store_unavailable(is_grpc(&request)),
    };
    State::Answer {
        response: Some(Box::new(answer)),
    }
}

impl<F, S, B, M, ResB> Future for ResponseFuture<F, S, B, M>
where
    F: Future<Output = Result<Decision, StoreError>> + Unpin,
    S: Service<Request<B>, Response = Response<ResB>>,
    M: BodyMode<ResB>,
{
    type Output = Result<Response<M::Body>, S::Error>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project().kind.project() {
            KindProj::Pass { call } => {
                let response = ready!(call.poll(cx))?;
                Poll::Ready(Ok(M::inner(response)))
            }
            KindProj::Full {
                state,
                config,
                chosen,
                settler,
            } => poll_full::<F, S, B, M, ResB>(state, config, chosen, settler, cx),
        }
    }
}

/// [`ResponseFuture`]'s poll for every request but a plain pass. Out of
/// line, so that a pass's poll stays a call and a return (which the layer
/// bench's one-limit, headers-off row guards).
#[inline(never)]
fn poll_full<F, S, B, M, ResB>(
    mut state: Pin<&mut ServiceState<F, S, B>>,
    config: &Option<Arc<LayerConfig>>,
    chosen: &Chosen,
    settler: &mut Option<Settler<S::Response, F>>,
    cx: &mut Context<'_>,
) -> Poll<Result<Response<M::Body>, S::Error>>
where
    F: Future<Output = Result<Decision, StoreError>> + Unpin,
    S: Service<Request<B>, Response = Response<ResB>>,
    M: BodyMode<ResB>,
{
    loop {
        match state.as_mut().project() {
            StateProj::Check { mut check, pending } => {
                let Some(config) = config.as_deref() else {
                    unreachable!("a pending check keeps the layer's configuration")
                };
                let Some((inner, _, verdict)) = pending.as_deref_mut() else {
                    unreachable!("a pending check holds its request until it is left")
                };
                if verdict.is_none() {
                    let outcome = ready!(check.as_mut().poll(cx));
                    waited(&check, config, chosen);
                    *verdict = Some(judge(outcome, config, chosen));
                }
                // Under a layer that waits, the service came unpolled (see
                // `for_later`): it is made ready only for a request that
                // will be passed on. A ready one is ready again at once.
                if let Some(Verdict::Pass(_)) = verdict {
                    ready!(inner.poll_ready(cx))?;
                }
                let Some((mut inner, request, Some(verdict))) = pending.take().map(|p| *p) else {
                    unreachable!("a pending check has its verdict once the store answered")
                };
                let next = next_state(verdict, &mut inner, request, config, chosen);
                state.set(next);
            }
            StateProj::Call { call, decision } => {
                let mut response = ready!(call.poll(cx))?;
                let Some(decision) = decision.take() else {
                    return Poll::Ready(Ok(M::inner(response)));
                };
                let settling = settler
                    .take()
                    .and_then(|settle| settle(&response, &decision));
                if let Some(settling) = settling {
                    state.set(State::Settle {
                        settling,
                        response: Some(response),
                        reserved: decision,
                    });
                    continue;
                }
                if let Some(config) = config.as_deref() {
                    add_headers(config, chosen, &decision, &mut response);
                }
                return Poll::Ready(Ok(M::inner(response)));
            }
            StateProj::Settle {
                settling,
                response,
                reserved,
            } => {
                let decision = match ready!(settling.poll(cx)) {
                    Ok(settled) => settled,
                    Err(err) => {
                        observe::settle_failed(&err);
                        *reserved
                    }
                };
                let mut response = response
                    .take()
                    .expect("ResponseFuture polled after completion");
                if let Some(config) = config.as_deref() {
                    add_headers(config, chosen, &decision, &mut response);
                }
                return Poll::Ready(Ok(M::inner(response)));
            }
            StateProj::Answer { response } => {
                let response = response
                    .take()
                    .expect("ResponseFuture polled after completion");
                return Poll::Ready(Ok((*response).map(M::full)));
            }
        }
    }
}

/// The rate-limit headers of an accepted response, if the layer sends them.
fn add_headers<R>(
    config: &LayerConfig,
    chosen: &Chosen,
    decision: &Decision,
    response: &mut Response<R>,
) {
    if config.headers_on_success {
        let view = chosen.get(config);
        view.headers().apply(decision, response.headers_mut());
    }
}
