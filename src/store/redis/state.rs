//! A key's stored state read back as the [`KeyState`] every store judges
//! with: each algorithm's one format, decoded as docs/design.md describes
//! it, for a person (or a test) reading what Redis holds.

use redis::RedisResult;

use super::client::Connection;
use super::{error, keys};
use crate::algorithm::leases::{Lease, Leases};
use crate::algorithm::{Algorithm, FixedWindow, SlidingCounter, SlidingLog, TokenBucket};
use crate::limit::Limit;
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
    let failed = |e| error("Redis read failed".into(), e);
    let mut get = redis::cmd("MGET");
    get.arg(name).arg(keys::penalty_key(name));
    let read: RedisResult<(Option<Vec<u8>>, Option<String>)> = connection.query(&get, None).await;
    let (stored, penalty) = read.map_err(failed)?;
    let penalty_until = penalty.and_then(|until| until.parse().ok()).unwrap_or(0);
    let mut leases = Leases::default();
    if policy.in_flight().is_some() {
        let mut range = redis::cmd("ZRANGE");
        range
            .arg(keys::leases_key(name))
            .arg(0)
            .arg(-1)
            .arg("WITHSCORES");
        let held: RedisResult<Vec<(u64, f64)>> = connection.query(&range, None).await;
        for (id, until) in held.map_err(failed)? {
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

/// The algorithm's state in `bytes`, if they are what its script writes.
fn decode(bytes: &[u8], policy: &Policy) -> Option<Counts> {
    let limits = policy.limits();
    match policy.algorithm() {
        Algorithm::SlidingCounter => {
            let records = records(bytes, limits.len())?;
            Some(Counts::Counter(SlidingCounter::from_parts(records)))
        }
        Algorithm::FixedWindow => {
            let windows = pairs(bytes, limits, |max| max + 1)?;
            Some(Counts::Fixed(FixedWindow::from_parts(windows)))
        }
        Algorithm::TokenBucket => {
            let tats = pairs(bytes, limits, |max| max)?;
            Some(Counts::Bucket(TokenBucket::from_parts(tats)))
        }
        Algorithm::SlidingLog => {
            let capacity = policy.log_capacity();
            let stamps = log_stamps(bytes, capacity)?;
            Some(Counts::Log(SlidingLog::holding(&stamps, capacity)))
        }
    }
}

/// The counter's records: per limit the window index, 8 little-endian
/// bytes below 2^53, and two 4-byte counts.
fn records(bytes: &[u8], limits: usize) -> Option<Vec<(u64, u32, u32)>> {
    if bytes.len() != 16 * limits {
        return None;
    }
    let records = bytes.chunks_exact(16).map(|record| {
        let window = u64::from_le_bytes(record[..8].try_into().ok()?);
        let count = |at: usize| Some(u32::from_le_bytes(record[at..at + 4].try_into().ok()?));
        (window < 1 << 53).then_some((window, count(8)?, count(12)?))
    });
    records.collect()
}

/// The fixed window's and the bucket's records: per limit 8 little-endian
/// bytes below 2^53 (the window index, or the arrival time's whole µs) and
/// a 4-byte number below `bound` of the limit's max (the window's count, at
/// most max, or the arrival time's remainder, below it).
fn pairs(bytes: &[u8], limits: &[Limit], bound: fn(u64) -> u64) -> Option<Vec<(u64, u32)>> {
    if bytes.len() != 12 * limits.len() {
        return None;
    }
    let pairs = bytes.chunks_exact(12).zip(limits).map(|(record, limit)| {
        let word = u64::from_le_bytes(record[..8].try_into().ok()?);
        let number = u32::from_le_bytes(record[8..].try_into().ok()?);
        let below = bound(u64::from(limit.max()));
        (word < 1 << 53 && u64::from(number) < below).then_some((word, number))
    });
    pairs.collect()
}

/// The most stamps a log keeps as the stamps alone, as `log.lua` writes
/// them: a longer log is a ring behind a head.
const LOG_PLAIN_STAMPS: usize = 128;

/// The log's stamps, oldest first: 8 little-endian bytes each, up to
/// [`LOG_PLAIN_STAMPS`] of them alone, more in a ring behind the head's slot
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
