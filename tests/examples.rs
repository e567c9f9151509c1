//! The examples, run here: axum and tonic served on 127.0.0.1:0 and called by
//! real clients, the token gateway on a manual clock, the outbound clients
//! on real time.

#[cfg(feature = "axum")]
#[path = "../examples/axum/app.rs"]
mod axum_app;

#[path = "../examples/tokens.rs"]
mod tokens;

#[path = "../examples/generations.rs"]
mod generations;
#[path = "../examples/outbound.rs"]
mod outbound;

#[cfg(feature = "tonic")]
#[path = "../examples/tonic/server.rs"]
mod tonic_server;

#[cfg(feature = "axum")]
mod axum_example {
    use std::net::SocketAddr;

    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// One HTTP/1.1 request on a fresh connection: (status, body).
    async fn send(addr: SocketAddr, request: &str) -> (u16, String) {
        let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
        stream.write_all(request.as_bytes()).await.unwrap();
        let mut reply = String::new();
        stream.read_to_string(&mut reply).await.unwrap();
        let status = reply.split(' ').nth(1).unwrap().parse().unwrap();
        let body = reply
            .split("\r\n\r\n")
            .nth(1)
            .unwrap_or_default()
            .to_owned();
        (status, body)
    }

    fn get(forwarded_for: &str) -> String {
        format!("GET / HTTP/1.1\r\nhost: t\r\nx-forwarded-for: {forwarded_for}\r\nconnection: close\r\n\r\n")
    }

    const LOGIN: &str =
        "POST /login HTTP/1.1\r\nhost: t\r\ncontent-length: 0\r\nconnection: close\r\n\r\n";

    #[tokio::test]
    async fn per_route_limits_behind_a_trusted_proxy() {
        let app = crate::axum_app::app(&["127.0.0.1/32"]);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let server = tokio::spawn(async move {
            axum::serve(
                listener,
                app.into_make_service_with_connect_info::<SocketAddr>(),
            )
            .await
        });

        // Two clients behind the proxy each get their own 5 per second.
        let mut alice = Vec::new();
        for _ in 0..6 {
            alice.push(send(addr, &get("203.0.113.7")).await.0);
        }
        assert_eq!(alice, [200, 200, 200, 200, 200, 429]);
        let (status, body) = send(addr, &get("198.51.100.1")).await;
        assert_eq!((status, body.as_str()), (200, "hello! 4 left in this 1s\n"));
        // A forged leftmost entry does not give Alice a fresh window.
        assert_eq!(send(addr, &get("1.2.3.4, 203.0.113.7")).await.0, 429);

        // /login has its own, stricter limit and answers with problem+json.
        for _ in 0..3 {
            assert_eq!(send(addr, LOGIN).await.0, 200);
        }
        let (status, body) = send(addr, LOGIN).await;
        assert_eq!(status, 429);
        assert!(body.contains("quota-exceeded"), "{body}");
        server.abort();
    }
}

#[cfg(feature = "tonic")]
mod tonic_example {
    use tonic::transport::Endpoint;
    use tonic::Code;
    use tonic_health::pb::health_client::HealthClient;
    use tonic_health::pb::HealthCheckRequest;

    #[tokio::test]
    async fn grpc_client_gets_resource_exhausted_with_a_retry_delay() {
        let (listener, addr) = crate::tonic_server::bind(0).await.unwrap();
        let server = tokio::spawn(crate::tonic_server::serve(listener, 2));
        let channel = Endpoint::from_shared(format!("http://{addr}"))
            .unwrap()
            .connect()
            .await
            .unwrap();
        let mut client = HealthClient::new(channel);
        let check = || HealthCheckRequest {
            service: String::new(),
        };
        for _ in 0..2 {
            client.check(check()).await.unwrap();
        }
        let status = client.check(check()).await.unwrap_err();
        server.abort();
        assert_eq!(status.code(), Code::ResourceExhausted);
        let retry: u64 = status
            .metadata()
            .get("retry-after")
            .unwrap()
            .to_str()
            .unwrap()
            .parse()
            .unwrap();
        assert!((1..=120).contains(&retry), "retry after {retry} s");
        assert!(
            status.message().contains("limit of 2 per 60s"),
            "{}",
            status.message()
        );
    }
}

/// The tokens example's gateway: calls reserve their maximum and settle at
/// what they used, and one that asks for more than a minute's tokens is
/// answered 413.
#[tokio::test]
async fn the_token_gateway_reserves_and_settles() {
    use tower_sliding_window::{ManualClock, MemoryStore};

    let app = tokens::gateway(MemoryStore::with_clock(ManualClock::new()));
    let (status, used, left) = tokens::call(&app, "alice", 400, 120).await;
    assert_eq!((status.as_u16(), used), (200, Some(120)));
    assert!(left.unwrap().starts_with("\"60s\";r=880;"));
    let (status, _, _) = tokens::call(&app, "alice", tokens::TOKENS_PER_MINUTE + 1, 1).await;
    assert_eq!(status.as_u16(), 413);
    let (status, used, left) = tokens::call(&app, "alice", 880, 900).await;
    assert_eq!((status.as_u16(), used), (200, Some(880)));
    assert!(left.unwrap().starts_with("\"60s\";r=0;"));
    let (status, _, _) = tokens::call(&app, "alice", 1, 1).await;
    assert_eq!(status.as_u16(), 429);
}

/// The generations example's gateway: 8 streams at once, the 9th refused
/// at once, and a slot freed when a stream ends.
#[tokio::test]
async fn the_generation_gateway_caps_streams_in_flight() {
    let streams = generations::Streams::default();
    let app = generations::gateway(streams.clone());
    let mut held = Vec::new();
    for _ in 0..generations::IN_FLIGHT {
        let (status, _, response) = generations::start(&app, "carol").await;
        assert_eq!(status.as_u16(), 200);
        held.push(response);
    }
    let (status, retry, _) = generations::start(&app, "carol").await;
    assert_eq!(
        (status.as_u16(), retry.as_str()),
        (429, "retry after \"1\"")
    );
    assert_eq!(generations::start(&app, "dave").await.0.as_u16(), 200);
    drop(streams.lock().unwrap().remove(0));
    let ended = axum::body::to_bytes(held.remove(0).into_body(), 1024).await;
    assert!(ended.unwrap().is_empty());
    assert_eq!(generations::start(&app, "carol").await.0.as_u16(), 200);
}

/// The outbound example's run, on Redis with `--features redis` (as the
/// suite runs) or a shared memory store: every call answered, and its final
/// line names a peak within the provider's limits, the requests' reached.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_outbound_clients_keep_to_the_providers_limits() {
    let last = outbound::run()
        .await
        .unwrap_or_else(|error| panic!("the outbound example failed: {error}"));
    assert!(last.starts_with("ok: 9 calls in "), "{last}");
    let peak: Vec<u32> = last
        .split_once("at most ")
        .and_then(|(_, peak)| peak.strip_suffix(" tokens a window"))
        .expect(&last)
        .split(" requests and ")
        .map(|n| n.parse().expect(&last))
        .collect();
    assert_eq!(peak[0], 4, "{last}");
    assert!(peak[1] <= 1_000, "{last}");
}
