//! A policy: the algorithm and the limits that judge one request together.

use std::fmt;
use std::hash::{BuildHasher, Hash, Hasher};
use std::sync::{Arc, LazyLock, OnceLock};
use std::time::Duration;

use crate::algorithm::{log, Algorithm, Decision, INLINE_LIMITS};
use crate::error::ConfigError;
use crate::limit::{duration_name, Limit};

/// What a request's cost asks of a store (see [`Policy::weigh`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Weighed {
    /// Judged by the algorithms, and recorded if it passes.
    Judged,
    /// Judged as one unit, recorded nowhere, and passed.
    Peek,
    /// Refused unjudged: more than some limit ever holds.
    TooCostly,
}

/// An algorithm with one or more limits, judged all-or-nothing: a request is
/// accepted only if every limit accepts it, and only then recorded in all.
///
/// A policy is a plain value: its algorithm, its limits, its name and its
/// [penalty](Policy::with_penalty). Two
/// policies built apart with equal values are equal, hash alike, and find
/// the same windows in a store (see [`Store`](crate::Store)), so a plan may
/// build its policy from data on every request. Cloning is cheap (one `Arc`).
///
/// ```
/// use tower_sliding_window::{Algorithm, Limit, Policy};
///
/// let free = Policy::new(Algorithm::SlidingCounter, [Limit::per_second(10), Limit::per_minute(100)])?
///     .named("free");
/// assert_eq!(free.label(), "free");
/// assert_eq!(free.signature(), "c10/1s,100/60s");
/// let again = Policy::new(Algorithm::SlidingCounter, ["10/s".parse()?, "100/min".parse()?])?.named("free");
/// assert_eq!(free, again);
/// # Ok::<(), tower_sliding_window::ConfigError>(())
/// ```
#[derive(Clone)]
pub struct Policy {
    inner: Arc<PolicyInner>,
}

struct PolicyInner {
    algorithm: Algorithm,
    limits: Limits,
    name: Option<Box<str>>,
    /// How long a refusal shuts the key out, µs; 0 for no penalty.
    penalty_micros: u64,
    /// The most requests of a key in flight at once; 0 for no cap.
    in_flight: u32,
    // Derived from the fields above, kept so that stores and lookups
    // need not work them out on every request.
    /// Written the first time it is asked for: a plan that builds its
    /// policy per request for the memory store never needs it.
    signature: OnceLock<Box<str>>,
    hash: u64,
    smallest_max: u32,
    largest_max: u32,
    longest_window_micros: u64,
    log_capacity: u32,
}

impl fmt::Debug for Policy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let inner = &self.inner;
        f.debug_struct("Policy")
            .field("algorithm", &inner.algorithm)
            .field("limits", &inner.limits.as_slice())
            .field("name", &inner.name)
            .field("penalty", &self.penalty())
            .field("in_flight", &self.in_flight())
            .finish()
    }
}

impl PartialEq for Policy {
    #[inline]
    fn eq(&self, other: &Self) -> bool {
        let (a, b) = (&*self.inner, &*other.inner);
        Arc::ptr_eq(&self.inner, &other.inner)
            || (a.hash == b.hash
                && a.algorithm == b.algorithm
                && a.limits.as_slice() == b.limits.as_slice()
                && a.name == b.name
                && a.penalty_micros == b.penalty_micros
                && a.in_flight == b.in_flight)
    }
}

impl Eq for Policy {}

impl Hash for Policy {
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write_u64(self.inner.hash);
    }
}

impl Policy {
    /// The most limits one policy may hold.
    pub const MAX_LIMITS: usize = INLINE_LIMITS;

    /// A policy judging requests by `algorithm` against every limit in `limits`.
    ///
    /// # Errors
    ///
    /// [`ConfigError::NoLimits`] for an empty list (a policy that only caps
    /// requests in flight is [`Policy::in_flight_only`]) and
    /// [`ConfigError::TooManyLimits`] for more than [`Policy::MAX_LIMITS`].
    pub fn new(
        algorithm: Algorithm,
        limits: impl IntoIterator<Item = Limit>,
    ) -> Result<Self, ConfigError> {
        let limits = Limits::collect(limits);
        match limits.as_slice().len() {
            0 => return Err(ConfigError::NoLimits),
            n if n > Self::MAX_LIMITS => return Err(ConfigError::TooManyLimits(n)),
            _ => {}
        }
        Ok(Self::build(algorithm, limits, None, 0, 0))
    }

    /// A policy with no rate limit, only a cap of `max` requests of a key
    /// in flight at once (see [`with_in_flight`](Policy::with_in_flight)).
    /// Its decisions name no [`Limit`]; a request's cost does not matter.
    ///
    /// # Panics
    ///
    /// If `max` is 0, which would refuse every request.
    pub fn in_flight_only(max: u32) -> Self {
        assert_cap(max);
        Self::build(Algorithm::default(), Limits::collect([]), None, 0, max)
    }

    /// The same policy with a cap: at most `max` requests of a key
    /// admitted and not yet over at once, on top of the rate limits, all
    /// judged together (a request the cap refuses records nothing in any
    /// window, one a window refuses takes no slot). A request takes one
    /// slot whatever its cost. The cap is part of the policy's value.
    ///
    /// # Panics
    ///
    /// If `max` is 0, which would refuse every request.
    pub fn with_in_flight(self, max: u32) -> Self {
        assert_cap(max);
        let inner = &self.inner;
        Self::build(
            inner.algorithm,
            inner.limits.clone(),
            inner.name.clone(),
            inner.penalty_micros,
            max,
        )
    }

    /// The cap given with [`with_in_flight`](Policy::with_in_flight), if any.
    #[inline]
    pub fn in_flight(&self) -> Option<u32> {
        (self.inner.in_flight > 0).then_some(self.inner.in_flight)
    }

    fn build(
        algorithm: Algorithm,
        limits: Limits,
        name: Option<Box<str>>,
        penalty_micros: u64,
        in_flight: u32,
    ) -> Self {
        // Seeded once per process, so that policies built from data cannot
        // be chosen to collide.
        static SEED: LazyLock<foldhash::fast::RandomState> = LazyLock::new(Default::default);
        let hash = SEED.hash_one((
            algorithm,
            limits.as_slice(),
            &name,
            penalty_micros,
            in_flight,
        ));
        let maxes = limits.as_slice().iter().map(Limit::max);
        Self {
            inner: Arc::new(PolicyInner {
                signature: OnceLock::new(),
                // With no limit, any cost passes: a request takes one slot.
                smallest_max: maxes.clone().min().unwrap_or(u32::MAX),
                largest_max: maxes.max().unwrap_or(1),
                longest_window_micros: limits
                    .as_slice()
                    .iter()
                    .map(Limit::window_micros)
                    .max()
                    .unwrap_or(1),
                log_capacity: log::capacity_for(limits.as_slice()),
                algorithm,
                limits,
                name,
                penalty_micros,
                in_flight,
                hash,
            }),
        }
    }

    /// The same algorithm and limits under a name, used as its label in
    /// metrics and logs instead of its [`signature`](Policy::signature).
    /// A name is a label value: name policies from a bounded set (a tier,
    /// not a tenant id), or metrics get a series per name.
    /// The name is part of the policy's value: a named policy keeps windows
    /// apart from the unnamed one and from other names.
    pub fn named(self, name: impl Into<String>) -> Self {
        let inner = &self.inner;
        Self::build(
            inner.algorithm,
            inner.limits.clone(),
            Some(name.into().into_boxed_str()),
            inner.penalty_micros,
            inner.in_flight,
        )
    }

    /// The same policy with a penalty: a refusal shuts the key out for
    /// `penalty` from that instant. That refusal answers `Retry-After` with
    /// the whole penalty; every request for the key during it is refused
    /// with the time left, records nothing and does not extend it; after
    /// it, the key is judged by its windows as usual. A zero `penalty` is
    /// none; one is counted in whole microseconds, rounded up, and at most
    /// [`Limit::MAX_WINDOW`]. The penalty is part of the policy's value.
    pub fn with_penalty(self, penalty: Duration) -> Self {
        let micros = penalty.min(Limit::MAX_WINDOW).as_nanos().div_ceil(1_000) as u64;
        let inner = &self.inner;
        Self::build(
            inner.algorithm,
            inner.limits.clone(),
            inner.name.clone(),
            micros,
            inner.in_flight,
        )
    }

    /// The penalty given with [`with_penalty`](Policy::with_penalty), if any.
    pub fn penalty(&self) -> Option<Duration> {
        (self.inner.penalty_micros > 0).then(|| Duration::from_micros(self.inner.penalty_micros))
    }

    #[inline]
    pub(crate) fn penalty_micros(&self) -> u64 {
        self.inner.penalty_micros
    }

    /// The algorithm counting requests.
    #[inline]
    pub fn algorithm(&self) -> Algorithm {
        self.inner.algorithm
    }

    /// The limits, in the order they were given.
    #[inline]
    pub fn limits(&self) -> &[Limit] {
        self.inner.limits.as_slice()
    }

    /// The limit a decision stands on when none of the limits made it (a
    /// store's own refusal, a failure policy's admission): the first, or,
    /// for a policy with only a cap, the cap per second.
    pub(crate) fn first_limit(&self) -> Limit {
        let cap = self.inner.in_flight.max(1);
        self.limits()
            .first()
            .copied()
            .unwrap_or(Limit::per_second(cap))
    }

    /// `decision`, a stand-in for the limits on [`first_limit`](Self::first_limit),
    /// naming no limit if this policy has none.
    pub(crate) fn stand_in(&self, decision: Decision) -> Decision {
        if self.limits().is_empty() {
            decision.naming_no_limit()
        } else {
            decision
        }
    }

    /// The largest `max` among the limits: the most timestamps a log keeps
    /// per key.
    #[inline]
    pub fn largest_max(&self) -> u32 {
        self.inner.largest_max
    }

    /// The most stamps a sliding log keeps for one key under this policy.
    #[inline]
    pub(crate) fn log_capacity(&self) -> u32 {
        self.inner.log_capacity
    }

    /// How every store takes a request of `cost` units: the algorithms
    /// judge it from 1 to every limit's `max`; 0 passes and records
    /// nothing (a peek); more never passes.
    #[inline]
    pub(crate) fn weigh(&self, cost: u32) -> Weighed {
        if cost.wrapping_sub(1) < self.inner.smallest_max {
            Weighed::Judged
        } else if cost == 0 {
            Weighed::Peek
        } else {
            Weighed::TooCostly
        }
    }

    /// Whether `other` is this very policy, not only an equal value.
    #[inline(always)]
    pub(crate) fn is(&self, other: &Policy) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    /// The hash of the policy's value, seeded once per process: stores mix
    /// it into a key's hash to find the key's state under this policy.
    #[inline]
    pub(crate) fn value_hash(&self) -> u64 {
        self.inner.hash
    }

    /// The longest window among the limits.
    pub fn longest_window(&self) -> Duration {
        Duration::from_micros(self.longest_window_micros())
    }

    #[inline]
    pub(crate) fn longest_window_micros(&self) -> u64 {
        self.inner.longest_window_micros
    }

    /// The same name, with `algorithm` and `limits`.
    pub(crate) fn with_rules(
        &self,
        algorithm: Algorithm,
        limits: impl IntoIterator<Item = Limit>,
    ) -> Result<Self, ConfigError> {
        let limits = Limits::collect(limits);
        match limits.as_slice().len() {
            0 if self.in_flight().is_none() => return Err(ConfigError::NoLimits),
            n if n > Self::MAX_LIMITS => return Err(ConfigError::TooManyLimits(n)),
            _ => {}
        }
        let inner = &self.inner;
        Ok(Self::build(
            algorithm,
            limits,
            inner.name.clone(),
            inner.penalty_micros,
            inner.in_flight,
        ))
    }

    /// The share of this policy one of `instances` instances enforces
    /// alone: every limit's `max` and the in-flight cap divided by their
    /// number, rounded up and at least 1, with the same windows, name and
    /// penalty.
    #[cfg(feature = "redis")]
    pub(crate) fn shared_by(&self, instances: usize) -> Self {
        let instances = u32::try_from(instances).unwrap_or(u32::MAX).max(1);
        if instances == 1 {
            return self.clone();
        }
        let inner = &self.inner;
        let limits = inner.limits.as_slice().iter();
        let shares = limits.map(|limit| limit.with_max(limit.max().div_ceil(instances)));
        Self::build(
            inner.algorithm,
            Limits::collect(shares),
            inner.name.clone(),
            inner.penalty_micros,
            inner.in_flight.div_ceil(instances),
        )
    }

    /// A short text naming the algorithm and limits, e.g. `l5/30s` or
    /// `c10/1s,100/60s`: equal for equal algorithms and limits in every
    /// process. Remote stores name state with it and the name.
    pub fn signature(&self) -> &str {
        let inner = &self.inner;
        inner.signature.get_or_init(|| {
            let mut signature = signature(inner.algorithm, inner.limits.as_slice());
            if inner.penalty_micros > 0 {
                signature.push_str(&format!(";p{}", duration_name(inner.penalty_micros)));
            }
            if inner.in_flight > 0 {
                signature.push_str(&format!(";i{}", inner.in_flight));
            }
            signature.into()
        })
    }

    /// The name given with [`named`](Policy::named), if any.
    pub fn name(&self) -> Option<&str> {
        self.inner.name.as_deref()
    }

    /// The name given with [`named`](Policy::named), else the signature: what
    /// metrics and logs call a layer's own policy (never a client's key). An
    /// unnamed policy a plan chose is called `unnamed` there instead, so
    /// that limits built per tenant make no series per tenant.
    pub fn label(&self) -> &str {
        self.name().unwrap_or_else(|| self.signature())
    }
}

/// A policy's limits: up to two, as nearly every policy has, inside the
/// policy's own allocation, so that a store comparing a policy rebuilt per
/// request with the one an entry holds reads one allocation, not two.
#[derive(Clone)]
enum Limits {
    Few { len: u8, limits: [Limit; 2] },
    Many(Box<[Limit]>),
}

impl Limits {
    fn collect(limits: impl IntoIterator<Item = Limit>) -> Self {
        let mut limits = limits.into_iter();
        let Some(first) = limits.next() else {
            return Self::Many(Box::new([]));
        };
        let Some(second) = limits.next() else {
            return Self::Few {
                len: 1,
                limits: [first, first],
            };
        };
        match limits.next() {
            None => Self::Few {
                len: 2,
                limits: [first, second],
            },
            Some(third) => Self::Many([first, second, third].into_iter().chain(limits).collect()),
        }
    }

    #[inline]
    fn as_slice(&self) -> &[Limit] {
        match self {
            Self::Few { len, limits } => &limits[..usize::from(*len)],
            Self::Many(limits) => limits,
        }
    }
}

fn assert_cap(max: u32) {
    assert!(max > 0, "an in-flight cap of 0 would refuse every request");
}

fn signature(algorithm: Algorithm, limits: &[Limit]) -> String {
    let tag = algorithm.letter();
    let limits: Vec<String> = limits
        .iter()
        .map(|limit| format!("{}/{}", limit.max(), limit.window_name()))
        .collect();
    format!("{tag}{}", limits.join(","))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_values_are_equal_policies_and_names_tell_them_apart() {
        let make = || Policy::new(Algorithm::SlidingLog, [Limit::per_second(5)]).unwrap();
        let (a, b) = (make(), make());
        assert_eq!(a, b);
        let hash = |p: &Policy| foldhash::fast::FixedState::with_seed(1).hash_one(p);
        assert_eq!(hash(&a), hash(&b));
        assert_ne!(a, b.clone().named("login"));
        assert_eq!(a.clone().named("login"), b.named("login"));
        let counter = Policy::new(Algorithm::SlidingCounter, [Limit::per_second(5)]).unwrap();
        assert_ne!(a, counter);
    }

    #[test]
    #[cfg(feature = "redis")]
    fn a_share_divides_every_max_rounding_up() {
        let policy = Policy::new(
            Algorithm::SlidingCounter,
            [
                Limit::per_second(10),
                Limit::per_minute(100),
                Limit::per_hour(2),
            ],
        )
        .unwrap()
        .named("free");
        let share = policy.shared_by(4);
        let maxes: Vec<u32> = share.limits().iter().map(Limit::max).collect();
        assert_eq!(maxes, [3, 25, 1]);
        assert_eq!(share.name(), Some("free"));
        assert_eq!(share.limits()[1].window(), Duration::from_secs(60));
        assert!(policy.shared_by(1).is(&policy));
        assert!(policy.shared_by(0).is(&policy));
    }
}
