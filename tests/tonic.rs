//! A real tonic client against a real tonic server behind the layer.

use std::net::SocketAddr;

use tokio_stream::wrappers::TcpListenerStream;
use tonic::transport::{Channel, Endpoint, Server};
use tonic::Code;
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::HealthCheckRequest;
use tower_sliding_window::extract::Global;
use tower_sliding_window::{Limit, SlidingWindowLayer};

fn everyone<B>(_: &http::Request<B>) -> Option<&'static str> {
    Some("everyone")
}

async fn channel(addr: SocketAddr) -> Channel {
    Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap()
}

fn check() -> HealthCheckRequest {
    HealthCheckRequest {
        service: String::new(),
    }
}

#[tokio::test]
async fn tonic_client_sees_resource_exhausted() {
    let (_reporter, health) = tonic_health::server::health_reporter();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr: SocketAddr = listener.local_addr().unwrap();
    let server = tokio::spawn(async move {
        Server::builder()
            .layer(SlidingWindowLayer::new(
                Limit::per_minute(2),
                everyone::<tonic::body::Body>,
            ))
            .add_service(health)
            .serve_with_incoming(TcpListenerStream::new(listener))
            .await
            .unwrap();
    });

    let channel = channel(addr).await;
    let mut client = HealthClient::new(channel);
    assert!(client.check(check()).await.is_ok());
    assert!(client.check(check()).await.is_ok());
    let status = client.check(check()).await.unwrap_err();
    server.abort();
    assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
    assert!(status.message().contains("retry after"), "{status:?}");
    assert!(status.metadata().get("retry-after").is_some());
}

/// A tonic client's channel wrapped like any service: in HTTP mode (the
/// default) the layer answers a refused call as a server would, so the
/// client's caller sees a `Status`, not a transport error.
#[tokio::test]
async fn a_wrapped_tonic_client_sees_resource_exhausted() {
    let (_reporter, health) = tonic_health::server::health_reporter();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr: SocketAddr = listener.local_addr().unwrap();
    let server = tokio::spawn(async move {
        Server::builder()
            .add_service(health)
            .serve_with_incoming(TcpListenerStream::new(listener))
            .await
            .unwrap();
    });

    let channel = channel(addr).await;
    let limited = tower::ServiceBuilder::new()
        .layer(SlidingWindowLayer::new(Limit::per_minute(2), Global))
        .service(channel);
    let mut client = HealthClient::new(limited);
    assert!(client.check(check()).await.is_ok());
    assert!(client.check(check()).await.is_ok());
    let status = client.check(check()).await.unwrap_err();
    server.abort();
    assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
    assert!(status.metadata().get("retry-after").is_some());
}
