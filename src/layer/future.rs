//! The response future, in every mode: await the store's decision, then
//! either answer the request or call the inner service with it, and
//! settle from the response. What differs between modes is how a request
//! ends ([`Ending`]).

use std::future::Future;
use std::marker::PhantomData;
use std::ops::ControlFlow;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use pin_project_lite::pin_project;
use tower::Service;

use super::body::WrapBody;
use super::config::{Chosen, LayerConfig};
use super::ending::{Ending, Refusal};
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

pin_project! {
    /// Response future of [`SlidingWindow`](crate::SlidingWindow) for a
    /// request `R`: in the HTTP modes `M` ([`WrapBody`],
    /// [`InnerBody`](super::InnerBody)) a response, in
    /// [error mode](crate::SlidingWindowLayer::refuse_with_error) the inner
    /// service's response or an error. Its bound `M: Ending<R, S>` is this
    /// crate's own, sealed, and met by every mode: it says how each mode
    /// ends a request.
    pub struct ResponseFuture<F, S, R, M = WrapBody>
    where
        S: Service<R>,
        M: Ending<R, S>,
    {
        #[pin]
        kind: Kind<F, S, R, M::Answer>,
        mode: PhantomData<fn() -> M>,
    }
}

pin_project! {
    #[project = KindProj]
    enum Kind<F, S, R, A>
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
            // no reference count taken and dropped, two atomic operations
            // a request fewer.
            config: Option<Arc<LayerConfig>>,
            chosen: Chosen,
            settler: Option<Settler<S::Response, F>>,
            hold: Hold,
        },
    }
}

pin_project! {
    #[project = StateProj]
    enum State<F, S, R, A>
    where
        S: Service<R>,
    {
        /// Waiting for a store that could not answer at once (or for a
        /// turn), then for the inner service to be ready.
        Check {
            check: Checking<F, S, R>,
        },
        /// The request was let through; waiting for the inner service.
        Call {
            #[pin]
            call: S::Future,
            decision: Option<Decision>,
        },
        /// The layer answers by itself.
        Answer {
            answer: Option<A>,
        },
        /// Settling a request from its response, before handing it on.
        Settle {
            #[pin]
            settling: F,
            response: Option<S::Response>,
            reserved: Decision,
        },
    }
}

impl<F, S, R, M> ResponseFuture<F, S, R, M>
where
    S: Service<R>,
    M: Ending<R, S>,
{
    fn full(
        state: State<F, S, R, M::Answer>,
        config: Option<Arc<LayerConfig>>,
        chosen: Chosen,
        After { settler, hold }: After<S::Response, F>,
    ) -> Self {
        Self {
            kind: Kind::Full {
                state,
                config,
                chosen,
                settler,
                hold,
            },
            mode: PhantomData,
        }
    }

    /// A future for a request whose store has not answered: it waits for
    /// the answer, then, for a request that may pass, for `inner`.
    pub(crate) fn check(
        admission: Admission<F>,
        inner: S,
        request: R,
        config: Arc<LayerConfig>,
        chosen: Chosen,
        after: After<S::Response, F>,
    ) -> Self {
        let check = Checking {
            admission,
            phase: Phase::Judging(Box::new(Parked { inner, request })),
            config,
        };
        Self::full(State::Check { check }, None, chosen, after)
    }

    /// A future for a request whose store answered at once: the inner
    /// service (polled ready) is called now if the request may pass. It
    /// keeps the decision and the layer's configuration only if the
    /// response needs them, and the request's in-flight slot, held since
    /// before the call, if it took one.
    // Forced inline, so that the request, passed by value, is not copied
    // into a call's frame on the way.
    #[inline(always)]
    pub(crate) fn decided(
        outcome: Result<Decision, StoreError>,
        inner: &mut S,
        request: R,
        config: &Arc<LayerConfig>,
        chosen: Chosen,
        mut after: After<S::Response, F>,
    ) -> Self {
        // Held before the call: a call that panics frees it.
        let decision = match judge(outcome, config, &chosen, &mut after.hold) {
            Verdict::Pass(decision) => decision,
            refused => {
                let state = next_state::<F, S, R, M>(refused, inner, request, config, &chosen);
                return Self::full(state, None, chosen, after);
            }
        };
        let call = pass_on::<S, R, M>(decision.as_ref(), inner, request, config);
        // Only a response reads the configuration.
        let reads = config.read_after_response();
        if !reads && after.settler.is_none() && after.hold.is_none() {
            return Self::pass(call);
        }
        let state = State::Call { call, decision };
        Self::full(state, reads.then(|| Arc::clone(config)), chosen, after)
    }

    pub(crate) fn pass(call: S::Future) -> Self {
        Self {
            kind: Kind::Pass { call },
            mode: PhantomData,
        }
    }

    /// The layer's answer to a request that carries no key.
    pub(crate) fn no_key(request: &R, config: &LayerConfig) -> Self {
        let answer = M::answer(Refusal::NoKey, request, config, &Chosen::Layer);
        let state = State::Answer {
            answer: Some(answer),
        };
        let after = After {
            settler: None,
            hold: Hold::None,
        };
        Self::full(state, None, Chosen::Layer, after)
    }
}

/// Marks a decision the store made as judged in shadow mode or not, and
/// counts it in events and metrics.
#[inline(always)]
fn record(decision: &mut Decision, config: &LayerConfig, chosen: &Chosen) {
    decision.shadow = config.shadow;
    observe::decided(&chosen.get(config).events, decision);
}

/// What the layer makes of the store's answer, once recorded in events and
/// metrics: call the inner service, with the decision that let the request
/// through (none for a failed store in shadow mode), or answer it.
enum Verdict {
    Pass(Option<Decision>),
    Answer(Refusal),
}

/// Judges the store's answer for a request under the layer's `config`,
/// holding the in-flight slot of a request that may pass from here on.
#[inline(always)]
fn judge(
    outcome: Result<Decision, StoreError>,
    config: &LayerConfig,
    chosen: &Chosen,
    hold: &mut Hold,
) -> Verdict {
    match outcome {
        Ok(mut decision) => {
            record(&mut decision, config, chosen);
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

/// Reports how long a request the admission let through or refused had
/// waited, if it had.
fn waited<F>(admission: &Admission<F>, config: &LayerConfig, chosen: &Chosen) {
    let waited = admission.waited();
    if !waited.is_zero() {
        observe::waited(&chosen.get(config).events, waited);
    }
}

/// What follows a verdict: calling the inner service, or answering.
#[inline(always)]
fn next_state<F, S, R, M>(
    verdict: Verdict,
    inner: &mut S,
    request: R,
    config: &LayerConfig,
    chosen: &Chosen,
) -> State<F, S, R, M::Answer>
where
    S: Service<R>,
    M: Ending<R, S>,
{
    match verdict {
        Verdict::Pass(decision) => State::Call {
            call: pass_on::<S, R, M>(decision.as_ref(), inner, request, config),
            decision,
        },
        Verdict::Answer(refusal) => State::Answer {
            answer: Some(M::answer(refusal, &request, config, chosen)),
        },
    }
}

/// Calls the inner service with a request that may pass, marked with the
/// `decision` that let it through, if any.
#[inline(always)]
fn pass_on<S, R, M>(
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

impl<F, S, R, M> Future for ResponseFuture<F, S, R, M>
where
    F: Future<Output = Result<Decision, StoreError>> + Unpin,
    S: Service<R>,
    M: Ending<R, S>,
{
    type Output = Result<M::Output, M::Error>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project().kind.project() {
            KindProj::Pass { call } => {
                let response = ready!(call.poll(cx)).map_err(M::failed)?;
                Poll::Ready(Ok(M::respond(response, None, None)))
            }
            KindProj::Full {
                state,
                config,
                chosen,
                settler,
                hold,
            } => poll_full::<F, S, R, M>(state, config, chosen, settler, hold, cx),
        }
    }
}

/// [`ResponseFuture`]'s poll for every request but a plain pass. Out of
/// line, so that a pass's poll stays a call and a return.
#[inline(never)]
fn poll_full<F, S, R, M>(
    mut state: Pin<&mut State<F, S, R, M::Answer>>,
    config: &mut Option<Arc<LayerConfig>>,
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
        match state.as_mut().project() {
            StateProj::Check { check } => {
                let (verdict, parked) =
                    ready!(check.poll_verdict(chosen, hold, cx)).map_err(M::failed)?;
                let Parked { mut inner, request } = *parked;
                let layer = Arc::clone(&check.config);
                // Only the response to a judged request reads it.
                let reads =
                    matches!(verdict, Verdict::Pass(Some(_))) && layer.read_after_response();
                let next = next_state::<F, S, R, M>(verdict, &mut inner, request, &layer, chosen);
                *config = reads.then_some(layer);
                state.set(next);
            }
            StateProj::Call { call, decision } => {
                let response = ready!(call.poll(cx)).map_err(M::failed)?;
                let reserved = decision.take();
                match responded::<F, S, R, M>(response, reserved, settler, config, chosen, hold) {
                    ControlFlow::Break(output) => return Poll::Ready(Ok(output)),
                    ControlFlow::Continue(settle) => state.set(settle),
                }
            }
            StateProj::Settle {
                settling,
                response,
                reserved,
            } => {
                // A settling that fails leaves the reservation standing.
                let decision = ready!(settling.poll(cx))
                    .inspect_err(observe::settle_failed)
                    .unwrap_or(*reserved);
                let response = response.take().expect("polled after completion");
                let output = respond::<S, R, M>(response, Some(&decision), config, chosen, hold);
                return Poll::Ready(Ok(output));
            }
            StateProj::Answer { answer } => {
                let answer = answer.take().expect("polled after completion");
                return Poll::Ready(M::answered(answer));
            }
        }
    }
}

/// The inner service's response is in: handed on at once, or, for a
/// request `reserved` whose response changes what it cost, the settling
/// to wait for first.
fn responded<F, S, R, M>(
    response: S::Response,
    reserved: Option<Decision>,
    settler: &mut Option<Settler<S::Response, F>>,
    config: &Option<Arc<LayerConfig>>,
    chosen: &Chosen,
    hold: &mut Hold,
) -> ControlFlow<M::Output, State<F, S, R, M::Answer>>
where
    S: Service<R>,
    M: Ending<R, S>,
{
    let settle = reserved.as_ref().zip(settler.take());
    let settling = settle.and_then(|(decision, settle)| settle(&response, decision));
    match (settling, reserved) {
        (Some(settling), Some(reserved)) => ControlFlow::Continue(State::Settle {
            settling,
            response: Some(response),
            reserved,
        }),
        (_, reserved) => {
            let decision = reserved.as_ref();
            ControlFlow::Break(respond::<S, R, M>(response, decision, config, chosen, hold))
        }
    }
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
    let judged = decision
        .zip(config.as_deref())
        .map(|(decision, config)| (decision, config, chosen));
    M::respond(response, judged, hold.take())
}

/// A request whose store has not answered yet: the store's pending
/// verdict, then, for a request that may pass, the inner service made
/// ready. What it parks is boxed, so that the common states keep the
/// future small.
struct Checking<F, S, R> {
    admission: Admission<F>,
    phase: Phase<S, R>,
    config: Arc<LayerConfig>,
}

/// The inner service and the request, parked until the verdict is in.
struct Parked<S, R> {
    inner: S,
    request: R,
}

/// What a check hands on: its verdict, and what it parked.
type Handed<S, R> = (Verdict, Box<Parked<S, R>>);

enum Phase<S, R> {
    /// Waiting for the store.
    Judging(Box<Parked<S, R>>),
    /// The verdict is in; a request that may pass waits for the inner
    /// service to be ready.
    Readying(Box<Parked<S, R>>, Verdict),
    /// Finished: the verdict handed on, or the inner service failed to
    /// get ready.
    Over,
}

impl<F, S, R> Checking<F, S, R>
where
    F: Future<Output = Result<Decision, StoreError>> + Unpin,
    S: Service<R>,
{
    /// The verdict and what was parked, once the store has answered and,
    /// for a request that may pass, the inner service is ready. The
    /// request's slot is held as soon as the verdict is in: a service that
    /// then fails to get ready, or a future dropped meanwhile, frees it.
    fn poll_verdict(
        &mut self,
        chosen: &Chosen,
        hold: &mut Hold,
        cx: &mut Context<'_>,
    ) -> Poll<Result<Handed<S, R>, S::Error>> {
        loop {
            match std::mem::replace(&mut self.phase, Phase::Over) {
                Phase::Judging(parked) => {
                    let Poll::Ready(outcome) = Pin::new(&mut self.admission).poll(cx) else {
                        self.phase = Phase::Judging(parked);
                        return Poll::Pending;
                    };
                    waited(&self.admission, &self.config, chosen);
                    let verdict = judge(outcome, &self.config, chosen, hold);
                    self.phase = Phase::Readying(parked, verdict);
                }
                // Under a layer that waits, the service came unpolled (see
                // `for_later`): it is made ready only for a request that
                // will be passed on. A ready one is ready again at once.
                Phase::Readying(mut parked, verdict @ Verdict::Pass(_)) => {
                    match parked.inner.poll_ready(cx) {
                        Poll::Ready(Ok(())) => return Poll::Ready(Ok((verdict, parked))),
                        Poll::Ready(Err(err)) => return Poll::Ready(Err(err)),
                        Poll::Pending => {
                            self.phase = Phase::Readying(parked, verdict);
                            return Poll::Pending;
                        }
                    }
                }
                Phase::Readying(parked, verdict) => return Poll::Ready(Ok((verdict, parked))),
                Phase::Over => panic!("a check polled after it finished"),
            }
        }
    }
}
