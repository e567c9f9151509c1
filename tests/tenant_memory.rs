//! What a tenant with limits of its own costs the memory store beside a
//! key under a policy every tenant shares: its policy value, held once by
//! its entry, and no map or table of its own. Both plans build the policy
//! on every request, as a plan reading limits from data does, and a shared
//! policy built per request costs what one built once does.
//!
//! The only test in its binary, because it counts the heap of the whole
//! process with a wrapping allocator.

use std::time::Duration;

use tower_sliding_window::{Algorithm, Limit, MemoryStore, Policy};

#[path = "support/live_bytes.rs"]
mod live_bytes;

use live_bytes::live_bytes;

const TENANTS: u64 = 20_000;

/// The most a tenant's own limits may add to what its key costs.
const OWN_POLICY_BYTES: isize = 256;

/// Bytes the store grows by per tenant, each tenant judged once under the
/// policy `plan` builds for it.
fn bytes_per_tenant(plan: impl Fn(u64) -> Policy) -> isize {
    let store = MemoryStore::new();
    let before = live_bytes();
    for tenant in 0..TENANTS {
        assert!(store.decide_now(tenant, &plan(tenant)).is_allowed());
    }
    let grown = (live_bytes() - before) / TENANTS as isize;
    assert_eq!(store.key_count::<u64>(), TENANTS as usize);
    grown
}

#[test]
fn a_tenant_with_limits_of_its_own_costs_its_policy_and_no_more() {
    for algorithm in [
        Algorithm::SlidingCounter,
        Algorithm::FixedWindow,
        Algorithm::SlidingLog,
    ] {
        let per_minute = |max| {
            let limit = Limit::new(max, Duration::from_secs(60)).unwrap();
            Policy::new(algorithm, [limit]).unwrap()
        };
        let once = per_minute(1_000);
        let shared_once = bytes_per_tenant(|_| once.clone());
        let shared = bytes_per_tenant(|_| per_minute(1_000));
        let own = bytes_per_tenant(|tenant| per_minute(1_000 + tenant as u32));
        println!(
            "{algorithm:?}: bytes a tenant: {shared_once} under a policy built once, \
             {shared} under one built per request, {own} under its own"
        );
        assert!(
            shared - shared_once <= 8,
            "{algorithm:?}: {shared} against {shared_once}"
        );
        assert!(
            own - shared <= OWN_POLICY_BYTES,
            "{algorithm:?}: {own} bytes against {shared}"
        );
    }
}
