//! A private redis-server speaking TLS, with certificates made at test
//! time: a CA, a server certificate it signs for 127.0.0.1 and
//! localhost, and a client certificate it signs, for mutual TLS. The server also listens in plain text on its `port`, for
//! redis-cli and for telling when it is up.

#![allow(dead_code)]

use std::path::PathBuf;

use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair};

use crate::redis_server::{form_cluster, free_port, Server, CLUSTER_NODE};

/// A CA, and a server's and a client's certificates it signed, each with
/// its key, as PEM.
#[derive(Clone)]
pub struct Certificates {
    pub ca_pem: String,
    pub cert_pem: String,
    pub key_pem: String,
    pub client_cert_pem: String,
    pub client_key_pem: String,
}

/// A fresh CA and a server certificate for 127.0.0.1 and localhost.
pub fn make_certificates(ca_name: &str) -> Certificates {
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(DnType::CommonName, ca_name);
    let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate().unwrap()).unwrap();
    let key = KeyPair::generate().unwrap();
    let params = CertificateParams::new(vec!["127.0.0.1".into(), "localhost".into()]).unwrap();
    let cert = params.signed_by(&key, &ca).unwrap();
    let client_key = KeyPair::generate().unwrap();
    let mut client_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    client_params
        .distinguished_name
        .push(DnType::CommonName, "tsw test client");
    let client_cert = client_params.signed_by(&client_key, &ca).unwrap();
    Certificates {
        ca_pem: ca.pem(),
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
        client_cert_pem: client_cert.pem(),
        client_key_pem: client_key.serialize_pem(),
    }
}

/// A redis-server with TLS on `tls_port`, and its certificates.
pub struct TlsServer {
    pub server: Server,
    pub tls_port: u16,
    pub certificates: Certificates,
    dir: PathBuf,
}

impl TlsServer {
    /// Starts one; `extra` are more redis-server arguments.
    pub fn start(extra: &[&str]) -> Self {
        Self::start_with(make_certificates("tsw test CA"), extra)
    }

    /// Starts one with `certificates`.
    pub fn start_with(certificates: Certificates, extra: &[&str]) -> Self {
        let dir =
            std::env::temp_dir().join(format!("tsw-tls-{}-{}", std::process::id(), free_port()));
        std::fs::create_dir_all(&dir).unwrap();
        let write = |name: &str, pem: &str| {
            let path = dir.join(name);
            std::fs::write(&path, pem).unwrap();
            path.to_str().unwrap().to_owned()
        };
        let cert = write("server.pem", &certificates.cert_pem);
        let key = write("server.key", &certificates.key_pem);
        let ca = write("ca.pem", &certificates.ca_pem);
        let tls_port = free_port();
        let port = tls_port.to_string();
        let mut args = vec![
            "--tls-port",
            &port,
            "--tls-cert-file",
            &cert,
            "--tls-key-file",
            &key,
            "--tls-ca-cert-file",
            &ca,
            "--tls-auth-clients",
            "no",
        ];
        args.extend_from_slice(extra);
        let server = Server::start_with(&args);
        Self {
            server,
            tls_port,
            certificates,
            dir,
        }
    }

    /// `rediss://` to the TLS port, with `credentials@` if given.
    pub fn url(&self, credentials: &str) -> String {
        format!("rediss://{credentials}127.0.0.1:{}", self.tls_port)
    }
}

impl Drop for TlsServer {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A three-primary Redis Cluster whose nodes speak TLS to clients and to
/// each other (each also listens in plain text, for redis-cli).
pub struct TlsCluster {
    pub nodes: Vec<TlsServer>,
}

impl TlsCluster {
    pub fn start() -> Self {
        // One CA and server certificate for every node.
        let made = make_certificates("tsw cluster CA");
        let mut args = CLUSTER_NODE.to_vec();
        args.extend(["--tls-cluster", "yes"]);
        let nodes: Vec<TlsServer> = (0..3)
            .map(|_| TlsServer::start_with(made.clone(), &args))
            .collect();
        form_cluster(&nodes.iter().map(|node| &node.server).collect::<Vec<_>>());
        Self { nodes }
    }

    /// `rediss://` to each node's TLS port.
    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(|node| node.url("")).collect()
    }

    pub fn ca_pem(&self) -> String {
        self.nodes[0].certificates.ca_pem.clone()
    }
}
