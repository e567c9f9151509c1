//! The tower middleware: [`SlidingWindowLayer`], its service and futures,
//! the body types it answers with, the plans that choose a policy per
//! request, the HTTP and gRPC answers it writes, and the errors it fails
//! calls with in error mode.

mod body;
mod config;
mod ending;
mod error_mode;
mod errors;
mod future;
mod header_text;
mod http_options;
mod key;
#[allow(clippy::module_inception)]
mod layer;
mod plan;
mod rejection;
mod response;
mod service;
mod slot;
mod view;
mod wait;
mod weights;

pub use self::body::{BodyMode, HttpMode, InnerBody, RefuseWithError, ResponseBody, WrapBody};
pub use self::error_mode::ErrorFuture;
pub use self::errors::{MissingKeyError, RateLimited};
pub use self::future::ResponseFuture;
pub use self::key::{KeyExtractor, MissingKey};
pub use self::layer::SlidingWindowLayer;
pub use self::plan::{Plan, PlanByKey, PlanByRequest, SinglePolicy};
pub use self::rejection::Rejection;
pub use self::response::{QuotaUnit, RATELIMIT, RATELIMIT_POLICY};
pub use self::service::SlidingWindow;
pub use self::weights::{CostFn, OneUnit, RequestCost, ResponseSettle, SettleFn, Weigh, Weights};
