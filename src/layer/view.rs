//! What the layer derives from a policy, once per policy rather than per
//! request: the text of its headers and the names its events carry.

use super::response::{PolicyHeaders, QuotaUnit};
use crate::observe::PolicyEvents;
use crate::policy::Policy;

#[derive(Debug)]
pub(crate) struct PolicyView {
    pub(crate) policy: Policy,
    pub(crate) headers: PolicyHeaders,
    pub(crate) events: PolicyEvents,
}

impl PolicyView {
    pub(crate) fn new(policy: Policy, unit: QuotaUnit) -> Self {
        Self {
            headers: PolicyHeaders::new(&policy, unit),
            events: PolicyEvents::new(&policy),
            policy,
        }
    }
}
