//! The tower middleware: [`SlidingWindowLayer`], its services and futures
//! (one of each per behaviour), the body types it answers in, the key
//! extractors that also plan, cost and settle, the HTTP and gRPC answers
//! it writes, and the errors it fails calls with in error mode.

mod answers;
mod body;
mod config;
mod errors;
mod future;
mod header_text;
mod http_options;
mod key;
#[allow(clippy::module_inception)]
mod layer;
mod reader;
mod rejection;
mod response;
mod service;
mod slot;
mod view;
mod wait;

pub use self::body::{AnswerBody, HttpMode, InnerBody, RefuseWithError, ResponseBody, WrapBody};
pub use self::errors::{MissingKeyError, RateLimited};
pub use self::future::{ErrorFuture, ResponseFuture, WrapBodyFuture};
pub use self::key::{KeyExtractor, MissingKey, UnitsUsed};
pub use self::layer::SlidingWindowLayer;
pub use self::reader::{Costed, Planned, PlannedByRequest, Settled};
pub use self::rejection::Rejection;
pub use self::response::{QuotaUnit, RATELIMIT, RATELIMIT_POLICY};
pub use self::service::{SlidingWindow, SlidingWindowRefuseWithError, SlidingWindowWrapBody};
