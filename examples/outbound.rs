//! Two instances of a client held to an LLM provider's published limits,
//! requests and tokens per minute per API key, shared through Redis
//! (`--features redis`, as two processes would) or one `MemoryStore`.
//! Each call waits its turn rather than fail. The provider, a `service_fn`
//! here, keeps an exact log of what it receives and fails any call over its
//! limits; the run exits non-zero if a call failed or a window held more.
//!
//! Run with `cargo run --example outbound [--features redis]` (Redis at
//! `REDIS_URL`, default `redis://127.0.0.1:6379`).

use std::collections::{HashMap, VecDeque};
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tower::util::BoxCloneService;
use tower::{service_fn, BoxError, ServiceBuilder, ServiceExt};
use tower_sliding_window::{Algorithm, Limit, RateLimited, SlidingWindowLayer};

/// The provider's limits per API key: "a minute" scaled down to a second.
const WINDOW: Duration = Duration::from_secs(1);
const REQUESTS: u32 = 4;
const TOKENS: u32 = 1_000;
/// The clients count windows this much longer than the provider's: a call
/// is judged a moment before the provider receives it, and that moment
/// varies from call to call (a Redis round trip, a busy scheduler).
const MARGIN: Duration = Duration::from_millis(100);
/// The longest any one wait for a turn may last.
const PATIENCE: Duration = Duration::from_secs(10);
/// Each client's calls in turn, (prompt words, max_tokens): B starts with
/// two large ones, A comes up a moment later with small ones.
const CALLS_B: &[(usize, u32)] = &[(100, 400), (200, 500), (20, 80)];
const CALLS_A: &[(usize, u32)] = &[(20, 80); 6];
const A_STARTS: Duration = Duration::from_millis(200);

#[derive(Clone)]
struct Completion {
    api_key: &'static str,
    prompt: String,
    max_tokens: u32,
}

impl Completion {
    fn prompt_tokens(&self) -> u32 {
        self.prompt.split_whitespace().count() as u32 // a word a token, here
    }

    /// The most the call can use: its prompt and all it lets the model write.
    fn estimate(&self) -> u32 {
        self.prompt_tokens() + self.max_tokens
    }
}

fn api_key(call: &Completion) -> Option<&'static str> {
    Some(call.api_key)
}

/// The provider's answer: the tokens the call used, and when it arrived.
struct Usage {
    tokens: u32,
    created: Instant,
}

/// What the provider received per API key in the last window, (when,
/// tokens) a call, and the most requests and tokens a window ever held.
#[derive(Default)]
struct Received {
    calls: HashMap<&'static str, VecDeque<(Instant, u32)>>,
    peak: (u32, u32),
}

impl Received {
    /// Records a call; the requests and tokens of the window ending with it.
    fn record(&mut self, key: &'static str, tokens: u32, now: Instant) -> (u32, u32) {
        let log = self.calls.entry(key).or_default();
        log.push_back((now, tokens));
        // Closed at both ends: a call exactly a window ago still counts.
        while log.front().is_some_and(|&(at, _)| now - at > WINDOW) {
            log.pop_front();
        }
        let seen = (
            log.len() as u32,
            log.iter().map(|&(_, tokens)| tokens).sum(),
        );
        self.peak = (self.peak.0.max(seen.0), self.peak.1.max(seen.1));
        seen
    }
}

type Provider = BoxCloneService<Completion, Usage, BoxError>;

fn provider(received: Arc<Mutex<Received>>) -> Provider {
    BoxCloneService::new(service_fn(move |call: Completion| {
        let received = Arc::clone(&received);
        async move {
            let created = Instant::now();
            // The model writes three quarters of what the call allows.
            let used = call.prompt_tokens() + call.max_tokens * 3 / 4;
            let (requests, tokens) = received.lock().unwrap().record(call.api_key, used, created);
            if requests > REQUESTS || tokens > TOKENS {
                return Err(
                    format!("429: {requests} requests, {tokens} tokens in a window").into(),
                );
            }
            // Writing takes a while, and the call holds its reservation meanwhile.
            tokio::time::sleep(Duration::from_millis(u64::from(used) / 4)).await;
            Ok(Usage {
                tokens: used,
                created,
            })
        }
    }))
}

/// A call through the tokens layer: the provider's usage, or that layer's
/// refusal, whose turn the caller waits for.
enum Outcome {
    Used(Usage),
    NotYet(RateLimited),
}

type Client = BoxCloneService<Completion, Outcome, BoxError>;

#[cfg(feature = "redis")]
type Windows = tower_sliding_window::RedisStore;
#[cfg(not(feature = "redis"))]
type Windows = tower_sliding_window::MemoryStore;

/// Each client's handle on the shared windows: a Redis connection of its
/// own, under a prefix of this run's own.
#[cfg(feature = "redis")]
async fn windows() -> Result<[Windows; 2], BoxError> {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let run = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH)?;
    let prefix = format!("tsw-outbound-{}-{}", run.as_nanos(), std::process::id());
    let connect = || async {
        let store = Windows::connect(&url).await?.with_prefix(&prefix);
        // A call Redis cannot judge is not sent: the provider would count it
        // all the same. A second is generous for a client that waits anyway.
        let store = store.with_failure_policy(tower_sliding_window::FailurePolicy::FailClosed);
        Ok::<_, BoxError>(store.with_timeout(Duration::from_secs(1)))
    };
    Ok([connect().await?, connect().await?])
}

#[cfg(not(feature = "redis"))]
async fn windows() -> Result<[Windows; 2], BoxError> {
    let store = Windows::new();
    Ok([store.clone(), store])
}

fn client(windows: Windows, provider: Provider) -> Client {
    let limit = |max| Limit::new(max, WINDOW + MARGIN).expect("a valid limit");
    // Only the outer layer waits. A call the inner layer held back would
    // reach the provider later than the outer layer counted it, and the
    // provider counts on receipt: it could see more than its limit. So the
    // tokens layer refuses at once, the requests layer gives that call's
    // request back, and `send` sleeps until the tokens' turn.
    let requests = SlidingWindowLayer::new(limit(REQUESTS), api_key)
        .named("requests")
        .algorithm(Algorithm::SlidingLog) // exact, as the provider counts
        .store(windows.clone())
        .settle(|outcome: &Outcome| matches!(outcome, Outcome::NotYet(_)).then_some(0))
        .refuse_with_error()
        .wait_up_to(PATIENCE);
    let tokens = SlidingWindowLayer::new(limit(TOKENS), api_key)
        .named("tokens")
        .algorithm(Algorithm::SlidingLog)
        .store(windows)
        .cost(Completion::estimate) // reserved, then settled from the usage
        .settle(|usage: &Usage| Some(usage.tokens))
        .refuse_with_error();
    let service = ServiceBuilder::new()
        .layer(requests)
        // The tokens layer's "not yet" reaches the requests layer as an
        // answer, for it to settle; other errors stay errors.
        .map_result(|result: Result<Usage, BoxError>| match result {
            Ok(usage) => Ok(Outcome::Used(usage)),
            Err(error) => match error.downcast_ref::<RateLimited>() {
                Some(refused) if refused.decision().wait_helps() => Ok(Outcome::NotYet(*refused)),
                _ => Err(error),
            },
        })
        .layer(tokens)
        .service(provider);
    BoxCloneService::new(service)
}

/// Sends `call` until the provider answers, sleeping through the tokens
/// layer's refusals while their turn comes within `PATIENCE` of the first
/// try; the usage, and whether that layer held the call back.
async fn send(client: Client, call: Completion) -> Result<(Usage, bool), BoxError> {
    let deadline = Instant::now() + PATIENCE;
    let mut held = false;
    loop {
        match client.clone().oneshot(call.clone()).await? {
            Outcome::Used(usage) => return Ok((usage, held)),
            Outcome::NotYet(refused) if Instant::now() + refused.retry_after() <= deadline => {
                held = true;
                tokio::time::sleep(refused.retry_after()).await;
            }
            Outcome::NotYet(refused) => return Err(refused.into()),
        }
    }
}

/// One client's calls in turn: a line for each, from when it was sent.
async fn calls(name: &str, client: Client, calls: &[(usize, u32)]) -> Vec<(Instant, String)> {
    let mut lines = Vec::new();
    for (n, &(words, max_tokens)) in calls.iter().enumerate() {
        let prompt = "word ".repeat(words);
        let call = Completion {
            api_key: "sk-team",
            prompt,
            max_tokens,
        };
        let head = format!("{name:<6}  {:>4}  {:>8}", n + 1, call.estimate());
        let asked = Instant::now();
        lines.push(match send(client.clone(), call).await {
            Ok((usage, held)) => {
                let waited = (usage.created - asked).as_secs_f64();
                let why = if held { " (tokens)" } else { "" };
                let line = format!("{head}  {:>4}  {waited:>5.2}s{why}", usage.tokens);
                (usage.created, line)
            }
            Err(error) => (Instant::now(), format!("{head}  FAILED: {error}")),
        });
    }
    lines
}

/// Runs both clients and prints each call; the final line if every call was
/// answered within the provider's limits, else what went wrong.
pub async fn run() -> Result<String, BoxError> {
    let received = Arc::new(Mutex::new(Received::default()));
    let provider = provider(Arc::clone(&received));
    let [a, b] = windows().await?;
    let (a, b) = (client(a, provider.clone()), client(b, provider));
    println!("limits per API key: {REQUESTS} requests and {TOKENS} tokens a second (\"minute\")");
    println!("two clients, one key; each call waits its turn\n");
    println!("{:>6}  client  call  reserved  used  waited", "sent");
    let start = Instant::now();
    let b = tokio::spawn(calls("B", b, CALLS_B));
    tokio::time::sleep(A_STARTS).await;
    let mut lines = calls("A", a, CALLS_A).await;
    lines.extend(b.await?);
    lines.sort();
    for (sent, line) in &lines {
        println!("{:>5.2}s  {line}", (*sent - start).as_secs_f64());
    }
    let failed = lines.iter().filter(|(_, l)| l.contains("FAILED")).count();
    let (requests, tokens) = received.lock().unwrap().peak;
    let seen = format!("the provider saw at most {requests} requests and {tokens} tokens a window");
    if failed > 0 || requests > REQUESTS || tokens > TOKENS {
        return Err(format!("{failed} calls failed; {seen}").into());
    }
    let (calls, elapsed) = (lines.len(), start.elapsed().as_secs_f64());
    Ok(format!("ok: {calls} calls in {elapsed:.1}s; {seen}"))
}

// Unused where tests/examples.rs includes this file for `run`.
#[allow(dead_code)]
#[tokio::main]
async fn main() -> ExitCode {
    match run().await {
        Ok(last) => {
            println!("\n{last}");
            ExitCode::SUCCESS
        }
        Err(error) => {
            println!("\nfailed: {error}");
            ExitCode::FAILURE
        }
    }
}
