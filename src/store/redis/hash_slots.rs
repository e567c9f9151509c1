//! Which node of a Redis Cluster holds a key, so that an outage is decided
//! per node: the hash-slot map as `CLUSTER SLOTS` gives it, and a key's hash slot.

use redis::Value;

use super::outage::{whole, Node};

/// The primary serving each range of hash slots.
#[derive(Debug, Default)]
pub(super) struct HashSlots {
    ranges: Vec<(u16, u16, Node)>,
}

impl HashSlots {
    /// The node holding the key `name`: `""` for a slot no range covers.
    pub(super) fn node(&self, name: &str) -> Node {
        let slot = hash_slot(name.as_bytes());
        self.ranges
            .iter()
            .find(|(first, last, _)| (*first..=*last).contains(&slot))
            .map_or_else(whole, |(_, _, node)| node.clone())
    }

    /// Whether some range is served by `node`.
    pub(super) fn names(&self, node: &Node) -> bool {
        self.ranges.iter().any(|(_, _, n)| n == node)
    }

    /// The map in a `CLUSTER SLOTS` reply: per range, its first and last
    /// slot, then the primary's host and port (then replicas, not used).
    pub(super) fn read(reply: &Value) -> Option<Self> {
        let Value::Array(entries) = reply else {
            return None;
        };
        let mut ranges = Vec::with_capacity(entries.len());
        for entry in entries {
            let Value::Array(fields) = entry else {
                return None;
            };
            let [first, last, Value::Array(primary), ..] = fields.as_slice() else {
                return None;
            };
            let [host, port, ..] = primary.as_slice() else {
                return None;
            };
            let number = |value: &Value| redis::from_redis_value_ref::<u16>(value).ok();
            let host: String = redis::from_redis_value_ref(host).ok()?;
            let node = Node::from(format!("{host}:{}", number(port)?));
            ranges.push((number(first)?, number(last)?, node));
        }
        Some(Self { ranges })
    }
}

/// A node's host and port, to send it a probe.
pub(super) fn address(node: &Node) -> Option<(String, u16)> {
    let (host, port) = node.rsplit_once(':')?;
    Some((host.to_owned(), port.parse().ok()?))
}

/// A key's hash slot as Redis Cluster computes it: CRC16 (XMODEM) of the
/// name's hash tag (between its first `{` and the next `}`, if not empty),
/// else of the whole name, modulo 16384.
pub(super) fn hash_slot(name: &[u8]) -> u16 {
    let tag = name.iter().position(|&b| b == b'{').and_then(|open| {
        let rest = &name[open + 1..];
        let close = rest.iter().position(|&b| b == b'}')?;
        (close > 0).then(|| &rest[..close])
    });
    crc16::State::<crc16::XMODEM>::calculate(tag.unwrap_or(name)) % 16_384
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_follow_the_hash_tag_as_redis_computes_them() {
        // Values from `CLUSTER KEYSLOT`.
        assert_eq!(hash_slot(b"foo"), 12_182);
        assert_eq!(hash_slot(b"user-2"), 157);
        assert_eq!(hash_slot(b"tsw:{user-2}:v5:l5/1s"), 157);
        // An empty tag is no tag: the whole name is hashed.
        assert_eq!(hash_slot(b"{}foo"), 9_500);
    }

    #[test]
    fn a_hash_slot_map_reads_from_its_reply() {
        let range = |first: i64, last: i64, port: i64| {
            Value::Array(vec![
                Value::Int(first),
                Value::Int(last),
                Value::Array(vec![
                    Value::BulkString(b"10.0.0.1".to_vec()),
                    Value::Int(port),
                ]),
            ])
        };
        let reply = Value::Array(vec![range(0, 8191, 7000), range(8192, 16383, 7001)]);
        let slots = HashSlots::read(&reply).unwrap();
        assert_eq!(&*slots.node("foo"), "10.0.0.1:7001");
        assert_eq!(&*slots.node("tsw:{user-2}:v5:l5/1s"), "10.0.0.1:7000");
        assert!(HashSlots::read(&Value::Int(1)).is_none());
        assert_eq!(
            address(&Node::from("10.0.0.1:7001")),
            Some(("10.0.0.1".into(), 7001))
        );
    }
}
