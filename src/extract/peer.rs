//! The address of the connection's other end.

use std::net::{IpAddr, SocketAddr};

use http::Request;
#[cfg(feature = "tonic-tls")]
use tonic::transport::server::{TcpConnectInfo, TlsConnectInfo};

use super::ip::{check_prefix, key_for, DEFAULT_IPV6_PREFIX};
use crate::error::ConfigError;

/// Keys requests by the peer's IP address: the TCP connection's other end.
///
/// It finds the address where servers record it, without an interceptor:
/// axum's `ConnectInfo<SocketAddr>` (feature `axum`; serve with
/// `into_make_service_with_connect_info::<SocketAddr>()`), tonic's
/// `TcpConnectInfo` (feature `tonic`, enough under tonic's own TLS too), the
/// `TlsConnectInfo` that is all tonic records when TLS is ended before it, on
/// tokio-rustls streams through `serve_with_incoming` (feature `tonic-tls`,
/// which leaves the crypto provider to your tonic features), or a plain
/// `SocketAddr` extension that any other server can insert. IPv6 addresses
/// are keyed by their /64 (see [`ipv6_prefix`](PeerIp::ipv6_prefix)).
///
/// Without the matching feature (or, in axum, without
/// `into_make_service_with_connect_info`) it finds no address: every request
/// then has no key, and the layer refuses it with `400` unless told otherwise
/// ([`MissingKey`](crate::MissingKey)).
///
/// Behind a reverse proxy every request comes from the proxy: use
/// [`ClientIp`](super::ClientIp) there.
#[derive(Clone, Copy, Debug)]
pub struct PeerIp {
    ipv6_prefix: u8,
}

impl PeerIp {
    /// Keys by the peer's address, IPv6 by /64.
    pub fn new() -> Self {
        Self {
            ipv6_prefix: DEFAULT_IPV6_PREFIX,
        }
    }

    /// Keys IPv6 peers by their first `bits` bits (128 for whole addresses).
    ///
    /// # Errors
    ///
    /// [`ConfigError`] unless `bits` is 1 to 128.
    pub fn ipv6_prefix(mut self, bits: u8) -> Result<Self, ConfigError> {
        self.ipv6_prefix = check_prefix(bits)?;
        Ok(self)
    }
}

impl Default for PeerIp {
    fn default() -> Self {
        Self::new()
    }
}

impl PeerIp {
    /// The request's key, if it has one: what the layer counts it under.
    // Inlined: it runs on every request, and out of line its key comes
    // back through memory rather than in registers.
    #[inline]
    pub fn extract<B>(&self, request: &Request<B>) -> Option<IpAddr> {
        peer_addr(request).map(|ip| key_for(ip, self.ipv6_prefix))
    }
}

super::reads_requests!(PeerIp => IpAddr);

/// The peer's IP as the server recorded it in the request's extensions.
#[inline]
pub(super) fn peer_addr<B>(request: &Request<B>) -> Option<IpAddr> {
    let extensions = request.extensions();
    #[cfg(feature = "axum")]
    if let Some(axum::extract::ConnectInfo(addr)) =
        extensions.get::<axum::extract::ConnectInfo<SocketAddr>>()
    {
        return Some(addr.ip());
    }
    #[cfg(feature = "tonic")]
    if let Some(info) = extensions.get::<tonic::transport::server::TcpConnectInfo>() {
        if let Some(addr) = info.remote_addr() {
            return Some(addr.ip());
        }
    }
    // On TLS streams it did not make, tonic records only this wrapped form
    // (its own TLS records the bare one above too): without this, a server
    // that ends TLS before tonic had no keys.
    #[cfg(feature = "tonic-tls")]
    if let Some(addr) = extensions
        .get::<TlsConnectInfo<TcpConnectInfo>>()
        .and_then(|info| info.get_ref().remote_addr())
    {
        return Some(addr.ip());
    }
    extensions.get::<SocketAddr>().map(SocketAddr::ip)
}
