//! One decision in the in-memory store, against governor's keyed limiter and
//! a naive `Mutex<HashMap>`, in one run: a hot key and 100k keys, on one
//! thread and on two. The 100k keys are visited in a scattered order, as a
//! service's unrelated clients come, so that each call finds its key's
//! entry away from the last one's.
//!
//! `cargo bench --bench store`; ratios are printed at the end.

mod report;

use std::borrow::Cow;
use std::collections::HashMap;
use std::hint::black_box;
use std::net::{IpAddr, Ipv4Addr};
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput};
use governor::{Quota, RateLimiter};
use tower_sliding_window::store::MemoryBinding;
use tower_sliding_window::{
    bound_key, Algorithm, Clock, Limit, MemoryStore, Policy, SystemClock, DEFAULT_KEY_BOUND,
};

const KEYS: u64 = 100_000;

/// Anything that can judge a request for a `u64` key.
trait Limiter: Send + Sync {
    fn check(&self, key: u64) -> bool;
}

/// A memory store with a policy bound for both key types, as a layer binds
/// its policy once.
struct Ours<C: Clock> {
    store: MemoryStore<C>,
    by_number: MemoryBinding<u64>,
    by_ip: MemoryBinding<IpAddr>,
    by_text: MemoryBinding<String>,
}

impl<C: Clock> Ours<C> {
    fn new(store: MemoryStore<C>, policy: Policy) -> Self {
        Self {
            by_number: store.bind(&policy),
            by_ip: store.bind(&policy),
            by_text: store.bind(&policy),
            store,
        }
    }
}

impl<C: Clock> Limiter for Ours<C> {
    fn check(&self, key: u64) -> bool {
        self.store
            .decide_bound_now(key, &self.by_number)
            .is_allowed()
    }
}

/// [`Ours`] keyed by text made from the `u64` key, as a layer keyed by an
/// API key header keys its store; `bounded` passes the text through
/// [`bound_key`] as [`HeaderKey`](tower_sliding_window::extract::HeaderKey)
/// does, which keeps text this short as it is.
struct OursByText<C: Clock> {
    ours: Ours<C>,
    bounded: bool,
}

impl<C: Clock> Limiter for OursByText<C> {
    fn check(&self, key: u64) -> bool {
        let mut text = String::with_capacity(24);
        text.push_str("key-");
        text.push_str(itoa::Buffer::new().format(key));
        if self.bounded {
            if let Cow::Owned(digest) = bound_key(&text, DEFAULT_KEY_BOUND) {
                text = digest;
            }
        }
        self.ours
            .store
            .decide_bound_now(text, &self.ours.by_text)
            .is_allowed()
    }
}

/// [`Ours`] keyed by an IPv4 address made from the `u64` key, as a layer
/// keyed by peer IP keys its store: a key of 17 bytes, which makes its
/// entry larger than a `u64` key's.
struct OursByIp<C: Clock>(Ours<C>);

impl<C: Clock> Limiter for OursByIp<C> {
    fn check(&self, key: u64) -> bool {
        let ip = IpAddr::V4(Ipv4Addr::from(key as u32));
        self.0
            .store
            .decide_bound_now(ip, &self.0.by_ip)
            .is_allowed()
    }
}

fn ours(algorithm: Algorithm, max: u32, window: Duration) -> Ours<SystemClock> {
    let policy = Policy::new(algorithm, [Limit::new(max, window).unwrap()]).unwrap();
    Ours::new(MemoryStore::new(), policy)
}

/// A clock one microsecond further on at every read, after reading the
/// system clock as the others do (so it costs no less): every key's ring
/// then holds a known number of stamps inside the window, however fast
/// the machine. For one thread only: it steps with a plain read and
/// write, not an atomic add, which would order the memory accesses around
/// it as the system clock it stands in for does not.
#[derive(Clone, Default)]
struct SteppingClock(Arc<AtomicU64>);

impl Clock for SteppingClock {
    fn now(&self) -> Duration {
        Duration::from_micros(self.now_micros())
    }

    fn now_micros(&self) -> u64 {
        black_box(SystemClock.now_micros());
        let now = self.0.load(Ordering::Relaxed);
        self.0.store(now + 1, Ordering::Relaxed);
        now
    }
}

impl SteppingClock {
    /// Moves the clock `steps` ahead at once, as if that many calls went by.
    fn leap(&self, steps: u64) {
        self.0.fetch_add(steps, Ordering::Relaxed);
    }
}

/// A log (limit 100) whose every key holds `gaps + 1` stamps inside its
/// window at each call, the call's own included, and still accepts every
/// call: keys are visited in turn, one clock step apart, so each key's
/// calls are `keys` steps apart, and a window of `gaps` such gaps closes
/// exactly on the `gaps`-th newest stamp. With 99 gaps every key holds a
/// full ring of 100 stamps; with 9, ten inside its window, in a ring of 16
/// slots; with 3, four (see also [`OursByIp`]).
fn stepping_log(keys: u64, gaps: u64) -> (Ours<SteppingClock>, SteppingClock) {
    let limit = Limit::new(100, Duration::from_micros(gaps * keys)).unwrap();
    let clock = SteppingClock::default();
    let policy = Policy::new(Algorithm::SlidingLog, [limit]).unwrap();
    let log = Ours::new(MemoryStore::with_clock(clock.clone()), policy);
    (log, clock)
}

/// `limiter`, on `clock`, its every key's log filled before anything is
/// timed.
///
/// Filled in counting order: keys then take their heap memory in that
/// order, and the bench, visiting them in a scattered one, finds each
/// key's ring far from the last one's, as a service's unrelated clients
/// would. Filled in the order visited, a ring sat next to the last key's,
/// and how well the processor's prefetching followed depended on the
/// rings' sizes.
fn filled<L: Limiter>(limiter: L, clock: &SteppingClock, keys: u64) -> MustAccept<L> {
    for _ in 0..100 {
        for key in 0..keys {
            assert!(limiter.check(key));
        }
    }
    // A whole cycle of quiet: a key's first call in order then comes at
    // least a cycle after its last, and finds no more stamps inside its
    // window than it will from then on.
    clock.leap(keys);
    MustAccept(limiter)
}

/// The order the bench visits `keys` keys in: far from counting (a
/// multiple of a prime that divides no power of ten, so every key once),
/// so that a key's entry is seldom next to the last one's in the map or on
/// the heap, where the processor's prefetching would find it. Read from a
/// list, in order: working it out at each call would add a division to
/// every contender's time.
fn visiting_order(keys: u64) -> Arc<[u64]> {
    debug_assert!(
        !keys.is_multiple_of(7_919),
        "the step must be prime to the keys"
    );
    (0..keys).map(|i| i * 7_919 % keys).collect()
}

/// A limiter that stops the bench if it refuses: a refusal writes nothing
/// and would make a row cheaper than what it claims to time.
struct MustAccept<L>(L);

impl<L: Limiter> Limiter for MustAccept<L> {
    fn check(&self, key: u64) -> bool {
        let allowed = self.0.check(key);
        assert!(allowed, "a call the bench meant to accept was refused");
        allowed
    }
}

struct Governor(governor::DefaultKeyedRateLimiter<u64>);

impl Limiter for Governor {
    fn check(&self, key: u64) -> bool {
        self.0.check_key(&key).is_ok()
    }
}

/// [`Governor`] keyed by an IPv4 address made from the `u64` key, as
/// tower_governor keys it by peer IP: the peer for [`OursByIp`].
struct GovernorByIp(governor::DefaultKeyedRateLimiter<IpAddr>);

impl Limiter for GovernorByIp {
    fn check(&self, key: u64) -> bool {
        let ip = IpAddr::V4(Ipv4Addr::from(key as u32));
        self.0.check_key(&ip).is_ok()
    }
}

/// The obvious hand-written limiter: one lock around a map of fixed windows.
struct NaiveMutexMap {
    map: Mutex<HashMap<u64, (u64, u32)>>,
    start: Instant,
    max: u32,
}

impl Limiter for NaiveMutexMap {
    fn check(&self, key: u64) -> bool {
        let window = self.start.elapsed().as_secs();
        let mut map = self.map.lock().unwrap();
        let entry = map.entry(key).or_insert((window, 0));
        if entry.0 != window {
            *entry = (window, 0);
        }
        entry.1 += 1;
        entry.1 <= self.max
    }
}

/// The contenders, all with quotas that accept practically everything, so
/// every run measures the accepting path (the one that writes).
///
/// "ours log limit 100" has a 1 µs window: over 100k keys a key's calls
/// are far apart next to it, and its one stamp inside the window is in
/// the ring's first slots; on a hot key the window holds the calls of the
/// last microsecond or two (tens at these speeds; a call under about
/// 20 ns would fill it, and the row stops the bench rather than time
/// refusals). On one thread only, "ours log, full ring" keeps 100 stamps a
/// key inside the window, "ours log, 10 in window" ten and "ours log, 4 in
/// window" four, also with IP keys, beside "governor check_key, IP",
/// governor keyed by the same addresses.
fn contenders(keys: u64, threads: u64) -> Vec<(&'static str, Box<dyn Limiter>)> {
    let huge = u32::MAX;
    let mut contenders: Vec<(&'static str, Box<dyn Limiter>)> = vec![
        (
            "governor check_key",
            Box::new(Governor(RateLimiter::keyed(Quota::per_second(
                NonZeroU32::MAX,
            )))),
        ),
        (
            "ours counter",
            Box::new(ours(
                Algorithm::SlidingCounter,
                huge,
                Duration::from_secs(1),
            )),
        ),
        (
            "ours fixed",
            Box::new(ours(Algorithm::FixedWindow, huge, Duration::from_secs(1))),
        ),
        // governor's algorithm: a bucket that never empties at these speeds.
        (
            "ours token bucket",
            Box::new(ours(Algorithm::TokenBucket, huge, Duration::from_secs(1))),
        ),
        // A 1 µs window: every call accepts and records.
        (
            "ours log limit 100",
            Box::new(MustAccept(ours(
                Algorithm::SlidingLog,
                100,
                Duration::from_micros(1),
            ))),
        ),
        (
            "naive mutex map",
            Box::new(NaiveMutexMap {
                map: Mutex::new(HashMap::new()),
                start: Instant::now(),
                max: huge,
            }),
        ),
    ];
    if threads == 1 {
        let log = |gaps| {
            let (log, clock) = stepping_log(keys, gaps);
            filled(log, &clock, keys)
        };
        let log_by_ip = |gaps| {
            let (log, clock) = stepping_log(keys, gaps);
            filled(OursByIp(log), &clock, keys)
        };
        contenders.push(("ours log, full ring", Box::new(log(99))));
        contenders.push(("ours log, 10 in window", Box::new(log(9))));
        contenders.push(("ours log, 4 in window", Box::new(log(3))));
        contenders.push(("ours log, 4 in window, IP", Box::new(log_by_ip(3))));
        let governor_by_ip = RateLimiter::keyed(Quota::per_second(NonZeroU32::MAX));
        contenders.push((
            "governor check_key, IP",
            Box::new(GovernorByIp(governor_by_ip)),
        ));
        for (name, bounded) in [
            ("ours counter, text key", false),
            ("ours counter, text key bounded", true),
        ] {
            let ours = ours(Algorithm::SlidingCounter, huge, Duration::from_secs(1));
            contenders.push((name, Box::new(OursByText { ours, bounded })));
        }
    }
    contenders
}

const IDS: [&str; 13] = [
    "governor check_key",
    "ours counter",
    "ours fixed",
    "ours token bucket",
    "ours log limit 100",
    "naive mutex map",
    "ours log, full ring",
    "ours log, 10 in window",
    "ours log, 4 in window",
    "ours log, 4 in window, IP",
    "governor check_key, IP",
    "ours counter, text key",
    "ours counter, text key bounded",
];

fn single_thread(c: &mut Criterion, group_name: &str, keys: u64) {
    let mut group = c.benchmark_group(group_name);
    group.throughput(Throughput::Elements(1));
    let order = visiting_order(keys);
    for (name, limiter) in contenders(keys, 1) {
        for key in 0..keys {
            limiter.check(key);
        }
        let mut at = 0;
        group.bench_function(name, |b| {
            b.iter(|| {
                at = if at + 1 == order.len() { 0 } else { at + 1 };
                black_box(limiter.check(black_box(order[at])))
            })
        });
    }
    group.finish();
}

fn two_threads(c: &mut Criterion, group_name: &str, keys: u64) {
    let mut group = c.benchmark_group(group_name);
    group.throughput(Throughput::Elements(1));
    for (name, limiter) in contenders(keys, 2) {
        let limiter: Arc<dyn Limiter> = Arc::from(limiter);
        for key in 0..keys {
            limiter.check(key);
        }
        let order = visiting_order(keys);
        group.bench_function(name, |b| {
            // Time per decision with both threads working.
            b.iter_custom(|iters| timed_batch(&limiter, &order, 2, iters) / 2)
        });
    }
    group.finish();
}

/// One batch of `iters` decisions spread over `threads` threads, each
/// walking its own run of the keys in `order`.
fn timed_batch(limiter: &Arc<dyn Limiter>, order: &[u64], threads: u64, iters: u64) -> Duration {
    let keys = order.len();
    let start = Instant::now();
    std::thread::scope(|scope| {
        for thread in 0..threads as usize {
            let limiter = Arc::clone(limiter);
            scope.spawn(move || {
                let mut at = thread * (keys / threads as usize);
                for _ in 0..iters / threads {
                    at = if at + 1 >= keys { 0 } else { at + 1 };
                    black_box(limiter.check(black_box(order[at])));
                }
            });
        }
    });
    start.elapsed()
}

/// The same contenders timed in interleaved rounds, for ratios that a
/// burst of other work on the machine cannot tilt (see `report::paired`).
fn paired(title: &str, keys: u64, threads: u64) {
    let limiters: Vec<(&str, Arc<dyn Limiter>)> = contenders(keys, threads)
        .into_iter()
        .map(|(name, limiter)| (name, Arc::from(limiter)))
        .collect();
    let mut batches: Vec<(&str, report::Batch)> = limiters
        .iter()
        .map(|(name, limiter)| {
            for key in 0..keys {
                limiter.check(key);
            }
            let order = visiting_order(keys);
            let run: report::Batch = if threads == 1 {
                // No thread to start: a bare loop, as criterion times it.
                let mut at = 0;
                Box::new(move |iters| {
                    let start = Instant::now();
                    for _ in 0..iters {
                        at = if at + 1 == order.len() { 0 } else { at + 1 };
                        black_box(limiter.check(black_box(order[at])));
                    }
                    start.elapsed()
                })
            } else {
                // Time per decision with every thread working.
                Box::new(move |iters| timed_batch(limiter, &order, threads, iters) / threads as u32)
            };
            (*name, run)
        })
        .collect();
    report::paired(title, &mut batches, 31, Duration::from_millis(20), keys);
}

fn clocks(c: &mut Criterion) {
    let mut group = c.benchmark_group("clock read");
    group.bench_function("std Instant now", |b| b.iter(|| black_box(Instant::now())));
    group.bench_function("SystemClock", |b| {
        b.iter(|| black_box(SystemClock.now_micros()))
    });
    let quanta = governor::clock::QuantaClock::default();
    group.bench_function("quanta now", |b| {
        b.iter(|| black_box(governor::clock::Clock::now(&quanta)))
    });
    group.finish();
}

fn main() {
    let mut c = Criterion::default()
        .sample_size(30)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .configure_from_args();
    single_thread(&mut c, "one thread, hot key", 1);
    single_thread(&mut c, "one thread, 100k keys", KEYS);
    two_threads(&mut c, "two threads, hot key", 1);
    two_threads(&mut c, "two threads, 100k keys", KEYS);
    clocks(&mut c);
    c.final_summary();

    for group in [
        "one thread, hot key",
        "one thread, 100k keys",
        "two threads, hot key",
        "two threads, 100k keys",
    ] {
        report::print_group(group, &IDS, "governor check_key");
    }
    paired("one thread, hot key", 1, 1);
    paired("one thread, 100k keys", KEYS, 1);
    paired("two threads, hot key", 1, 2);
    paired("two threads, 100k keys", KEYS, 2);
    report::print_group(
        "clock read",
        &["std Instant now", "SystemClock", "quanta now"],
        "std Instant now",
    );
}
