//! The layer's answers, and how each behaviour ends a request: the one
//! place where the HTTP behaviours and error mode differ. Everything
//! before it (extract, judge, call, settle) is one protocol, written once
//! in the layer's future.

use std::marker::PhantomData;

use bytes::Bytes;
use http::{Request, Response};
use tower::{BoxError, Service};

use super::body::{BodyMode, RefuseWithError};
use super::config::{Chosen, LayerConfig};
use super::errors::{MissingKeyError, RateLimited};
use super::response::{is_grpc, missing_key, rejection, store_unavailable, PolicyHeaders};
use super::slot::Slot;
use crate::algorithm::Decision;
use crate::store::StoreError;

/// Why the layer answers a request itself instead of passing it on.
pub(crate) enum Refusal {
    /// The limits refused it.
    Limited(Decision),
    /// The store failed, and its failure policy let nothing through.
    Unavailable(StoreError),
    /// It carries no key, and keyless requests are refused.
    NoKey,
}

/// What an accepted response's `RateLimit` headers are made of: the
/// decision that let its request through, and its policy's header text.
pub(crate) struct Accepted<'a> {
    pub(crate) decision: &'a Decision,
    pub(crate) headers: &'a PolicyHeaders,
}

/// What a behaviour makes of a request's end, for requests `R` to a
/// service `S`.
pub(crate) trait Ending<R, S: Service<R>> {
    /// What the layer's future gives for a response.
    type Output;
    /// What it fails with.
    type Error;
    /// The layer's own answer, made while the request is at hand.
    type Answer;
    /// Whether accepted responses carry the `RateLimit` headers.
    const HEADERS: bool;

    /// Readies a request let through: its decision in the request, where
    /// the behaviour carries one.
    fn admit(request: &mut R, decision: &Decision, config: &LayerConfig);
    /// The layer's answer to a request it does not pass on.
    fn answer(refusal: Refusal, request: &R, config: &LayerConfig, chosen: &Chosen)
        -> Self::Answer;
    /// That answer, as the future's result.
    fn answered(answer: Self::Answer) -> Result<Self::Output, Self::Error>;
    /// The inner service's response, with what its decision adds to it
    /// (`None` for a request passed on unjudged), and the in-flight slot
    /// its request holds: carried by the body, or freed now.
    fn respond(
        response: S::Response,
        accepted: Option<Accepted<'_>>,
        slot: Option<Slot>,
    ) -> Self::Output;
    /// The inner service's error.
    fn failed(error: S::Error) -> Self::Error;
}

/// The HTTP behaviours, whose responses carry their body as `M` says:
/// [`InnerBody`](super::InnerBody) or [`WrapBody`](super::WrapBody).
pub(crate) struct Http<M>(PhantomData<M>);

impl<M, S, B, ResB> Ending<Request<B>, S> for Http<M>
where
    M: BodyMode<ResB>,
    S: Service<Request<B>, Response = Response<ResB>>,
{
    type Output = Response<M::Body>;
    type Error = S::Error;
    type Answer = Box<Response<Bytes>>;
    const HEADERS: bool = true;

    #[inline(always)]
    fn admit(request: &mut Request<B>, decision: &Decision, config: &LayerConfig) {
        if config.decision_extension {
            request.extensions_mut().insert(*decision);
        }
    }

    fn answer(
        refusal: Refusal,
        request: &Request<B>,
        config: &LayerConfig,
        chosen: &Chosen,
    ) -> Self::Answer {
        let grpc = is_grpc(request);
        Box::new(match refusal {
            Refusal::Limited(decision) => rejection(
                &decision,
                chosen.get(config).headers(),
                &config.rejection,
                grpc,
            ),
            Refusal::Unavailable(_) => store_unavailable(grpc),
            Refusal::NoKey => missing_key(grpc),
        })
    }

    fn answered(answer: Self::Answer) -> Result<Self::Output, Self::Error> {
        Ok((*answer).map(M::full))
    }

    #[inline(always)]
    fn respond(
        mut response: Response<ResB>,
        accepted: Option<Accepted<'_>>,
        slot: Option<Slot>,
    ) -> Self::Output {
        if let Some(Accepted { decision, headers }) = accepted {
            headers.apply(decision, response.headers_mut());
        }
        M::inner(response, slot)
    }

    #[inline(always)]
    fn failed(error: S::Error) -> S::Error {
        error
    }
}

impl<R, S> Ending<R, S> for RefuseWithError
where
    S: Service<R>,
    S::Error: Into<BoxError>,
{
    type Output = S::Response;
    type Error = BoxError;
    type Answer = BoxError;
    const HEADERS: bool = false;

    fn admit(_: &mut R, _: &Decision, _: &LayerConfig) {}

    fn answer(refusal: Refusal, _: &R, _: &LayerConfig, _: &Chosen) -> BoxError {
        match refusal {
            Refusal::Limited(decision) => RateLimited::new(decision).into(),
            Refusal::Unavailable(error) => error.into(),
            Refusal::NoKey => MissingKeyError.into(),
        }
    }

    fn answered(answer: BoxError) -> Result<S::Response, BoxError> {
        Err(answer)
    }

    fn respond(response: S::Response, _: Option<Accepted<'_>>, _: Option<Slot>) -> S::Response {
        response
    }

    fn failed(error: S::Error) -> BoxError {
        error.into()
    }
}
