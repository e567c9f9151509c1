//! The scenarios: synthetic traffic sent through the real layer and memory
//! store (with a manual clock), and what each algorithm made of it.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::future::{ready, Ready};
use std::time::Duration;

use http::{Request, Response};
use tower::util::ServiceFn;
use tower::{service_fn, Layer, Service, ServiceExt};
use tower_sliding_window::layer::SlidingWindowWrapBody;
use tower_sliding_window::{
    Algorithm, Limit, ManualClock, MemoryStore, Policy, SlidingWindowLayer,
};

use super::traffic::{even, poisson_sources, Arrival, Mix, Rng};

/// The request extension naming the source, read by the key extractor.
#[derive(Clone, Copy)]
struct Source(u32);

type Handler = ServiceFn<fn(Request<()>) -> Ready<Result<Response<()>, Infallible>>>;
type KeyFn = fn(&Request<()>) -> Option<u32>;

fn ok(_: Request<()>) -> Ready<Result<Response<()>, Infallible>> {
    ready(Ok(Response::new(())))
}

fn source_key(request: &Request<()>) -> Option<u32> {
    request.extensions().get::<Source>().map(|source| source.0)
}

/// One policy behind the real layer, on its own memory store; all judges of
/// a scenario read one manual clock.
pub struct Judge {
    clock: ManualClock,
    service: SlidingWindowWrapBody<Handler, KeyFn, MemoryStore<ManualClock>>,
}

impl Judge {
    pub fn new(clock: &ManualClock, algorithm: Algorithm, limits: &[Limit]) -> Self {
        let policy = Policy::new(algorithm, limits.iter().copied()).expect("valid policy");
        let layer = SlidingWindowLayer::with_policy(policy, source_key as KeyFn)
            .store(MemoryStore::with_clock(clock.clone()))
            .wrap_body();
        Self {
            clock: clock.clone(),
            service: layer.layer(service_fn(ok as fn(_) -> _)),
        }
    }

    /// Whether the layer let this arrival through.
    pub async fn admits(&mut self, arrival: Arrival) -> bool {
        self.clock.set(Duration::from_micros(arrival.at_micros));
        let mut request = Request::new(());
        request.extensions_mut().insert(Source(arrival.source));
        let service = self.service.ready().await.expect("infallible");
        let response = service.call(request).await.expect("infallible");
        response.status().is_success()
    }
}

/// The most accepted requests in any closed interval of `window` µs.
pub fn densest(sorted_times: &[u64], window: u64) -> usize {
    let mut best = 0;
    let mut end = 0;
    for (start, &from) in sorted_times.iter().enumerate() {
        while end < sorted_times.len() && sorted_times[end] <= from + window {
            end += 1;
        }
        best = best.max(end - start);
    }
    best
}

fn secs(s: u64) -> u64 {
    s * 1_000_000
}

/// Accepted times per algorithm for one stream of arrivals.
async fn replay(arrivals: &[Arrival], judges: &mut [Judge]) -> Vec<Vec<u64>> {
    let mut accepted = vec![Vec::new(); judges.len()];
    for &arrival in arrivals {
        for (judge, times) in judges.iter_mut().zip(accepted.iter_mut()) {
            if judge.admits(arrival).await {
                times.push(arrival.at_micros);
            }
        }
    }
    accepted
}

/// Cumulative accepted count over time, for the chart.
pub type Series = Vec<(f64, f64)>;

fn cumulative(times: &[u64]) -> Series {
    times
        .iter()
        .enumerate()
        .map(|(i, &t)| (t as f64 / 1e6, (i + 1) as f64))
        .collect()
}

/// Many Poisson sources around the limit: how often the counter disagrees
/// with the exact log, and how far its estimate is from the real rate.
#[derive(Clone, Debug, PartialEq)]
pub struct ManySources {
    pub mix: Mix,
    pub sources: u32,
    pub requests: usize,
    pub limit: Limit,
    pub log_accepted: usize,
    pub counter_accepted: usize,
    pub fixed_accepted: usize,
    /// Requests the counter decided differently from the log.
    pub differ: usize,
    /// Requests the log accepted and the counter refused.
    pub counter_stricter: usize,
    /// Requests the log refused and the counter accepted.
    pub counter_laxer: usize,
    /// Sources the log never refused (never over the limit in any window).
    pub sources_under: u32,
    /// Of those, the ones the counter refused at least once.
    pub false_positive_sources: u32,
    /// Sources the log refused at least once.
    pub sources_over: u32,
    /// Of those, the ones the counter never refused.
    pub false_negative_sources: u32,
    /// Mean of |estimated - real| / real over the counter's decisions, where
    /// "real" counts the requests it accepted in the last window exactly.
    pub mean_rate_gap: f64,
}

pub async fn many_sources(seed: u64, mix: Mix, sources: u32, duration_secs: u64) -> ManySources {
    let limit = Limit::new(10, Duration::from_secs(60)).expect("valid");
    let w = limit.window().as_micros() as u64;
    let mut rng = Rng::new(seed);
    let (arrivals, _) = poisson_sources(&mut rng, mix, sources, secs(duration_secs), 10.0, w);
    let clock = ManualClock::new();
    let mut log = Judge::new(&clock, Algorithm::SlidingLog, &[limit]);
    let mut counter = Judge::new(&clock, Algorithm::SlidingCounter, &[limit]);
    let mut fixed = Judge::new(&clock, Algorithm::FixedWindow, &[limit]);

    let n = sources as usize;
    let (mut log_refused, mut counter_refused) = (vec![false; n], vec![false; n]);
    // The counter's own accepted stream per source: exact recent times, and
    // (fixed window, previous count, current count).
    let mut recent: Vec<VecDeque<u64>> = vec![VecDeque::new(); n];
    let mut tallies: Vec<(u64, u64, u64)> = vec![(0, 0, 0); n];
    let (mut gap_sum, mut gap_count) = (0.0, 0u64);
    let mut result = ManySources {
        mix,
        sources,
        requests: arrivals.len(),
        limit,
        log_accepted: 0,
        counter_accepted: 0,
        fixed_accepted: 0,
        differ: 0,
        counter_stricter: 0,
        counter_laxer: 0,
        sources_under: 0,
        false_positive_sources: 0,
        sources_over: 0,
        false_negative_sources: 0,
        mean_rate_gap: 0.0,
    };
    for &arrival in &arrivals {
        let s = arrival.source as usize;
        let now = arrival.at_micros;
        let by_log = log.admits(arrival).await;
        let by_counter = counter.admits(arrival).await;
        let by_fixed = fixed.admits(arrival).await;

        // How far the counter's estimate is from the exact count it stands for.
        let queue = &mut recent[s];
        while queue.front().is_some_and(|&t| t + w < now) {
            queue.pop_front();
        }
        let real = queue.len() as f64;
        let (k, elapsed) = (now / w, now % w);
        let tally = &mut tallies[s];
        if tally.0 != k {
            tally.1 = if k == tally.0 + 1 { tally.2 } else { 0 };
            tally.2 = 0;
            tally.0 = k;
        }
        let estimate = tally.1 as f64 * (w - elapsed) as f64 / w as f64 + tally.2 as f64;
        if real > 0.0 {
            gap_sum += (estimate - real).abs() / real;
            gap_count += 1;
        }
        if by_counter {
            queue.push_back(now);
            tally.2 += 1;
        }

        result.log_accepted += usize::from(by_log);
        result.counter_accepted += usize::from(by_counter);
        result.fixed_accepted += usize::from(by_fixed);
        if by_log != by_counter {
            result.differ += 1;
            if by_log {
                result.counter_stricter += 1;
            } else {
                result.counter_laxer += 1;
            }
        }
        log_refused[s] |= !by_log;
        counter_refused[s] |= !by_counter;
    }
    for s in 0..n {
        if log_refused[s] {
            result.sources_over += 1;
            result.false_negative_sources += u32::from(!counter_refused[s]);
        } else {
            result.sources_under += 1;
            result.false_positive_sources += u32::from(counter_refused[s]);
        }
    }
    result.mean_rate_gap = if gap_count == 0 {
        0.0
    } else {
        gap_sum / gap_count as f64
    };
    result
}

/// The document's boundary burst: `limit` requests in the last second before
/// a fixed-window boundary and `limit` more in the first second after it.
#[derive(Clone, Debug, PartialEq)]
pub struct Burst {
    pub limit: u32,
    /// Most accepted in any window-length interval, per algorithm.
    pub densest: Vec<(Algorithm, usize)>,
    pub series: Vec<(Algorithm, Series)>,
}

const ALGORITHMS: [Algorithm; 4] = [
    Algorithm::FixedWindow,
    Algorithm::SlidingLog,
    Algorithm::SlidingCounter,
    Algorithm::TokenBucket,
];

pub async fn boundary_burst() -> Burst {
    let limit = Limit::per_minute(100);
    let w = secs(60);
    let mut arrivals = even(0, 100, w - secs(1), secs(1));
    arrivals.extend(even(0, 100, w, secs(1)));
    let clock = ManualClock::new();
    let mut judges: Vec<Judge> = ALGORITHMS
        .iter()
        .map(|&a| Judge::new(&clock, a, &[limit]))
        .collect();
    let accepted = replay(&arrivals, &mut judges).await;
    Burst {
        limit: limit.max(),
        densest: ALGORITHMS
            .iter()
            .zip(&accepted)
            .map(|(&a, t)| (a, densest(t, w)))
            .collect(),
        series: ALGORITHMS
            .iter()
            .zip(&accepted)
            .map(|(&a, t)| (a, cumulative(t)))
            .collect(),
    }
}

/// A full previous window bunched at its start or its end, then a steady
/// probe: how many probes each algorithm accepts in the next half window.
#[derive(Clone, Debug, PartialEq)]
pub struct Clustering {
    pub limit: u32,
    pub probes: usize,
    /// (where the previous window's traffic bunched, accepted probes per algorithm)
    pub outcomes: Vec<(&'static str, Vec<(Algorithm, usize)>)>,
}

pub async fn clustering() -> Clustering {
    let limit = Limit::per_minute(100);
    let w = secs(60);
    // Five probes a second through the first half of the next window.
    let probes = even(0, 150, w, w / 2);
    let mut outcomes = Vec::new();
    for (label, from) in [
        ("start of the previous window", 0),
        ("end of the previous window", w - secs(6)),
    ] {
        let mut arrivals = even(0, 100, from, secs(6));
        arrivals.extend(probes.iter().copied());
        let clock = ManualClock::new();
        let mut judges: Vec<Judge> = ALGORITHMS
            .iter()
            .map(|&a| Judge::new(&clock, a, &[limit]))
            .collect();
        let accepted = replay(&arrivals, &mut judges).await;
        let in_probe_phase = |times: &Vec<u64>| times.iter().filter(|&&t| t >= w).count();
        outcomes.push((
            label,
            ALGORITHMS
                .iter()
                .zip(&accepted)
                .map(|(&a, t)| (a, in_probe_phase(t)))
                .collect(),
        ));
    }
    Clustering {
        limit: limit.max(),
        probes: probes.len(),
        outcomes,
    }
}

/// An attacker who knows the window and its alignment: silent until `lead`
/// before a minute boundary, then a request every 10 ms for 90 s more. It
/// tries several leads against each defence and keeps the one that gains most.
#[derive(Clone, Debug, PartialEq)]
pub struct Shaping {
    pub limit: u32,
    /// (defence, best lead in s, most accepted in any 60 s interval, extra over the limit)
    pub gains: Vec<(&'static str, u64, usize, i64)>,
    pub series: Vec<(&'static str, Series)>,
}

pub async fn shaping() -> Shaping {
    let per_minute = Limit::per_minute(100);
    let per_second = Limit::per_second(5);
    let w = secs(60);
    let defences: [(&'static str, Algorithm, Vec<Limit>); 5] = [
        (
            "fixed window, 100/min",
            Algorithm::FixedWindow,
            vec![per_minute],
        ),
        (
            "sliding counter, 100/min",
            Algorithm::SlidingCounter,
            vec![per_minute],
        ),
        (
            "sliding counter, 5/s + 100/min",
            Algorithm::SlidingCounter,
            vec![per_second, per_minute],
        ),
        (
            "sliding log, 100/min",
            Algorithm::SlidingLog,
            vec![per_minute],
        ),
        (
            "token bucket, 100/min",
            Algorithm::TokenBucket,
            vec![per_minute],
        ),
    ];
    let mut gains = Vec::new();
    let mut series = Vec::new();
    for (name, algorithm, limits) in &defences {
        let mut best: Option<(u64, usize, Vec<u64>)> = None;
        for lead in [1, 2, 5, 10, 20, 30, 40] {
            let span = secs(lead + 90);
            let arrivals = even(0, span / 10_000, w - secs(lead), span);
            let clock = ManualClock::new();
            let mut judge = [Judge::new(&clock, *algorithm, limits)];
            let accepted = replay(&arrivals, &mut judge).await.remove(0);
            let most = densest(&accepted, w);
            if best.as_ref().is_none_or(|(_, top, _)| most > *top) {
                best = Some((lead, most, accepted));
            }
        }
        let (lead, most, accepted) = best.expect("at least one lead tried");
        gains.push((*name, lead, most, most as i64 - i64::from(per_minute.max())));
        series.push((*name, cumulative(&accepted)));
    }
    Shaping {
        limit: per_minute.max(),
        gains,
        series,
    }
}
