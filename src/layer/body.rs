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

/// How a layer's responses carry their body, given the inner service's body
/// type `B`: chosen on the layer, [`WrapBody`] by default, [`InnerBody`]
/// with [`SlidingWindowLayer::inner_body`](crate::SlidingWindowLayer::inner_body).
///
/// Sealed: these two are the only modes.
pub trait BodyMode<B>: sealed::Sealed {
    /// The body type of the layer's responses.
    type Body;
    /// A response the inner service made, in the layer's body type, with
    /// the in-flight slot its request holds, if any.
    #[allow(private_interfaces)]
    fn inner(response: Response<B>, slot: Option<Slot>) -> Response<Self::Body>;
    /// The body of a response the layer made itself.
    fn full(data: Bytes) -> Self::Body;
}

/// Responses carry a [`ResponseBody`]: works with any inner body type.
#[derive(Clone, Copy, Debug, Default)]
pub struct WrapBody;

/// Responses carry the inner service's own body type, which the layer builds
/// its own answers in (from `Bytes`, as `axum::body::Body` and
/// `http_body_util::Full<Bytes>` are built).
///
/// axum boxes every response body that is not already its `Body` again; with
/// axum's `Body` passed through as it is, that allocation goes. tonic's body
/// cannot be built from `Bytes`: tonic servers keep [`WrapBody`].
#[derive(Clone, Copy, Debug, Default)]
pub struct InnerBody;

/// The modes that answer refusals as HTTP responses, [`WrapBody`] and
/// [`InnerBody`], as against
/// [`RefuseWithError`](crate::layer::RefuseWithError). The layer's HTTP
/// options are offered in these modes only.
pub trait HttpMode: sealed::Sealed {}

impl HttpMode for WrapBody {}
impl HttpMode for InnerBody {}

mod sealed {
    pub trait Sealed {}
    impl Sealed for super::WrapBody {}
    impl Sealed for super::InnerBody {}
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

impl<B: From<Bytes>> BodyMode<B> for InnerBody {
    type Body = B;

    /// The slot is freed here: the body passes through as it is.
    fn inner(response: Response<B>, _: Option<Slot>) -> Response<Self::Body> {
        response
    }

    fn full(data: Bytes) -> Self::Body {
        B::from(data)
    }
}

/// The mode of a layer whose refusals fail the call with an error, set by
/// [`SlidingWindowLayer::refuse_with_error`](crate::SlidingWindowLayer::refuse_with_error).
#[derive(Clone, Copy, Debug, Default)]
pub struct RefuseWithError;
