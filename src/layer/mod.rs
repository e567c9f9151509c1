//! The tower middleware: [`SlidingWindowLayer`], its service and future,
//! the body types it answers with, the plans that choose a policy per
//! request, and the HTTP and gRPC answers it writes.

mod body;
mod future;
mod header_text;
mod key;
#[allow(clippy::module_inception)]
mod layer;
mod plan;
mod rejection;
mod response;
mod service;
mod view;
mod weights;

pub use self::body::{BodyMode, InnerBody, ResponseBody, WrapBody};
pub use self::future::ResponseFuture;
pub use self::key::{KeyExtractor, MissingKey};
pub use self::layer::SlidingWindowLayer;
pub use self::plan::{Plan, PlanByKey, PlanByRequest, SinglePolicy};
pub use self::rejection::Rejection;
pub use self::response::{QuotaUnit, RATELIMIT, RATELIMIT_POLICY};
pub use self::service::SlidingWindow;
pub use self::weights::{CostFn, OneUnit, RequestCost, ResponseSettle, SettleFn, Weigh, Weights};
