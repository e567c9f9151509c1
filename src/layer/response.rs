//! The HTTP side of a decision: rate-limit headers, and the responses the
//! layer writes itself (429, 503, 400, or their gRPC equivalents).

use bytes::Bytes;
use http::header::{HeaderName, HeaderValue, CONTENT_TYPE, RETRY_AFTER};
use http::{HeaderMap, Request, Response, StatusCode};

use super::header_text;
use super::rejection::{Rejection, Style};
use crate::algorithm::{Decision, Origin};
use crate::limit::Limit;
use crate::policy::Policy;

/// `RateLimit-Policy` from draft-ietf-httpapi-ratelimit-headers-10.
pub static RATELIMIT_POLICY: HeaderName = HeaderName::from_static("ratelimit-policy");
/// `RateLimit` from draft-ietf-httpapi-ratelimit-headers-10.
pub static RATELIMIT: HeaderName = HeaderName::from_static("ratelimit");

static GRPC_STATUS: HeaderName = HeaderName::from_static("grpc-status");
static GRPC_MESSAGE: HeaderName = HeaderName::from_static("grpc-message");

/// gRPC status codes the layer answers with.
const GRPC_INVALID_ARGUMENT: u16 = 3;
const GRPC_RESOURCE_EXHAUSTED: u16 = 8;
const GRPC_UNAVAILABLE: u16 = 14;

/// The name of a policy's in-flight cap in `RateLimit-Policy` and
/// `RateLimit`, counted in the draft's `concurrent-requests` unit.
const IN_FLIGHT: &str = "in-flight";

/// The problem type draft-ietf-httpapi-ratelimit-headers registers.
const QUOTA_EXCEEDED: &str = "https://iana.org/assignments/http-problem-types#quota-exceeded";

/// What a policy's quota counts, as `RateLimit-Policy` tells clients with
/// its `qu` parameter: only the units the draft registers.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum QuotaUnit {
    /// Requests, or units of a cost that are not among the registered ones
    /// (tokens, compute units): the draft's default, sent as no parameter.
    #[default]
    Requests,
    /// Bytes of content: for a [`cost`](crate::SlidingWindowLayer::cost)
    /// that counts a body's bytes.
    ContentBytes,
}

/// Header text that depends only on the policy: computed once for the
/// layer's own policy, and for a plan's choice only when a response needs it.
#[derive(Clone, Debug)]
pub(crate) struct PolicyHeaders {
    policy: HeaderValue,
    names: Box<[String]>,
}

impl PolicyHeaders {
    pub(crate) fn new(policy: &Policy, unit: QuotaUnit) -> Self {
        let names: Box<[String]> = policy.limits().iter().map(Limit::window_name).collect();
        let unit = match unit {
            QuotaUnit::Requests => "",
            QuotaUnit::ContentBytes => ";qu=\"content-bytes\"",
        };
        let items: Vec<String> = policy
            .limits()
            .iter()
            .zip(names.iter())
            .map(|(limit, name)| {
                format!(
                    "\"{name}\";q={};w={}{unit}",
                    limit.max(),
                    ceil_secs(limit.window_micros()).max(1)
                )
            })
            .chain(
                policy
                    .in_flight()
                    .map(|cap| format!("\"{IN_FLIGHT}\";q={cap};qu=\"concurrent-requests\"")),
            )
            .collect();
        let policy = HeaderValue::try_from(items.join(", "))
            .unwrap_or_else(|_| HeaderValue::from_static(""));
        Self { policy, names }
    }

    /// Sets `RateLimit-Policy` and `RateLimit` for `decision`, unless a
    /// decision that stood in for the limits has nothing true to say.
    pub(crate) fn apply(&self, decision: &Decision, headers: &mut HeaderMap) {
        if matches!(decision.origin(), Origin::FailOpen | Origin::StoreFull) {
            return;
        }
        headers.insert(RATELIMIT_POLICY.clone(), self.policy.clone());
        let (remaining, replenish) = decision.quota.resolve(&decision.limit, decision.at_micros);
        let (mut remaining_text, mut reset_text) = (itoa::Buffer::new(), itoa::Buffer::new());
        let remaining = remaining_text.format(remaining).as_bytes();
        let value = match decision.limit_index() {
            // No store knows when a slot frees: the cap's item has no reset.
            None => header_text::joined(&[b"\"", IN_FLIGHT.as_bytes(), b"\";r=", remaining]),
            Some(index) => header_text::joined(&[
                b"\"",
                self.names.get(index).map_or("", String::as_str).as_bytes(),
                b"\";r=",
                remaining,
                b";t=",
                reset_text.format(ceil_secs(replenish)).as_bytes(),
            ]),
        };
        if let Some(value) = value {
            headers.insert(RATELIMIT.clone(), value);
        }
    }
}

/// Whole seconds, rounded up: a client that waits this long will not be early.
pub(crate) fn ceil_secs(micros: u64) -> u64 {
    micros.div_ceil(1_000_000)
}

/// Whether the request speaks gRPC, and so must be answered in gRPC's terms.
pub(crate) fn is_grpc<B>(request: &Request<B>) -> bool {
    request
        .headers()
        .get(CONTENT_TYPE)
        .is_some_and(|value| value.as_bytes().starts_with(b"application/grpc"))
}

fn refusal_message(decision: &Decision, wait: u64) -> String {
    match decision.origin() {
        Origin::StoreFull => format!(
            "Too Many Requests: the rate limiter is tracking too many clients; retry after {wait} s"
        ),
        Origin::InFlight => format!(
            "Too Many Requests: too many requests of this client in flight; retry after {wait} s"
        ),
        Origin::Penalty => format!(
            "Too Many Requests: refused after going over the limit of {} per {}; retry after {wait} s",
            decision.limit.max(),
            decision.limit.window_name()
        ),
        _ => format!(
            "Too Many Requests: limit of {} per {} reached; retry after {wait} s",
            decision.limit.max(),
            decision.limit.window_name()
        ),
    }
}

/// The answer to a request the limits refused.
pub(crate) fn rejection(
    decision: &Decision,
    headers: &PolicyHeaders,
    style: &Rejection,
    grpc: bool,
) -> Response<Bytes> {
    if decision.origin() == Origin::TooCostly {
        let mut response = too_costly(decision, grpc);
        response
            .headers_mut()
            .insert(RATELIMIT_POLICY.clone(), headers.policy.clone());
        return response;
    }
    let wait = ceil_secs(decision.retry_after_micros).max(1);
    let message = refusal_message(decision, wait);
    let mut response = if grpc {
        grpc_answer(GRPC_RESOURCE_EXHAUSTED, &message)
    } else {
        match &style.style {
            Style::PlainText => text_answer(style.status, message),
            Style::ProblemJson => problem_answer(style.status, &message, wait),
            Style::Custom(build) => build(decision),
        }
    };
    let mut extra = HeaderMap::new();
    extra.insert(RETRY_AFTER, HeaderValue::from(wait));
    headers.apply(decision, &mut extra);
    let headers = response.headers_mut();
    for (name, value) in extra {
        if let Some(name) = name {
            headers.entry(name).or_insert(value);
        }
    }
    response
}

/// The answer to a request that costs more than a limit holds: no wait
/// would help, so it names none.
fn too_costly(decision: &Decision, grpc: bool) -> Response<Bytes> {
    let message = format!(
        "Content Too Large: the request costs more than the limit of {} per {} allows",
        decision.limit.max(),
        decision.limit.window_name()
    );
    if grpc {
        grpc_answer(GRPC_INVALID_ARGUMENT, &message)
    } else {
        text_answer(StatusCode::PAYLOAD_TOO_LARGE, message)
    }
}

/// The answer when the store could not decide and its failure policy is to refuse.
pub(crate) fn store_unavailable(grpc: bool) -> Response<Bytes> {
    let message = "Service Unavailable: the rate limiter's store did not answer";
    if grpc {
        grpc_answer(GRPC_UNAVAILABLE, message)
    } else {
        text_answer(StatusCode::SERVICE_UNAVAILABLE, message.to_owned())
    }
}

/// The answer to a request without a key, under [`crate::MissingKey::Reject`].
pub(crate) fn missing_key(grpc: bool) -> Response<Bytes> {
    let message = "Bad Request: the request carries no rate-limit key";
    if grpc {
        grpc_answer(GRPC_INVALID_ARGUMENT, message)
    } else {
        text_answer(StatusCode::BAD_REQUEST, message.to_owned())
    }
}

fn text_answer(status: StatusCode, message: String) -> Response<Bytes> {
    let mut response = Response::new(Bytes::from(message + "\n"));
    *response.status_mut() = status;
    response.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}

/// An RFC 9457 problem document. Every interpolated value is a number or
/// text of our own, so no JSON escaping is needed.
fn problem_answer(status: StatusCode, message: &str, wait: u64) -> Response<Bytes> {
    let body = format!(
        "{{\"type\":\"{QUOTA_EXCEEDED}\",\"title\":\"Request cannot be satisfied as assigned quota has been exceeded\",\"status\":{},\"detail\":\"{message}\",\"retry-after\":{wait}}}",
        status.as_u16()
    );
    let mut response = Response::new(Bytes::from(body));
    *response.status_mut() = status;
    response.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("application/problem+json"),
    );
    response
}

/// A trailers-only gRPC response: HTTP 200 with the status in the headers.
fn grpc_answer(code: u16, message: &str) -> Response<Bytes> {
    let mut response = Response::new(Bytes::new());
    let headers = response.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/grpc"));
    headers.insert(GRPC_STATUS.clone(), HeaderValue::from(code));
    if let Ok(message) = HeaderValue::try_from(grpc_message_encode(message)) {
        headers.insert(GRPC_MESSAGE.clone(), message);
    }
    response
}

/// Percent-encodes what gRPC's `grpc-message` does not carry as is.
fn grpc_message_encode(message: &str) -> String {
    let mut out = String::with_capacity(message.len());
    for byte in message.bytes() {
        if (0x20..=0x7e).contains(&byte) && byte != b'%' {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}
