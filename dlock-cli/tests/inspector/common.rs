//! Running the built `dlock` binary, and waiting for what the tests set up to be visible.

use std::future::Future;
use std::process::{Output, Stdio};
use std::time::{Duration, Instant};

use dlock_runtime::redis;
use serde_json::Value;
use tokio::io::AsyncWriteExt;
use tokio::process::Command;

/// The binary cargo built for these tests.
pub const BIN: &str = env!("CARGO_BIN_EXE_dlock");

/// Longest any one run of the binary may take (it connects with a 5 s timeout).
const RUN_BOUND: Duration = Duration::from_secs(30);

/// Runs `dlock args...`, `stdin` written to its standard input (then closed).
pub async fn dlock_with_stdin(args: &[&str], stdin: &str) -> Output {
    let mut child = Command::new(BIN)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("start the dlock binary");
    let mut input = child.stdin.take().expect("stdin is piped");
    input
        .write_all(stdin.as_bytes())
        .await
        .expect("write stdin");
    drop(input);
    tokio::time::timeout(RUN_BOUND, child.wait_with_output())
        .await
        .unwrap_or_else(|_| panic!("dlock {args:?} ran longer than {RUN_BOUND:?}"))
        .expect("wait for dlock")
}

/// Runs `dlock args...` with nothing on stdin.
pub async fn dlock(args: &[&str]) -> Output {
    dlock_with_stdin(args, "").await
}

/// Runs `dlock args... --json`, which must succeed, and parses what it printed.
pub async fn dlock_json(args: &[&str]) -> Value {
    let mut all = args.to_vec();
    all.push("--json");
    let out = dlock(&all).await;
    assert!(
        out.status.success(),
        "dlock {all:?} failed: {}",
        text(&out.stderr)
    );
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("dlock {all:?} printed no JSON ({e}): {}", text(&out.stdout)))
}

pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The entry of `list` for the lock `name` of `kind`.
pub fn entry<'a>(list: &'a Value, name: &str, kind: &str) -> &'a Value {
    list.as_array()
        .expect("a JSON array")
        .iter()
        .find(|v| v["name"] == name && v["kind"] == kind)
        .unwrap_or_else(|| panic!("no {kind} lock `{name}` in {list:#}"))
}

/// Waits, at most 10 s, until `check` answers true: for state that other tasks or processes
/// set up and that no event announces (a waiter's subscription, a queue entry).
pub async fn until<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let started = Instant::now();
    for _ in 0..2_000 {
        if check().await {
            return;
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "not within 10 s: {what}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!("not within 2000 checks: {what}");
}

/// Subscribers of `channel` on every node of `urls`, added up.
pub async fn subscribers(urls: &[String], channel: &str) -> i64 {
    let mut total = 0;
    for url in urls {
        let client = redis::Client::open(url.as_str()).expect("a node URL");
        let mut conn = client
            .get_multiplexed_async_connection()
            .await
            .expect("connect to a node");
        let reply: (String, i64) = redis::cmd("PUBSUB")
            .arg("NUMSUB")
            .arg(channel)
            .query_async(&mut conn)
            .await
            .expect("PUBSUB NUMSUB");
        total += reply.1;
    }
    total
}
