//! The conformance suite, run against every store: in memory, Redis on a
//! single node (`REDIS_URL`, default `redis://127.0.0.1:6379`), and a
//! three-node Redis Cluster the test starts on loopback ports.

mod suite;

mod memory {
    use tower_sliding_window::{ManualClock, MemoryStore};

    async fn make(clock: ManualClock) -> MemoryStore<ManualClock> {
        MemoryStore::with_clock(clock)
    }

    crate::conformance_suite!(make);
}

#[path = "../support/bytes_store.rs"]
mod bytes_store;

/// The suite on a store over a key-value service written outside the
/// crate from the public API alone, as a user would write one: bytes in a
/// map with compare-and-swap, judged by `KeyState` in a `CasStore`.
mod external_store {
    use tower_sliding_window::{CasStore, ManualClock};

    use crate::bytes_store::BytesMap;

    async fn make(clock: ManualClock) -> CasStore<BytesMap, ManualClock> {
        CasStore::with_clock(BytesMap::new(clock.clone()), clock)
    }

    crate::conformance_suite!(make);
}

/// The in-flight cases on the same store over a service that answers
/// later, as a remote one does: a release still counts before the next
/// call. (A crowd of thousands on one key would exhaust its retries, as
/// `CasStore` documents.)
mod remote_external_store {
    use tower_sliding_window::{CasStore, ManualClock};

    use crate::bytes_store::{BytesMap, RemoteBytesMap};

    async fn make(clock: ManualClock) -> CasStore<RemoteBytesMap, ManualClock> {
        CasStore::with_clock(RemoteBytesMap(BytesMap::new(clock.clone())), clock)
    }

    crate::conformance_tests!(make;
        the_cap_holds_under_a_crowd,
        a_stream_holds_its_slot_until_it_ends,
        a_cancelled_request_frees_its_slot,
        cap_and_windows_are_all_or_nothing,
        a_sequential_client_is_never_refused,
        a_request_of_no_cost_takes_a_slot
    );
}

#[cfg(feature = "redis")]
#[path = "../support/redis_server.rs"]
mod redis_server;
#[cfg(feature = "redis")]
#[path = "../support/stores.rs"]
mod stores;

#[cfg(feature = "redis")]
mod redis_single {
    use tower_sliding_window::{ManualClock, RedisStore};

    use crate::redis_server::shared_url;
    use crate::stores::redis_store;

    async fn make(clock: ManualClock) -> RedisStore {
        redis_store(&shared_url(), "conformance", &clock).await
    }

    crate::conformance_suite!(make);
}

#[cfg(feature = "redis")]
mod redis_cluster {
    use tower_sliding_window::{ManualClock, RedisStore};

    use crate::redis_server::Cluster;
    use crate::stores::set_up;
    use crate::suite;

    async fn make(urls: &[String], clock: ManualClock) -> RedisStore {
        let urls: Vec<&str> = urls.iter().map(String::as_str).collect();
        let store = RedisStore::connect_cluster(&urls)
            .await
            .expect("connect to the test cluster");
        set_up(store, "cluster", &clock)
    }

    /// One test for the whole suite, so the cluster is started and torn down once.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn whole_suite_on_a_three_node_cluster() {
        let cluster = tokio::task::spawn_blocking(Cluster::start).await.unwrap();
        let urls = cluster.urls();
        macro_rules! run_all {
            ($urls:expr; $($case:ident),*) => {$({
                let clock = ManualClock::new();
                suite::$case(make($urls, clock.clone()).await, clock).await;
            })*};
        }
        crate::for_each_case!([run_all](&urls));
        drop(cluster);
    }
}

#[cfg(feature = "redis-tls")]
#[path = "../support/tls_redis.rs"]
mod tls_redis;

/// The suite over TLS, on a private server with a CA made at test time.
#[cfg(feature = "redis-tls")]
mod redis_tls {
    use tower_sliding_window::{ManualClock, RedisStore, RedisTls};

    use crate::stores::set_up;
    use crate::suite;
    use crate::tls_redis::TlsServer;

    async fn make(server: &TlsServer, clock: ManualClock) -> RedisStore {
        let tls = RedisTls::new().with_root_ca_pem(server.certificates.ca_pem.clone());
        let store = RedisStore::connect_tls(&server.url(""), tls)
            .await
            .expect("connect over TLS");
        set_up(store, "tls", &clock)
    }

    /// One test for the whole suite, so the server is started once.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn whole_suite_over_tls() {
        let server = tokio::task::spawn_blocking(|| TlsServer::start(&[]))
            .await
            .unwrap();
        macro_rules! run_all {
            ($server:expr; $($case:ident),*) => {$({
                let clock = ManualClock::new();
                suite::$case(make($server, clock.clone()).await, clock).await;
            })*};
        }
        crate::for_each_case!([run_all](&server));
    }
}
