//! The inspector on a PostgreSQL store (`--url postgres://...`), against a throw-away server
//! (`dlock_runtime::testing::PgServer`): what the clients hold, read back through the
//! runtime's `stored_locks`, and the runtime's force unlock waking a waiter.

use std::time::{Duration, Instant};

use dlock_runtime::testing::{postgres_available, PgServer};
use dlock_runtime::LockClient;
use tokio::io::{AsyncBufReadExt, BufReader};

use crate::common::{dlock, dlock_json, entry, text, until, BIN};

/// A started server, or `None` (and a `skipped:` line) where PostgreSQL is not installed.
async fn server(test: &str) -> Option<PgServer> {
    if !postgres_available() {
        println!("skipped: {test}: no PostgreSQL server binaries");
        return None;
    }
    Some(
        tokio::task::spawn_blocking(PgServer::start)
            .await
            .unwrap()
            .expect("start PostgreSQL"),
    )
}

/// Whether some session's last statement was a LISTEN: a waiter's client LISTENed for its
/// lock (the statement shows until that connection's next health query, 2 s later).
async fn listening(server: &PgServer) -> bool {
    let sql = "SELECT count(*) FROM pg_stat_activity WHERE query LIKE 'LISTEN %'";
    let port = server.port();
    let out = tokio::task::block_in_place(|| server.psql(sql))
        .unwrap_or_else(|e| panic!("psql on port {port}: {e}"));
    out.trim() != "0"
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_show_and_unlock_read_a_postgres_store() {
    let Some(server) = server("list_show_and_unlock_read_a_postgres_store").await else {
        return;
    };
    let url = server.url();
    let (a, b) = (
        LockClient::connect(&url).await.expect("client a"),
        LockClient::connect(&url).await.expect("client b"),
    );
    // A lease far beyond the waiter's wait: only the force unlock's NOTIFY lets it in in time.
    let order = a
        .lock("order:1")
        .ttl(Duration::from_secs(120))
        .acquire()
        .await
        .expect("acquire order:1");
    let exports = a.semaphore("exports", 3);
    let permits = (
        exports.acquire().await.expect("permit 1"),
        exports.acquire().await.expect("permit 2"),
    );
    let readers = (
        a.read_write_lock("prices").read().acquire().await.unwrap(),
        b.read_write_lock("prices").read().acquire().await.unwrap(),
    );

    let list = dlock_json(&["list", "--url", &url]).await;
    let names: Vec<(&str, &str)> = list
        .as_array()
        .unwrap()
        .iter()
        .map(|v| (v["name"].as_str().unwrap(), v["kind"].as_str().unwrap()))
        .collect();
    assert_eq!(
        names,
        [
            ("exports", "semaphore"),
            ("order:1", "plain"),
            ("prices", "rw")
        ]
    );
    let plain = entry(&list, "order:1", "plain");
    assert_eq!(plain["key"], "dlock:{order:1}");
    assert_eq!(plain["held"], true);
    assert!(plain["holders"][0]["owner"]
        .as_str()
        .unwrap()
        .starts_with(a.client_id()));
    let pttl = plain["pttl_ms"].as_i64().unwrap();
    assert!(
        pttl > 100_000 && pttl <= 120_000,
        "server-judged lease: {pttl}"
    );
    assert_eq!(
        plain["waiting_clients"],
        serde_json::Value::Null,
        "not countable"
    );
    let sem = entry(&list, "exports", "semaphore");
    assert_eq!(sem["permits"], serde_json::json!({"used": 2, "total": 3}));
    let rw = entry(&list, "prices", "rw");
    assert_eq!(rw["mode"], "read");
    let sides: Vec<&str> = rw["holders"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["side"].as_str().unwrap())
        .collect();
    assert_eq!(sides, ["read", "read"]);

    let out = dlock(&["list", "--url", &url]).await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    let table = text(&out.stdout);
    let row = table.lines().find(|l| l.starts_with("order:1")).unwrap();
    let cells: Vec<&str> = row.split("  ").filter(|c| !c.is_empty()).collect();
    assert_eq!(
        cells[4].trim(),
        "-",
        "waiting clients, not countable: {table}"
    );

    let shown = dlock_json(&["show", "prices", "--url", &url]).await;
    assert_eq!(shown.as_array().unwrap().len(), 1, "{shown}");
    assert_eq!(shown[0]["kind"], "rw");
    let out = dlock(&["show", "order:1", "--kind", "redisson", "--url", &url]).await;
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("Redisson's layout exists only on Redis"),
        "{}",
        text(&out.stderr)
    );

    let waiter = tokio::spawn({
        let b = b.clone();
        async move {
            let started = Instant::now();
            let guard = b
                .lock("order:1")
                .wait(Duration::from_secs(30))
                .acquire()
                .await;
            (guard, started.elapsed())
        }
    });
    until("b's waiter LISTENs", || listening(&server)).await;
    let unlocked = dlock_json(&["unlock", "order:1", "--force", "--yes", "--url", &url]).await;
    assert_eq!(
        unlocked,
        serde_json::json!({"name": "order:1", "kind": "plain", "unlocked": true})
    );
    let (guard, waited) = tokio::time::timeout(Duration::from_secs(30), waiter)
        .await
        .expect("the waiter finishes")
        .unwrap();
    let guard = guard.expect("the waiter is woken and takes the lock");
    assert!(
        waited < Duration::from_secs(20),
        "woken, not timed out: {waited:?}"
    );
    let shown = dlock_json(&["show", "order:1", "--url", &url]).await;
    assert!(
        shown[0]["holders"][0]["owner"]
            .as_str()
            .unwrap()
            .starts_with(b.client_id()),
        "{shown}"
    );
    guard.release().await.unwrap();
    drop((order, permits, readers));
}

/// The next line `watch --json` printed, parsed.
async fn next_json(
    lines: &mut tokio::io::Lines<BufReader<tokio::process::ChildStdout>>,
) -> serde_json::Value {
    let line = tokio::time::timeout(Duration::from_secs(10), lines.next_line())
        .await
        .expect("a line within 10 s")
        .expect("read")
        .expect("a line before the end");
    serde_json::from_str(&line).expect("one JSON object per line")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_sees_holder_changes_on_a_postgres_store() {
    let Some(server) = server("watch_sees_holder_changes_on_a_postgres_store").await else {
        return;
    };
    let url = server.url();
    let a = LockClient::connect(&url).await.expect("client");
    let mut child = tokio::process::Command::new(BIN)
        .args([
            "watch",
            "job",
            "--count",
            "3",
            "--interval",
            "20ms",
            "--json",
            "--url",
            &url,
        ])
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("start dlock watch");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    assert_eq!(next_json(&mut lines).await["held"], false);
    let guard = a.lock("job").acquire().await.expect("acquire");
    let held = next_json(&mut lines).await;
    assert!(held["holders"][0]["owner"]
        .as_str()
        .unwrap()
        .starts_with(a.client_id()));
    guard.release().await.unwrap();
    assert_eq!(next_json(&mut lines).await["held"], false);
    let status = tokio::time::timeout(Duration::from_secs(10), child.wait())
        .await
        .expect("exits after --count")
        .unwrap();
    assert!(status.success());
}

#[tokio::test]
async fn an_unreachable_postgres_store_is_named_without_its_password() {
    let out = dlock(&[
        "list",
        "--url",
        "postgres://inspector:pg-s3cret@127.0.0.1:1/locks",
        "--timeout",
        "1s",
    ])
    .await;
    assert!(!out.status.success());
    let err = text(&out.stderr);
    assert!(!err.contains("pg-s3cret"), "{err}");
    assert!(!err.contains("Redis URL"), "{err}");
    assert!(
        err.contains("postgres://inspector:***@127.0.0.1:1"),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn long_names_and_names_with_nul_are_listed_whole() {
    let Some(server) = server("long_names_and_names_with_nul_are_listed_whole").await else {
        return;
    };
    let url = server.url();
    let a = LockClient::connect(&url).await.expect("client");
    // Over 512 bytes the store keeps the key's hash, and its whole text in `long_names`.
    let long = format!("report:{}", "x".repeat(600));
    let nul = "a\0b".to_owned();
    let held = (
        a.lock(long.as_str())
            .acquire()
            .await
            .expect("acquire the long name"),
        a.lock(nul.as_str())
            .acquire()
            .await
            .expect("acquire the name with NUL"),
    );
    let list = dlock_json(&["list", "--url", &url]).await;
    assert_eq!(entry(&list, &long, "plain")["held"], true, "{list:#}");
    assert_eq!(entry(&list, &nul, "plain")["held"], true, "{list:#}");
    let shown = dlock_json(&["show", &long, "--url", &url]).await;
    assert_eq!(shown.as_array().unwrap().len(), 1, "{shown}");
    assert!(shown[0]["holders"][0]["owner"]
        .as_str()
        .unwrap()
        .starts_with(a.client_id()));
    drop(held);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fair_locks_queue_is_listed_first_in_line_first() {
    let Some(server) = server("a_fair_locks_queue_is_listed_first_in_line_first").await else {
        return;
    };
    let url = server.url();
    let holder = LockClient::connect(&url).await.expect("holder");
    let waiter = LockClient::connect(&url).await.expect("waiter");
    let held = (holder.fair_lock("report"))
        .ttl(Duration::from_secs(60))
        .acquire()
        .await
        .expect("acquire");
    let lock = waiter.fair_lock("report").wait(Duration::from_secs(30));
    let waiting = tokio::spawn(async move { lock.acquire().await.map(drop) });
    let queued = |url: String| async move {
        let list = dlock_json(&["list", "--url", &url]).await;
        entry(&list, "report", "fair")["queue"].clone()
    };
    until("the waiter queued", || {
        let queued = queued(url.clone());
        async move { queued.await.as_array().is_some_and(|q| q.len() == 1) }
    })
    .await;
    // Still queued: the holder keeps the lock until it releases below.
    let queue = queued(url.clone()).await;
    let place = queue[0].as_str().expect("an owner id");
    assert!(place.starts_with(waiter.client_id()), "{queue}");
    held.release().await.expect("release");
    waiting
        .await
        .unwrap()
        .expect("the waiter is granted the lock");
}
