//! Replays the traffic of the source document's tables (and of vector T,
//! the token bucket it points to next) through the real layer, on the
//! in-memory store with a manual clock, and prints each table with the
//! outcomes the layer gave.
//!
//! Run with `cargo run --example demo`.

use std::convert::Infallible;
use std::time::Duration;

use http::{Request, Response};
use tower::{service_fn, ServiceBuilder, ServiceExt};
use tower_sliding_window::{Algorithm, Limit, ManualClock, MemoryStore, SlidingWindowLayer};

type Outcome = (u16, Option<String>);

/// A layer-wrapped service plus the clock its store reads.
struct Bench {
    clock: ManualClock,
    algorithm: Algorithm,
    limit: Limit,
}

impl Bench {
    fn new(algorithm: Algorithm, limit: Limit) -> Self {
        Self {
            clock: ManualClock::new(),
            algorithm,
            limit,
        }
    }

    /// Sends requests at the given times (in seconds) and returns each status
    /// and `Retry-After`.
    async fn replay(&self, times: &[f64]) -> Vec<Outcome> {
        let layer = SlidingWindowLayer::new(self.limit, |_: &Request<()>| Some("client"))
            .algorithm(self.algorithm)
            .store(MemoryStore::with_clock(self.clock.clone()))
            .wrap_body();
        let svc = ServiceBuilder::new()
            .layer(layer)
            .service(service_fn(|_| async {
                Ok::<_, Infallible>(Response::new(()))
            }));
        let mut outcomes = Vec::new();
        for &t in times {
            self.clock.set(Duration::from_secs_f64(t));
            let response = svc
                .clone()
                .oneshot(Request::new(()))
                .await
                .expect("infallible");
            let retry = response
                .headers()
                .get("retry-after")
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned);
            outcomes.push((response.status().as_u16(), retry));
        }
        outcomes
    }
}

/// Counts how many outcomes match the document, and names those that do not.
#[derive(Default)]
struct Checks {
    passed: usize,
    failed: Vec<String>,
}

impl Checks {
    fn expect(&mut self, what: &str, got: &Outcome, accepted: bool, retry_after: Option<&str>) {
        let ok = (got.0 == 200) == accepted
            && retry_after.is_none_or(|expected| got.1.as_deref() == Some(expected));
        if ok {
            self.passed += 1;
        } else {
            self.failed.push(format!("{what}: got {}", describe(got)));
        }
    }

    fn expect_count(&mut self, what: &str, got: usize, expected: usize) {
        if got == expected {
            self.passed += 1;
        } else {
            self.failed
                .push(format!("{what}: got {got}, the document says {expected}"));
        }
    }
}

fn describe(outcome: &Outcome) -> String {
    match outcome {
        (200, _) => "accepted".into(),
        (status, Some(retry)) => format!("rejected ({status}, Retry-After: {retry})"),
        (status, None) => format!("rejected ({status})"),
    }
}

fn five_per_30s() -> Limit {
    Limit::new(5, Duration::from_secs(30)).expect("a valid limit")
}

async fn vector_l(checks: &mut Checks) {
    println!("Sliding window log, 30 s window, limit 5 (the document's first table)\n");
    println!(
        "{:<6} {:<9} {:<29} {:<47} counter, same traffic",
        "time", "arrivals", "document says", "log through the layer"
    );
    // (time, arrivals, accepted of them, what the document says)
    let rows: [(f64, usize, usize, &str); 6] = [
        (0.0, 1, 1, "accepted"),
        (5.0, 2, 2, "both accepted (count 3)"),
        (15.0, 2, 2, "both accepted (count 5)"),
        (25.0, 1, 0, "rejected, at the limit"),
        (35.0, 1, 1, "accepted, 0 s has expired"),
        (40.0, 3, 2, "two accepted, third rejected"),
    ];
    let times: Vec<f64> = rows
        .iter()
        .flat_map(|&(t, n, _, _)| std::iter::repeat_n(t, n))
        .collect();
    let log = Bench::new(Algorithm::SlidingLog, five_per_30s())
        .replay(&times)
        .await;
    let counter = Bench::new(Algorithm::SlidingCounter, five_per_30s())
        .replay(&times)
        .await;
    let mut at = 0;
    for (t, n, accepted, says) in rows {
        for (i, outcome) in log[at..at + n].iter().enumerate() {
            // 5 s and one tick until the blocking request leaves: 6 s, rounded up.
            let retry = (i >= accepted).then_some("6");
            checks.expect(
                &format!("log at {t}s, arrival {}", i + 1),
                outcome,
                i < accepted,
                retry,
            );
        }
        let got = |outcomes: &[Outcome]| {
            outcomes[at..at + n]
                .iter()
                .map(describe)
                .collect::<Vec<_>>()
                .join(", ")
        };
        println!(
            "{:<6} {:<9} {:<29} {:<47} {}",
            format!("{t}s"),
            n,
            says,
            got(&log),
            got(&counter)
        );
        at += n;
    }
    println!();
}

async fn vectors_c_and_q(checks: &mut Checks) {
    println!("Sliding window counter, 30 s window, limit 5; the window [0 s, 30 s) accepted 5\n");
    println!(
        "{:<14} {:<8} {:<9} {:<26} counter through the layer",
        "time", "1 - x", "weighted", "document says"
    );
    let spread = [0.0, 5.0, 5.0, 15.0, 15.0];
    // (times after the set-up, 1 - x, weighted, the document, accepted, Retry-After)
    type Row<'a> = (&'a [f64], &'a str, &'a str, &'a str, bool, Option<&'a str>);
    let rows: [Row; 6] = [
        (&[35.0], "5/6", "4.17", "rejected (5.17 > 5)", false, None),
        (&[40.0], "2/3", "3.33", "accepted (4.33)", true, None),
        (
            &[40.0, 40.0],
            "2/3",
            "4.33",
            "rejected (5.33 > 5)",
            false,
            None,
        ),
        (
            &[33.0],
            "9/10",
            "4.50",
            "rejected, retry in 3 s",
            false,
            Some("3"),
        ),
        (
            &[35.999],
            "0.80003",
            "4.0002",
            "rejected (just under 36 s)",
            false,
            None,
        ),
        (&[36.0], "4/5", "4.00", "accepted (exactly 5)", true, None),
    ];
    for (times, one_minus_x, weighted, says, accepted, retry) in rows {
        let bench = Bench::new(Algorithm::SlidingCounter, five_per_30s());
        let history: Vec<f64> = spread.iter().chain(times).copied().collect();
        let outcomes = bench.replay(&history).await;
        let last = outcomes.last().expect("at least one request");
        checks.expect(&format!("counter at {times:?} s"), last, accepted, retry);
        let label = if times.len() > 1 {
            format!("{}s again", times[0])
        } else {
            format!("{}s", times[0])
        };
        println!(
            "{:<14} {:<8} {:<9} {:<26} {}",
            label,
            one_minus_x,
            weighted,
            says,
            describe(last)
        );
    }
    println!();

    println!(
        "Where they disagree: the five requests of [0 s, 30 s) all came in its first second\n"
    );
    let early = [0.0, 0.2, 0.4, 0.6, 0.8, 33.0];
    for (algorithm, accepted) in [
        (Algorithm::SlidingLog, true),
        (Algorithm::SlidingCounter, false),
    ] {
        let outcomes = Bench::new(algorithm, five_per_30s()).replay(&early).await;
        checks.expect(
            &format!("{algorithm:?} at 33 s after an early burst"),
            &outcomes[5],
            accepted,
            None,
        );
        println!(
            "  {:<16} at 33 s: {}",
            format!("{algorithm:?}"),
            describe(&outcomes[5])
        );
    }
    println!("  (the log looks back to 3 s and sees nothing; the counter still charges 4.5)\n");
}

/// Vector T: the token bucket the document points to next, 5 per 30 s.
async fn vector_t(checks: &mut Checks) {
    println!("Token bucket (GCRA), 30 s window, limit 5: five tokens, one back every 6 s\n");
    println!(
        "{:<6} {:<9} {:<44} through the layer",
        "time", "arrivals", "spec says"
    );
    // (time, arrivals, accepted of them, retry-after of the refusal, what the spec says)
    let rows: [(f64, usize, usize, &str, &str); 4] = [
        (
            0.0,
            6,
            5,
            "6",
            "five accepted (the burst), sixth: retry 6 s",
        ),
        (6.0, 2, 1, "6", "one accepted, one refused, retry 6 s"),
        (
            20.0,
            3,
            2,
            "4",
            "two accepted, the third refused, retry 4 s",
        ),
        (
            60.0,
            6,
            5,
            "6",
            "five accepted (refilled), sixth: retry 6 s",
        ),
    ];
    let times: Vec<f64> = rows
        .iter()
        .flat_map(|&(t, n, _, _, _)| std::iter::repeat_n(t, n))
        .collect();
    let outcomes = Bench::new(Algorithm::TokenBucket, five_per_30s())
        .replay(&times)
        .await;
    let mut next = outcomes.iter();
    for (time, arrivals, accepted, retry, says) in rows {
        let got: Vec<&Outcome> = next.by_ref().take(arrivals).collect();
        for (i, outcome) in got.iter().enumerate() {
            let expected_retry = (i >= accepted).then_some(retry);
            checks.expect(
                &format!("T at {time} s, request {}", i + 1),
                outcome,
                i < accepted,
                expected_retry,
            );
        }
        let described: Vec<String> = got.iter().map(|o| describe(o)).collect();
        println!(
            "{:<6} {:<9} {:<44} {}",
            format!("{time} s"),
            arrivals,
            says,
            described.join(", ")
        );
    }
    let log_traffic = [0.0, 5.0, 5.0, 15.0, 15.0, 25.0, 35.0, 40.0, 40.0, 40.0];
    let passed = Bench::new(Algorithm::TokenBucket, five_per_30s())
        .replay(&log_traffic)
        .await
        .iter()
        .filter(|(status, _)| *status == 200)
        .count();
    checks.expect_count("the bucket on the log table's traffic", passed, 10);
    println!("  (the log table's traffic passes whole through the bucket: {passed} of 10, where the log takes 8)\n");
}

async fn boundary_burst(checks: &mut Checks) {
    println!("Boundary burst: 100 per minute; 100 requests in the last second before the");
    println!("minute turns and 100 in the first second after it\n");
    let w = 60.0;
    let times: Vec<f64> = (0..100)
        .map(|i| w - 1.0 + f64::from(i) / 100.0)
        .chain((0..100).map(|i| w + f64::from(i) / 100.0))
        .collect();
    let limit = Limit::per_minute(100);
    for (algorithm, document) in [
        (Algorithm::FixedWindow, 200),
        (Algorithm::SlidingLog, 100),
        (Algorithm::SlidingCounter, 101),
        (Algorithm::TokenBucket, 103),
    ] {
        let outcomes = Bench::new(algorithm, limit).replay(&times).await;
        let accepted: Vec<f64> = times
            .iter()
            .zip(&outcomes)
            .filter(|(_, (status, _))| *status == 200)
            .map(|(&t, _)| t)
            .collect();
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
        checks.expect_count(&format!("{algorithm:?} boundary burst"), densest, document);
        println!(
            "  {:<16} document: {document:>3}   through the layer: {densest:>3} in one 60 s interval",
            format!("{algorithm:?}")
        );
    }
    println!();
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let mut checks = Checks::default();
    vector_l(&mut checks).await;
    vectors_c_and_q(&mut checks).await;
    vector_t(&mut checks).await;
    boundary_burst(&mut checks).await;
    if checks.failed.is_empty() {
        println!("All {} outcomes match the document.", checks.passed);
    } else {
        for failure in &checks.failed {
            println!("MISMATCH {failure}");
        }
        println!(
            "{} of {} outcomes differ from the document.",
            checks.failed.len(),
            checks.passed + checks.failed.len()
        );
        std::process::exit(1);
    }
}
