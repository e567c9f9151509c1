//! The example's gRPC server, shared with the integration test.

use std::net::SocketAddr;

use tokio::net::TcpListener;
use tokio_stream::wrappers::TcpListenerStream;
use tonic::transport::Server;
use tower_sliding_window::extract::PeerIp;
use tower_sliding_window::{Limit, SlidingWindowLayer};

/// Serves the standard gRPC health service on `listener`, limited to
/// `per_minute` calls per client IP, until the task is dropped.
pub async fn serve(listener: TcpListener, per_minute: u32) -> Result<(), tonic::transport::Error> {
    let (reporter, health) = tonic_health::server::health_reporter();
    reporter
        .set_service_status("", tonic_health::ServingStatus::Serving)
        .await;
    Server::builder()
        .layer(SlidingWindowLayer::new(
            Limit::per_minute(per_minute),
            PeerIp::new(),
        ))
        .add_service(health)
        .serve_with_incoming(TcpListenerStream::new(listener))
        .await
}

/// Binds 127.0.0.1 on `port` (0 for any free one).
pub async fn bind(port: u16) -> std::io::Result<(TcpListener, SocketAddr)> {
    let listener = TcpListener::bind(("127.0.0.1", port)).await?;
    let addr = listener.local_addr()?;
    Ok((listener, addr))
}
