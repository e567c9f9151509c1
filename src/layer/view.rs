//! What the layer derives from a policy: the text of its headers and the
//! names its events carry. The layer's own policy keeps one view for the
//! layer's life; a policy a plan chose gets a view per request, so that
//! per-tenant limits cost no cache that grows or thrashes. The header
//! text is worked out only when a response needs it.

use std::sync::{LazyLock, OnceLock};

use super::response::{PolicyHeaders, QuotaUnit};
use crate::observe::{PolicyEvents, UNNAMED};
use crate::policy::Policy;

#[derive(Debug)]
pub(crate) struct PolicyView {
    pub(crate) policy: Policy,
    pub(crate) events: Events,
    unit: QuotaUnit,
    headers: OnceLock<PolicyHeaders>,
}

impl PolicyView {
    /// The view of the layer's own policy, its header text made at once.
    pub(crate) fn own(policy: Policy, unit: QuotaUnit) -> Self {
        Self {
            events: Events::Owned(Box::new(PolicyEvents::new(policy.label()))),
            unit,
            headers: OnceLock::from(PolicyHeaders::new(&policy, unit)),
            policy,
        }
    }

    /// The view of a policy a plan chose for one request. An unnamed one
    /// is labelled `unnamed` in events, all sharing one set of them: its
    /// signature would make a series per tenant where limits are per
    /// tenant.
    pub(crate) fn planned(policy: Policy, unit: QuotaUnit) -> Self {
        static UNNAMED_EVENTS: LazyLock<PolicyEvents> =
            LazyLock::new(|| PolicyEvents::new(UNNAMED));
        let events = match policy.name() {
            Some(name) => Events::Owned(Box::new(PolicyEvents::new(name))),
            None => Events::Shared(&UNNAMED_EVENTS),
        };
        Self {
            events,
            unit,
            headers: OnceLock::new(),
            policy,
        }
    }

    /// The policy's header text.
    pub(crate) fn headers(&self) -> &PolicyHeaders {
        self.headers
            .get_or_init(|| PolicyHeaders::new(&self.policy, self.unit))
    }
}

/// A view's events: its own, or the ones every unnamed policy a plan
/// chooses shares.
#[derive(Debug)]
pub(crate) enum Events {
    Owned(Box<PolicyEvents>),
    Shared(&'static PolicyEvents),
}

impl std::ops::Deref for Events {
    type Target = PolicyEvents;

    fn deref(&self) -> &PolicyEvents {
        match self {
            Self::Owned(events) => events,
            Self::Shared(events) => events,
        }
    }
}
