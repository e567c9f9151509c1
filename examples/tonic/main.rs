//! A tonic gRPC server (the standard health service) behind the layer, and
//! a client that calls it until it is refused, printing the status code and
//! how long the server says to wait.
//!
//! Run with `cargo run --example tonic --features tonic`.

mod server;

use std::time::Duration;

use tonic::transport::Endpoint;
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::HealthCheckRequest;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let (listener, addr) = server::bind(0).await?;
    tokio::spawn(server::serve(listener, 3));
    println!("gRPC health service on {addr}, limited to 3 calls per minute per client IP\n");

    let channel = Endpoint::from_shared(format!("http://{addr}"))?
        .connect_timeout(Duration::from_secs(5))
        .connect()
        .await?;
    let mut client = HealthClient::new(channel);
    for call in 1..=5 {
        match client
            .check(HealthCheckRequest {
                service: String::new(),
            })
            .await
        {
            Ok(reply) => println!("call {call}: OK, status {:?}", reply.into_inner().status()),
            Err(status) => {
                let retry = status
                    .metadata()
                    .get("retry-after")
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or("?");
                println!(
                    "call {call}: {:?} ({}); retry after {retry} s",
                    status.code(),
                    status.message()
                );
            }
        }
    }
    Ok(())
}
