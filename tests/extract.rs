//! The ready-made key extractors: client IPs behind proxies (spoofed,
//! malformed, IPv4/IPv6, trusted and untrusted chains), peer addresses,
//! header keys and the global key.

use std::net::{IpAddr, SocketAddr};

use http::Request;
use proptest::prelude::*;
use tower_sliding_window::extract::{ClientIp, ForwardedHeader, Global, HeaderKey, PeerIp};
use tower_sliding_window::{Algorithm, Limit, ManualClock, MemoryStore, Policy};

fn ip(text: &str) -> IpAddr {
    text.parse().unwrap()
}

/// A request from `peer` carrying `name: value` header lines.
fn request(peer: &str, headers: &[(&str, &str)]) -> Request<()> {
    let mut builder = Request::builder();
    for (name, value) in headers {
        builder = builder.header(*name, *value);
    }
    let mut request = builder.body(()).unwrap();
    request
        .extensions_mut()
        .insert(SocketAddr::new(ip(peer), 40_000));
    request
}

fn proxies() -> ClientIp {
    ClientIp::behind(["10.0.0.0/8", "2001:db8:ffff::/48", "192.0.2.1"]).unwrap()
}

#[test]
fn rightmost_untrusted_address_wins_over_a_forged_leftmost() {
    let xff = [("x-forwarded-for", "1.1.1.1, 203.0.113.9, 10.0.0.7")];
    assert_eq!(
        proxies().extract(&request("10.0.0.1", &xff)),
        Some(ip("203.0.113.9"))
    );
}

#[test]
fn an_untrusted_peer_is_the_client_whatever_it_claims() {
    let forged = [("x-forwarded-for", "10.0.0.9, 5.5.5.5")];
    assert_eq!(
        proxies().extract(&request("198.51.100.20", &forged)),
        Some(ip("198.51.100.20"))
    );
}

#[test]
fn later_header_lines_are_nearer_hops() {
    let lines = [
        ("x-forwarded-for", "6.6.6.6, 203.0.113.5"),
        ("x-forwarded-for", "10.1.1.1"),
    ];
    assert_eq!(
        proxies().extract(&request("10.0.0.1", &lines)),
        Some(ip("203.0.113.5"))
    );
}

#[test]
fn when_every_hop_is_trusted_the_leftmost_is_the_client() {
    let internal = [("x-forwarded-for", "10.9.9.9, 10.0.0.7")];
    assert_eq!(
        proxies().extract(&request("10.0.0.1", &internal)),
        Some(ip("10.9.9.9"))
    );
    assert_eq!(
        proxies().extract(&request("10.0.0.1", &[])),
        Some(ip("10.0.0.1")),
        "no header"
    );
}

#[test]
fn malformed_hops_fall_back_to_the_peer() {
    for bad in [
        "not-an-ip",
        "unknown",
        "",
        "1.2.3.4.5",
        "10.0.0.7,,",
        "[::1",
    ] {
        let header = [("x-forwarded-for", bad)];
        assert_eq!(
            proxies().extract(&request("10.0.0.1", &header)),
            Some(ip("10.0.0.1")),
            "{bad:?}"
        );
    }
    // Malformed entries left of the first untrusted hop are never read.
    let header = [("x-forwarded-for", "garbage, 203.0.113.9")];
    assert_eq!(
        proxies().extract(&request("10.0.0.1", &header)),
        Some(ip("203.0.113.9"))
    );
    // A header that is not text.
    let mut binary = request("10.0.0.1", &[]);
    binary.headers_mut().insert(
        "x-forwarded-for",
        http::HeaderValue::from_bytes(b"\xff\xfe").unwrap(),
    );
    assert_eq!(proxies().extract(&binary), Some(ip("10.0.0.1")));
}

#[test]
fn forwarded_header_with_ipv6_and_ports() {
    let client_ip = proxies().header(ForwardedHeader::Forwarded);
    let header = [(
        "forwarded",
        "for=6.6.6.6, for=\"[2001:db8:cafe::17]:4711\";proto=https, for=192.0.2.1;by=10.0.0.1",
    )];
    // IPv6 clients are keyed by their /64.
    assert_eq!(
        client_ip.extract(&request("10.0.0.1", &header)),
        Some(ip("2001:db8:cafe::"))
    );
    let obfuscated = [("forwarded", "for=_hidden")];
    assert_eq!(
        client_ip.extract(&request("10.0.0.1", &obfuscated)),
        Some(ip("10.0.0.1"))
    );
    // X-Forwarded-For is not read when Forwarded is configured.
    let other = [("x-forwarded-for", "203.0.113.9")];
    assert_eq!(
        client_ip.extract(&request("10.0.0.1", &other)),
        Some(ip("10.0.0.1"))
    );
}

#[test]
fn ipv6_trusted_proxies_and_prefixes() {
    let header = [("x-forwarded-for", "2001:db8:1:2:aaaa::1")];
    let per_64 = proxies();
    let per_host = proxies().ipv6_prefix(128).unwrap();
    assert_eq!(
        per_64.extract(&request("2001:db8:ffff::5", &header)),
        Some(ip("2001:db8:1:2::"))
    );
    assert_eq!(
        per_host.extract(&request("2001:db8:ffff::5", &header)),
        Some(ip("2001:db8:1:2:aaaa::1"))
    );
    // IPv4-mapped peers count as IPv4, and are trusted as such.
    assert_eq!(
        proxies().extract(&request(
            "::ffff:10.0.0.1",
            &[("x-forwarded-for", "203.0.113.9")]
        )),
        Some(ip("203.0.113.9"))
    );
}

#[test]
fn bad_proxy_lists_and_prefixes_are_config_errors() {
    let err = ClientIp::behind(["10.0.0.0/8", "ten.0.0.0/8"]).unwrap_err();
    assert!(
        err.to_string()
            .contains("\"ten.0.0.0/8\" is not an IP network"),
        "{err}"
    );
    assert!(ClientIp::behind(["10.0.0.0/33"]).is_err());
    assert!(PeerIp::new().ipv6_prefix(0).is_err());
}

#[test]
fn peer_ip_from_a_socket_addr_extension_and_none_without_one() {
    assert_eq!(
        PeerIp::new().extract(&request("203.0.113.1", &[])),
        Some(ip("203.0.113.1"))
    );
    assert_eq!(PeerIp::new().extract(&Request::new(())), None);
    assert_eq!(
        proxies().extract(&Request::new(())),
        None,
        "no peer, no key"
    );
}

#[cfg(feature = "axum")]
#[test]
fn peer_ip_reads_axum_connect_info() {
    let mut request = Request::new(());
    let addr: SocketAddr = "[2001:db8::9]:1234".parse().unwrap();
    request
        .extensions_mut()
        .insert(axum::extract::ConnectInfo(addr));
    assert_eq!(PeerIp::new().extract(&request), Some(ip("2001:db8::")));
}

#[test]
fn header_keys_are_injective_even_for_binary_values() {
    let key = HeaderKey::new("x-api-key").unwrap();
    let with = |value: &[u8]| {
        let mut request = Request::new(());
        request
            .headers_mut()
            .insert("x-api-key", http::HeaderValue::from_bytes(value).unwrap());
        key.extract(&request)
    };
    assert_eq!(with(b"abc123"), Some("abc123".into()));
    assert_eq!(with(b""), None, "an empty key is no key");
    assert_eq!(with(b"\xff"), Some("%FF".into()));
    assert_ne!(with(b"\xff"), with(b"%FF"), "escaping cannot collide");
    assert_eq!(key.extract(&Request::new(())), None);
    assert!(HeaderKey::new("bad header").is_err());
}

#[test]
fn long_header_values_are_digested_into_keys_of_their_own() {
    let key = HeaderKey::new("x-api-key").unwrap();
    let with = |value: &str| {
        let request = Request::get("/")
            .header("x-api-key", value)
            .body(())
            .unwrap();
        key.extract(&request).unwrap()
    };
    let long = "k".repeat(64 * 1024);
    let mut one_byte_apart = long.clone();
    one_byte_apart.replace_range(40_000..40_001, "j");
    assert_eq!(with(&long).len(), tower_sliding_window::DIGEST_LEN);
    assert!(with(&long).starts_with("sha256:"));
    assert_ne!(with(&long), with(&one_byte_apart));
    assert_eq!(with(&long), with(&long.clone()), "equal values share a key");
    // The bound counts escaped bytes: 128 are kept, 129 are not.
    assert_eq!(with(&"k".repeat(128)), "k".repeat(128));
    assert!(with(&"k".repeat(129)).starts_with("sha256:"));
    // A short value that spells a digest cannot pose as one.
    assert_ne!(with(&with(&long)), with(&long));
    let short = HeaderKey::new("x-api-key").unwrap().max_len(8);
    let request = Request::get("/")
        .header("x-api-key", "123456789")
        .body(())
        .unwrap();
    assert!(short.extract(&request).unwrap().starts_with("sha256:"));
}

#[test]
fn long_keys_keep_their_own_windows_in_a_store() {
    let store = MemoryStore::with_clock(ManualClock::new());
    let policy = Policy::new(Algorithm::SlidingLog, [Limit::per_minute(2)]).unwrap();
    let key = |value: &str| {
        let request = Request::get("/")
            .header("x-api-key", value)
            .body(())
            .unwrap();
        HeaderKey::new("x-api-key")
            .unwrap()
            .extract(&request)
            .unwrap()
    };
    let long = "k".repeat(64 * 1024);
    let mut other = long.clone();
    other.push('k');
    for _ in 0..2 {
        assert!(store.decide_now(key(&long), &policy).is_allowed());
    }
    assert!(!store.decide_now(key(&long), &policy).is_allowed());
    assert!(store.decide_now(key(&other), &policy).is_allowed());
}

#[test]
fn global_key_is_the_same_for_everyone() {
    assert_eq!(Global.extract(&Request::new(())), Some("global"));
}

proptest! {
    /// Whatever the header says, the answer is the peer or an address that
    /// appears in the header, and nothing panics.
    #[test]
    fn fuzzed_forwarded_headers_never_panic_or_invent_addresses(
        entries in prop::collection::vec(
            prop_oneof![
                "[0-9.]{0,16}",
                "[0-9a-f:\\[\\]]{0,24}",
                any::<std::net::Ipv4Addr>().prop_map(|ip| ip.to_string()),
                any::<std::net::Ipv6Addr>().prop_map(|ip| format!("[{ip}]:80")),
                "for=[^,]{0,20}",
                "\\PC{0,12}",
            ],
            0..6,
        ),
        forwarded in any::<bool>(),
    ) {
        let line = entries.join(", ");
        let whole = |c: ClientIp| c.ipv6_prefix(128).unwrap();
        let client_ip = whole(if forwarded { proxies().header(ForwardedHeader::Forwarded) } else { proxies() });
        let name = if forwarded { "forwarded" } else { "x-forwarded-for" };
        let Ok(value) = http::HeaderValue::from_str(&line) else { return Ok(()) };
        let mut request = request("10.0.0.1", &[]);
        request.headers_mut().insert(name, value);
        let got = client_ip.extract(&request).expect("a peer always gives a key");
        // Every address the header could be read as, by any proxy's notation.
        let readings = line.split([',', ';']).filter_map(|part| {
            let part = part.trim();
            let part = part.strip_prefix("for=").unwrap_or(part).trim_matches('"');
            part.parse::<IpAddr>()
                .ok()
                .or_else(|| part.parse::<SocketAddr>().ok().map(|a| a.ip()))
                .or_else(|| part.strip_prefix('[')?.strip_suffix(']')?.parse().ok())
        });
        let mentioned = got == ip("10.0.0.1") || readings.map(|ip| ip.to_canonical()).any(|ip| ip == got);
        prop_assert!(mentioned, "{got} from {line:?}");
        prop_assert_eq!(got.to_canonical(), got);
    }
}
