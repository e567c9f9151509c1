//! Managed Redis: `rediss://` with a CA made at test time, passwords, and
//! what `connect` says when it is given something that cannot work: each
//! against a private redis-server this binary starts.
#![cfg(feature = "redis-tls")]

#[path = "support/redis_server.rs"]
mod redis_server;
#[path = "support/tls_redis.rs"]
mod tls_redis;

use std::time::Duration;

use metrics_util::debugging::{DebugValue, DebuggingRecorder};
use redis_server::{free_port, Server};
use tls_redis::{make_certificates, TlsCluster, TlsServer};
use tower_sliding_window::{
    Algorithm, FailurePolicy, Limit, ManualClock, Origin, Policy, RedisStore, RedisTls, Store,
    StoreErrorKind,
};

fn three_a_minute(algorithm: Algorithm) -> Policy {
    Policy::new(algorithm, [Limit::per_minute(3)]).unwrap()
}

/// Three requests for `key` pass at once under 3 a minute, and a fourth
/// is refused.
async fn three_pass_then_one_is_refused(store: &RedisStore, key: &str, policy: &Policy) {
    for n in 0..3 {
        let decision = store.decide(key, policy).await.unwrap();
        assert!(decision.is_allowed(), "{key}: request {n}");
        assert_eq!(decision.origin(), Origin::Limits, "{key}");
    }
    let fourth = store.decide(key, policy).await.unwrap();
    assert!(!fourth.is_allowed(), "{key}: the fourth");
}

/// The kind of the error `connect` gave, or a panic if it gave a store.
fn kind_of(connected: Result<RedisStore, tower_sliding_window::StoreError>) -> StoreErrorKind {
    match connected {
        Ok(_) => panic!("connected where it should not"),
        Err(err) => {
            println!("{err}");
            err.kind()
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_tls_one_limit_of_3_a_minute_is_exact() {
    let server = tokio::task::spawn_blocking(|| TlsServer::start(&[]))
        .await
        .unwrap();
    let tls = RedisTls::new().with_root_ca_pem(server.certificates.ca_pem.clone());
    let store = RedisStore::connect_tls(&server.url(""), tls)
        .await
        .expect("a TLS connection trusting the test CA");
    let clock = ManualClock::new();
    clock.set(Duration::from_secs(1_800_000_000));
    let store = store
        .with_clock(clock.clone())
        .with_failure_policy(FailurePolicy::FailClosed)
        .with_timeout(Duration::from_secs(5));
    for algorithm in [
        Algorithm::SlidingLog,
        Algorithm::SlidingCounter,
        Algorithm::FixedWindow,
        Algorithm::TokenBucket,
    ] {
        let policy = three_a_minute(algorithm);
        three_pass_then_one_is_refused(&store, &format!("{algorithm:?}"), &policy).await;
    }
    // A stamp exactly a window old still counts: a microsecond more.
    clock.advance(Duration::from_micros(60_000_001));
    let log = three_a_minute(Algorithm::SlidingLog);
    assert!(
        store.decide("SlidingLog", &log).await.unwrap().is_allowed(),
        "a minute on"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_untrusted_certificate_is_a_tls_error_at_connect() {
    let server = tokio::task::spawn_blocking(|| TlsServer::start(&[]))
        .await
        .unwrap();
    // The platform's roots do not hold the test CA.
    assert_eq!(
        kind_of(RedisStore::connect(&server.url("")).await),
        StoreErrorKind::Tls
    );
    // Nor does another CA.
    let other = RedisTls::new().with_root_ca_pem(make_certificates("another CA").ca_pem);
    assert_eq!(
        kind_of(RedisStore::connect_tls(&server.url(""), other).await),
        StoreErrorKind::Tls
    );
    // PEM with no certificate in it is a configuration error, at connect.
    let garbage = RedisTls::new().with_root_ca_pem("not a certificate");
    let kind = kind_of(RedisStore::connect_tls(&server.url(""), garbage).await);
    assert!(
        matches!(kind, StoreErrorKind::Config | StoreErrorKind::Tls),
        "{kind:?}"
    );
}

/// A server that asks every client for a certificate (mutual TLS) takes
/// one signed by its CA, given with `with_client_cert_pem`, and refuses a
/// client without one at connect.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutual_tls_takes_the_client_certificate() {
    let server = tokio::task::spawn_blocking(|| TlsServer::start(&["--tls-auth-clients", "yes"]))
        .await
        .unwrap();
    let certificates = &server.certificates;
    let ca_only = RedisTls::new().with_root_ca_pem(certificates.ca_pem.clone());
    let kind = kind_of(RedisStore::connect_tls(&server.url(""), ca_only.clone()).await);
    assert_eq!(kind, StoreErrorKind::Tls);
    let mutual = ca_only.with_client_cert_pem(
        certificates.client_cert_pem.clone(),
        certificates.client_key_pem.clone(),
    );
    let store = RedisStore::connect_tls(&server.url(""), mutual)
        .await
        .expect("a client certificate the server's CA signed");
    let policy = three_a_minute(Algorithm::SlidingCounter);
    three_pass_then_one_is_refused(&store, "mutual", &policy).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn passwords_are_checked_at_connect() {
    let server = tokio::task::spawn_blocking(|| TlsServer::start(&["--requirepass", "s3cret"]))
        .await
        .unwrap();
    let plain =
        |credentials: &str| format!("redis://{credentials}127.0.0.1:{}", server.server.port);
    assert_eq!(
        kind_of(RedisStore::connect(&plain("")).await),
        StoreErrorKind::Authentication
    );
    assert_eq!(
        kind_of(RedisStore::connect(&plain(":wrong@")).await),
        StoreErrorKind::Authentication
    );
    let store = RedisStore::connect(&plain(":s3cret@"))
        .await
        .expect("the right password");
    let policy = three_a_minute(Algorithm::SlidingCounter);
    assert_eq!(
        store.decide("k", &policy).await.unwrap().origin(),
        Origin::Limits
    );

    let tls = || RedisTls::new().with_root_ca_pem(server.certificates.ca_pem.clone());
    assert_eq!(
        kind_of(RedisStore::connect_tls(&server.url(""), tls()).await),
        StoreErrorKind::Authentication
    );
    let store = RedisStore::connect_tls(&server.url(":s3cret@"), tls())
        .await
        .expect("TLS and the password");
    assert_eq!(
        store.decide("k", &policy).await.unwrap().origin(),
        Origin::Limits
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_url_and_an_unreachable_server_are_told_apart() {
    assert_eq!(
        kind_of(RedisStore::connect("redis://127.0.0.1:notaport").await),
        StoreErrorKind::Config
    );
    assert_eq!(
        kind_of(RedisStore::connect("http://127.0.0.1:6379").await),
        StoreErrorKind::Config
    );
    assert_eq!(
        kind_of(RedisStore::connect("rediss://127.0.0.1:6379#insecure").await),
        StoreErrorKind::Config
    );
    let nobody = format!("redis://127.0.0.1:{}", free_port());
    let kind = kind_of(RedisStore::connect(&nobody).await);
    assert!(
        matches!(kind, StoreErrorKind::Connection | StoreErrorKind::Timeout),
        "{kind:?}"
    );
    let err = RedisStore::connect("redis://app:s3cret@127.0.0.1:notaport")
        .await
        .unwrap_err();
    assert!(!err.to_string().contains("s3cret"), "{err}");
}

/// A plain `redis://` URL at a port that speaks TLS: the server drops the
/// connection, and the error says what to write instead.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plain_url_at_a_tls_port_suggests_rediss() {
    let server = tokio::task::spawn_blocking(|| TlsServer::start(&[]))
        .await
        .unwrap();
    let plain = format!("redis://127.0.0.1:{}", server.tls_port);
    let err = RedisStore::connect(&plain).await.unwrap_err();
    assert_eq!(err.kind(), StoreErrorKind::Connection, "{err}");
    assert!(err.to_string().contains("rediss://"), "{err}");
    // A port where nobody listens gets no such hint.
    let nobody = format!("redis://127.0.0.1:{}", free_port());
    let err = RedisStore::connect(&nobody).await.unwrap_err();
    assert!(!err.to_string().contains("rediss://"), "{err}");
}

/// A password rotated under a running store: the failure policy answers,
/// and the failure is counted as an authentication one, not an outage.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rotated_password_is_an_authentication_failure_at_run_time() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    metrics::set_global_recorder(recorder).unwrap();
    let server = tokio::task::spawn_blocking(|| Server::start_with(&["--requirepass", "old"]))
        .await
        .unwrap();
    let url = format!("redis://:old@127.0.0.1:{}", server.port);
    let store = RedisStore::connect(&url)
        .await
        .unwrap()
        .with_failure_policy(FailurePolicy::FailClosed)
        .with_timeout(Duration::from_secs(2));
    let policy = three_a_minute(Algorithm::SlidingLog);
    assert!(store.decide("k", &policy).await.unwrap().is_allowed());

    server
        .cli(&["CONFIG", "SET", "requirepass", "new"])
        .unwrap();
    // Asked with the new password, which the helper does not know.
    let killed = std::process::Command::new("redis-cli")
        .env("REDISCLI_AUTH", "new")
        .args([
            "-p",
            &server.port.to_string(),
            "CLIENT",
            "KILL",
            "TYPE",
            "normal",
        ])
        .output()
        .unwrap();
    assert!(killed.status.success());
    // The first call may meet the dropped connection; the reconnection
    // then fails on the old password.
    let mut kinds = Vec::new();
    for _ in 0..20 {
        match store.decide("k", &policy).await {
            Err(err) if err.kind() == StoreErrorKind::Authentication => break,
            Err(err) => kinds.push(err.kind()),
            Ok(decision) => panic!("decided with a rotated password: {decision:?}"),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(kinds.len() < 20, "never an authentication error: {kinds:?}");
    let open = store.clone().with_failure_policy(FailurePolicy::FailOpen);
    assert_eq!(
        open.decide("k", &policy).await.unwrap().origin(),
        Origin::FailOpen
    );

    let counted = snapshotter
        .snapshot()
        .into_vec()
        .into_iter()
        .find_map(|(key, _, _, value)| {
            let key = key.key();
            let authentication = key
                .labels()
                .any(|l| l.key() == "kind" && l.value() == "authentication");
            (key.name() == "tower_sliding_window_store_failures_total" && authentication)
                .then_some(value)
        });
    match counted {
        Some(DebugValue::Counter(n)) => assert!(n >= 2, "{n}"),
        other => panic!("no authentication failures counted: {other:?}"),
    }
}

/// A cluster whose nodes speak TLS, reached through `connect_cluster_tls`:
/// keys in every slot are judged exactly, 3 a minute each.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_over_tls_judges_exactly() {
    let cluster = tokio::task::spawn_blocking(TlsCluster::start)
        .await
        .unwrap();
    let urls = cluster.urls();
    let urls: Vec<&str> = urls.iter().map(String::as_str).collect();
    let tls = RedisTls::new().with_root_ca_pem(cluster.ca_pem());
    let store = RedisStore::connect_cluster_tls(&urls, tls)
        .await
        .expect("a TLS connection to the cluster")
        .with_failure_policy(FailurePolicy::FailClosed)
        .with_timeout(Duration::from_secs(5));
    // Untrusted without the CA.
    let kind = kind_of(RedisStore::connect_cluster(&urls).await);
    assert_eq!(kind, StoreErrorKind::Tls);
    let policy = three_a_minute(Algorithm::SlidingLog);
    for key in 0..12 {
        three_pass_then_one_is_refused(&store, &format!("tenant-{key}"), &policy).await;
    }
}
