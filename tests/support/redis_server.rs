//! Private redis-server processes on loopback ports, for tests that need a
//! server of their own (to stop, flush or cluster) rather than the shared one.

#![allow(dead_code)]

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// The shared server the suite runs against: `REDIS_URL`, or the local default.
pub fn shared_url() -> String {
    std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into())
}

/// A prefix no other test run uses, so runs never see each other's keys.
pub fn unique_prefix(label: &str) -> String {
    static COUNTER: AtomicU32 = AtomicU32::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!(
        "tsw-test:{label}:{}:{nanos}:{}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    )
}

/// A port in 20000..30000 that is free, along with its cluster bus port (+10000).
pub fn free_port() -> u16 {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let base = 20_000 + (std::process::id() * 7) % 9_000;
    loop {
        let port = (base + NEXT.fetch_add(1, Ordering::Relaxed) % 9_900) as u16;
        let free = |p: u16| TcpListener::bind(("127.0.0.1", p)).is_ok();
        if port < 30_000 && free(port) && free(port + 10_000) {
            return port;
        }
    }
}

/// One redis-server child process, killed when dropped.
pub struct Server {
    pub port: u16,
    child: Option<Child>,
    dir: PathBuf,
    extra: Vec<String>,
}

impl Server {
    /// Starts a server with no persistence on a free port and waits for it.
    pub fn start() -> Self {
        Self::start_with(&[])
    }

    pub fn start_with(extra: &[&str]) -> Self {
        let port = free_port();
        let dir = std::env::temp_dir().join(format!("tsw-redis-{}-{port}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut server = Self {
            port,
            child: None,
            dir,
            extra: extra.iter().map(|s| s.to_string()).collect(),
        };
        server.restart();
        server
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Starts the process (again) on the same port.
    pub fn restart(&mut self) {
        assert!(self.child.is_none(), "server already running");
        let child = Command::new("redis-server")
            .args(["--port", &self.port.to_string()])
            .args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .args(["--dir", self.dir.to_str().unwrap()])
            .args(&self.extra)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server must be installed for the Redis tests (.ci/run installs it)");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        while self.cli(&["PING"]).as_deref() != Some("PONG") {
            assert!(
                Instant::now() < deadline,
                "redis-server on port {} did not start",
                self.port
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Kills the process at once, as a crash would.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Stops the process without killing it (SIGSTOP): connections hang.
    pub fn pause(&self) {
        self.signal("-STOP");
    }

    pub fn resume(&self) {
        self.signal("-CONT");
    }

    fn signal(&self, signal: &str) {
        if let Some(child) = &self.child {
            let status = Command::new("kill")
                .args([signal, &child.id().to_string()])
                .status()
                .unwrap();
            assert!(status.success());
        }
    }

    /// How many scripts the server's script cache holds, if `INFO` says.
    #[allow(dead_code)] // not every binary that starts a server counts scripts
    pub fn scripts_cached(&self) -> Option<u64> {
        self.cli(&["INFO", "memory"])?
            .lines()
            .find_map(|line| line.strip_prefix("number_of_cached_scripts:"))
            .and_then(|n| n.trim().parse().ok())
    }

    /// Runs redis-cli against this server; `None` if it could not answer.
    pub fn cli(&self, args: &[&str]) -> Option<String> {
        let mut command = Command::new("redis-cli");
        // A server started with a password is asked with it.
        if let Some(at) = self.extra.iter().position(|arg| arg == "--requirepass") {
            command.env("REDISCLI_AUTH", &self.extra[at + 1]);
        }
        let output = command
            .args(["-p", &self.port.to_string()])
            .args(args)
            .output()
            .ok()?;
        let text = String::from_utf8_lossy(&output.stdout).trim().to_owned();
        (output.status.success() && !text.starts_with("Could not connect")).then_some(text)
    }

    /// Starts recording every command the server receives.
    pub fn monitor(&self) -> Monitor {
        let mut child = Command::new("redis-cli")
            .args(["-p", &self.port.to_string(), "MONITOR"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-cli");
        let stdout = child.stdout.take().unwrap();
        let lines = std::thread::spawn(move || {
            use std::io::BufRead;
            std::io::BufReader::new(stdout)
                .lines()
                .map_while(Result::ok)
                .collect()
        });
        // MONITOR answers OK once it is attached.
        let deadline = Instant::now() + Duration::from_secs(5);
        self.wait_for(
            &["CLIENT", "LIST"],
            "cmd=monitor",
            deadline,
            "MONITOR did not attach",
        );
        Monitor {
            child,
            lines: Some(lines),
            port: self.port,
        }
    }

    /// Waits until `redis-cli args` answers with text containing `wanted`,
    /// failing with `what` once `deadline` has passed.
    pub fn wait_for(&self, args: &[&str], wanted: &str, deadline: Instant, what: &str) {
        while !self.cli(args).unwrap_or_default().contains(wanted) {
            assert!(Instant::now() < deadline, "{what}");
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Calls of `command` (e.g. `evalsha`) recorded in `INFO commandstats`.
    pub fn command_calls(&self, command: &str) -> u64 {
        self.command_stat(command, "calls")
    }

    /// Calls of `command` that did not fail (a script's first call by SHA
    /// fails until the client has loaded it).
    pub fn successful_calls(&self, command: &str) -> u64 {
        self.command_stat(command, "calls") - self.command_stat(command, "failed_calls")
    }

    /// Successful script calls that judged, read from one `INFO`: every
    /// script call but the heartbeats, each of which runs one `ZADD`.
    pub fn decision_scripts(&self) -> u64 {
        let stats = self.cli(&["INFO", "commandstats"]).unwrap_or_default();
        let stat = |command, field| Self::stat_in(&stats, command, field);
        let succeeded = |command| stat(command, "calls") - stat(command, "failed_calls");
        succeeded("evalsha") + succeeded("eval") - stat("zadd", "calls")
    }

    /// Redis CPU (µs) spent in `command` since the stats were reset.
    pub fn command_usec(&self, command: &str) -> u64 {
        self.command_stat(command, "usec")
    }

    fn command_stat(&self, command: &str, field: &str) -> u64 {
        let stats = self.cli(&["INFO", "commandstats"]).unwrap_or_default();
        Self::stat_in(&stats, command, field)
    }

    fn stat_in(stats: &str, command: &str, field: &str) -> u64 {
        let prefix = format!("cmdstat_{command}:");
        stats
            .lines()
            .find_map(|line| line.strip_prefix(&prefix))
            .and_then(|fields| {
                fields
                    .split(',')
                    .find_map(|pair| pair.strip_prefix(field)?.strip_prefix('='))
            })
            .and_then(|n| n.parse().ok())
            .unwrap_or(0)
    }
}

/// A running `redis-cli MONITOR`.
pub struct Monitor {
    child: Child,
    lines: Option<std::thread::JoinHandle<Vec<String>>>,
    port: u16,
}

impl Monitor {
    /// Stops recording; returns the commands seen, without the markers the
    /// test itself sent.
    pub fn finish(mut self) -> Vec<String> {
        // A marker command, so we know everything before it has been printed.
        let _ = Command::new("redis-cli")
            .args(["-p", &self.port.to_string(), "ECHO", "monitor-end"])
            .output();
        std::thread::sleep(Duration::from_millis(200));
        let _ = self.child.kill();
        let _ = self.child.wait();
        let lines = self.lines.take().unwrap().join().unwrap();
        lines
            .into_iter()
            .take_while(|line| !line.contains("monitor-end"))
            .filter(|line| line.contains('[') && !line.contains("\"CLIENT\""))
            .collect()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.resume();
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The arguments that make a redis-server a cluster node.
pub const CLUSTER_NODE: [&str; 6] = [
    "--cluster-enabled",
    "yes",
    "--cluster-config-file",
    "nodes.conf",
    "--cluster-node-timeout",
    "2000",
];

/// Makes `nodes` (started with [`CLUSTER_NODE`]) one cluster of
/// primaries, and waits until every node says it is ok.
pub fn form_cluster(nodes: &[&Server]) {
    form_cluster_with_replicas(nodes, 0);
}

/// Makes `nodes` one cluster with `replicas` replicas for each primary.
pub fn form_cluster_with_replicas(nodes: &[&Server], replicas: usize) {
    let addresses: Vec<String> = nodes
        .iter()
        .map(|n| format!("127.0.0.1:{}", n.port))
        .collect();
    let status = Command::new("redis-cli")
        .args(["--cluster", "create"])
        .args(&addresses)
        .args(["--cluster-replicas", &replicas.to_string(), "--cluster-yes"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .expect("redis-cli must be installed for the cluster tests");
    assert!(status.success(), "redis-cli --cluster create failed");
    let deadline = Instant::now() + Duration::from_secs(30);
    for node in nodes {
        node.wait_for(
            &["CLUSTER", "INFO"],
            "cluster_state:ok",
            deadline,
            "no cluster_state:ok",
        );
    }
    // A replica takes over only with data recent enough: wait until each
    // has synchronised with its primary.
    for node in nodes {
        if node.cli(&["ROLE"]).unwrap_or_default().starts_with("slave") {
            node.wait_for(
                &["INFO", "replication"],
                "master_link_status:up",
                deadline,
                "a replica never synchronised",
            );
        }
    }
}

/// A three-primary Redis Cluster on loopback, torn down when dropped.
pub struct Cluster {
    pub nodes: Vec<Server>,
}

impl Cluster {
    pub fn start() -> Self {
        let nodes: Vec<Server> = (0..3).map(|_| Server::start_with(&CLUSTER_NODE)).collect();
        form_cluster(&nodes.iter().collect::<Vec<_>>());
        Self { nodes }
    }

    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(Server::url).collect()
    }
}
