//! Turning an address into a key: one form per host, and one key per IPv6
//! network prefix.

use std::net::{IpAddr, Ipv6Addr};

use crate::error::ConfigError;

/// The default IPv6 prefix: a /64 is what one customer usually gets, so a
/// single host can rotate through a whole /64 without escaping its limit.
pub(super) const DEFAULT_IPV6_PREFIX: u8 = 64;

pub(super) fn check_prefix(bits: u8) -> Result<u8, ConfigError> {
    if (1..=128).contains(&bits) {
        Ok(bits)
    } else {
        Err(ConfigError::Extractor(format!(
            "an IPv6 prefix must be 1 to 128 bits, not {bits}"
        )))
    }
}

/// The key for `ip`: IPv4-mapped IPv6 addresses as plain IPv4 (so a
/// dual-stack listener does not count one client twice), IPv6 addresses
/// cut to their first `ipv6_prefix` bits.
pub(super) fn key_for(ip: IpAddr, ipv6_prefix: u8) -> IpAddr {
    match ip.to_canonical() {
        IpAddr::V4(v4) => IpAddr::V4(v4),
        IpAddr::V6(v6) => {
            let mask = u128::MAX
                .checked_shl(128 - u32::from(ipv6_prefix))
                .unwrap_or(0);
            IpAddr::V6(Ipv6Addr::from(u128::from(v6) & mask))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ipv6_is_cut_to_its_prefix_and_mapped_ipv4_unwrapped() {
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        assert_eq!(
            key_for(ip("2001:db8:1:2:3:4:5:6"), 64),
            ip("2001:db8:1:2::")
        );
        assert_eq!(
            key_for(ip("2001:db8:1:2:3:4:5:6"), 128),
            ip("2001:db8:1:2:3:4:5:6")
        );
        assert_eq!(key_for(ip("2001:db8:1:2:3:4:5:6"), 48), ip("2001:db8:1::"));
        assert_eq!(key_for(ip("::ffff:192.0.2.7"), 64), ip("192.0.2.7"));
        assert_eq!(key_for(ip("192.0.2.7"), 1), ip("192.0.2.7"));
        assert!(check_prefix(0).is_err() && check_prefix(129).is_err());
    }
}
