//! What a request costs and what its response settles it at: see
//! [`SlidingWindowLayer::cost`](crate::SlidingWindowLayer::cost) and
//! [`SlidingWindowLayer::settle`](crate::SlidingWindowLayer::settle).

use std::sync::Arc;

/// Gives a wrapper around a shared closure `Clone` (a reference count, so
/// the closure itself need not be `Clone`) and a `Debug` that names it.
/// Holding the closure shared rather than by its own type keeps the
/// layer's type nameable in a struct field.
macro_rules! shared_closure {
    ($name:ident<$($param:ident),+>) => {
        impl<$($param),+> Clone for $name<$($param),+> {
            fn clone(&self) -> Self {
                Self(std::sync::Arc::clone(&self.0))
            }
        }

        impl<$($param),+> std::fmt::Debug for $name<$($param),+> {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(concat!(stringify!($name), "(..)"))
            }
        }
    };
}
pub(crate) use shared_closure;

/// A request's cost in units, and what its response says it really used,
/// for requests of type `R` and responses of type `Res`.
pub trait Weigh<R, Res> {
    /// The units `request` reserves.
    fn cost(&self, request: &R) -> u32;

    /// The units the request behind `response` really used; `None` keeps
    /// the reservation.
    fn settle(&self, response: &Res) -> Option<u32>;

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
/// [`SlidingWindowLayer::cost`](crate::SlidingWindowLayer::cost), for
/// requests of type `R`.
pub struct CostFn<R>(pub(crate) Arc<dyn Fn(&R) -> u32 + Send + Sync>);

/// The settling closure given to
/// [`SlidingWindowLayer::settle`](crate::SlidingWindowLayer::settle), for
/// responses of type `Res`.
pub struct SettleFn<Res>(pub(crate) Arc<UnitsUsed<Res>>);

type UnitsUsed<Res> = dyn Fn(&Res) -> Option<u32> + Send + Sync;

shared_closure!(CostFn<R>);
shared_closure!(SettleFn<Res>);

/// One half of [`Weights`]: what a request of type `R` costs.
pub trait RequestCost<R> {
    /// The units `request` reserves.
    fn cost(&self, request: &R) -> u32;
}

impl<R> RequestCost<R> for OneUnit {
    #[inline]
    fn cost(&self, _: &R) -> u32 {
        1
    }
}

impl<R> RequestCost<R> for CostFn<R> {
    fn cost(&self, request: &R) -> u32 {
        (self.0)(request)
    }
}

/// The other half of [`Weights`]: what a response of type `Res` settles
/// its request at.
pub trait ResponseSettle<Res> {
    /// The units really used; `None` keeps the reservation.
    fn settle(&self, response: &Res) -> Option<u32>;

    /// Whether `settle` can answer anything but `None`.
    fn settles(&self) -> bool;
}

impl<Res> ResponseSettle<Res> for OneUnit {
    fn settle(&self, _: &Res) -> Option<u32> {
        None
    }

    #[inline]
    fn settles(&self) -> bool {
        false
    }
}

impl<Res> ResponseSettle<Res> for SettleFn<Res> {
    fn settle(&self, response: &Res) -> Option<u32> {
        (self.0)(response)
    }

    fn settles(&self) -> bool {
        true
    }
}

impl<R, Res, C: RequestCost<R>, S: ResponseSettle<Res>> Weigh<R, Res> for Weights<C, S> {
    #[inline]
    fn cost(&self, request: &R) -> u32 {
        self.cost.cost(request)
    }

    fn settle(&self, response: &Res) -> Option<u32> {
        self.settle.settle(response)
    }

    #[inline]
    fn settles(&self) -> bool {
        self.settle.settles()
    }
}
