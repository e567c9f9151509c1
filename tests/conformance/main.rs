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

/// The suite on a store written outside the crate, as a user would write
/// one: it wraps a memory store and counts the calls that reach it.
mod external_store {
    use std::hash::Hash;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    use tower_sliding_window::store::MemoryBinding;
    use tower_sliding_window::{ManualClock, MemoryStore, Policy, Store};

    use crate::suite;

    #[derive(Clone)]
    struct Counting {
        inner: MemoryStore<ManualClock>,
        calls: Arc<AtomicUsize>,
    }

    impl<K: Hash + Eq + Send + Sync + 'static> Store<K> for Counting {
        type Binding = MemoryBinding<K>;
        type Future = <MemoryStore<ManualClock> as Store<K>>::Future;

        fn bind(&self, policy: &Policy) -> MemoryBinding<K> {
            self.inner.bind(policy)
        }

        fn decide_cost_bound(&self, key: K, binding: &MemoryBinding<K>, cost: u32) -> Self::Future {
            self.calls.fetch_add(1, Ordering::Relaxed);
            self.inner.decide_cost_bound(key, binding, cost)
        }

        fn settle_bound(
            &self,
            key: K,
            binding: &MemoryBinding<K>,
            admitted: &tower_sliding_window::Decision,
            cost: u32,
            used: u32,
        ) -> Self::Future {
            self.calls.fetch_add(1, Ordering::Relaxed);
            self.inner.settle_bound(key, binding, admitted, cost, used)
        }

        fn peek_bound(&self, key: K, binding: &MemoryBinding<K>) -> Self::Future {
            self.calls.fetch_add(1, Ordering::Relaxed);
            self.inner.peek_bound(key, binding)
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn whole_suite_on_a_store_written_outside_the_crate() {
        macro_rules! run_all {
            (; $($case:ident),*) => {$({
                let clock = ManualClock::new();
                let calls = Arc::new(AtomicUsize::new(0));
                let store = Counting {
                    inner: MemoryStore::with_clock(clock.clone()),
                    calls: Arc::clone(&calls),
                };
                suite::$case(store, clock).await;
                assert!(calls.load(Ordering::Relaxed) > 0, "{} reached the store", stringify!($case));
            })*};
        }
        crate::for_each_case!([run_all]());
    }
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
