//! The response futures: await the store's decision, then either answer
//! the request or call the inner service with it, and settle from the
//! response. One future does this for every behaviour; what differs is
//! how a request ends ([`Ending`]), and each behaviour names its own
//! future type around it.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use bytes::Bytes;
use http::{Request, Response};
use pin_project_lite::pin_project;
use tower::{BoxError, Service};

use super::answers::{Accepted, Ending, Http, Refusal};
use super::body::{AnswerBody, InnerBody, RefuseWithError, ResponseBody, WrapBody};
use super::config::{Chosen, LayerConfig};
use super::slot::Hold;
use super::wait::Admission;
use crate::algorithm::{Decision, Origin};
use crate::clock::micros;
use crate::observe;
use crate::store::StoreError;

/// Settles a request reserved by the decision given, from its response
/// `R`: the store's call `F`, if the response changes what it cost.
pub(crate) type Settler<R, F> = Box<dyn FnOnce(&R, &Decision) -> Option<F> + Send>;

/// What a request leaves to do once it is admitted: settle from its
/// response, and free its in-flight slot once the response is over.
pub(crate) struct After<R, F> {
    pub(crate) settler: Option<Settler<R, F>>,
    pub(crate) hold: Hold,
}

impl<R, F> After<R, F> {
    /// Nothing to do: no settling, no slot.
    pub(crate) fn nothing() -> Self {
        Self {
            settler: None,
            hold: Hold::None,
        }
    }

    fn is_nothing(&self) -> bool {
        self.settler.is_none() && self.hold.is_none()
    }
}

pin_project! {
    /// The future every behaviour runs, for a request `R` to the inner
    /// service `S`, whose store answers with `F` and whose layer answers
    /// refusals with `A`.
    #[project = JudgedProj]
    pub(crate) enum Judged<F, S, R, A>
    where
        S: Service<R>,
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
            state: State<F, S, R, A>,
            // `None` where nothing reads it once the response is in (the
            // layer's own answers, and accepted requests with headers off):
            // no reference count taken and dropped.
            config: Option<Arc<LayerConfig>>,
            chosen: Chosen,
            settler: Option<Settler<S::Response, F>>,
            hold: Hold,
        },
    }
}

pin_project! {
    /// Where a judged request stands: calling the inner service (whose
    /// future is pinned), or any other step.
    #[project = StateProj]
    enum State<F, S, R, A>
    where
        S: Service<R>,
    {
        /// Let through; waiting for the inner service's response.
        Calling {
            #[pin]
            call: S::Future,
            decision: Option<Decision>,
        },
        Other {
            step: Step<F, S, R, A>,
        },
    }
}

/// The steps whose parts move on to the next one, each holding what it
/// needs and nothing else.
enum Step<F, S: Service<R>, R, A> {
    /// Waiting for a store that could not answer at once, or for a turn.
    Judging {
        admission: Admission<F>,
        parked: Box<Parked<S, R>>,
        config: Arc<LayerConfig>,
    },
    /// Let through; waiting for the inner service to be ready.
    Readying {
        parked: Box<Parked<S, R>>,
        decision: Option<Decision>,
        config: Arc<LayerConfig>,
    },
    /// Settling a request from its response, before handing it on.
    Settling {
        settling: F,
        response: S::Response,
        reserved: Decision,
    },
    /// The layer answers by itself.
    Answering { answer: A },
    /// The future has given its output.
    Done,
}

impl<F, S: Service<R>, R, A> From<Step<F, S, R, A>> for State<F, S, R, A> {
    fn from(step: Step<F, S, R, A>) -> Self {
        Self::Other { step }
    }
}

/// The inner service and the request, parked until the verdict is in;
/// boxed, so that the common states keep the future small.
pub(crate) struct Parked<S, R> {
    pub(crate) inner: S,
    pub(crate) request: R,
}

/// What the layer makes of the store's answer: call the inner service,
/// with the decision that let the request through (none for a failed
/// store in shadow mode), or answer it.
enum Verdict {
    Pass(Option<Decision>),
    Answer(Refusal),
}

impl<F, S, R, A> Judged<F, S, R, A>
where
    S: Service<R>,
{
    fn full(
        state: State<F, S, R, A>,
        config: Option<Arc<LayerConfig>>,
        chosen: Chosen,
        after: After<S::Response, F>,
    ) -> Self {
        Self::Full {
            state,
            config,
            chosen,
            settler: after.settler,
            hold: after.hold,
        }
    }

    /// A future for a request whose store has not answered: it waits for
    /// the answer, then, for a request that may pass, for `parked.inner`.
    pub(crate) fn judging(
        admission: Admission<F>,
        parked: Parked<S, R>,
        config: Arc<LayerConfig>,
        chosen: Chosen,
        after: After<S::Response, F>,
    ) -> Self {
        let parked = Box::new(parked);
        let step = Step::Judging {
            admission,
            parked,
            config,
        };
        Self::full(step.into(), None, chosen, after)
    }

    /// A future for a request whose store answered at once: the inner
    /// service (polled ready) is called now if the request may pass. It
    /// keeps the decision and the configuration only if the response
    /// needs them.
    // Forced inline, so that the request, passed by value, is not copied
    // into a call's frame on the way.
    #[inline(always)]
    pub(crate) fn decided<M: Ending<R, S, Answer = A>>(
        outcome: Result<Decision, StoreError>,
        inner: &mut S,
        request: R,
        config: &Arc<LayerConfig>,
        chosen: Chosen,
        mut after: After<S::Response, F>,
    ) -> Self {
        match judge(outcome, config, &chosen, &mut after.hold) {
            Verdict::Pass(decision) => {
                let keep = keep::<R, S, M>(decision.as_ref(), config);
                let call = call::<S, R, M>(decision.as_ref(), inner, request, config);
                if keep.is_none() && after.is_nothing() {
                    return Self::Pass { call };
                }
                Self::full(State::Calling { call, decision }, keep, chosen, after)
            }
            Verdict::Answer(refusal) => {
                let answer = M::answer(refusal, &request, config, &chosen);
                Self::full(Step::Answering { answer }.into(), None, chosen, after)
            }
        }
    }

    /// A request passed on unjudged.
    pub(crate) fn pass(call: S::Future) -> Self {
        Self::Pass { call }
    }

    /// The layer's answer to a request that carries no key.
    pub(crate) fn no_key<M: Ending<R, S, Answer = A>>(request: &R, config: &LayerConfig) -> Self {
        let answer = M::answer(Refusal::NoKey, request, config, &Chosen::Layer);
        let step = Step::Answering { answer };
        Self::full(step.into(), None, Chosen::Layer, After::nothing())
    }
}

/// Judges the store's answer for a request under the layer's `config`,
/// once counted in events and metrics, holding the in-flight slot of a
/// request that may pass from here on: a call that panics frees it.
#[inline(always)]
fn judge(
    outcome: Result<Decision, StoreError>,
    config: &LayerConfig,
    chosen: &Chosen,
    hold: &mut Hold,
) -> Verdict {
    match outcome {
        Ok(mut decision) => {
            decision.shadow = config.shadow;
            observe::decided(&chosen.get(config).events, &decision);
            if decision.origin() == Origin::InFlight {
                decision.retry_after_micros = micros(config.in_flight_retry);
            }
            if decision.is_allowed() || config.shadow {
                hold.arm(&decision);
                Verdict::Pass(Some(decision))
            } else {
                Verdict::Answer(Refusal::Limited(decision))
            }
        }
        Err(err) => {
            observe::unavailable(&chosen.get(config).events, &err);
            // Nothing is refused in shadow mode, not even by a failure.
            if config.shadow {
                Verdict::Pass(None)
            } else {
                Verdict::Answer(Refusal::Unavailable(err))
            }
        }
    }
}

/// Calls the inner service with a request let through, marked with the
/// `decision` that let it through, if any.
#[inline(always)]
fn call<S, R, M>(
    decision: Option<&Decision>,
    inner: &mut S,
    mut request: R,
    config: &LayerConfig,
) -> S::Future
where
    S: Service<R>,
    M: Ending<R, S>,
{
    if let Some(decision) = decision {
        M::admit(&mut request, decision, config);
    }
    inner.call(request)
}

/// The configuration, kept for the response to a request let through by
/// `decision` only where that response reads it.
#[inline(always)]
fn keep<R, S, M>(decision: Option<&Decision>, config: &Arc<LayerConfig>) -> Option<Arc<LayerConfig>>
where
    S: Service<R>,
    M: Ending<R, S>,
{
    let reads = decision.is_some() && M::HEADERS && config.read_after_response();
    reads.then(|| Arc::clone(config))
}

impl<F, S, R, A> Judged<F, S, R, A>
where
    F: Future<Output = Result<Decision, StoreError>> + Unpin,
    S: Service<R>,
{
    /// Polls the future as behaviour `M` ends requests.
    #[inline(always)]
    fn poll_as<M: Ending<R, S, Answer = A>>(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Result<M::Output, M::Error>> {
        match self.project() {
            JudgedProj::Pass { call } => {
                let response = ready!(call.poll(cx)).map_err(M::failed)?;
                Poll::Ready(Ok(M::respond(response, None, None)))
            }
            JudgedProj::Full {
                state,
                config,
                chosen,
                settler,
                hold,
            } => poll_full::<F, S, R, M>(state, config, chosen, settler, hold, cx),
        }
    }
}

/// [`Judged`]'s poll for every request but a plain pass. Out of line, so
/// that a pass's poll stays a call and a return.
#[inline(never)]
fn poll_full<F, S, R, M>(
    mut state: Pin<&mut State<F, S, R, M::Answer>>,
    kept: &mut Option<Arc<LayerConfig>>,
    chosen: &Chosen,
    settler: &mut Option<Settler<S::Response, F>>,
    hold: &mut Hold,
    cx: &mut Context<'_>,
) -> Poll<Result<M::Output, M::Error>>
where
    F: Future<Output = Result<Decision, StoreError>> + Unpin,
    S: Service<R>,
    M: Ending<R, S>,
{
    loop {
        let moved = match state.as_mut().project() {
            StateProj::Calling { call, decision } => {
                let response = ready!(call.poll(cx)).map_err(M::failed)?;
                responded::<F, S, R, M>(response, decision.take(), settler, kept, chosen, hold)
            }
            StateProj::Other { step } => match std::mem::replace(step, Step::Done) {
                Step::Judging {
                    admission,
                    parked,
                    config,
                } => judged::<F, S, R, M>(admission, parked, config, chosen, hold, cx),
                Step::Readying {
                    parked,
                    decision,
                    config,
                } => readied::<F, S, R, M>(parked, decision, config, kept, cx)?,
                Step::Settling {
                    settling,
                    response,
                    reserved,
                } => settled::<F, S, R, M>(settling, response, reserved, kept, chosen, hold, cx),
                Step::Answering { answer } => return Poll::Ready(M::answered(answer)),
                Step::Done => panic!("a rate-limit response future polled after it finished"),
            },
        };
        match moved {
            Moved::Waiting(step) => {
                state.set(step.into());
                return Poll::Pending;
            }
            Moved::To(next) => state.set(next),
            Moved::Responded(output) => {
                state.set(Step::Done.into());
                return Poll::Ready(Ok(output));
            }
        }
    }
}

/// Where a step of [`poll_full`] left the request.
enum Moved<F, S: Service<R>, R, A, O> {
    /// Still at this step, waiting to be woken.
    Waiting(Step<F, S, R, A>),
    /// On to the next state.
    To(State<F, S, R, A>),
    /// The response, handed on.
    Responded(O),
}

type MovedAs<F, S, R, M> = Moved<F, S, R, <M as Ending<R, S>>::Answer, <M as Ending<R, S>>::Output>;

/// The store has answered, or not yet: a request let through goes on to
/// ready the inner service, any other is answered.
fn judged<F, S, R, M>(
    mut admission: Admission<F>,
    parked: Box<Parked<S, R>>,
    config: Arc<LayerConfig>,
    chosen: &Chosen,
    hold: &mut Hold,
    cx: &mut Context<'_>,
) -> MovedAs<F, S, R, M>
where
    F: Future<Output = Result<Decision, StoreError>> + Unpin,
    S: Service<R>,
    M: Ending<R, S>,
{
    let Poll::Ready(outcome) = Pin::new(&mut admission).poll(cx) else {
        let step = Step::Judging {
            admission,
            parked,
            config,
        };
        return Moved::Waiting(step);
    };
    let waited = admission.waited();
    if !waited.is_zero() {
        observe::waited(&chosen.get(&config).events, waited);
    }
    let step = match judge(outcome, &config, chosen, hold) {
        Verdict::Pass(decision) => Step::Readying {
            parked,
            decision,
            config,
        },
        Verdict::Answer(refusal) => Step::Answering {
            answer: M::answer(refusal, &parked.request, &config, chosen),
        },
    };
    Moved::To(step.into())
}

/// A request let through, once the inner service is ready, is called.
/// Under a layer that waits, the service came unpolled (see `for_later`):
/// it is made ready only for a request that will be passed on. A ready one
/// is ready again at once.
fn readied<F, S, R, M>(
    mut parked: Box<Parked<S, R>>,
    decision: Option<Decision>,
    config: Arc<LayerConfig>,
    kept: &mut Option<Arc<LayerConfig>>,
    cx: &mut Context<'_>,
) -> Result<MovedAs<F, S, R, M>, M::Error>
where
    S: Service<R>,
    M: Ending<R, S>,
{
    match parked.inner.poll_ready(cx) {
        Poll::Pending => {
            let step = Step::Readying {
                parked,
                decision,
                config,
            };
            Ok(Moved::Waiting(step))
        }
        Poll::Ready(Err(err)) => Err(M::failed(err)),
        Poll::Ready(Ok(())) => {
            let Parked { mut inner, request } = *parked;
            *kept = keep::<R, S, M>(decision.as_ref(), &config);
            let call = call::<S, R, M>(decision.as_ref(), &mut inner, request, &config);
            Ok(Moved::To(State::Calling { call, decision }))
        }
    }
}

/// The inner service's response is in: handed on at once, or, for a
/// request `reserved` whose response changes what it cost, after the
/// settling it starts.
fn responded<F, S, R, M>(
    response: S::Response,
    reserved: Option<Decision>,
    settler: &mut Option<Settler<S::Response, F>>,
    kept: &Option<Arc<LayerConfig>>,
    chosen: &Chosen,
    hold: &mut Hold,
) -> MovedAs<F, S, R, M>
where
    S: Service<R>,
    M: Ending<R, S>,
{
    let settle = reserved.zip(settler.take());
    match settle.and_then(|(reserved, settle)| Some((settle(&response, &reserved)?, reserved))) {
        Some((settling, reserved)) => Moved::To(
            Step::Settling {
                settling,
                response,
                reserved,
            }
            .into(),
        ),
        None => Moved::Responded(respond::<S, R, M>(
            response,
            reserved.as_ref(),
            kept,
            chosen,
            hold,
        )),
    }
}

/// The settling of a request's units, once done, hands its response on;
/// one that fails leaves the reservation standing.
fn settled<F, S, R, M>(
    mut settling: F,
    response: S::Response,
    reserved: Decision,
    kept: &Option<Arc<LayerConfig>>,
    chosen: &Chosen,
    hold: &mut Hold,
    cx: &mut Context<'_>,
) -> MovedAs<F, S, R, M>
where
    F: Future<Output = Result<Decision, StoreError>> + Unpin,
    S: Service<R>,
    M: Ending<R, S>,
{
    let Poll::Ready(settled) = Pin::new(&mut settling).poll(cx) else {
        let step = Step::Settling {
            settling,
            response,
            reserved,
        };
        return Moved::Waiting(step);
    };
    let decision = settled
        .inspect_err(observe::settle_failed)
        .unwrap_or(reserved);
    Moved::Responded(respond::<S, R, M>(
        response,
        Some(&decision),
        kept,
        chosen,
        hold,
    ))
}

/// The inner service's response handed on, with what the layer adds for
/// the `decision` that let it through (nothing without one, or where the
/// future kept no configuration), and the request's slot, freed with it.
fn respond<S, R, M>(
    response: S::Response,
    decision: Option<&Decision>,
    config: &Option<Arc<LayerConfig>>,
    chosen: &Chosen,
    hold: &mut Hold,
) -> M::Output
where
    S: Service<R>,
    M: Ending<R, S>,
{
    // The future keeps the configuration only where the headers go on.
    let accepted = decision
        .zip(config.as_deref())
        .map(|(decision, config)| Accepted {
            decision,
            headers: chosen.get(config).headers(),
        });
    M::respond(response, accepted, hold.take())
}

/// One behaviour's public future: a name for [`Judged`] as it ends
/// requests, and its `Future` impl.
macro_rules! behaviour_future {
    (
        $(#[$doc:meta])*
        $name:ident, $mode:ty, $answer:ty,
        impl<$($param:ident),*> for $request:ty => $output:ty, where { $($bounds:tt)* }
    ) => {
        pin_project! {
            $(#[$doc])*
            pub struct $name<F, S, R>
            where
                S: Service<R>,
            {
                #[pin]
                judged: Judged<F, S, R, $answer>,
            }
        }

        impl<F, S, R> From<Judged<F, S, R, $answer>> for $name<F, S, R>
        where
            S: Service<R>,
        {
            #[inline(always)]
            fn from(judged: Judged<F, S, R, $answer>) -> Self {
                Self { judged }
            }
        }

        impl<F, S, $($param),*> Future for $name<F, S, $request>
        where
            F: Future<Output = Result<Decision, StoreError>> + Unpin,
            S: Service<$request>,
            $($bounds)*
        {
            type Output = $output;

            #[inline]
            fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
                self.project().judged.poll_as::<$mode>(cx)
            }
        }
    };
}

behaviour_future! {
    /// Response future of [`SlidingWindow`](crate::SlidingWindow): the
    /// response, in the inner service's body type.
    ResponseFuture, Http<InnerBody>, Box<Response<Bytes>>,
    impl<B, ResB> for Request<B> => Result<Response<ResB>, S::Error>, where {
        S: Service<Request<B>, Response = Response<ResB>>,
        ResB: AnswerBody,
    }
}

behaviour_future! {
    /// Response future of
    /// [`SlidingWindowWrapBody`](crate::layer::SlidingWindowWrapBody): the
    /// response, in a [`ResponseBody`] around the inner service's body.
    WrapBodyFuture, Http<WrapBody>, Box<Response<Bytes>>,
    impl<B, ResB> for Request<B> => Result<Response<ResponseBody<ResB>>, S::Error>, where {
        S: Service<Request<B>, Response = Response<ResB>>,
    }
}

behaviour_future! {
    /// Response future of
    /// [`SlidingWindowRefuseWithError`](crate::layer::SlidingWindowRefuseWithError):
    /// the inner service's response, or the error a refused call fails with.
    ErrorFuture, RefuseWithError, BoxError,
    impl<R> for R => Result<S::Response, BoxError>, where {
        S::Error: Into<BoxError>,
    }
}
