//! The behaviour every store must reproduce, run through the real layer with
//! a manual clock. Each store's test file calls these with a fresh store
//! reading the given clock.

use std::collections::HashMap;
use std::convert::Infallible;
use std::time::Duration;

use http::{Request, Response, StatusCode};
use http_body_util::BodyExt;
use tower::util::ServiceFn;
use tower::{service_fn, Layer, Service, ServiceExt};
use tower_sliding_window::layer::ResponseBody;
use tower_sliding_window::layer::SlidingWindowWrapBody;
use tower_sliding_window::KeyState;
use tower_sliding_window::{
    Algorithm, Decision, Limit, ManualClock, Origin, Policy, SlidingWindowLayer, Store,
};

type Handler = ServiceFn<fn(Request<()>) -> std::future::Ready<Result<Response<()>, Infallible>>>;
type KeyFn = fn(&Request<()>) -> Option<String>;

#[path = "in_flight.rs"]
mod in_flight;
pub use in_flight::*;

pub type Svc<St> = SlidingWindowWrapBody<Handler, KeyFn, St>;

/// Every algorithm, for the cases that hold for each.
const ALGORITHMS: [Algorithm; 4] = [
    Algorithm::SlidingLog,
    Algorithm::SlidingCounter,
    Algorithm::FixedWindow,
    Algorithm::TokenBucket,
];

fn ok(_: Request<()>) -> std::future::Ready<Result<Response<()>, Infallible>> {
    std::future::ready(Ok(Response::new(())))
}

fn client_key(request: &Request<()>) -> Option<String> {
    request
        .headers()
        .get("x-client")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
}

/// The layer over a handler that always answers 200, keyed by `x-client`.
pub fn service<St: Store<String>>(store: St, policy: Policy) -> Svc<St> {
    SlidingWindowLayer::with_policy(policy, client_key as KeyFn)
        .store(store)
        .wrap_body()
        .layer(service_fn(ok as fn(_) -> _))
}

pub fn policy(algorithm: Algorithm, limits: &[(u32, u64)]) -> Policy {
    Policy::new(
        algorithm,
        limits
            .iter()
            .map(|&(max, secs)| Limit::new(max, Duration::from_secs(secs)).unwrap()),
    )
    .unwrap()
}

pub async fn hit<S>(svc: &S, client: &str) -> Response<ResponseBody<()>>
where
    S: Service<Request<()>, Response = Response<ResponseBody<()>>, Error = Infallible> + Clone,
{
    let request = Request::builder()
        .header("x-client", client)
        .body(())
        .unwrap();
    svc.clone().oneshot(request).await.unwrap()
}

fn header<'a>(response: &'a Response<ResponseBody<()>>, name: &str) -> Option<&'a str> {
    response.headers().get(name).map(|v| v.to_str().unwrap())
}

fn at(clock: &ManualClock, secs: f64) {
    clock.set(Duration::from_secs_f64(secs));
}

/// Vector L (docs/design.md) through the layer, with the `Retry-After` values it implies.
pub async fn vector_l<St: Store<String>>(store: St, clock: ManualClock) {
    let svc = service(store, policy(Algorithm::SlidingLog, &[(5, 30)]));
    let script: [(f64, &[u16]); 6] = [
        (0.0, &[200]),
        (5.0, &[200, 200]),
        (15.0, &[200, 200]),
        (25.0, &[429]),
        (35.0, &[200]),
        (40.0, &[200, 200, 429]),
    ];
    for (time, statuses) in script {
        at(&clock, time);
        for &expected in statuses {
            let response = hit(&svc, "L").await;
            assert_eq!(response.status(), expected, "at {time}s");
            if expected == 429 {
                // 5 s and one tick until the blocking request is more than 30 s old.
                assert_eq!(header(&response, "retry-after"), Some("6"), "at {time}s");
                assert_eq!(header(&response, "ratelimit"), Some("\"30s\";r=0;t=6"));
            }
        }
    }
}

/// Vector T (docs/design.md) through the layer: 5 per 30 s is a bucket of
/// five tokens, one back every 6 s, so `t` is the time to the next token.
pub async fn vector_t<St: Store<String>>(store: St, clock: ManualClock) {
    let svc = service(store, policy(Algorithm::TokenBucket, &[(5, 30)]));
    // A full bucket's burst: five pass, the sixth waits for a token.
    let burst: &[(u16, &str)] = &[
        (200, "r=4;t=6"),
        (200, "r=3;t=6"),
        (200, "r=2;t=6"),
        (200, "r=1;t=6"),
        (200, "r=0;t=6"),
        (429, "r=0;t=6"),
    ];
    let script: [(f64, &[(u16, &str)]); 4] = [
        (0.0, burst),
        (6.0, &[(200, "r=0;t=6"), (429, "r=0;t=6")]),
        (
            20.0,
            &[(200, "r=1;t=4"), (200, "r=0;t=4"), (429, "r=0;t=4")],
        ),
        (60.0, burst),
    ];
    for (time, expected) in script {
        at(&clock, time);
        for &(status, quota) in expected {
            let response = hit(&svc, "T").await;
            assert_eq!(response.status(), status, "at {time}s");
            let ratelimit = format!("\"30s\";{quota}");
            assert_eq!(
                header(&response, "ratelimit"),
                Some(&ratelimit[..]),
                "at {time}s"
            );
            if status == 429 {
                let wait = &quota[quota.len() - 1..];
                assert_eq!(header(&response, "retry-after"), Some(wait), "at {time}s");
            }
        }
    }
    // Vector L's traffic passes whole: ten accepted where the log takes eight.
    let mut accepted = 0;
    for (time, arrivals) in [
        (0.0, 1),
        (5.0, 2),
        (15.0, 2),
        (25.0, 1),
        (35.0, 1),
        (40.0, 3),
    ] {
        at(&clock, 100.0 + time);
        for _ in 0..arrivals {
            accepted += u32::from(hit(&svc, "L").await.status() == 200);
        }
    }
    assert_eq!(accepted, 10);
}

/// The boundary burst (100 per minute; 100 requests 10 ms apart before the
/// minute turns and 100 after) through each algorithm: the log lets 100
/// through, the counter 101, the fixed window 200, the bucket 103 (its
/// burst and what refills meanwhile).
pub async fn the_boundary_burst<St: Store<String>>(store: St, clock: ManualClock) {
    for (algorithm, expected) in [
        (Algorithm::SlidingLog, 100),
        (Algorithm::SlidingCounter, 101),
        (Algorithm::FixedWindow, 200),
        (Algorithm::TokenBucket, 103),
    ] {
        let svc = service(store.clone(), policy(algorithm, &[(100, 60)]));
        let mut accepted = 0;
        for i in 0..200u32 {
            // 120 s + 59 s, then the next minute: 10 ms apart across the turn.
            clock.set(Duration::from_millis(179_000 + 10 * u64::from(i)));
            accepted += u32::from(hit(&svc, "burst").await.status() == 200);
        }
        assert_eq!(accepted, expected, "{algorithm:?}");
    }
}

/// Vector C's set-up: the window [0, 30) accepted five.
async fn fill_previous_window<St: Store<String>>(
    svc: &Svc<St>,
    clock: &ManualClock,
    client: &str,
    times: &[f64],
) {
    for &time in times {
        at(clock, time);
        assert_eq!(hit(svc, client).await.status(), 200);
    }
}

/// Vectors C and Q (docs/design.md) through the layer.
pub async fn vectors_c_and_q<St: Store<String>>(store: St, clock: ManualClock) {
    let svc = service(store, policy(Algorithm::SlidingCounter, &[(5, 30)]));
    let spread = [0.0, 5.0, 5.0, 15.0, 15.0];

    fill_previous_window(&svc, &clock, "C", &spread).await;
    at(&clock, 35.0);
    assert_eq!(hit(&svc, "C").await.status(), 429, "C at 35 s: 5.17 > 5");
    at(&clock, 40.0);
    assert_eq!(hit(&svc, "C").await.status(), 200, "C at 40 s: 4.33");
    assert_eq!(hit(&svc, "C").await.status(), 429, "C at 40 s again: 5.33");

    // Q, on fresh keys with the same history (the clock goes back to 0 for them).
    for (client, time, expected) in [("Q1", 33.0, 429), ("Q2", 35.999, 429), ("Q3", 36.0, 200)] {
        fill_previous_window(&svc, &clock, client, &spread).await;
        at(&clock, time);
        let response = hit(&svc, client).await;
        assert_eq!(response.status(), expected, "{client} at {time}s");
        if client == "Q1" {
            assert_eq!(
                header(&response, "retry-after"),
                Some("3"),
                "exactly 3 s at 33 s"
            );
        }
    }
}

/// Vector Q.3 (docs/design.md): traffic bunched at the start of the previous window.
pub async fn vector_q_log_versus_counter<St: Store<String>>(store: St, clock: ManualClock) {
    let log = service(store.clone(), policy(Algorithm::SlidingLog, &[(5, 30)]));
    let counter = service(store, policy(Algorithm::SlidingCounter, &[(5, 30)]));
    let early = [0.0, 0.2, 0.4, 0.6, 0.8];
    fill_previous_window(&log, &clock, "early", &early).await;
    fill_previous_window(&counter, &clock, "early", &early).await;
    at(&clock, 33.0);
    assert_eq!(
        hit(&log, "early").await.status(),
        200,
        "the log sees nothing since 3 s"
    );
    assert_eq!(
        hit(&counter, "early").await.status(),
        429,
        "the counter charges 4.5"
    );
}

/// Two limits in one layer: a request refused by either is recorded in neither.
pub async fn all_or_nothing<St: Store<String>>(store: St, clock: ManualClock) {
    // 2 per second and 3 per two seconds.
    let svc = service(store, policy(Algorithm::SlidingLog, &[(2, 1), (3, 2)]));
    at(&clock, 0.0);
    assert_eq!(hit(&svc, "k").await.status(), 200);
    assert_eq!(hit(&svc, "k").await.status(), 200);
    let refused = hit(&svc, "k").await;
    assert_eq!(refused.status(), 429);
    assert_eq!(
        header(&refused, "ratelimit"),
        Some("\"1s\";r=0;t=2"),
        "the 1 s limit refused"
    );
    assert_eq!(
        header(&refused, "ratelimit-policy"),
        Some("\"1s\";q=2;w=1, \"2s\";q=3;w=2")
    );

    at(&clock, 1.5);
    // Had the refusal at 0 s counted in the 2 s window, it would be full now.
    assert_eq!(hit(&svc, "k").await.status(), 200);
    let refused = hit(&svc, "k").await;
    assert_eq!(refused.status(), 429, "the 2 s window holds 0, 0 and 1.5");
    assert_eq!(header(&refused, "ratelimit"), Some("\"2s\";r=0;t=1"));

    at(&clock, 2.000_001);
    // The requests from 0 s have left the 2 s window. Had the refusal at 1.5 s
    // counted in the 1 s window, it would hold two requests and refuse.
    assert_eq!(hit(&svc, "k").await.status(), 200);
    assert_eq!(
        hit(&svc, "k").await.status(),
        429,
        "now the 1 s window is full"
    );
}

/// Mixed traffic over several keys gives, header for header, what the core
/// computes for the same times.
pub async fn matches_the_core<St: Store<String>>(store: St, clock: ManualClock) {
    for algorithm in ALGORITHMS {
        let policy = policy(algorithm, &[(3, 1), (10, 5)]);
        let svc = service(store.clone(), policy.clone());
        let mut states: Vec<KeyState> = (0..3).map(|_| KeyState::new(policy.algorithm())).collect();
        // A fixed pseudo-random walk: small steps, bursts at one instant, a few long gaps.
        let mut seed = 0x2545_f491_4f6c_dd1d_u64;
        let mut now_micros = 0u64;
        for _ in 0..400 {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            now_micros += match seed % 10 {
                0..=3 => 0,
                4..=8 => seed % 300_000,
                _ => seed % 3_000_000,
            };
            let key = (seed >> 20) as usize % states.len();
            clock.set(Duration::from_micros(now_micros));
            let expected = states[key].decide(&policy, Duration::from_micros(now_micros), 1);
            let response = hit(&svc, &format!("walk-{key}")).await;
            let expected_status = if expected.is_allowed() { 200 } else { 429 };
            assert_eq!(
                response.status(),
                expected_status,
                "{algorithm:?} at {now_micros} µs"
            );
            let expected_remaining = format!(";r={};", expected.remaining());
            assert!(
                header(&response, "ratelimit")
                    .unwrap()
                    .contains(&expected_remaining),
                "{algorithm:?} at {now_micros} µs: {:?} vs {expected:?}",
                header(&response, "ratelimit")
            );
        }
    }
}

/// Many tasks on two OS threads, on one key at one instant: exactly `limit`
/// get through, for limits 1, 10 and 1,000 and every algorithm.
pub async fn concurrent_requests_admit_exactly_the_limit<St: Store<String>>(
    store: St,
    clock: ManualClock,
) {
    at(&clock, 7.0);
    for algorithm in ALGORITHMS {
        for limit in [1u32, 10, 1_000] {
            let svc = service(store.clone(), policy(algorithm, &[(limit, 60)]));
            let key = format!("crowd-{algorithm:?}-{limit}");
            let tasks: Vec<_> = (0..limit as usize * 2 + 100)
                .map(|_| {
                    let (svc, key) = (svc.clone(), key.clone());
                    tokio::spawn(async move { hit(&svc, &key).await.status() })
                })
                .collect();
            let mut accepted = 0;
            for task in tasks {
                if task.await.unwrap() == StatusCode::OK {
                    accepted += 1;
                }
            }
            assert_eq!(accepted, limit, "{algorithm:?}, limit {limit}");
        }
    }
}

/// Two layers sharing one store keep separate windows for the same key.
pub async fn policies_do_not_share_windows<St: Store<String>>(store: St, clock: ManualClock) {
    at(&clock, 1.0);
    let strict = service(store.clone(), policy(Algorithm::SlidingCounter, &[(1, 10)]));
    let lenient = service(store.clone(), policy(Algorithm::SlidingCounter, &[(3, 10)]));
    assert_eq!(hit(&strict, "shared").await.status(), 200);
    assert_eq!(hit(&strict, "shared").await.status(), 429);
    for _ in 0..3 {
        assert_eq!(hit(&lenient, "shared").await.status(), 200);
    }
    assert_eq!(hit(&lenient, "shared").await.status(), 429);

    // Equal limits, different names: still apart, in every store (a remote
    // store identifies windows by name and limits).
    let login = service(
        store.clone(),
        policy(Algorithm::SlidingLog, &[(1, 10)]).named("login"),
    );
    let signup = service(
        store,
        policy(Algorithm::SlidingLog, &[(1, 10)]).named("signup"),
    );
    assert_eq!(hit(&login, "named").await.status(), 200);
    assert_eq!(hit(&signup, "named").await.status(), 200);
    assert_eq!(hit(&login, "named").await.status(), 429);
}

/// A window belongs to (store, policy value, key): layers built apart with
/// equal policies on one store count together, and a name keeps them apart.
pub async fn equal_policies_share_windows<St: Store<String>>(store: St, clock: ManualClock) {
    at(&clock, 1.0);
    for algorithm in ALGORITHMS {
        let key = format!("{algorithm:?}");
        let first = service(store.clone(), policy(algorithm, &[(2, 10)]));
        let second = service(store.clone(), policy(algorithm, &[(2, 10)]));
        assert_eq!(hit(&first, &key).await.status(), 200, "{algorithm:?}");
        assert_eq!(hit(&second, &key).await.status(), 200, "{algorithm:?}");
        assert_eq!(hit(&first, &key).await.status(), 429, "{algorithm:?}");
        assert_eq!(hit(&second, &key).await.status(), 429, "{algorithm:?}");
        let named = service(store.clone(), policy(algorithm, &[(2, 10)]).named("apart"));
        assert_eq!(hit(&named, &key).await.status(), 200, "{algorithm:?}");
    }
}

/// A plan that builds each request's policy from per-customer limits, as a
/// configuration read at run time would give them, limits each customer
/// as a policy built once would.
pub async fn a_plan_built_per_request_limits<St: Store<String>>(store: St, clock: ManualClock) {
    at(&clock, 1.0);
    let per_customer: HashMap<String, Limit> = [("acme", "3/10s"), ("initech", "1/10s")]
        .into_iter()
        .map(|(customer, limit)| (customer.to_owned(), limit.parse().unwrap()))
        .collect();
    for algorithm in ALGORITHMS {
        let limits = per_customer.clone();
        let svc = SlidingWindowLayer::new(Limit::per_minute(1), client_key as KeyFn)
            .store(store.clone())
            .plan(move |customer: &String| {
                let limit = limits
                    .get(customer)
                    .copied()
                    .unwrap_or("2/10s".parse().unwrap());
                Policy::new(algorithm, [limit]).unwrap()
            })
            .wrap_body()
            .layer(service_fn(ok as fn(_) -> _));
        for (customer, max) in [("acme", 3), ("initech", 1), ("anyone else", 2)] {
            let mut passed = 0;
            for _ in 0..6 {
                passed += usize::from(hit(&svc, customer).await.status() == 200);
            }
            assert_eq!(passed, max, "{algorithm:?}, {customer}");
        }
    }
}

/// Tenants with limits of their own, 2,000 of them, each a policy value no
/// other tenant has, each sending more than its limit: exactly the sum of
/// their limits passes.
pub async fn many_tenants_with_limits_of_their_own<St: Store<String>>(
    store: St,
    clock: ManualClock,
) {
    const TENANTS: u32 = 2_000;
    at(&clock, 1.0);
    let own = |tenant: u32| {
        let limit = Limit::new(
            1 + tenant % 5,
            Duration::from_millis(10_000 + u64::from(tenant)),
        );
        Policy::new(ALGORITHMS[tenant as usize % 3], [limit.unwrap()]).unwrap()
    };
    let svc = SlidingWindowLayer::new(Limit::per_minute(1), client_key as KeyFn)
        .store(store)
        .plan(move |tenant: &String| {
            let tenant = tenant.strip_prefix("tenant-").and_then(|n| n.parse().ok());
            own(tenant.unwrap_or(0))
        })
        .wrap_body()
        .layer(service_fn(ok as fn(_) -> _));
    let (mut passed, mut limits) = (0, 0);
    for tenant in 0..TENANTS {
        let max = 1 + tenant % 5;
        limits += max;
        let key = format!("tenant-{tenant}");
        for _ in 0..max + 2 {
            passed += u32::from(hit(&svc, &key).await.status() == 200);
        }
    }
    assert_eq!(passed, limits);
}

/// Shadow mode refuses nothing, yet records as enforcement would: a request
/// it would have refused leaves no trace, which an enforcing layer with the
/// same policy on the same store then finds.
pub async fn shadow_mode_refuses_nothing_and_records_as_enforcement_would<St: Store<String>>(
    store: St,
    clock: ManualClock,
) {
    fn shadowed(request: Request<()>) -> std::future::Ready<Result<Response<String>, Infallible>> {
        let decision = request.extensions().get::<Decision>().copied();
        let seen = decision.map_or("none".to_owned(), |d| {
            format!("allowed={} shadow={}", d.is_allowed(), d.is_shadow())
        });
        std::future::ready(Ok(Response::new(seen)))
    }
    async fn send<S>(svc: &S, client: &str) -> (StatusCode, Option<String>, String)
    where
        S: Service<Request<()>, Response = Response<ResponseBody<String>>, Error = Infallible>
            + Clone,
    {
        let request = Request::builder()
            .header("x-client", client)
            .body(())
            .unwrap();
        let response = svc.clone().oneshot(request).await.unwrap();
        let status = response.status();
        let ratelimit = header_of(&response, "ratelimit");
        let body = response.into_body().collect().await.unwrap().to_bytes();
        (status, ratelimit, String::from_utf8(body.to_vec()).unwrap())
    }
    for algorithm in ALGORITHMS {
        at(&clock, 1.0);
        let key = format!("shadow-{algorithm:?}");
        let rules = policy(algorithm, &[(2, 10)]);
        let shadow = SlidingWindowLayer::with_policy(rules.clone(), client_key as KeyFn)
            .store(store.clone())
            .shadow_mode(true)
            .wrap_body()
            .layer(service_fn(shadowed as fn(_) -> _));
        let enforcing = service(store.clone(), rules);
        for _ in 0..2 {
            let (status, ratelimit, seen) = send(&shadow, &key).await;
            assert_eq!(
                (status, seen.as_str()),
                (StatusCode::OK, "allowed=true shadow=true")
            );
            assert_eq!(ratelimit, None, "no headers for a limit not enforced");
        }
        at(&clock, 5.0);
        let (status, _, seen) = send(&shadow, &key).await;
        assert_eq!(
            (status, seen.as_str()),
            (StatusCode::OK, "allowed=false shadow=true"),
            "{algorithm:?}: let through, though enforcement would refuse it"
        );
        assert_eq!(hit(&enforcing, &key).await.status(), 429, "{algorithm:?}");
        // Had the refused request at 5 s been recorded, the log would still
        // hold it at 11 s and admit one request, not two.
        if algorithm == Algorithm::SlidingLog {
            clock.set(Duration::from_micros(11_000_001));
            assert_eq!(hit(&enforcing, &key).await.status(), 200);
            assert_eq!(hit(&enforcing, &key).await.status(), 200);
            assert_eq!(hit(&enforcing, &key).await.status(), 429);
        }
    }
    // Asked for, the headers come back in shadow mode.
    at(&clock, 100.0);
    let with_headers = SlidingWindowLayer::with_policy(
        policy(Algorithm::SlidingLog, &[(1, 10)]),
        client_key as KeyFn,
    )
    .store(store)
    .shadow_mode(true)
    .rate_limit_headers(true)
    .wrap_body()
    .layer(service_fn(shadowed as fn(_) -> _));
    let (_, ratelimit, _) = send(&with_headers, "shadow-headers").await;
    assert!(ratelimit.is_some_and(|value| value.contains("r=0")));
    let (status, _, _) = send(&with_headers, "shadow-headers").await;
    assert_eq!(status, StatusCode::OK);
}

/// A penalty: the refusal that starts it waits all of it, every request
/// during it is refused with the time left and does not extend it, other
/// keys are untouched, and after it the key's windows judge again.
pub async fn a_penalty_shuts_a_key_out_without_extending<St: Store<String>>(
    store: St,
    clock: ManualClock,
) {
    for algorithm in ALGORITHMS {
        at(&clock, 1.0);
        let key = format!("penalised-{algorithm:?}");
        let other = format!("{key}-other");
        let svc =
            SlidingWindowLayer::with_policy(policy(algorithm, &[(2, 10)]), client_key as KeyFn)
                .penalty(Duration::from_secs(60))
                .store(store.clone())
                .wrap_body()
                .layer(service_fn(ok as fn(_) -> _));
        assert_eq!(hit(&svc, &key).await.status(), 200);
        assert_eq!(hit(&svc, &key).await.status(), 200);
        let refused = hit(&svc, &key).await;
        assert_eq!(refused.status(), 429, "{algorithm:?}");
        assert_eq!(header(&refused, "retry-after"), Some("60"), "{algorithm:?}");
        at(&clock, 30.0);
        let during = hit(&svc, &key).await;
        assert_eq!(header(&during, "retry-after"), Some("31"), "{algorithm:?}");
        assert_eq!(
            hit(&svc, &other).await.status(),
            200,
            "{algorithm:?}: other keys"
        );
        at(&clock, 50.5);
        let later = hit(&svc, &key).await;
        assert_eq!(
            header(&later, "retry-after"),
            Some("11"),
            "{algorithm:?}: not extended by the refusals during it"
        );
        // The store says why: the penalty.
        let decision = store
            .decide(
                key.clone(),
                &policy(algorithm, &[(2, 10)]).with_penalty(Duration::from_secs(60)),
            )
            .await
            .unwrap();
        assert_eq!(decision.origin(), Origin::Penalty, "{algorithm:?}");
        // It ends 60 s after the refusal at 1 s; the windows judge again.
        at(&clock, 61.0);
        assert_eq!(hit(&svc, &key).await.status(), 200, "{algorithm:?}");
        assert_eq!(hit(&svc, &key).await.status(), 200, "{algorithm:?}");
    }
}

/// A peek under a policy with a penalty is told what a request would be
/// told, the penalty its refusal would start included, but starts nothing:
/// once the limits have room again, long before that penalty would end, a
/// request passes.
pub async fn a_peek_under_a_penalty_starts_nothing<St: Store<String>>(
    store: St,
    clock: ManualClock,
) {
    for algorithm in ALGORITHMS {
        at(&clock, 1.0);
        let policy = policy(algorithm, &[(2, 10)]).with_penalty(Duration::from_secs(60));
        let key = format!("peeked-{algorithm:?}");
        for _ in 0..2 {
            let decision = store.decide(key.clone(), &policy).await.unwrap();
            assert!(decision.is_allowed(), "{algorithm:?}");
        }
        let peek = store.peek(key.clone(), &policy).await.unwrap();
        assert!(!peek.is_allowed(), "{algorithm:?}");
        assert_eq!(peek.origin(), Origin::Limits, "{algorithm:?}");
        assert_eq!(peek.retry_after(), Duration::from_secs(60), "{algorithm:?}");
        // Two windows on, every algorithm has room again.
        at(&clock, 21.0);
        let decision = store.decide(key, &policy).await.unwrap();
        assert!(
            decision.is_allowed(),
            "{algorithm:?}: the peek started nothing"
        );
    }
}

/// Counting only failed logins: successes never use quota, failures do, and
/// once failures reach the limit every request is refused.
pub async fn count_only_counts_matching_responses<St: Store<String>>(
    store: St,
    clock: ManualClock,
) {
    for algorithm in ALGORITHMS {
        at(&clock, 5.0);
        let layer =
            SlidingWindowLayer::with_policy(policy(algorithm, &[(2, 60)]), client_key as KeyFn)
                .count_only(|status, _| status == StatusCode::UNAUTHORIZED)
                .store(store.clone())
                .wrap_body();
        let login = layer.layer(service_fn(|request: Request<()>| {
            let failed = request.headers().contains_key("x-wrong-password");
            let mut response = Response::new(());
            if failed {
                *response.status_mut() = StatusCode::UNAUTHORIZED;
            }
            std::future::ready(Ok::<_, Infallible>(response))
        }));
        let attempt = |wrong: bool| {
            let mut request = Request::builder().header("x-client", format!("login-{algorithm:?}"));
            if wrong {
                request = request.header("x-wrong-password", "1");
            }
            login.clone().oneshot(request.body(()).unwrap())
        };
        for _ in 0..5 {
            let ok = attempt(false).await.unwrap();
            assert_eq!(
                ok.status(),
                StatusCode::OK,
                "{algorithm:?}: successes are free"
            );
        }
        let first = attempt(true).await.unwrap();
        assert_eq!(first.status(), StatusCode::UNAUTHORIZED);
        // The headers count the failure that is being recorded.
        let ratelimit = header_of(&first, "ratelimit").unwrap_or_default();
        assert!(
            ratelimit.starts_with("\"60s\";r=1;"),
            "{algorithm:?}: {ratelimit}"
        );
        assert_eq!(
            attempt(true).await.unwrap().status(),
            StatusCode::UNAUTHORIZED
        );
        assert_eq!(
            attempt(true).await.unwrap().status(),
            StatusCode::TOO_MANY_REQUESTS,
            "{algorithm:?}: two failures used the quota"
        );
        assert_eq!(
            attempt(false).await.unwrap().status(),
            StatusCode::TOO_MANY_REQUESTS,
            "{algorithm:?}: refused before the service"
        );
    }
}

/// Requests that weigh more than one: admitted while every limit has room
/// for all their units, with the exact wait otherwise; a cost of 0 always
/// passes, one over a limit never does; settling gives back or charges.
pub async fn costs_weigh_admission_and_settle<St: Store<String>>(store: St, clock: ManualClock) {
    for algorithm in ALGORITHMS {
        at(&clock, 10.0);
        let tokens = policy(algorithm, &[(10, 60)]);
        let key = format!("costs-{algorithm:?}");
        let decide = |cost| store.decide_cost(key.clone(), &tokens, cost);
        let first = decide(4).await.unwrap();
        assert!(first.is_allowed(), "{algorithm:?}");
        assert_eq!(first.remaining(), 6, "{algorithm:?}");
        let refused = decide(7).await.unwrap();
        assert!(!refused.is_allowed(), "{algorithm:?}");
        // The log waits for the stamps at 10 s to leave the closed window;
        // the fixed window for its next block at 60 s; the counter until
        // the previous window's 4 weigh at most 3, a quarter into the next.
        let wait = match algorithm {
            Algorithm::SlidingLog => 60_000_001,
            Algorithm::FixedWindow => 50_000_000,
            Algorithm::SlidingCounter => 65_000_000,
            // 10 per minute refill one every 6 s: 4 + 7 units need one
            // token more than the bucket holds.
            Algorithm::TokenBucket => 6_000_000,
            other => unimplemented!("no wait worked out for {other:?}"),
        };
        assert_eq!(
            refused.retry_after(),
            Duration::from_micros(wait),
            "{algorithm:?}"
        );
        let free = decide(0).await.unwrap();
        assert!(free.is_allowed(), "{algorithm:?}: a cost of 0 passes");
        let too_much = decide(11).await.unwrap();
        assert!(!too_much.is_allowed(), "{algorithm:?}");
        assert_eq!(too_much.origin(), Origin::TooCostly, "{algorithm:?}");
        assert_eq!(too_much.retry_after(), Duration::ZERO, "{algorithm:?}");
        let filling = decide(6).await.unwrap();
        assert!(filling.is_allowed(), "{algorithm:?}: 4 + 6 fit 10");
        assert_eq!(filling.remaining(), 0, "{algorithm:?}");
        assert!(
            !decide(1).await.unwrap().is_allowed(),
            "{algorithm:?}: full"
        );
        // It used 2 of its 6: 4 come back.
        let binding = store.bind(&tokens);
        let settled = store
            .settle_bound(key.clone(), &binding, &filling, 6, 2)
            .await
            .unwrap();
        assert_eq!(settled.remaining(), 4, "{algorithm:?}");
        assert!(decide(4).await.unwrap().is_allowed(), "{algorithm:?}");
        assert!(!decide(1).await.unwrap().is_allowed(), "{algorithm:?}");
        // One that used more than it reserved is charged, past the limit.
        let other = format!("overspent-{algorithm:?}");
        let reserved = store.decide_cost(other.clone(), &tokens, 1).await.unwrap();
        store
            .settle_bound(other.clone(), &binding, &reserved, 1, 50)
            .await
            .unwrap();
        assert!(
            !store.decide(other, &tokens).await.unwrap().is_allowed(),
            "{algorithm:?}: charged full"
        );

        // Two limits, all or nothing: the refused request counts in neither.
        let both = policy(algorithm, &[(5, 1), (10, 60)]);
        let key = format!("costs-both-{algorithm:?}");
        let decide = |cost| store.decide_cost(key.clone(), &both, cost);
        assert!(decide(3).await.unwrap().is_allowed(), "{algorithm:?}");
        let refusal = decide(3).await.unwrap();
        assert!(!refusal.is_allowed(), "{algorithm:?}");
        assert_eq!(refusal.limit_index(), Some(0), "{algorithm:?}");
        at(&clock, 12.0);
        assert!(
            decide(5).await.unwrap().is_allowed(),
            "{algorithm:?}: 3 + 5 of 10"
        );
        at(&clock, 13.0);
        let minute = decide(3).await.unwrap();
        assert!(!minute.is_allowed(), "{algorithm:?}: 8 + 3 over 10");
        assert_eq!(minute.limit_index(), Some(1), "{algorithm:?}");
    }
}

/// Through the layer: the cost from the request, the settling from the
/// response, `RateLimit` in units after settling, and a request that can
/// never fit answered 413 without `Retry-After`.
pub async fn the_layer_costs_and_settles<St: Store<String>>(store: St, clock: ManualClock) {
    at(&clock, 20.0);
    let number = |headers: &http::HeaderMap, name: &str| -> Option<u32> {
        headers.get(name)?.to_str().ok()?.parse().ok()
    };
    for algorithm in ALGORITHMS {
        let layer =
            SlidingWindowLayer::with_policy(policy(algorithm, &[(10, 60)]), client_key as KeyFn)
                .cost(move |request: &Request<()>| {
                    number(request.headers(), "x-reserve").unwrap_or(1)
                })
                .settle(move |response: &Response<()>| number(response.headers(), "x-used"))
                .store(store.clone())
                .wrap_body();
        let svc = layer.layer(service_fn(|request: Request<()>| {
            let mut response = Response::new(());
            if let Some(used) = request.headers().get("x-use") {
                response.headers_mut().insert("x-used", used.clone());
            }
            std::future::ready(Ok::<_, Infallible>(response))
        }));
        let call = |reserve: u32, used: Option<u32>| {
            let mut request = Request::builder()
                .header("x-client", format!("layer-costs-{algorithm:?}"))
                .header("x-reserve", reserve.to_string());
            if let Some(used) = used {
                request = request.header("x-use", used.to_string());
            }
            svc.clone().oneshot(request.body(()).unwrap())
        };
        let settled = call(4, Some(1)).await.unwrap();
        assert_eq!(settled.status(), StatusCode::OK);
        let ratelimit = header_of(&settled, "ratelimit").unwrap_or_default();
        assert!(
            ratelimit.starts_with("\"60s\";r=9;"),
            "{algorithm:?}: {ratelimit}"
        );
        let kept = call(3, None).await.unwrap();
        let ratelimit = header_of(&kept, "ratelimit").unwrap_or_default();
        assert!(
            ratelimit.starts_with("\"60s\";r=6;"),
            "{algorithm:?}: {ratelimit}"
        );
        let never = call(11, None).await.unwrap();
        assert_eq!(
            never.status(),
            StatusCode::PAYLOAD_TOO_LARGE,
            "{algorithm:?}"
        );
        assert!(
            never.headers().get("retry-after").is_none(),
            "{algorithm:?}"
        );
        assert!(
            never.headers().get("ratelimit-policy").is_some(),
            "{algorithm:?}"
        );
        assert_eq!(call(7, None).await.unwrap().status(), 429, "{algorithm:?}");
        assert_eq!(call(6, None).await.unwrap().status(), 200, "{algorithm:?}");
    }
}

/// Many tasks reserving several units at one instant never get more
/// units through than the limit.
pub async fn costly_requests_at_once_never_over_admit<St: Store<String>>(
    store: St,
    clock: ManualClock,
) {
    at(&clock, 30.0);
    for algorithm in ALGORITHMS {
        let tokens = policy(algorithm, &[(100, 60)]);
        let tasks: Vec<_> = (0..60)
            .map(|_| {
                let (store, tokens) = (store.clone(), tokens.clone());
                let key = format!("crowd-costs-{algorithm:?}");
                tokio::spawn(async move {
                    store
                        .decide_cost(key, &tokens, 7)
                        .await
                        .unwrap()
                        .is_allowed()
                })
            })
            .collect();
        let mut admitted = 0;
        for task in tasks {
            admitted += u32::from(task.await.unwrap());
        }
        assert_eq!(admitted, 100 / 7, "{algorithm:?}");
    }
}

fn header_of<B>(response: &Response<B>, name: &str) -> Option<String> {
    response
        .headers()
        .get(name)
        .map(|v| v.to_str().unwrap().to_owned())
}

/// Keys that look like Redis syntax, escapes or binary never share a window.
pub async fn awkward_keys_stay_apart<St: Store<String>>(store: St, clock: ManualClock) {
    at(&clock, 3.0);
    let policy = policy(Algorithm::SlidingLog, &[(1, 60)]);
    let huge = "k".repeat(1 << 20);
    let keys: Vec<String> = [
        "a{b}", "a%7Bb%7D", "a%257Bb", "{", "}", "{}", ":", "a:b", "", "nul\0", "nul\u{1}", "%00",
        "é{", &huge,
    ]
    .iter()
    .map(|k| k.to_string())
    .collect();
    for key in &keys {
        let first = store.decide(key.clone(), &policy).await.unwrap();
        assert!(
            first.is_allowed(),
            "{:?} was already counted: it shares a window",
            &key[..key.len().min(20)]
        );
    }
    for key in &keys {
        let second = store.decide(key.clone(), &policy).await.unwrap();
        assert!(
            !second.is_allowed(),
            "{:?} lost its window",
            &key[..key.len().min(20)]
        );
    }
}

/// A clock that steps back never reopens a window.
pub async fn clock_stepping_back_admits_nothing_extra<St: Store<String>>(
    store: St,
    clock: ManualClock,
) {
    for algorithm in ALGORITHMS {
        let policy = policy(algorithm, &[(3, 10)]);
        let key = format!("back-{algorithm:?}");
        at(&clock, 100.0);
        for _ in 0..3 {
            assert!(store
                .decide(key.clone(), &policy)
                .await
                .unwrap()
                .is_allowed());
        }
        for back_to in [99.0, 50.0, 0.0] {
            at(&clock, back_to);
            let decision = store.decide(key.clone(), &policy).await.unwrap();
            assert!(
                !decision.is_allowed(),
                "{algorithm:?} at {back_to}s after 100s"
            );
        }
        // Days later everything is free again, without overflow.
        at(&clock, 100.0 + 86_400.0 * 400.0);
        assert!(
            store
                .decide(key.clone(), &policy)
                .await
                .unwrap()
                .is_allowed(),
            "{algorithm:?}"
        );
    }
}

/// The log's window is closed: a stamp exactly one window old still counts,
/// also in a log that has already let older stamps go (in a memory store,
/// a ring of four slots turned over several times, then a larger one from
/// 70 s).
pub async fn log_counts_a_stamp_exactly_one_window_old<St: Store<String>>(
    store: St,
    clock: ManualClock,
) {
    let policy = policy(Algorithm::SlidingLog, &[(5, 10)]);
    let key = String::from("edge");
    let decide = |micros: u64| {
        clock.set(Duration::from_micros(micros));
        store.decide(key.clone(), &policy)
    };
    let second = 1_000_000;
    // 12 s apart: each stamp leaves the window before the next request,
    // yet the key never idles long enough to be dropped (window and grace).
    for secs in [0, 12, 24, 36, 48, 60, 61, 62, 63] {
        let decision = decide(secs * second).await.unwrap();
        assert!(decision.is_allowed(), "at {secs}s");
    }
    // 60, 61, 62 and 63 are inside [60, 70]: this is the fifth.
    let fifth = decide(70 * second).await.unwrap();
    assert!(fifth.is_allowed());
    assert_eq!(fifth.remaining(), 0);
    let sixth = decide(70 * second).await.unwrap();
    assert!(!sixth.is_allowed(), "the stamp at 60s still counts at 70s");
    assert_eq!(sixth.retry_after(), Duration::from_micros(1));
    assert!(decide(70 * second + 1).await.unwrap().is_allowed());
}

/// Every case of the suite, for the macros below.
#[macro_export]
macro_rules! for_each_case {
    ([$($callback:tt)*]($($args:tt)*)) => {
        $($callback)*!($($args)*;
            vector_l,
            vector_t,
            the_boundary_burst,
            vectors_c_and_q,
            vector_q_log_versus_counter,
            all_or_nothing,
            matches_the_core,
            concurrent_requests_admit_exactly_the_limit,
            policies_do_not_share_windows,
            equal_policies_share_windows,
            a_plan_built_per_request_limits,
            many_tenants_with_limits_of_their_own,
            count_only_counts_matching_responses,
            costs_weigh_admission_and_settle,
            the_layer_costs_and_settles,
            costly_requests_at_once_never_over_admit,
            shadow_mode_refuses_nothing_and_records_as_enforcement_would,
            a_penalty_shuts_a_key_out_without_extending,
            a_peek_under_a_penalty_starts_nothing,
            awkward_keys_stay_apart,
            clock_stepping_back_admits_nothing_extra,
            log_counts_a_stamp_exactly_one_window_old,
            the_cap_holds_under_a_crowd,
            a_stream_holds_its_slot_until_it_ends,
            a_cancelled_request_frees_its_slot,
            cap_and_windows_are_all_or_nothing,
            a_sequential_client_is_never_refused,
            a_request_of_no_cost_takes_a_slot
        );
    };
}

/// One `#[tokio::test]` per case, each against a fresh store from
/// `$make(clock)`.
#[macro_export]
macro_rules! conformance_tests {
    ($make:expr; $($case:ident),*) => {$(
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $case() {
            let clock = tower_sliding_window::ManualClock::new();
            $crate::suite::$case($make(clock.clone()).await, clock).await;
        }
    )*};
}

/// Runs every case of the suite against stores made by `$make(clock)`.
#[macro_export]
macro_rules! conformance_suite {
    ($make:expr) => {
        $crate::for_each_case!([$crate::conformance_tests]($make));
    };
}
