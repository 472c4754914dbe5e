//! Helpers shared by the `lock_*` integration tests: servers, raw Redis access, polling.
//!
//! Every test starts its own `redis-server`. Polling (`eventually`) is only used where the
//! event happens inside Redis (a key expiring, a background release landing) and cannot be
//! awaited directly; the deadline is generous and the poll interval short.

// Each test binary uses a different subset of these helpers.
#![allow(dead_code)]

pub mod child;
pub mod logs;
pub mod proxy;

use std::future::Future;
use std::time::{Duration, Instant};

use dlock::redis::aio::MultiplexedConnection;
use dlock::testing::RedisServer;
use dlock::{Lock, LockClient};

/// A fresh, empty redis-server for this test.
pub fn server() -> RedisServer {
    RedisServer::start().expect("start redis-server (is it installed?)")
}

/// A `LockClient` with default settings.
pub async fn client(server: &RedisServer) -> LockClient {
    LockClient::connect(&server.url())
        .await
        .expect("connect LockClient")
}

/// A plain redis-rs connection, for the test's own reads and writes next to the locks.
pub async fn raw(url: &str) -> MultiplexedConnection {
    dlock::redis::Client::open(url)
        .expect("redis url")
        .get_multiplexed_async_connection()
        .await
        .expect("raw redis connection")
}

/// Polls `check` every 5 ms until it returns true; panics naming `what` after `within`.
/// Returns how long it took.
pub async fn eventually<F, Fut>(within: Duration, what: &str, mut check: F) -> Duration
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let start = Instant::now();
    loop {
        if check().await {
            return start.elapsed();
        }
        assert!(
            start.elapsed() < within,
            "{what}: still not the case after {within:?}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Waits until this client can take `lock` with `try_acquire` (then gives it back): after a
/// dropped guard's background release, the client's own queue for the key is given back when
/// the release's reply arrives, which may be a moment after Redis shows the key gone.
pub async fn until_taken_here(lock: &Lock, within: Duration) {
    eventually(within, "the lock free for this client", || {
        let lock = lock.clone();
        async move {
            match lock.try_acquire().await.unwrap() {
                Some(g) => g.release().await.is_ok(),
                None => false,
            }
        }
    })
    .await;
}

/// Waits until nobody holds `lock` (the key is gone in Redis); returns how long that took.
pub async fn until_unlocked(lock: &Lock, within: Duration) -> Duration {
    eventually(within, &format!("lock `{}` free", lock.name()), || async {
        !lock.is_locked().await.expect("is_locked")
    })
    .await
}

/// Lock hashes left in Redis: `KEYS dlock:*` minus the fencing counters (kept past
/// the lock, so the next holder's token is larger) and
/// the release/re-entry latches (short-lived request ids).
pub async fn lock_keys(conn: &mut MultiplexedConnection) -> Vec<String> {
    let keys: Vec<String> = dlock::redis::cmd("KEYS")
        .arg("dlock:*")
        .query_async(conn)
        .await
        .expect("KEYS");
    keys.into_iter()
        // Fencing counters (one per cluster slot) and latches outlive the locks on purpose.
        .filter(|k| !k.starts_with("dlock:fence:{") && !k.contains(":latch:"))
        .collect()
}

/// The Redis state of a lock key, for failure messages: its fields (owner -> count), PTTL and
/// the number of subscribers of its channel.
pub async fn describe_lock(conn: &mut MultiplexedConnection, key: &str) -> String {
    let fields: Vec<String> = dlock::redis::cmd("HGETALL")
        .arg(key)
        .query_async(conn)
        .await
        .unwrap_or_default();
    let pttl: i64 = dlock::redis::cmd("PTTL")
        .arg(key)
        .query_async(conn)
        .await
        .unwrap_or(-3);
    let subs: Vec<dlock::redis::Value> = dlock::redis::cmd("PUBSUB")
        .arg("NUMSUB")
        .arg(format!("{key}:chan"))
        .query_async(conn)
        .await
        .unwrap_or_default();
    format!("lock key {key}: fields {fields:?}, pttl {pttl} ms, channel subscribers {subs:?}")
}

/// Sends a signal to a process with kill(1) (the tests have no libc dependency).
pub fn signal(pid: u32, sig: &str) {
    let ok = std::process::Command::new("kill")
        .args([sig, &pid.to_string()])
        .status()
        .expect("run kill")
        .success();
    assert!(ok, "kill {sig} {pid} failed");
}

/// A SIGSTOPped process, resumed (SIGCONT) when dropped, so a failing assertion cannot leave
/// it stopped.
pub struct Stopped(u32);

impl Stopped {
    pub fn stop(pid: u32) -> Self {
        signal(pid, "-STOP");
        Stopped(pid)
    }
}

impl Drop for Stopped {
    fn drop(&mut self) {
        signal(self.0, "-CONT");
    }
}

/// A small xorshift generator: the tests only need cheap, reproducible-by-seed randomness.
pub struct Rng(u64);

impl Rng {
    /// Seeded from the clock; the seed is printed so a failing run can be replayed with
    /// `Rng::new(seed)`.
    pub fn from_clock() -> Self {
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(1)
            | 1;
        println!("rng seed: {seed}");
        Rng::new(seed)
    }

    pub fn new(seed: u64) -> Self {
        Rng(seed | 1)
    }

    pub fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }

    /// Uniform in `0..n` (n > 0), modulo bias irrelevant here.
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// Lets the runtime run other tasks `n` times: a random point inside an acquire in progress.
pub async fn yield_times(n: u64) {
    for _ in 0..n {
        tokio::task::yield_now().await;
    }
}

/// Calls per command this server has received so far (`INFO commandstats`; `function|load`
/// for a subcommand): executed (`calls`, failed ones such as NOSCRIPT included) plus refused
/// before running (`rejected_calls`, such as CROSSSLOT).
pub async fn command_calls(
    conn: &mut MultiplexedConnection,
) -> std::collections::BTreeMap<String, u64> {
    let stats: String = dlock::redis::cmd("INFO")
        .arg("commandstats")
        .query_async(conn)
        .await
        .expect("INFO commandstats");
    stats
        .lines()
        .filter_map(|l| l.strip_prefix("cmdstat_")?.split_once(':'))
        .map(|(cmd, fields)| {
            let n = fields
                .split(',')
                .filter_map(|field| {
                    let (k, v) = field.split_once('=')?;
                    matches!(k, "calls" | "rejected_calls").then(|| v.trim().parse::<u64>().ok())?
                })
                .sum();
            (cmd.to_owned(), n)
        })
        .collect()
}

/// What a server received between two [`command_calls`] readings, for the script commands:
/// FCALL, EVALSHA, EVAL and FUNCTION LOAD.
pub fn script_calls_between(
    before: &std::collections::BTreeMap<String, u64>,
    after: &std::collections::BTreeMap<String, u64>,
) -> std::collections::BTreeMap<&'static str, u64> {
    ["fcall", "evalsha", "eval", "function|load"]
        .into_iter()
        .map(|cmd| {
            let of = |m: &std::collections::BTreeMap<String, u64>| m.get(cmd).copied().unwrap_or(0);
            (cmd, of(after) - of(before))
        })
        .collect()
}

/// Script calls this server has received so far: EVAL, EVALSHA and FCALL (read-only variants
/// too), counted as in [`command_calls`].
pub async fn script_calls(conn: &mut MultiplexedConnection) -> u64 {
    command_calls(conn)
        .await
        .into_iter()
        .filter(|(cmd, _)| cmd.starts_with("eval") || cmd.starts_with("fcall"))
        .map(|(_, n)| n)
        .sum()
}

/// An acquire in progress, boxed so a test can poll it by hand.
pub type Acquiring =
    std::pin::Pin<Box<dyn Future<Output = Result<dlock::LockGuard, dlock::LockError>> + Send>>;

/// An acquire polled once, so it has queued at the client's gate behind the holder.
pub async fn queued(lock: &dlock::Lock) -> Acquiring {
    let lock = lock.clone();
    let mut fut: Acquiring = Box::pin(async move { lock.acquire().await });
    assert!(
        futures_util::poll!(fut.as_mut()).is_pending(),
        "the acquire did not queue behind the holder"
    );
    fut
}

/// The name libtest knows test function `f` by, in the module whose `module_path!()` is
/// `module_path`: `fence::child_process_entry` in an area binary (the crate's own name is not
/// part of it), plain `f` in a binary of its own. A child process re-runs one test of its own
/// binary with `--exact` and this name.
pub fn test_path(module_path: &str, f: &str) -> String {
    match module_path.split_once("::") {
        Some((_, module)) => format!("{module}::{f}"),
        None => f.to_owned(),
    }
}

/// Waits (bounded: 5 s) until `key` is gone from the server behind `conn`: a grant given back
/// in the background.
pub async fn until_key_gone(conn: &MultiplexedConnection, key: &str) {
    eventually(Duration::from_secs(5), "the key given back", || {
        let (mut conn, key) = (conn.clone(), key.to_owned());
        async move {
            let n: i64 = dlock::redis::cmd("EXISTS")
                .arg(&key)
                .query_async(&mut conn)
                .await
                .unwrap();
            n == 0
        }
    })
    .await;
}

/// Acquires and releases `lock` (replica-synced) until its replicas confirm it (bounded: 10 s):
/// a replica fresh from its first sync may need a moment.
pub async fn until_synced_acquire(lock: &Lock) {
    eventually(
        Duration::from_secs(10),
        "a synced acquire confirmed",
        || {
            let lock = lock.clone();
            async move {
                match lock.acquire().await {
                    Ok(g) => g.release().await.is_ok(),
                    Err(dlock::LockError::NotSynced { .. }) => false,
                    Err(e) => panic!("{e}"),
                }
            }
        },
    )
    .await;
}

/// Asserts that the script commands of [`script_calls_between`] were one FCALL and nothing
/// else (no NOSCRIPT, EVAL or reload).
pub fn assert_one_fcall(sent: &std::collections::BTreeMap<&'static str, u64>) {
    assert_eq!(
        (
            sent["fcall"],
            sent["evalsha"] + sent["eval"] + sent["function|load"]
        ),
        (1, 0),
        "one FCALL and nothing else: {sent:?}"
    );
}

/// The redis-server the harness starts: Redis or Valkey, its version, what it offers.
pub fn server_info() -> dlock::testing::ServerInfo {
    dlock::testing::server_info().expect("redis-server --version")
}

/// Says that the running test checks `what` not at all on this server, and `why`:
/// `skipped: <test>: <what> (<why>)`. Written to stderr past libtest's capture, so the line
/// shows in every run, passing or not.
pub fn skipped(what: &str, why: &str) {
    use std::io::Write;
    let thread = std::thread::current();
    let test = thread.name().unwrap_or("a test");
    let _ = writeln!(std::io::stderr(), "skipped: {test}: {what} ({why})");
}

/// Whether the harness's redis-server has TLS; if not, says that the running test skips
/// `what`.
pub fn tls_or_skip(what: &str) -> bool {
    let tls = dlock::testing::supports_tls().expect("start a TLS redis-server");
    if !tls {
        skipped(what, &format!("{} is built without TLS", server_info()));
    }
    tls
}

/// Whether the harness's redis-server has FUNCTION (Redis 7.0+, Valkey); if not, says that the
/// running test skips `what`.
pub fn functions_or_skip(what: &str) -> bool {
    let info = server_info();
    if !info.has_functions() {
        skipped(
            what,
            &format!("{info} has no FUNCTION: dlock calls EVALSHA there"),
        );
    }
    info.has_functions()
}

/// Whether the harness's redis-server has sharded pub/sub (Redis 7.0+, Valkey); if not, says
/// that the running test skips `what`.
pub fn sharded_pubsub_or_skip(what: &str) -> bool {
    let info = server_info();
    if !info.has_sharded_pubsub() {
        skipped(
            what,
            &format!("{info} has no sharded pub/sub: PUBLISH and SUBSCRIBE there"),
        );
    }
    info.has_sharded_pubsub()
}

/// The script commands of the first acquire after a promotion, as the server promises them:
/// with FUNCTION one FCALL (the library is replicated with the data); without it (Redis 6.2)
/// one EVALSHA, and at most one EVAL after its NOSCRIPT (the script cache is not replicated).
pub fn assert_first_acquire_after_a_promotion(
    sent: &std::collections::BTreeMap<&'static str, u64>,
) {
    let info = server_info();
    if info.has_functions() {
        assert_one_fcall(sent);
        return;
    }
    println!("{info} has no FUNCTION: one EVALSHA and at most one EVAL expected");
    assert!(
        sent["fcall"] == 0
            && sent["function|load"] == 0
            && sent["evalsha"] == 1
            && sent["eval"] <= 1,
        "{info}: one EVALSHA, then at most one EVAL after NOSCRIPT: {sent:?}"
    );
}
