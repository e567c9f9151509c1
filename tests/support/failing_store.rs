//! A store whose every call fails, as one whose server is down would:
//! written outside the crate, as a user's own store would be.

use std::future::{ready, Ready};

use tower_sliding_window::{Decision, Policy, Store, StoreError};

#[derive(Clone)]
pub struct FailingStore(pub &'static str);

impl<K> Store<K> for FailingStore {
    // Nothing to keep per policy.
    type Binding = Policy;
    type Future = Ready<Result<Decision, StoreError>>;

    fn bind(&self, policy: &Policy) -> Policy {
        policy.clone()
    }

    fn decide_cost_bound(&self, _: K, _: &Policy, _: u32) -> Self::Future {
        ready(Err(StoreError::new(self.0, None)))
    }

    fn settle_bound(
        &self,
        key: K,
        policy: &Policy,
        _: &Decision,
        cost: u32,
        _: u32,
    ) -> Self::Future {
        self.decide_cost_bound(key, policy, cost)
    }

    fn peek_bound(&self, key: K, policy: &Policy) -> Self::Future {
        self.decide_cost_bound(key, policy, 1)
    }
}
