//! Connecting: to one server or a cluster, over TLS where the URL says
//! `rediss://`, checked by one round trip before the store is handed out,
//! and what kind of failure a Redis error is.

use std::time::Duration;

use redis::cluster::ClusterClientBuilder;

use super::client::{Connection, Opener};
use super::errors::error;
use crate::store::{StoreError, StoreErrorKind};

/// Certificates for `rediss://` connections beyond the defaults: a CA of
/// your own for a self-hosted Redis, and a client certificate for mutual
/// TLS (feature `redis-tls`).
///
/// Without it, [`RedisStore::connect`](super::RedisStore::connect) verifies a `rediss://` server
/// against the platform's root certificates, which is what managed Redis
/// services need.
///
/// ```no_run
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// use tower_sliding_window::{RedisStore, RedisTls};
///
/// let tls = RedisTls::new().with_root_ca_pem(std::fs::read("/etc/redis/ca.pem")?);
/// let store = RedisStore::connect_tls("rediss://:password@redis.internal:6380", tls).await?;
/// # Ok(()) }
/// ```
#[cfg(feature = "redis-tls")]
#[derive(Clone, Default)]
pub struct RedisTls {
    root_ca_pem: Option<Vec<u8>>,
    client_pem: Option<(Vec<u8>, Vec<u8>)>,
}

#[cfg(feature = "redis-tls")]
impl std::fmt::Debug for RedisTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The client key is a secret: say only whether there is one.
        f.debug_struct("RedisTls")
            .field("custom_root_ca", &self.root_ca_pem.is_some())
            .field("client_certificate", &self.client_pem.is_some())
            .finish()
    }
}

#[cfg(feature = "redis-tls")]
impl RedisTls {
    /// The platform's root certificates, and no client certificate.
    pub fn new() -> Self {
        Self::default()
    }

    /// Trusts the CA certificates in `pem` instead of the platform's roots.
    pub fn with_root_ca_pem(mut self, pem: impl Into<Vec<u8>>) -> Self {
        self.root_ca_pem = Some(pem.into());
        self
    }

    /// Presents this client certificate chain and its private key, both
    /// PEM, to a server that asks for one (mutual TLS).
    pub fn with_client_cert_pem(
        mut self,
        cert_pem: impl Into<Vec<u8>>,
        key_pem: impl Into<Vec<u8>>,
    ) -> Self {
        self.client_pem = Some((cert_pem.into(), key_pem.into()));
        self
    }

    /// A CA file that holds no certificate would trust nobody, and every
    /// handshake would fail as if the server were at fault: say so here.
    fn check(&self) -> Result<(), StoreError> {
        use rustls::pki_types::{pem::PemObject, CertificateDer};
        let Some(pem) = &self.root_ca_pem else {
            return Ok(());
        };
        let certificates = CertificateDer::pem_slice_iter(pem)
            .filter(Result::is_ok)
            .count();
        if certificates == 0 {
            let message = "the root CA PEM holds no certificate";
            return Err(StoreError::new(message, None).with_kind(StoreErrorKind::Config));
        }
        Ok(())
    }

    fn certificates(self) -> redis::TlsCertificates {
        redis::TlsCertificates {
            client_tls: self
                .client_pem
                .map(|(client_cert, client_key)| redis::ClientTlsConfig {
                    client_cert,
                    client_key,
                }),
            root_cert: self.root_ca_pem,
        }
    }
}

/// A client for one server at `url`.
pub(super) fn plain(url: &str) -> Result<redis::Client, StoreError> {
    install_crypto_provider();
    redis::Client::open(url).map_err(|e| url_error(url, e))
}

/// A client for one server at the `rediss://` `url`, with `tls`'s
/// certificates.
#[cfg(feature = "redis-tls")]
pub(super) fn with_tls(url: &str, tls: RedisTls) -> Result<redis::Client, StoreError> {
    install_crypto_provider();
    tls.check()?;
    redis::Client::build_with_tls(url, tls.certificates())
        .map_err(|e| url_error(url, e).with_kind(StoreErrorKind::Config))
}

/// A connection to the server `client` names (at `url`), checked by a
/// `PING`, and how to open it again.
pub(super) async fn single(
    client: redis::Client,
    url: &str,
) -> Result<(Connection, Opener), StoreError> {
    let opener = Opener::Single(client);
    let connection = opener.open().await.map_err(|e| {
        let hint = if url.starts_with("redis://") && is_reset(&e) {
            " (if that port speaks TLS, the URL is rediss://)"
        } else {
            ""
        };
        error(
            format!("cannot connect to Redis at {}{hint}", redact(url)),
            e,
        )
    })?;
    Ok((connection, opener))
}

/// `builder` with `tls`'s certificates.
#[cfg(feature = "redis-tls")]
pub(super) fn cluster_tls(
    builder: ClusterClientBuilder,
    tls: RedisTls,
) -> Result<ClusterClientBuilder, StoreError> {
    tls.check()?;
    Ok(builder.certs(tls.certificates()))
}

/// A connection to the Cluster `builder` names (at `urls`), each node
/// given checked by a `PING`, and how to open it again.
pub(super) async fn cluster(
    urls: &[&str],
    builder: ClusterClientBuilder,
) -> Result<(Connection, Opener), StoreError> {
    install_crypto_provider();
    let shown: Vec<String> = urls.iter().map(|url| redact(url)).collect();
    // No response timeout of its own: the store's bounds every call,
    // whatever it is set to.
    let client = builder
        .connection_timeout(Duration::from_secs(2))
        .retries(2)
        .build()
        .map_err(|e| {
            error(format!("invalid Redis Cluster URLs {shown:?}"), e)
                .with_kind(StoreErrorKind::Config)
        })?;
    // Connecting pings every node given, so a node that refuses the
    // password or the handshake fails here.
    let opener = Opener::Cluster(client);
    let connection = opener
        .open()
        .await
        .map_err(|e| error(format!("cannot connect to Redis Cluster at {shown:?}"), e))?;
    Ok((connection, opener))
}

/// Makes ring rustls's process-wide provider, unless the application chose
/// one first: redis-rs builds its TLS configuration from that default, and
/// rustls cannot pick one by itself when both of its providers are built in.
fn install_crypto_provider() {
    #[cfg(feature = "redis-tls")]
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        // Losing a race to another installer leaves theirs: fine too.
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
}

/// Whether the server closed or reset the connection before answering:
/// what a TLS port does with a plain-text client.
fn is_reset(e: &redis::RedisError) -> bool {
    let text = e.to_string().to_lowercase();
    ["reset", "closed", "broken pipe", "unexpected end", "eof"]
        .iter()
        .any(|word| text.contains(word))
}

/// An error for a URL redis-rs would not take.
fn url_error(url: &str, e: redis::RedisError) -> StoreError {
    let hint = if url.starts_with("rediss://") && !cfg!(feature = "redis-tls") {
        " (rediss:// needs the crate's `redis-tls` feature)"
    } else {
        ""
    };
    error(format!("invalid Redis URL {:?}{hint}", redact(url)), e).with_kind(StoreErrorKind::Config)
}

/// `url` with its password, if any, replaced: errors end up in logs.
fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    match rest.split_once('@') {
        Some((credentials, host)) if credentials.contains(':') => {
            let user = credentials.split(':').next().unwrap_or_default();
            format!("{scheme}://{user}:***@{host}")
        }
        _ => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_are_kept_out_of_messages() {
        assert_eq!(redact("redis://127.0.0.1:6379"), "redis://127.0.0.1:6379");
        assert_eq!(
            redact("rediss://app:s3cret@host:6380/0"),
            "rediss://app:***@host:6380/0"
        );
        assert_eq!(redact("redis://:s3cret@host"), "redis://:***@host");
        assert_eq!(redact("not a url"), "not a url");
    }

    #[test]
    fn a_bad_url_is_a_config_error() {
        let err = redis::Client::open("redis://host:notaport").unwrap_err();
        assert_eq!(
            url_error("redis://host:notaport", err).kind(),
            StoreErrorKind::Config
        );
    }
}
