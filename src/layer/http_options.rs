//! The options that only make sense where refusals are HTTP answers: the
//! response body type, the `RateLimit` headers, the rejection's style, the
//! decision extension and responses that count. A layer under
//! [`refuse_with_error`](SlidingWindowLayer::refuse_with_error) has none
//! of them.

use std::sync::Arc;

use http::{HeaderMap, StatusCode};

use super::body::{HttpMode, InnerBody, WrapBody};
use super::config::CountOnly;
use super::layer::SlidingWindowLayer;
use super::rejection::Rejection;
use super::response::QuotaUnit;
use super::view::PolicyView;

impl<E, St, M: HttpMode> SlidingWindowLayer<E, St, M> {
    /// Answers in the inner service's own body type, an
    /// [`AnswerBody`](crate::layer::AnswerBody): axum's `Body` (feature
    /// `axum`) or tonic's (feature `tonic`). The default; it undoes
    /// [`wrap_body`](Self::wrap_body).
    ///
    /// On axum this saves an allocation per request: axum boxes every
    /// response body that is not already its own `Body`.
    pub fn inner_body(self) -> SlidingWindowLayer<E, St, InnerBody> {
        self.with_behaviour(InnerBody)
    }

    /// Answers in a [`ResponseBody`](crate::layer::ResponseBody) around the
    /// inner service's body, for any body type: one a layer cannot build
    /// its answers in (`String`, a body of your own), or one from a crate
    /// whose feature is off. The service is then a
    /// [`SlidingWindowWrapBody`](crate::layer::SlidingWindowWrapBody).
    ///
    /// ```
    /// use tower::{service_fn, Service, ServiceBuilder, ServiceExt};
    /// use tower_sliding_window::{Limit, SlidingWindowLayer};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let key = |_: &http::Request<String>| Some("everyone");
    /// let mut svc = ServiceBuilder::new()
    ///     .layer(SlidingWindowLayer::new(Limit::per_minute(1), key).wrap_body())
    ///     .service(service_fn(|_| async { Ok::<_, std::convert::Infallible>(http::Response::new(String::from("hello"))) }));
    /// let response = svc.ready().await.unwrap().call(http::Request::new(String::new())).await.unwrap();
    /// assert_eq!(response.status(), http::StatusCode::OK);
    /// # }
    /// ```
    pub fn wrap_body(self) -> SlidingWindowLayer<E, St, WrapBody> {
        self.with_behaviour(WrapBody)
    }

    /// Whether accepted responses carry `RateLimit-Policy` and `RateLimit`
    /// (default `true`, and `false` in [shadow mode](Self::shadow_mode)).
    /// Rejections always carry them.
    ///
    /// What they cost: an accepted request's future keeps its decision and
    /// a reference to the layer's configuration until the response is in,
    /// and the response gets two header values. Without them, a request
    /// the memory store let through, with nothing to settle (no
    /// [`settle`](Self::settle) or [`count_only`](Self::count_only)), is
    /// awaited as the inner service's own future, with nothing else kept
    /// beside it.
    pub fn rate_limit_headers(mut self, on: bool) -> Self {
        let config = Arc::make_mut(&mut self.config);
        config.headers_asked = Some(on);
        config.headers_on_success = on;
        self
    }

    /// Whether accepted requests carry their [`Decision`](crate::Decision)
    /// in their extensions for handlers to read (`Extension<Decision>` in
    /// axum). Off by default, since it costs an allocation per request
    /// that most services never read; on by default in
    /// [shadow mode](Self::shadow_mode), where it tells a handler what
    /// enforcement would have done.
    pub fn decision_extension(mut self, on: bool) -> Self {
        let config = Arc::make_mut(&mut self.config);
        config.extension_asked = Some(on);
        config.decision_extension = on;
        self
    }

    /// How refused HTTP requests are answered (default
    /// [`Rejection::plain_text`]).
    pub fn rejection(mut self, rejection: Rejection) -> Self {
        Arc::make_mut(&mut self.config).rejection = rejection;
        self
    }

    /// Counts a request only when its response matches `counts` (given the
    /// status and headers), e.g. failed logins only:
    /// `.count_only(|status, _| status == StatusCode::UNAUTHORIZED)`.
    ///
    /// Each request reserves its cost when it arrives, so a key over its
    /// limit is refused before reaching the service, and requests in flight
    /// at once never get past the limit together (ten at once against a
    /// limit of three admit three). The limit therefore also bounds the
    /// requests in flight, whatever their outcome. A response that does not
    /// match gives the reservation back, in one store call (a Redis round
    /// trip) made before the response is handed on; a response future
    /// dropped before that, an `Err` from the inner service, and a request
    /// a failure policy let through keep it. The predicate sees the
    /// response as the inner service made it; gRPC failures travel as HTTP
    /// 200 with the status in trailers, which it cannot see. With [`settle`](SlidingWindowLayer::settle) too, a
    /// matching response is settled by it. `RateLimit` shows the quota
    /// after any give-back.
    pub fn count_only<F>(mut self, counts: F) -> Self
    where
        F: Fn(StatusCode, &HeaderMap) -> bool + Send + Sync + 'static,
    {
        Arc::make_mut(&mut self.config).count_only = Some(CountOnly(Arc::new(counts)));
        self
    }

    /// What `RateLimit-Policy` says the quota counts (default requests, as
    /// no parameter): [`QuotaUnit::ContentBytes`] for a
    /// [`cost`](Self::cost) in bytes. Only the units the draft registers
    /// are offered; tokens and other units go as the default.
    pub fn quota_unit(mut self, unit: QuotaUnit) -> Self {
        let config = Arc::make_mut(&mut self.config);
        config.quota_unit = unit;
        config.own = Arc::new(PolicyView::own(config.own.policy.clone(), unit));
        self
    }
}
