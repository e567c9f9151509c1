//! The source document's vectors L, C and Q and the boundary burst (as
//! docs/design.md restates them), through the sans-IO algorithms.

use std::time::Duration;

use tower_sliding_window::algorithm::{FixedWindow, SlidingCounter, SlidingLog};
use tower_sliding_window::{Decision, Limit};

fn secs(s: f64) -> Duration {
    Duration::from_secs_f64(s)
}

fn five_per_30s() -> [Limit; 1] {
    [Limit::new(5, Duration::from_secs(30)).unwrap()]
}

/// Vector L: (time in s, arrivals, how many of them are accepted).
const VECTOR_L: [(u64, usize, usize); 6] = [
    (0, 1, 1),
    (5, 2, 2),
    (15, 2, 2),
    (25, 1, 0),
    (35, 1, 1),
    (40, 3, 2),
];

#[test]
fn vector_l_sliding_log() {
    let limits = five_per_30s();
    let mut log = SlidingLog::new();
    for (at, arrivals, accepted) in VECTOR_L {
        let outcomes: Vec<Decision> = (0..arrivals)
            .map(|_| log.decide(Duration::from_secs(at), &limits))
            .collect();
        let got = outcomes.iter().filter(|d| d.is_allowed()).count();
        assert_eq!(got, accepted, "at {at}s");
        // Accepted ones come first: the last arrivals at an instant are the refused ones.
        assert!(
            outcomes.iter().take(accepted).all(Decision::is_allowed),
            "at {at}s"
        );
    }
}

#[test]
fn vector_l_retry_after_is_exact() {
    let limits = five_per_30s();
    let mut log = SlidingLog::new();
    for at in [0, 5, 5, 15, 15] {
        assert!(log.decide(Duration::from_secs(at), &limits).is_allowed());
    }
    let refused = log.decide(Duration::from_secs(25), &limits);
    assert!(!refused.is_allowed());
    // The request from 0 s still counts at 30 s; one tick later it does not.
    assert_eq!(refused.retry_after(), Duration::from_micros(5_000_001));
    assert_eq!(refused.remaining(), 0);
    let mut probe = log.clone();
    assert!(!probe.decide(Duration::from_secs(30), &limits).is_allowed());
    assert!(log
        .decide(Duration::from_micros(30_000_001), &limits)
        .is_allowed());
}

/// Vector C's set-up: five accepted in the window [0, 30) at the given times.
fn counter_with_previous(times: &[f64]) -> SlidingCounter {
    let mut counter = SlidingCounter::new();
    for &t in times {
        assert!(counter.decide(secs(t), &five_per_30s()).is_allowed());
    }
    counter
}

#[test]
fn vector_c_sliding_counter() {
    let limits = five_per_30s();
    let mut counter = counter_with_previous(&[0.0, 5.0, 5.0, 15.0, 15.0]);
    assert!(
        !counter.decide(secs(35.0), &limits).is_allowed(),
        "35 s: 4.17 + 1 > 5"
    );
    assert!(
        counter.decide(secs(40.0), &limits).is_allowed(),
        "40 s: 3.33 + 1 <= 5"
    );
    assert!(
        !counter.decide(secs(40.0), &limits).is_allowed(),
        "40 s again: 4.33 + 1 > 5"
    );
}

#[test]
fn vector_q_counter_boundaries_are_exact() {
    let limits = five_per_30s();
    let counter = counter_with_previous(&[0.0, 5.0, 5.0, 15.0, 15.0]);

    let refused = counter.clone().decide(secs(33.0), &limits);
    assert!(!refused.is_allowed(), "33 s: 4.5 + 1 > 5");
    assert_eq!(
        refused.retry_after(),
        Duration::from_secs(3),
        "retry-after at 33 s is exactly 3 s"
    );

    assert!(
        !counter.clone().decide(secs(35.999), &limits).is_allowed(),
        "35.999 s still refused"
    );
    assert!(!counter
        .clone()
        .decide(Duration::from_micros(35_999_999), &limits)
        .is_allowed());
    assert!(
        counter.clone().decide(secs(36.0), &limits).is_allowed(),
        "36 s: exactly 5"
    );
}

#[test]
fn vector_q_log_accepts_where_counter_rejects() {
    let limits = five_per_30s();
    let early = [0.0, 0.2, 0.4, 0.6, 0.8];
    let mut log = SlidingLog::new();
    for t in early {
        assert!(log.decide(secs(t), &limits).is_allowed());
    }
    let mut counter = counter_with_previous(&early);
    assert!(
        log.decide(secs(33.0), &limits).is_allowed(),
        "the log looks back to 3 s and sees nothing"
    );
    assert!(
        !counter.decide(secs(33.0), &limits).is_allowed(),
        "the counter still charges 4.5"
    );
}

/// `limit` requests spread evenly over the last second before a fixed-window
/// boundary and `limit` more over the first second after it: (accepted, most
/// accepted in any closed window-length interval).
fn boundary_burst(
    mut decide: impl FnMut(Duration) -> bool,
    limit: u32,
    window: Duration,
) -> (usize, usize) {
    let mut accepted = Vec::new();
    let w = window.as_micros() as u64;
    let span = 1_000_000;
    let times = (0..limit as u64)
        .map(|i| w - span + i * span / limit as u64)
        .chain((0..limit as u64).map(|i| w + i * span / limit as u64));
    for t in times {
        let now = Duration::from_micros(t);
        if decide(now) {
            accepted.push(t);
        }
    }
    let densest = accepted
        .iter()
        .map(|&start| {
            accepted
                .iter()
                .filter(|&&t| t >= start && t <= start + w)
                .count()
        })
        .max()
        .unwrap_or(0);
    (accepted.len(), densest)
}

#[test]
fn boundary_burst_fixed_200_log_100_counter_101() {
    let window = Duration::from_secs(60);
    let limits = [Limit::new(100, window).unwrap()];
    // 100 per minute; the window before the boundary is idle but for the burst.
    let mut fixed = FixedWindow::new();
    let mut log = SlidingLog::new();
    let mut counter = SlidingCounter::new();
    let fixed_result = boundary_burst(|t| fixed.decide(t, &limits).is_allowed(), 100, window);
    let log_result = boundary_burst(|t| log.decide(t, &limits).is_allowed(), 100, window);
    let counter_result = boundary_burst(|t| counter.decide(t, &limits).is_allowed(), 100, window);
    assert_eq!(
        fixed_result.1, 200,
        "a fixed window lets twice the limit through"
    );
    assert_eq!(log_result.1, 100, "the log allows exactly the limit");
    assert_eq!(
        counter_result.1, 101,
        "the counter's approximation shows as one extra"
    );
}
