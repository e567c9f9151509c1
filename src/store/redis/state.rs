//! A key's stored state read back as the [`KeyState`] every store judges
//! with: each algorithm's one format, decoded as docs/design.md describes
//! it, for a person (or a test) reading what Redis holds.

use super::client::Connection;
use super::keys;
use crate::algorithm::leases::{Lease, Leases};
use crate::algorithm::{Algorithm, SlidingLog};
use crate::policy::Policy;
use crate::state::{Counts, KeyState};
use crate::store::StoreError;

/// What Redis holds at the key `name` under `policy`, as
/// [`RedisStore::state`](super::RedisStore::state) tells it.
pub(super) async fn read(
    connection: &Connection,
    name: &str,
    policy: &Policy,
) -> Result<Option<KeyState>, StoreError> {
    let mut get = redis::cmd("MGET");
    get.arg(name).arg(keys::penalty_key(name));
    let (stored, penalty): (Option<Vec<u8>>, Option<String>) =
        connection.query(&get, None, "read").await?;
    let penalty_until = penalty.and_then(|until| until.parse().ok()).unwrap_or(0);
    let mut leases = Leases::default();
    if policy.in_flight().is_some() {
        let mut range = redis::cmd("ZRANGE");
        range
            .arg(keys::leases_key(name))
            .arg(0)
            .arg(-1)
            .arg("WITHSCORES");
        let held: Vec<(u64, f64)> = connection.query(&range, None, "read").await?;
        for (id, until) in held {
            let until = until as u64;
            leases.take(Lease { id, until });
        }
    }
    let counts = match stored.and_then(|bytes| decode(&bytes, policy)) {
        Some(counts) => counts,
        None if leases.len() > 0 => KeyState::new(policy.algorithm()).into_counts(),
        None => return Ok(None),
    };
    Ok(Some(KeyState::from_parts(counts, penalty_until, leases)))
}

/// The algorithm's state in `bytes`, if they are what its script writes:
/// for all but the log the numbers [`KeyState::to_bytes`] writes after its
/// header, a record per limit, each within what its limit allows.
fn decode(bytes: &[u8], policy: &Policy) -> Option<Counts> {
    let limits = policy.limits();
    let algorithm = policy.algorithm();
    let counts = match algorithm {
        Algorithm::SlidingLog => {
            let capacity = policy.log_capacity();
            return Some(Counts::Log(SlidingLog::holding(
                &log_stamps(bytes, capacity)?,
                capacity,
            )));
        }
        Algorithm::SlidingCounter if bytes.len() == 16 * limits.len() => {
            Counts::from_body(algorithm, bytes)?
        }
        _ if bytes.len() == 12 * limits.len() => Counts::from_body(algorithm, bytes)?,
        _ => return None,
    };
    // Read as the scripts read them.
    counts.fits(limits).then_some(counts)
}

/// The most stamps a log keeps as the stamps alone, as `log.lua` writes
/// them: a longer log is a ring behind a head.
const LOG_PLAIN_STAMPS: usize = 128;

/// The log's stamps, oldest first: 8 little-endian bytes each, up to
/// [`LOG_PLAIN_STAMPS`] of them alone, more in a ring behind the oldest's place
/// and the count (4 bytes each); at most the log's capacity, in order.
fn log_stamps(bytes: &[u8], capacity: u32) -> Option<Vec<u64>> {
    let (head, len, ring) = if bytes.len() <= 8 * LOG_PLAIN_STAMPS {
        (0, bytes.len() / 8, bytes)
    } else {
        let (header, ring) = bytes.split_at(8);
        let word =
            |at: usize| u32::from_le_bytes(header[at..at + 4].try_into().unwrap_or_default());
        (word(0) as usize, word(4) as usize, ring)
    };
    let size = ring.len() / 8;
    if !ring.len().is_multiple_of(8) || head >= size.max(1) || len > size || len > capacity as usize
    {
        return None;
    }
    let stamps: Option<Vec<u64>> = (0..len)
        .map(|i| {
            let at = 8 * ((head + i) % size);
            u64::try_from(i64::from_le_bytes(ring[at..at + 8].try_into().ok()?)).ok()
        })
        .collect();
    stamps.filter(|stamps| stamps.windows(2).all(|pair| pair[0] <= pair[1]))
}
