//! A policy: the algorithm and the limits that judge one request together.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use crate::error::ConfigError;
use crate::layer::PolicyHeaders;
use crate::limit::Limit;
use crate::store::PolicyMaps;

/// How requests are counted against a window.
///
/// See the crate docs' "Choosing an algorithm" for when each fits.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Algorithm {
    /// Two counts per key and limit, the previous window's weighted by how
    /// much of it still overlaps the sliding window. Approximate: it assumes
    /// the previous window's requests were spread evenly.
    #[default]
    SlidingCounter,
    /// One timestamp per accepted request (at most the largest limit per key).
    /// Exact: no closed interval of one window's length ever holds more than
    /// the limit.
    SlidingLog,
    /// One count per fixed block of the clock. Cheapest, but a burst that
    /// straddles two blocks gets up to twice the limit through.
    FixedWindow,
}

/// An algorithm with one or more limits, judged all-or-nothing: a request is
/// accepted only if every limit accepts it, and only then recorded in all.
///
/// A policy is shared by every clone of the layer that carries it; its
/// identity (not its contents) separates its windows from other policies' in
/// a [`MemoryStore`](crate::MemoryStore). Cloning is cheap (one `Arc`).
///
/// ```
/// use tower_sliding_window::{Algorithm, Limit, Policy};
///
/// let free = Policy::new(Algorithm::SlidingCounter, [Limit::per_second(10), Limit::per_minute(100)])?
///     .named("free");
/// assert_eq!(free.label(), "free");
/// assert_eq!(free.signature(), "c10/1s,100/60s");
/// # Ok::<(), tower_sliding_window::ConfigError>(())
/// ```
#[derive(Clone)]
pub struct Policy {
    inner: Arc<PolicyInner>,
}

struct PolicyInner {
    id: u64,
    algorithm: Algorithm,
    limits: Box<[Limit]>,
    largest_max: u32,
    /// `largest_max`, at most the slots a memory store's log ring takes.
    log_capacity: u32,
    longest_window_micros: u64,
    signature: String,
    name: Option<String>,
    /// Header text, built the first time a layer needs it.
    headers: OnceLock<PolicyHeaders>,
    /// This policy's key states in the memory stores it is used with.
    maps: PolicyMaps,
    /// The Redis store's scripts written for this policy (peeking, then
    /// recording), built the first time each is needed.
    #[cfg(feature = "redis")]
    redis_scripts: [OnceLock<redis::Script>; 2],
    /// The metric keys labelled with this policy's label.
    #[cfg(feature = "metrics")]
    metric_keys: OnceLock<crate::observe::MetricKeys>,
}

/// What a policy is, without the caches derived from it (a Redis script's
/// text would fill a log line).
impl fmt::Debug for Policy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let inner = &self.inner;
        f.debug_struct("Policy")
            .field("id", &inner.id)
            .field("algorithm", &inner.algorithm)
            .field("limits", &inner.limits)
            .field("name", &inner.name)
            .finish_non_exhaustive()
    }
}

impl Policy {
    /// The most limits one policy may hold.
    pub const MAX_LIMITS: usize = 8;

    /// A policy judging requests by `algorithm` against every limit in `limits`.
    ///
    /// # Errors
    ///
    /// [`ConfigError::NoLimits`] for an empty list and
    /// [`ConfigError::TooManyLimits`] for more than [`Policy::MAX_LIMITS`].
    pub fn new(
        algorithm: Algorithm,
        limits: impl IntoIterator<Item = Limit>,
    ) -> Result<Self, ConfigError> {
        let limits: Box<[Limit]> = limits.into_iter().collect();
        if limits.is_empty() {
            return Err(ConfigError::NoLimits);
        }
        if limits.len() > Self::MAX_LIMITS {
            return Err(ConfigError::TooManyLimits(limits.len()));
        }
        static NEXT_ID: AtomicU64 = AtomicU64::new(1);
        let largest_max = limits.iter().map(Limit::max).max().unwrap_or(1);
        Ok(Self {
            inner: Arc::new(PolicyInner {
                id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
                algorithm,
                largest_max,
                log_capacity: largest_max.min(crate::core::MAX_SLOTS as u32),
                longest_window_micros: limits.iter().map(Limit::window_micros).max().unwrap_or(1),
                signature: signature(algorithm, &limits),
                limits,
                name: None,
                headers: OnceLock::new(),
                maps: PolicyMaps::default(),
                #[cfg(feature = "redis")]
                redis_scripts: Default::default(),
                #[cfg(feature = "metrics")]
                metric_keys: OnceLock::new(),
            }),
        })
    }

    /// The same policy (same windows) with a name, used as its label in
    /// metrics and logs instead of its [`signature`](Policy::signature).
    pub fn named(self, name: impl Into<String>) -> Self {
        let inner = &self.inner;
        Self {
            inner: Arc::new(PolicyInner {
                id: inner.id,
                algorithm: inner.algorithm,
                limits: inner.limits.clone(),
                largest_max: inner.largest_max,
                log_capacity: inner.log_capacity,
                longest_window_micros: inner.longest_window_micros,
                signature: inner.signature.clone(),
                name: Some(name.into()),
                headers: OnceLock::new(),
                maps: inner.maps.share(),
                #[cfg(feature = "redis")]
                redis_scripts: inner.redis_scripts.clone(),
                // A new name is a new label.
                #[cfg(feature = "metrics")]
                metric_keys: OnceLock::new(),
            }),
        }
    }

    /// The algorithm counting requests.
    pub fn algorithm(&self) -> Algorithm {
        self.inner.algorithm
    }

    /// The limits, in the order they were given.
    pub fn limits(&self) -> &[Limit] {
        &self.inner.limits
    }

    /// A process-unique number for this policy (shared by its clones).
    pub fn id(&self) -> u64 {
        self.inner.id
    }

    /// The largest `max` among the limits: the most timestamps a log keeps
    /// per key.
    pub fn largest_max(&self) -> u32 {
        self.inner.largest_max
    }

    /// The most stamps a memory store's log keeps for a key under this
    /// policy: [`largest_max`](Self::largest_max), up to the ring's bound.
    pub(crate) fn log_capacity(&self) -> u32 {
        self.inner.log_capacity
    }

    pub(crate) fn longest_window_micros(&self) -> u64 {
        self.inner.longest_window_micros
    }

    /// A short text naming the algorithm and limits, equal for equal
    /// policies in every process (unlike [`id`](Policy::id)), e.g. `l5/30s`
    /// or `c10/1s,100/60s`. Remote stores name state with it, so instances
    /// of one service share windows.
    pub fn signature(&self) -> &str {
        &self.inner.signature
    }

    /// The name given with [`named`](Policy::named), if any.
    pub fn name(&self) -> Option<&str> {
        self.inner.name.as_deref()
    }

    /// The name given with [`named`](Policy::named), else the signature: what
    /// metrics and logs call this policy (never a client's key).
    pub fn label(&self) -> &str {
        self.inner.name.as_deref().unwrap_or(&self.inner.signature)
    }

    pub(crate) fn maps(&self) -> &PolicyMaps {
        &self.inner.maps
    }

    #[cfg(feature = "metrics")]
    pub(crate) fn metric_keys(&self) -> &crate::observe::MetricKeys {
        self.inner
            .metric_keys
            .get_or_init(|| crate::observe::MetricKeys::new(self.label()))
    }

    pub(crate) fn headers(&self) -> &PolicyHeaders {
        self.inner.headers.get_or_init(|| PolicyHeaders::new(self))
    }

    /// The Redis store's script for this policy, made by `make` the
    /// first time it is needed.
    #[cfg(feature = "redis")]
    pub(crate) fn redis_script(
        &self,
        record: bool,
        make: impl FnOnce() -> redis::Script,
    ) -> &redis::Script {
        self.inner.redis_scripts[usize::from(record)].get_or_init(make)
    }
}

fn signature(algorithm: Algorithm, limits: &[Limit]) -> String {
    let tag = match algorithm {
        Algorithm::SlidingCounter => "c",
        Algorithm::SlidingLog => "l",
        Algorithm::FixedWindow => "f",
    };
    let limits: Vec<String> = limits
        .iter()
        .map(|limit| format!("{}/{}", limit.max(), limit.window_name()))
        .collect();
    format!("{tag}{}", limits.join(","))
}
