//! Invariants of the simulator (`examples/simulate`) on small, fast runs.

#[path = "../examples/simulate/chart.rs"]
mod chart;
#[path = "../examples/simulate/scenarios.rs"]
mod scenarios;
#[path = "../examples/simulate/traffic.rs"]
mod traffic;

use scenarios::{boundary_burst, clustering, densest, many_sources, shaping, Judge};
use tower_sliding_window::{Algorithm, Limit, ManualClock};

#[tokio::test]
async fn the_log_never_exceeds_the_limit_in_any_window() {
    let limit = Limit::per_second(3);
    let clock = ManualClock::new();
    let mut log = Judge::new(&clock, Algorithm::SlidingLog, &[limit]);
    let mut rng = traffic::Rng::new(9);
    let (arrivals, _) = traffic::poisson_sources(
        &mut rng,
        traffic::Mix::AroundTheLimit,
        50,
        30_000_000,
        6.0,
        1_000_000,
    );
    let mut accepted: Vec<Vec<u64>> = vec![Vec::new(); 50];
    for arrival in arrivals {
        if log.admits(arrival).await {
            accepted[arrival.source as usize].push(arrival.at_micros);
        }
    }
    for times in &accepted {
        assert!(densest(times, 1_000_000) <= 3);
    }
    assert!(
        accepted.iter().any(|t| densest(t, 1_000_000) == 3),
        "the traffic does reach the limit"
    );
}

#[tokio::test]
async fn boundary_burst_reproduces_200_100_101_and_the_buckets_103() {
    let burst = boundary_burst().await;
    let most: Vec<usize> = burst.densest.iter().map(|(_, n)| *n).collect();
    assert_eq!(most, [200, 100, 101, 103], "{:?}", burst.densest);
}

#[tokio::test]
async fn clustering_flips_which_algorithm_is_more_permissive() {
    let c = clustering().await;
    let accepted = |row: usize, algorithm: Algorithm| {
        c.outcomes[row]
            .1
            .iter()
            .find(|(a, _)| *a == algorithm)
            .unwrap()
            .1
    };
    assert!(
        accepted(0, Algorithm::SlidingLog) > accepted(0, Algorithm::SlidingCounter),
        "{c:?}"
    );
    assert!(
        accepted(1, Algorithm::SlidingCounter) > accepted(1, Algorithm::SlidingLog),
        "{c:?}"
    );
}

#[tokio::test]
async fn a_per_second_limit_cuts_the_shaping_attackers_gain() {
    let attack = shaping().await;
    let gain = |name: &str| {
        attack
            .gains
            .iter()
            .find(|(n, ..)| n.starts_with(name))
            .unwrap()
            .3
    };
    assert_eq!(gain("sliding log"), 0, "the log gives nothing away");
    assert!(gain("fixed window") >= 90, "{:?}", attack.gains);
    assert!(gain("sliding counter, 100/min") > 50, "{:?}", attack.gains);
    // A bucket passes its burst and a window's refill: up to twice the limit.
    assert!(
        (90..=100).contains(&gain("token bucket")),
        "{:?}",
        attack.gains
    );
    assert!(
        gain("sliding counter, 5/s") < gain("sliding counter, 100/min"),
        "{:?}",
        attack.gains
    );
}

#[tokio::test]
async fn many_sources_is_deterministic_and_consistent() {
    let mix = traffic::Mix::AroundTheLimit;
    let first = many_sources(7, mix, 300, 300).await;
    let again = many_sources(7, mix, 300, 300).await;
    assert_eq!(first, again, "same seed, same result");
    let other = many_sources(8, mix, 300, 300).await;
    assert_ne!(first.requests, other.requests, "the seed matters");
    assert_eq!(first.differ, first.counter_stricter + first.counter_laxer);
    assert_eq!(first.sources_under + first.sources_over, 300);
    assert!(first.log_accepted <= first.requests);
    assert!(
        first.differ > 0 && first.differ < first.requests / 4,
        "{first:?}"
    );
    let calm = many_sources(7, traffic::Mix::MostlyBelow, 300, 300).await;
    assert!(
        calm.differ * first.requests < first.differ * calm.requests,
        "calmer traffic disagrees less"
    );
}

#[tokio::test]
async fn the_chart_is_written_and_parses_as_xml() {
    let burst = boundary_burst().await;
    let attack = shaping().await;
    let path = std::env::temp_dir().join(format!("tsw-simulation-{}.svg", std::process::id()));
    chart::write(&path, &burst, &attack).unwrap();
    let svg = std::fs::read_to_string(&path).unwrap();
    std::fs::remove_file(&path).unwrap();
    let document = roxmltree::Document::parse(&svg).expect("well-formed XML");
    assert_eq!(document.root_element().tag_name().name(), "svg");
    let lines = document
        .descendants()
        .filter(|n| n.tag_name().name() == "polyline")
        .count();
    assert!(
        lines >= 7,
        "one line per algorithm and defence, found {lines}"
    );
}
