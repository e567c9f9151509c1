//! `ServiceBuilder::new().sliding_window(…)`.

use tower::layer::util::Stack;
use tower::ServiceBuilder;

use crate::layer::SlidingWindowLayer;
use crate::limit::Limit;

/// A builder with `layer` added on top of its layers `L`.
type WithLayer<Layer, L> = ServiceBuilder<Stack<Layer, L>>;

mod sealed {
    pub trait Sealed {}
    impl<L> Sealed for tower::ServiceBuilder<L> {}
}

/// Adds sliding-window rate limiting to a [`ServiceBuilder`].
///
/// ```
/// use tower::{service_fn, ServiceBuilder};
/// use tower_sliding_window::{Limit, ServiceBuilderExt};
///
/// let svc = ServiceBuilder::new()
///     .sliding_window(Limit::per_second(10), |req: &http::Request<()>| {
///         req.headers().get("x-api-key")?.to_str().ok().map(str::to_owned)
///     })
///     .service(service_fn(|_req: http::Request<()>| async {
///         Ok::<_, std::convert::Infallible>(http::Response::new(()))
///     }));
/// ```
///
/// The trait is sealed: only `ServiceBuilder` implements it.
pub trait ServiceBuilderExt<L>: sealed::Sealed + Sized {
    /// Adds a [`SlidingWindowLayer`] allowing `limit` per key, with keys
    /// taken by `extractor`, on a private in-memory store.
    fn sliding_window<E>(self, limit: Limit, extractor: E) -> WithLayer<SlidingWindowLayer<E>, L>;

    /// Adds a configured [`SlidingWindowLayer`], whatever its store, reader
    /// and behaviour.
    fn sliding_window_layer<E, St, M>(
        self,
        layer: SlidingWindowLayer<E, St, M>,
    ) -> WithLayer<SlidingWindowLayer<E, St, M>, L>;
}

impl<L> ServiceBuilderExt<L> for ServiceBuilder<L> {
    fn sliding_window<E>(self, limit: Limit, extractor: E) -> WithLayer<SlidingWindowLayer<E>, L> {
        self.layer(SlidingWindowLayer::new(limit, extractor))
    }

    fn sliding_window_layer<E, St, M>(
        self,
        layer: SlidingWindowLayer<E, St, M>,
    ) -> WithLayer<SlidingWindowLayer<E, St, M>, L> {
        self.layer(layer)
    }
}
