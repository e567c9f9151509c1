//! The response body: the inner service's, or the layer's own short text,
//! and the two ways of giving both one type.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::Response;
use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;

use super::slot::Slot;

pin_project! {
    /// Either the inner service's body, passed through untouched, or the
    /// body of a response the layer wrote itself (a rejection's text).
    /// Under an [in-flight cap](crate::SlidingWindowLayer::in_flight), it
    /// holds its request's slot until it ends, fails or is dropped.
    pub struct ResponseBody<B> {
        #[pin]
        kind: Kind<B>,
        slot: Option<Slot>,
    }
}

pin_project! {
    #[project = KindProj]
    enum Kind<B> {
        Inner {
            #[pin]
            body: B,
        },
        // A complete body written by the layer; `None` once sent.
        Full {
            data: Option<Bytes>,
        },
    }
}

impl<B> ResponseBody<B> {
    pub(crate) fn inner(body: B, slot: Option<Slot>) -> Self {
        Self {
            kind: Kind::Inner { body },
            slot,
        }
    }

    pub(crate) fn full(data: Bytes) -> Self {
        Self {
            kind: Kind::Full {
                data: (!data.is_empty()).then_some(data),
            },
            slot: None,
        }
    }
}

impl<B> Body for ResponseBody<B>
where
    B: Body,
    B::Data: From<Bytes>,
{
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let this = self.project();
        match this.kind.project() {
            KindProj::Inner { body } => {
                let frame = body.poll_frame(cx);
                // The stream is over: its slot is free before the client
                // reads the end.
                if let Poll::Ready(None | Some(Err(_))) = &frame {
                    this.slot.take();
                }
                frame
            }
            KindProj::Full { data } => {
                Poll::Ready(data.take().map(|data| Ok(Frame::data(data.into()))))
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.kind {
            Kind::Inner { body } => body.is_end_stream(),
            Kind::Full { data } => data.is_none(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.kind {
            Kind::Inner { body } => body.size_hint(),
            Kind::Full { data } => {
                SizeHint::with_exact(data.as_ref().map_or(0, |data| data.len() as u64))
            }
        }
    }
}

/// A response body type the layer can answer in, beside the inner
/// service's own responses: `axum::body::Body` (feature `axum`) and
/// `tonic::body::Body` (feature `tonic`). The layer writes its own answers
/// (429, 503, 400) in it, and a request under an
/// [in-flight cap](crate::SlidingWindowLayer::in_flight) holds its slot
/// until the body ends, is dropped or fails (its body is then boxed, as
/// both types box any other).
///
/// Sealed. For any other body type, [`wrap_body`] answers in a
/// [`ResponseBody`] around it; the default layer does not compile there:
///
/// ```compile_fail
/// use tower::{service_fn, Service, ServiceExt};
/// use tower_sliding_window::{Limit, SlidingWindowLayer};
///
/// # async fn run() {
/// let key = |_: &http::Request<String>| Some("everyone");
/// let svc = tower::ServiceBuilder::new()
///     .layer(SlidingWindowLayer::new(Limit::per_minute(1), key)) // `.wrap_body()` here
///     .service(service_fn(|_| async { Ok::<_, std::convert::Infallible>(http::Response::new(String::new())) }));
/// let _ = svc.oneshot(http::Request::new(String::new())).await;
/// # }
/// ```
///
/// [`wrap_body`]: crate::SlidingWindowLayer::wrap_body
#[diagnostic::on_unimplemented(
    message = "the rate-limit layer cannot answer in `{Self}`",
    note = "enable the crate's `axum` or `tonic` feature for their bodies, or call `.wrap_body()` on the layer for any other"
)]
pub trait AnswerBody: sealed::Answer {}

/// The behaviour of a layer that answers in the inner service's own body
/// type, an [`AnswerBody`]: the default, served by
/// [`SlidingWindow`](crate::SlidingWindow).
#[derive(Clone, Copy, Debug, Default)]
pub struct InnerBody;

/// The behaviour set by
/// [`wrap_body`](crate::SlidingWindowLayer::wrap_body): responses carry a
/// [`ResponseBody`] around any inner body type; served by
/// [`SlidingWindowWrapBody`](crate::layer::SlidingWindowWrapBody).
#[derive(Clone, Copy, Debug, Default)]
pub struct WrapBody;

/// The behaviour set by
/// [`refuse_with_error`](crate::SlidingWindowLayer::refuse_with_error):
/// refusals fail the call with an error; served by
/// [`SlidingWindowRefuseWithError`](crate::layer::SlidingWindowRefuseWithError).
#[derive(Clone, Copy, Debug, Default)]
pub struct RefuseWithError;

/// The behaviours that answer refusals as HTTP responses, [`InnerBody`]
/// and [`WrapBody`], as against [`RefuseWithError`]: the layer's HTTP
/// options are offered under these only. Sealed.
pub trait HttpMode: sealed::Http {}

impl HttpMode for InnerBody {}
impl HttpMode for WrapBody {}

/// How a response of the HTTP behaviours carries its body, given the inner
/// service's body type `B`.
pub(crate) trait BodyMode<B> {
    /// The body type of the layer's responses.
    type Body;
    /// A response the inner service made, with the in-flight slot its
    /// request holds, if any.
    fn inner(response: Response<B>, slot: Option<Slot>) -> Response<Self::Body>;
    /// The body of an answer the layer made itself.
    fn full(data: Bytes) -> Self::Body;
}

impl<B: AnswerBody> BodyMode<B> for InnerBody {
    type Body = B;

    fn inner(response: Response<B>, slot: Option<Slot>) -> Response<B> {
        match slot {
            None => response,
            Some(slot) => response.map(|body| body.holding(slot)),
        }
    }

    fn full(data: Bytes) -> B {
        B::answer(data)
    }
}

impl<B> BodyMode<B> for WrapBody {
    type Body = ResponseBody<B>;

    fn inner(response: Response<B>, slot: Option<Slot>) -> Response<Self::Body> {
        response.map(|body| ResponseBody::inner(body, slot))
    }

    fn full(data: Bytes) -> Self::Body {
        ResponseBody::full(data)
    }
}

pub(crate) mod sealed {
    use bytes::Bytes;

    use super::Slot;

    /// What makes a behaviour an [`HttpMode`](super::HttpMode).
    pub trait Http {}
    impl Http for super::InnerBody {}
    impl Http for super::WrapBody {}

    /// What [`AnswerBody`](super::AnswerBody) asks of a body type.
    pub trait Answer: Sized {
        /// A body of `text`, for an answer the layer makes.
        fn answer(text: Bytes) -> Self;
        /// The body, holding `slot` until it ends, fails or is dropped.
        #[allow(private_interfaces)]
        fn holding(self, slot: Slot) -> Self;
    }
}

/// Implements [`AnswerBody`] for a body type that boxes any body given to
/// its constructor `new`.
#[cfg(any(feature = "axum", feature = "tonic"))]
macro_rules! answer_body {
    ($body:ty) => {
        impl sealed::Answer for $body {
            fn answer(text: Bytes) -> Self {
                if text.is_empty() {
                    // A gRPC refusal says it all in its headers.
                    return <$body>::empty();
                }
                <$body>::new(ResponseBody::<$body>::full(text))
            }

            #[allow(private_interfaces)]
            fn holding(self, slot: Slot) -> Self {
                <$body>::new(ResponseBody::inner(self, Some(slot)))
            }
        }

        impl AnswerBody for $body {}
    };
}

#[cfg(feature = "axum")]
answer_body!(axum::body::Body);
#[cfg(feature = "tonic")]
answer_body!(tonic::body::Body);
