//! The fixed scripts the store runs, one set for every policy, and how a
//! call fills their arguments: the policy's limits travel with each call,
//! so Redis's script cache holds these five whatever the number of
//! policies. Each file's header documents its keys, arguments and replies.

use std::sync::{Arc, LazyLock};

use redis::{Script, ScriptInvocation};

use super::keys;
use crate::algorithm::Algorithm;
use crate::policy::Policy;

/// A judging script: `lease.lua` (the time and the in-flight cap) and
/// `state.lua` (the arguments and the key's penalty), the algorithm's own
/// file, and `tail.lua` (the state written, the reply).
macro_rules! judging {
    ($file:literal) => {
        concat!(
            include_str!("lua/lease.lua"),
            include_str!("lua/state.lua"),
            include_str!(concat!("lua/", $file)),
            include_str!("lua/tail.lua")
        )
    };
}

/// The sliding counter and the fixed window: judging, peeking, settling.
const WINDOW: &str = judging!("window.lua");
/// The sliding log: judging, peeking, settling.
const LOG: &str = judging!("log.lua");
/// The token bucket: judging, peeking, settling.
const BUCKET: &str = judging!("bucket.lua");
/// An instance's heartbeat, counting the fleet (see `fleet`).
const FLEET: &str = include_str!("lua/fleet.lua");
/// The renewal of the in-flight slots an instance holds.
const RENEW: &str = concat!(include_str!("lua/lease.lua"), include_str!("lua/renew.lua"));

/// Every script the store runs, by the file name in `lua/` of its own
/// part (all but the heartbeat's start with `lease.lua`).
pub(super) const SOURCES: [(&str, &str); 5] = [
    ("window.lua", WINDOW),
    ("log.lua", LOG),
    ("bucket.lua", BUCKET),
    ("fleet.lua", FLEET),
    ("renew.lua", RENEW),
];

/// The scripts with their SHA1 digests, computed once per process.
static SCRIPTS: LazyLock<[Script; 5]> =
    LazyLock::new(|| SOURCES.map(|(_, source)| Script::new(source)));

/// The heartbeat's script.
pub(super) fn fleet() -> &'static Script {
    &SCRIPTS[3]
}

/// The call renewing, for each set of slots in `held` (all of one node,
/// or of one hash slot on a Cluster), its ids, to last `lease` µs from now
/// (the client's clock's, if it has one).
pub(super) fn renewal(
    held: &[(Arc<str>, Vec<u64>)],
    lease: u64,
    now: Option<u64>,
) -> ScriptInvocation<'static> {
    let mut invocation = SCRIPTS[4].prepare_invoke();
    match now {
        Some(now) => invocation.arg(now),
        None => invocation.arg(""),
    };
    invocation.arg("").arg(lease);
    for (leases, ids) in held {
        invocation.key(&**leases).arg(ids.len());
        for id in ids {
            invocation.arg(id);
        }
    }
    invocation
}

/// A request's in-flight slot, asked for with a judging call under a
/// policy with a cap: the id it takes if admitted, and for how long (µs).
#[derive(Clone, Copy, Debug)]
pub(super) struct Lease {
    pub(super) id: u64,
    pub(super) length: u64,
}

/// What a call asks of a script.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Ask {
    /// Judge a request of one unit and record nothing.
    Peek,
    /// A request of no cost under an in-flight cap: judged as a peek by
    /// the windows, which record nothing, but taking a slot.
    Free,
    /// Judge a request of this many units (at least one), recording them
    /// all if every limit has room.
    Record(u32),
    /// Judge a chunk of local quota of `cost` units that may be spent over
    /// the next `hold` µs, as `Record` but charged by the bucket from the
    /// last moment it may be spent.
    Chunk { cost: u32, hold: u64 },
    /// Settle a request judged at `at` (µs) for `cost` units: charge
    /// `units` more, or give back as many if negative.
    Settle { at: u64, cost: u32, units: i64 },
}

impl Ask {
    /// The units the request is judged at: a peek is judged as one.
    pub(super) fn cost(self) -> u32 {
        match self {
            Self::Record(cost) | Self::Chunk { cost, .. } => cost,
            Self::Peek | Self::Free | Self::Settle { .. } => 1,
        }
    }

    /// Whether the windows record it.
    pub(super) fn records(self) -> bool {
        !matches!(self, Self::Peek | Self::Free)
    }

    /// How long a chunk may be spent over (µs); nothing else is held.
    pub(super) fn hold(self) -> u64 {
        match self {
            Self::Chunk { hold, .. } => hold,
            _ => 0,
        }
    }

    /// Whether it takes an in-flight slot, under a cap.
    pub(super) fn takes_slot(self) -> bool {
        matches!(self, Self::Record(_) | Self::Free)
    }
}

/// The call of the script that does `ask` for the key `name` under
/// `policy`, with now in µs from the client's clock, if it has one (else
/// the script reads Redis `TIME`), the slot it takes under a cap, and its
/// `hold` under local quota (a bucket chunk's, or the log's widening). The
/// arguments are the same for every script: now, the cap, the units, the
/// hold (`h` and µs) and the time judged at for a settling (for the bucket
/// followed by the request's cost, which bounds what it may give back),
/// the penalty, the algorithm, then each limit's max and window.
pub(super) fn invocation(
    policy: &Policy,
    ask: Ask,
    name: &str,
    now: Option<u64>,
    lease: Option<Lease>,
    hold: u64,
) -> ScriptInvocation<'static> {
    let scripts: &'static [Script; 5] = &SCRIPTS;
    let algorithm = policy.algorithm();
    let script = match algorithm {
        Algorithm::SlidingLog => &scripts[1],
        Algorithm::TokenBucket => &scripts[2],
        Algorithm::SlidingCounter | Algorithm::FixedWindow => &scripts[0],
    };
    let mut invocation = script.key(name);
    let penalty = policy.penalty_micros();
    match now {
        Some(now) => invocation.arg(now),
        None => invocation.arg(""),
    };
    let lease = lease
        .zip(policy.in_flight())
        .filter(|_| !matches!(ask, Ask::Settle { .. }));
    match lease {
        Some((lease, cap)) => invocation.arg(format!("{cap} {} {}", lease.length, lease.id)),
        None => invocation.arg(""),
    };
    let settling = match ask {
        Ask::Settle { at, cost, .. } if algorithm == Algorithm::TokenBucket => {
            format!("{at} {cost}")
        }
        Ask::Settle { at, .. } => at.to_string(),
        _ => String::new(),
    };
    let units = match ask {
        Ask::Peek | Ask::Free => 0,
        Ask::Record(cost) | Ask::Chunk { cost, .. } => i64::from(cost),
        Ask::Settle { units, .. } => units,
    };
    match (hold, settling.is_empty()) {
        (0, _) => invocation.arg(units).arg(settling),
        (hold, true) => invocation.arg(units).arg(format!("h{hold}")),
        (hold, false) => invocation.arg(units).arg(format!("h{hold} {settling}")),
    };
    invocation.arg(penalty).arg(algorithm.letter());
    for limit in policy.limits() {
        invocation.arg(limit.max()).arg(limit.window_micros());
    }
    if penalty > 0 && !matches!(ask, Ask::Settle { .. }) {
        // Beside the state, in the same hash slot: the hash tag is the same.
        invocation.key(keys::penalty_key(name));
    }
    if lease.is_some() {
        invocation.key(keys::leases_key(name));
    }
    invocation
}
