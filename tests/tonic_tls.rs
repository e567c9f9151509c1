//! tonic servers on TLS behind the layer, keyed by `PeerIp` and `ClientIp`.
//!
//! What tonic records about the peer depends on who ends the TLS:
//! * its own TLS (`Server::tls_config`): `TlsConnectInfo<TcpConnectInfo>`
//!   and the bare `TcpConnectInfo` beside it, which the `tonic` feature reads;
//! * TLS ended before tonic, an incoming stream of tokio-rustls streams
//!   (`serve_with_incoming`): that `TlsConnectInfo` alone, which only the
//!   `tonic-tls` feature reads.
//!
//! A call without a key is refused with `InvalidArgument`; a keyed one past
//! its limit gets `ResourceExhausted`.
//!
//! The certificate and key in tests/support are a self-signed P-256 leaf for
//! `localhost` and 127.0.0.1. It is backdated to 2000, so that a machine
//! whose clock is behind still accepts it, and valid to 2126; rustls takes a
//! self-signed certificate as its own trust anchor only if it is no CA. Made
//! in an empty directory, with tests/support as `$S`:
//!
//! ```text
//! printf '%s\n' '[ca]' 'default_ca = self' '[self]' 'database = index.txt' \
//!   'new_certs_dir = .' 'rand_serial = yes' 'default_md = sha256' \
//!   'policy = any' 'x509_extensions = leaf' '[any]' 'commonName = supplied' \
//!   '[leaf]' 'subjectAltName = DNS:localhost, IP:127.0.0.1' \
//!   'basicConstraints = critical, CA:FALSE' \
//!   'keyUsage = critical, digitalSignature' 'extendedKeyUsage = serverAuth' \
//!   > ca.cnf && touch index.txt
//! openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
//!   -subj /CN=localhost -keyout "$S/tls-key.pem" -out req.csr
//! openssl ca -batch -notext -config ca.cnf -selfsign -keyfile "$S/tls-key.pem" \
//!   -in req.csr -startdate 20000101000000Z -enddate 21260101000000Z \
//!   -out "$S/tls-cert.pem"
//! ```

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::rustls::ServerConfig;
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;
use tokio_stream::wrappers::TcpListenerStream;
use tokio_stream::{Stream, StreamExt};
use tonic::transport::server::TcpConnectInfo;
use tonic::transport::{
    Certificate, Channel, ClientTlsConfig, Endpoint, Identity, Server, ServerTlsConfig,
};
use tonic::{Code, Status};
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::HealthCheckRequest;
use tower_sliding_window::extract::{ClientIp, PeerIp};
use tower_sliding_window::{Limit, SlidingWindowLayer};

const CERT: &str = include_str!("support/tls-cert.pem");
const KEY: &str = include_str!("support/tls-key.pem");

/// Serves tonic-health with `$server` (a `Server` builder) on `$incoming`,
/// behind `$layer`, in a task it evaluates to. A macro, not a function: the
/// bounds tonic puts on a layer's service are long, and would name the
/// crate's extractor trait besides.
macro_rules! serve {
    ($server:expr, $incoming:expr, $layer:expr) => {{
        let (_reporter, health) = tonic_health::server::health_reporter();
        let (server, incoming, layer) = ($server, $incoming, $layer);
        tokio::spawn(async move {
            server
                .layer(layer)
                .add_service(health)
                .serve_with_incoming(incoming)
                .await
                .unwrap();
        })
    }};
}

async fn listen() -> (TcpListener, SocketAddr) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    (listener, addr)
}

/// A server that ends the TLS itself.
fn tonic_tls() -> Server {
    Server::builder()
        .tls_config(ServerTlsConfig::new().identity(Identity::from_pem(CERT, KEY)))
        .unwrap()
}

/// Connections with the TLS ended before tonic sees them, as a server does
/// that reloads its certificate or shares a listener.
fn tls_ended_before_tonic(
    listener: TcpListener,
) -> impl Stream<Item = std::io::Result<TlsStream<TcpStream>>> {
    let certs = CertificateDer::pem_slice_iter(CERT.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .unwrap();
    let key = PrivateKeyDer::from_pem_slice(KEY.as_bytes()).unwrap();
    let mut config = ServerConfig::builder()
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .unwrap();
    // tonic's client insists on HTTP/2 being agreed in the handshake.
    config.alpn_protocols = vec![b"h2".to_vec()];
    let acceptor = TlsAcceptor::from(Arc::new(config));
    TcpListenerStream::new(listener).then(move |tcp| {
        let acceptor = acceptor.clone();
        async move { acceptor.accept(tcp?).await }
    })
}

/// A client that trusts only the test certificate, over `https` to the
/// address itself, so the certificate's IP entry is what it checks.
async fn client(addr: SocketAddr) -> HealthClient<Channel> {
    let tls = ClientTlsConfig::new().ca_certificate(Certificate::from_pem(CERT));
    let channel = Endpoint::from_shared(format!("https://{addr}"))
        .unwrap()
        .tls_config(tls)
        .unwrap()
        .connect()
        .await
        .unwrap();
    HealthClient::new(channel)
}

/// A health check, carrying `x-forwarded-for: forwarded_for` if given.
fn check(forwarded_for: Option<&str>) -> tonic::Request<HealthCheckRequest> {
    let mut request = tonic::Request::new(HealthCheckRequest {
        service: String::new(),
    });
    if let Some(ip) = forwarded_for {
        request
            .metadata_mut()
            .insert("x-forwarded-for", ip.parse().unwrap());
    }
    request
}

/// Makes three calls under a limit of two: the first two must pass; the
/// third's refusal is returned.
async fn third_refused(client: &mut HealthClient<Channel>, forwarded_for: Option<&str>) -> Status {
    for n in 1..=2 {
        let reply = client.check(check(forwarded_for)).await;
        assert!(reply.is_ok(), "call {n}: {reply:?}");
    }
    client.check(check(forwarded_for)).await.unwrap_err()
}

/// The peer as `PeerIp` finds it without the `tonic-tls` feature.
fn tcp_connect_info_only<B>(request: &http::Request<B>) -> Option<IpAddr> {
    let info = request.extensions().get::<TcpConnectInfo>()?;
    info.remote_addr().map(|addr| addr.ip())
}

#[tokio::test]
async fn peer_ip_keys_calls_under_tonic_tls_config() {
    let (listener, addr) = listen().await;
    let server = serve!(
        tonic_tls(),
        TcpListenerStream::new(listener),
        SlidingWindowLayer::new(Limit::per_minute(2), PeerIp::new())
    );
    let refused = third_refused(&mut client(addr).await, None).await;
    server.abort();
    // InvalidArgument here would mean no key: the peer went unseen.
    assert_eq!(refused.code(), Code::ResourceExhausted, "{refused:?}");
    assert!(refused.metadata().get("retry-after").is_some());
}

#[tokio::test]
async fn tonic_tls_config_records_the_bare_tcp_connect_info_too() {
    // Why the `tonic` feature alone serves tonic's own TLS.
    let (listener, addr) = listen().await;
    let server = serve!(
        tonic_tls(),
        TcpListenerStream::new(listener),
        SlidingWindowLayer::new(
            Limit::per_minute(2),
            tcp_connect_info_only::<tonic::body::Body>
        )
    );
    let refused = third_refused(&mut client(addr).await, None).await;
    server.abort();
    assert_eq!(refused.code(), Code::ResourceExhausted, "{refused:?}");
}

#[tokio::test]
async fn tls_ended_before_tonic_records_no_bare_tcp_connect_info() {
    // Why the `tonic-tls` feature: without it every call here has no key.
    let (listener, addr) = listen().await;
    let server = serve!(
        Server::builder(),
        tls_ended_before_tonic(listener),
        SlidingWindowLayer::new(
            Limit::per_minute(2),
            tcp_connect_info_only::<tonic::body::Body>
        )
    );
    let refused = client(addr).await.check(check(None)).await.unwrap_err();
    server.abort();
    assert_eq!(refused.code(), Code::InvalidArgument, "{refused:?}");
}

#[tokio::test]
async fn peer_ip_keys_calls_with_tls_ended_before_tonic() {
    let (listener, addr) = listen().await;
    let server = serve!(
        Server::builder(),
        tls_ended_before_tonic(listener),
        SlidingWindowLayer::new(Limit::per_minute(2), PeerIp::new())
    );
    let refused = third_refused(&mut client(addr).await, None).await;
    server.abort();
    assert_eq!(refused.code(), Code::ResourceExhausted, "{refused:?}");
}

#[tokio::test]
async fn client_ip_finds_the_peer_with_tls_ended_before_tonic() {
    // The peer, 127.0.0.1, is the trusted proxy: the key is the address it
    // forwarded, which ClientIp reads only once it has found the peer.
    let (listener, addr) = listen().await;
    let server = serve!(
        Server::builder(),
        tls_ended_before_tonic(listener),
        SlidingWindowLayer::new(
            Limit::per_minute(2),
            ClientIp::behind(["127.0.0.1"]).unwrap()
        )
    );
    let mut client = client(addr).await;
    let refused = third_refused(&mut client, Some("203.0.113.7")).await;
    // Another client through the same proxy has a window of its own.
    let other = client.check(check(Some("203.0.113.8"))).await;
    server.abort();
    assert_eq!(refused.code(), Code::ResourceExhausted, "{refused:?}");
    assert!(other.is_ok(), "{other:?}");
}
