//! The inspector on a ZooKeeper ensemble (`--url zk://...`), against a throw-away server
//! (`dlock_runtime::testing::ZkServer`): what the clients hold and who stands in line, read
//! back through the runtime's `stored_locks`; a child written as a Curator client writes it;
//! the runtime's force unlock waking the next in line; `watch`; an unreachable ensemble.

use std::time::{Duration, Instant};

use dlock_runtime::testing::{zookeeper_available, ZkServer};
use dlock_runtime::LockClient;
use tokio::io::{AsyncBufReadExt, BufReader};
use zookeeper_client::{Acls, Client, CreateMode};

use crate::common::{dlock, dlock_json, entry, text, until, BIN};

/// A started server, or `None` (and a `skipped:` line) where ZooKeeper is not installed.
async fn server(test: &str) -> Option<ZkServer> {
    if !zookeeper_available() {
        println!("skipped: {test}: no ZooKeeper server (java and its jar)");
        return None;
    }
    Some(
        tokio::task::spawn_blocking(ZkServer::start)
            .await
            .unwrap()
            .expect("start ZooKeeper"),
    )
}

/// A client with a short session, so a test's leftovers go quickly.
async fn client(url: &str) -> LockClient {
    LockClient::builder(url)
        .zookeeper_session_timeout(Duration::from_secs(4))
        .build()
        .await
        .expect("connect to ZooKeeper")
}

/// The `queue` of the lock `name` of `kind` as `list --json` shows it.
async fn queue(url: &str, name: &str, kind: &str) -> Vec<String> {
    let list = dlock_json(&["list", "--url", url]).await;
    let Some(found) = list
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == name && v["kind"] == kind)
    else {
        return Vec::new();
    };
    found["queue"]
        .as_array()
        .map(|q| q.iter().map(|o| o.as_str().unwrap().to_owned()).collect())
        .unwrap_or_default()
}

/// Whether `owner` is one of `client`'s owner ids.
fn of(owner: &serde_json::Value, client: &LockClient) -> bool {
    owner
        .as_str()
        .is_some_and(|o| o.starts_with(&format!("{}:", client.client_id())))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_show_and_unlock_read_a_zookeeper_ensemble() {
    let Some(server) = server("list_show_and_unlock_read_a_zookeeper_ensemble").await else {
        return;
    };
    let url = server.url();
    let (a, b) = (client(&url).await, client(&url).await);
    let order = a.lock("order:1").acquire().await.expect("acquire order:1");
    let exports = a.semaphore("exports", 3);
    let permits = (
        exports.acquire().await.expect("permit 1"),
        exports.acquire().await.expect("permit 2"),
    );
    let readers = (
        a.read_write_lock("prices").read().acquire().await.unwrap(),
        b.read_write_lock("prices").read().acquire().await.unwrap(),
    );
    // b waits for order:1: its child stands in line, where the inspector sees it.
    let waiter = tokio::spawn({
        let lock = b.lock("order:1").wait(Duration::from_secs(30));
        async move {
            let started = Instant::now();
            (lock.acquire().await, started.elapsed())
        }
    });
    until("b in line for order:1", || async {
        queue(&url, "order:1", "plain").await.len() == 1
    })
    .await;

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
    assert_eq!(plain["holders"].as_array().unwrap().len(), 1, "{plain}");
    assert!(of(&plain["holders"][0]["owner"], &a), "{plain}");
    assert_eq!(
        plain["pttl_ms"],
        serde_json::Value::Null,
        "the session is the lease: no time left to show"
    );
    assert!(of(&plain["queue"][0], &b), "{plain}");
    assert_eq!(plain["waiting_clients"], 1, "{plain}");
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

    // The table: the lease column says nothing it cannot know.
    let out = dlock(&["list", "--url", &url]).await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    let table = text(&out.stdout);
    let row = table.lines().find(|l| l.starts_with("order:1")).unwrap();
    let cells: Vec<&str> = row.split("  ").filter(|c| !c.is_empty()).collect();
    assert_eq!(cells[3].trim(), "-", "ttl: {table}");
    assert_eq!(cells[4].trim(), "1", "waiting clients: {table}");

    let shown = dlock_json(&["show", "prices", "--url", &url]).await;
    assert_eq!(shown.as_array().unwrap().len(), 1, "{shown}");
    assert_eq!(shown[0]["kind"], "rw");
    let out = dlock(&["show", "order:1", "--kind", "redisson", "--url", &url]).await;
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("a ZooKeeper store keeps no Redisson-kind locks"),
        "{}",
        text(&out.stderr)
    );

    // Force unlock: the holder's child goes, the waiter behind it is woken and holds, and the
    // old holder reads its hold lost at its next check.
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
    tokio::time::timeout(Duration::from_secs(10), order.lost())
        .await
        .expect("the force-unlocked holder reads lost");
    let shown = dlock_json(&["show", "order:1", "--url", &url]).await;
    assert!(of(&shown[0]["holders"][0]["owner"], &b), "{shown}");
    assert_eq!(shown[0]["queue"], serde_json::json!([]), "{shown}");
    guard.release().await.unwrap();
    drop((order, permits, readers));
}

/// A child written as Curator's `InterProcessMutex` writes it (its protected name, its host's
/// address as data, not a dlock owner id) is listed by its name as the holder, and dlock's
/// waiter behind it by its owner id: the listing does not trip over it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_child_written_by_curator_is_listed_by_its_name() {
    let Some(server) = server("a_child_written_by_curator_is_listed_by_its_name").await else {
        return;
    };
    let url = server.url();
    let zk = Client::connect(&server.connect_string())
        .await
        .expect("a plain ZooKeeper client");
    let node = "/dlock:{legacy}";
    zk.create(
        node,
        &[],
        &CreateMode::Container.with_acls(Acls::anyone_all()),
    )
    .await
    .expect("create the lock node");
    let (_, seq) = zk
        .create(
            &format!("{node}/_c_0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0-lock-"),
            b"10.0.0.7",
            &CreateMode::EphemeralSequential.with_acls(Acls::anyone_all()),
        )
        .await
        .expect("create Curator's child");
    let curator_child = format!("_c_0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0-lock-{seq}");
    let b = client(&url).await;
    let waiter = tokio::spawn({
        let lock = b.lock("legacy").wait(Duration::from_secs(30));
        async move { lock.acquire().await.map(drop) }
    });
    until("b in line behind Curator's child", || async {
        queue(&url, "legacy", "plain").await.len() == 1
    })
    .await;

    let list = dlock_json(&["list", "--url", &url]).await;
    let legacy = entry(&list, "legacy", "plain");
    assert_eq!(
        legacy["holders"][0]["owner"],
        curator_child.as_str(),
        "{legacy}"
    );
    assert!(of(&legacy["queue"][0], &b), "{legacy}");
    let out = dlock(&["list", "--url", &url]).await;
    assert!(out.status.success(), "{}", text(&out.stderr));

    // Curator's client lets go: dlock's waiter takes the lock.
    zk.delete(&format!("{node}/{curator_child}"), None)
        .await
        .expect("delete Curator's child");
    tokio::time::timeout(Duration::from_secs(20), waiter)
        .await
        .expect("the waiter finishes")
        .unwrap()
        .expect("b takes the lock after Curator's child");
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
async fn watch_sees_holder_changes_on_a_zookeeper_ensemble() {
    let Some(server) = server("watch_sees_holder_changes_on_a_zookeeper_ensemble").await else {
        return;
    };
    let url = server.url();
    let a = client(&url).await;
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
    assert!(of(&held["holders"][0]["owner"], &a), "{held}");
    guard.release().await.unwrap();
    assert_eq!(next_json(&mut lines).await["held"], false);
    let status = tokio::time::timeout(Duration::from_secs(10), child.wait())
        .await
        .expect("exits after --count")
        .unwrap();
    assert!(status.success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_zookeeper_ensemble_is_named_without_its_password_and_bounded() {
    let started = Instant::now();
    let out = dlock(&[
        "list",
        "--url",
        "zk://inspector:zk-s3cret@127.0.0.1:1/app",
        "--timeout",
        "1s",
    ])
    .await;
    let took = started.elapsed();
    assert!(!out.status.success());
    let err = text(&out.stderr);
    assert!(!err.contains("zk-s3cret"), "{err}");
    assert!(err.contains("127.0.0.1:1"), "names the ensemble: {err}");
    assert!(
        took < Duration::from_secs(10),
        "bounded by --timeout: {took:?}"
    );

    // A server that takes the connection and never answers: bounded by --timeout all the same.
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = silent.local_addr().unwrap().port();
    let keep = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((conn, _)) = silent.accept().await {
            held.push(conn);
        }
    });
    let started = Instant::now();
    let url = format!("zk://127.0.0.1:{port}");
    let out = dlock(&["list", "--url", &url, "--timeout", "1s"]).await;
    let took = started.elapsed();
    keep.abort();
    let err = text(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(err.contains(&url), "names the ensemble: {err}");
    // Which of two 1 s bounds ends it first is a race (the ZooKeeper client's own connection
    // timeout: "no available hosts"; dlock's: "no reply"), so the wording is not asserted.
    assert!(
        took < Duration::from_secs(5),
        "bounded by --timeout: {took:?}"
    );
}
