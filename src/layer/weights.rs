//! What a request costs and what its response settles it at: see
//! [`SlidingWindowLayer::cost`](crate::SlidingWindowLayer::cost) and
//! [`SlidingWindowLayer::settle`](crate::SlidingWindowLayer::settle).

use std::sync::Arc;

use http::{Request, Response};

/// A request's cost in units, and what its response says it really used.
pub trait Weigh<B, ResB> {
    /// The units `request` reserves.
    fn cost(&self, request: &Request<B>) -> u32;

    /// The units the request behind `response` really used; `None` keeps
    /// the reservation.
    fn settle(&self, response: &Response<ResB>) -> Option<u32>;

    /// Whether [`settle`](Weigh::settle) can answer anything but `None`:
    /// responses are looked at only then.
    fn settles(&self) -> bool;
}

/// A layer's costing and settling: each [`OneUnit`] (one unit a request,
/// nothing settled) or a closure.
#[derive(Clone, Copy, Debug, Default)]
pub struct Weights<C = OneUnit, S = OneUnit> {
    pub(crate) cost: C,
    pub(crate) settle: S,
}

/// Every request costs one unit, and none is settled: the default.
#[derive(Clone, Copy, Debug, Default)]
pub struct OneUnit;

/// The cost closure given to
/// [`SlidingWindowLayer::cost`](crate::SlidingWindowLayer::cost).
#[derive(Clone, Copy, Debug)]
pub struct CostFn<F>(pub(crate) F);

/// The settling closure given to
/// [`SlidingWindowLayer::settle`](crate::SlidingWindowLayer::settle),
/// shared: each settled request holds it, so cloning it costs a count.
#[derive(Debug)]
pub struct SettleFn<F>(pub(crate) Arc<F>);

impl<F> Clone for SettleFn<F> {
    fn clone(&self) -> Self {
        Self(Arc::clone(&self.0))
    }
}

/// One half of [`Weights`]: what a request costs.
pub trait RequestCost<B> {
    /// The units `request` reserves.
    fn cost(&self, request: &Request<B>) -> u32;
}

impl<B> RequestCost<B> for OneUnit {
    #[inline]
    fn cost(&self, _: &Request<B>) -> u32 {
        1
    }
}

impl<B, F: Fn(&Request<B>) -> u32> RequestCost<B> for CostFn<F> {
    fn cost(&self, request: &Request<B>) -> u32 {
        (self.0)(request)
    }
}

/// The other half of [`Weights`]: what a response settles its request at.
pub trait ResponseSettle<ResB> {
    /// The units really used; `None` keeps the reservation.
    fn settle(&self, response: &Response<ResB>) -> Option<u32>;

    /// Whether `settle` can answer anything but `None`.
    fn settles(&self) -> bool;
}

impl<ResB> ResponseSettle<ResB> for OneUnit {
    fn settle(&self, _: &Response<ResB>) -> Option<u32> {
        None
    }

    #[inline]
    fn settles(&self) -> bool {
        false
    }
}

impl<ResB, F: Fn(&Response<ResB>) -> Option<u32>> ResponseSettle<ResB> for SettleFn<F> {
    fn settle(&self, response: &Response<ResB>) -> Option<u32> {
        (self.0)(response)
    }

    fn settles(&self) -> bool {
        true
    }
}

impl<B, ResB, C: RequestCost<B>, S: ResponseSettle<ResB>> Weigh<B, ResB> for Weights<C, S> {
    #[inline]
    fn cost(&self, request: &Request<B>) -> u32 {
        self.cost.cost(request)
    }

    fn settle(&self, response: &Response<ResB>) -> Option<u32> {
        self.settle.settle(response)
    }

    #[inline]
    fn settles(&self) -> bool {
        self.settle.settles()
    }
}
