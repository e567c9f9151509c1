//! The client's IP address behind reverse proxies you trust.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use http::header::{HeaderName, FORWARDED};
use http::Request;
use ipnet::IpNet;

use super::ip::{check_prefix, key_for, DEFAULT_IPV6_PREFIX};
use super::peer::peer_addr;
use crate::error::ConfigError;

static X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");

/// The header your proxies record the client's address in.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum ForwardedHeader {
    /// `X-Forwarded-For: client, proxy1, proxy2` (the default).
    #[default]
    XForwardedFor,
    /// RFC 7239 `Forwarded: for=client, for="[2001:db8::1]:4711"`.
    Forwarded,
}

/// Keys requests by the client's IP address as reported by reverse proxies
/// you trust.
///
/// Every proxy appends the address it received the request from, so the
/// list reads client-first — but its left part is whatever the client sent.
/// `ClientIp` therefore starts at the peer and walks the list from the
/// **right**, skipping addresses in the trusted networks, and takes the first
/// address it does not trust: the nearest hop no trusted proxy can vouch
/// for. Forged entries a client puts in front never get that far.
///
/// * A peer outside the trusted networks is the client: its headers are ignored.
/// * A malformed entry met on the way (not an IP, `unknown`, an obfuscated
///   name) falls back to the peer's address: no guessing.
/// * If every hop is trusted, the leftmost one is the client.
///
/// IPv6 clients are keyed by their /64 by default.
///
/// ```
/// use std::net::SocketAddr;
/// use tower_sliding_window::extract::ClientIp;
/// use tower_sliding_window::KeyExtractor;
///
/// let client_ip = ClientIp::behind(["10.0.0.0/8"])?;
/// let mut request = http::Request::builder()
///     .header("x-forwarded-for", "6.6.6.6, 203.0.113.9, 10.0.0.2")
///     .body(())
///     .unwrap();
/// request.extensions_mut().insert("10.0.0.1:443".parse::<SocketAddr>().unwrap());
/// // 6.6.6.6 may be forged; 203.0.113.9 is where our proxies got the request from.
/// assert_eq!(client_ip.extract(&request), Some("203.0.113.9".parse().unwrap()));
/// # Ok::<(), tower_sliding_window::ConfigError>(())
/// ```
#[derive(Clone, Debug)]
pub struct ClientIp {
    trusted: Arc<[IpNet]>,
    header: ForwardedHeader,
    ipv6_prefix: u8,
}

impl ClientIp {
    /// Trusts the proxies in `networks` (CIDR notation such as `10.0.0.0/8`
    /// or `fd00::/8`; a bare address means just that host).
    ///
    /// # Errors
    ///
    /// [`ConfigError`] naming the first entry that is not a network or address.
    pub fn behind<I, S>(networks: I) -> Result<Self, ConfigError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let trusted = networks
            .into_iter()
            .map(|network| {
                let text = network.as_ref().trim();
                text.parse::<IpNet>()
                    .or_else(|_| text.parse::<IpAddr>().map(IpNet::from))
                    .map_err(|_| {
                        ConfigError::Extractor(format!("{text:?} is not an IP network or address"))
                    })
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self {
            trusted: trusted.into(),
            header: ForwardedHeader::default(),
            ipv6_prefix: DEFAULT_IPV6_PREFIX,
        })
    }

    /// Reads `header` instead of `X-Forwarded-For`.
    pub fn header(mut self, header: ForwardedHeader) -> Self {
        self.header = header;
        self
    }

    /// Keys IPv6 clients by their first `bits` bits (128 for whole addresses).
    ///
    /// # Errors
    ///
    /// [`ConfigError`] unless `bits` is 1 to 128.
    pub fn ipv6_prefix(mut self, bits: u8) -> Result<Self, ConfigError> {
        self.ipv6_prefix = check_prefix(bits)?;
        Ok(self)
    }

    fn trusts(&self, ip: IpAddr) -> bool {
        let ip = ip.to_canonical();
        self.trusted.iter().any(|network| network.contains(&ip))
    }

    /// The client's address given the peer's and the request's headers.
    pub(crate) fn resolve<B>(&self, peer: IpAddr, request: &Request<B>) -> IpAddr {
        if !self.trusts(peer) {
            return peer;
        }
        let name = match self.header {
            ForwardedHeader::XForwardedFor => &X_FORWARDED_FOR,
            ForwardedHeader::Forwarded => &FORWARDED,
        };
        let mut nearest = peer;
        // Later header lines were appended by nearer proxies, as were later
        // entries within a line: walk both backwards.
        for line in request.headers().get_all(name).iter().rev() {
            let Ok(line) = line.to_str() else {
                return peer;
            };
            for entry in line.rsplit(',') {
                let hop = match self.header {
                    ForwardedHeader::XForwardedFor => parse_node(entry.trim()),
                    ForwardedHeader::Forwarded => forwarded_for(entry),
                };
                let Some(hop) = hop else {
                    return peer;
                };
                if !self.trusts(hop) {
                    return hop;
                }
                nearest = hop;
            }
        }
        nearest
    }
}

impl ClientIp {
    /// The request's key, if it has one: what the layer counts it under.
    pub fn extract<B>(&self, request: &Request<B>) -> Option<IpAddr> {
        let peer = peer_addr(request)?;
        Some(key_for(self.resolve(peer, request), self.ipv6_prefix))
    }
}

super::reads_requests!(ClientIp => IpAddr);

/// An address as proxies write it: `192.0.2.1`, `192.0.2.1:80`, `2001:db8::1`,
/// `[2001:db8::1]` or `[2001:db8::1]:80`, optionally in double quotes.
fn parse_node(text: &str) -> Option<IpAddr> {
    let text = text.trim_matches('"');
    if let Ok(ip) = text.parse::<IpAddr>() {
        return Some(ip);
    }
    if let Ok(addr) = text.parse::<SocketAddr>() {
        return Some(addr.ip());
    }
    text.strip_prefix('[')?
        .strip_suffix(']')?
        .parse::<IpAddr>()
        .ok()
}

/// The `for=` node of one RFC 7239 element (`for=…;proto=…;by=…`).
fn forwarded_for(element: &str) -> Option<IpAddr> {
    element.split(';').find_map(|pair| {
        let (name, value) = pair.split_once('=')?;
        name.trim()
            .eq_ignore_ascii_case("for")
            .then(|| parse_node(value.trim()))
            .flatten()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nodes_in_every_form_proxies_write() {
        let ip = |s: &str| Some(s.parse::<IpAddr>().unwrap());
        assert_eq!(parse_node("192.0.2.1"), ip("192.0.2.1"));
        assert_eq!(parse_node("192.0.2.1:8080"), ip("192.0.2.1"));
        assert_eq!(parse_node("2001:db8::1"), ip("2001:db8::1"));
        assert_eq!(parse_node("[2001:db8::1]"), ip("2001:db8::1"));
        assert_eq!(parse_node("\"[2001:db8::1]:4711\""), ip("2001:db8::1"));
        assert_eq!(parse_node("unknown"), None);
        assert_eq!(parse_node("_hidden"), None);
        assert_eq!(parse_node(""), None);
        assert_eq!(
            forwarded_for("for=192.0.2.60;proto=http;by=203.0.113.43"),
            ip("192.0.2.60")
        );
        assert_eq!(
            forwarded_for("proto=https;For=\"[2001:db8:cafe::17]:4711\""),
            ip("2001:db8:cafe::17")
        );
        assert_eq!(forwarded_for("proto=https"), None);
    }
}
