//! The inspector on one server: every kind in `list`, `show`, both answers to `unlock`'s
//! question, and `watch`.

use std::time::{Duration, Instant};

use dlock_runtime::redis::{self, AsyncCommands};
use dlock_runtime::testing::RedisServer;
use dlock_runtime::LockClient;
use tokio::io::{AsyncBufReadExt, BufReader};

use crate::common::{dlock, dlock_json, dlock_with_stdin, entry, subscribers, text, until, BIN};

async fn client(server: &RedisServer) -> LockClient {
    LockClient::connect(&server.url())
        .await
        .expect("connect a LockClient")
}

#[tokio::test]
async fn list_shows_every_kind_with_holders_waiters_queue_and_permits() {
    let server = RedisServer::start().expect("start redis-server");
    let url = server.url();
    let (a, b) = (client(&server).await, client(&server).await);

    // A plain lock held twice by one owner (a re-entry), and a waiter from another client.
    let order = a.lock("order:1").acquire().await.expect("acquire order:1");
    let inner = order
        .scope(async { a.lock("order:1").acquire().await })
        .await
        .expect("re-enter order:1");
    let waiter = tokio::spawn({
        let b = b.clone();
        async move {
            b.lock("order:1")
                .wait(Duration::from_secs(30))
                .acquire()
                .await
        }
    });
    let channel = a.lock("order:1").channel().to_owned();
    until("the order:1 waiter subscribed", || async {
        subscribers(std::slice::from_ref(&url), &channel).await == 1
    })
    .await;

    // A fair lock with one client queued, a semaphore with 2 of 3 permits taken, two readers.
    let report = a
        .fair_lock("report")
        .acquire()
        .await
        .expect("acquire report");
    let fair_waiter = tokio::spawn({
        let b = b.clone();
        async move {
            b.fair_lock("report")
                .wait(Duration::from_secs(30))
                .acquire()
                .await
        }
    });
    let exports = a.semaphore("exports", 3);
    let permits = (
        exports.acquire().await.expect("permit 1"),
        exports.acquire().await.expect("permit 2"),
    );
    let readers = (
        a.read_write_lock("prices")
            .read()
            .acquire()
            .await
            .expect("reader a"),
        b.read_write_lock("prices")
            .read()
            .acquire()
            .await
            .expect("reader b"),
    );
    // Neither a lock freed since (only its latches are left) nor a stock key is a lock.
    a.lock("gone")
        .acquire()
        .await
        .expect("acquire gone")
        .release()
        .await
        .expect("release gone");
    let mut raw = redis::Client::open(url.as_str())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let _: () = raw.hset("dlock:stock:{item#0}", "left", 5).await.unwrap();

    until("the report waiter queued and subscribed", || async {
        let shown = dlock_json(&["show", "report", "--kind", "fair", "--url", &url]).await;
        shown[0]["queue"].as_array().map(Vec::len) == Some(1) && shown[0]["waiting_clients"] == 1
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
            ("prices", "rw"),
            ("report", "fair")
        ]
    );

    let plain = entry(&list, "order:1", "plain");
    assert_eq!(plain["held"], true);
    assert_eq!(plain["key"], "dlock:{order:1}");
    assert_eq!(plain["holders"].as_array().unwrap().len(), 1);
    assert!(plain["holders"][0]["owner"]
        .as_str()
        .unwrap()
        .starts_with(a.client_id()));
    assert_eq!(plain["holders"][0]["count"], 2);
    let pttl = plain["pttl_ms"].as_i64().unwrap();
    assert!(pttl > 0 && pttl <= 30_000, "pttl {pttl}");
    assert_eq!(plain["waiting_clients"], 1);

    let fair = entry(&list, "report", "fair");
    assert_eq!(fair["queue"].as_array().unwrap().len(), 1);
    assert!(fair["queue"][0]
        .as_str()
        .unwrap()
        .starts_with(b.client_id()));
    assert_eq!(fair["waiting_clients"], 1);

    let sem = entry(&list, "exports", "semaphore");
    assert_eq!(sem["permits"], serde_json::json!({"used": 2, "total": 3}));
    assert_eq!(sem["holders"].as_array().unwrap().len(), 2);
    assert_eq!(sem["waiting_clients"], 0);

    let rw = entry(&list, "prices", "rw");
    assert_eq!(rw["mode"], "read");
    let sides: Vec<&str> = rw["holders"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["side"].as_str().unwrap())
        .collect();
    assert_eq!(sides, ["read", "read"]);

    // The table for people: a header and a row per lock, owners shortened.
    let out = dlock(&["list", "--url", &url]).await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    let table = text(&out.stdout);
    println!("{table}");
    let lines: Vec<&str> = table.lines().collect();
    assert!(
        lines[0].starts_with("NAME") && lines[0].contains("PERMITS"),
        "{table}"
    );
    assert_eq!(lines.len(), 5, "{table}");
    let order_row = lines.iter().find(|l| l.starts_with("order:1")).unwrap();
    assert!(
        order_row.contains(&format!("{}…:", &a.client_id()[..8])) && order_row.contains(" x2"),
        "{table}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("exports") && l.trim_end().ends_with("2/3")),
        "{table}"
    );

    drop((inner, order, readers, permits, report));
    let next = waiter
        .await
        .unwrap()
        .expect("the order:1 waiter gets the lock once it is free");
    let fair_next = fair_waiter
        .await
        .unwrap()
        .expect("the report waiter gets the lock once it is free");
    assert!(!next.is_lost() && !fair_next.is_lost());
}

#[tokio::test]
async fn unlock_force_yes_frees_the_lock_and_wakes_a_waiter() {
    let server = RedisServer::start().expect("start redis-server");
    let url = server.url();
    let (a, b) = (client(&server).await, client(&server).await);
    // A lease far beyond the waiter's wait: only the force unlock's message can let it in.
    let held = a
        .lock("job")
        .ttl(Duration::from_secs(120))
        .acquire()
        .await
        .expect("acquire job");
    let waiter = tokio::spawn({
        let b = b.clone();
        async move {
            let started = Instant::now();
            let guard = b.lock("job").wait(Duration::from_secs(20)).acquire().await;
            (guard, started.elapsed())
        }
    });
    let channel = a.lock("job").channel().to_owned();
    until("the job waiter subscribed", || async {
        subscribers(std::slice::from_ref(&url), &channel).await == 1
    })
    .await;

    let unlocked = dlock_json(&["unlock", "job", "--force", "--yes", "--url", &url]).await;
    assert_eq!(
        unlocked,
        serde_json::json!({"name": "job", "kind": "plain", "unlocked": true})
    );

    let (guard, waited) = tokio::time::timeout(Duration::from_secs(20), waiter)
        .await
        .expect("the waiter finishes")
        .unwrap();
    let guard = guard.expect("the waiter is woken and takes the lock");
    assert!(waited < Duration::from_secs(10), "waited {waited:?}");
    let shown = dlock_json(&["show", "job", "--url", &url]).await;
    assert!(
        shown[0]["holders"][0]["owner"]
            .as_str()
            .unwrap()
            .starts_with(b.client_id()),
        "{shown}"
    );
    guard.release().await.expect("release");
    drop(held);
}

#[tokio::test]
async fn unlock_asks_first_and_a_no_leaves_the_lock() {
    let server = RedisServer::start().expect("start redis-server");
    let url = server.url();
    let a = client(&server).await;
    let held = a.lock("invoice:7").acquire().await.expect("acquire");

    let out = dlock_with_stdin(&["unlock", "invoice:7", "--force", "--url", &url], "n\n").await;
    assert!(
        !out.status.success(),
        "a declined unlock must not report success"
    );
    let err = text(&out.stderr);
    assert!(
        err.contains("Force-unlock the plain lock `invoice:7`?") && err.contains("not unlocked"),
        "{err}"
    );
    assert!(
        err.contains(a.client_id()),
        "the question shows the holder in full: {err}"
    );
    assert!(
        a.lock("invoice:7").is_locked().await.unwrap(),
        "still held after a no"
    );
    assert!(!held.is_lost());

    // No answer at all (stdin closed) is a no too.
    let out = dlock_with_stdin(&["unlock", "invoice:7", "--force", "--url", &url], "").await;
    assert!(!out.status.success());
    assert!(a.lock("invoice:7").is_locked().await.unwrap());

    let out = dlock_with_stdin(&["unlock", "invoice:7", "--force", "--url", &url], "y\n").await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("unlocked plain lock `invoice:7`"));
    assert!(
        !a.lock("invoice:7").is_locked().await.unwrap(),
        "gone after a yes"
    );
    drop(held);
}

#[tokio::test]
async fn unlock_by_kind_uses_that_kinds_force_unlock() {
    let server = RedisServer::start().expect("start redis-server");
    let url = server.url();
    let (a, b) = (client(&server).await, client(&server).await);
    let sem = a.semaphore("exports", 1);
    let permit = sem.acquire().await.expect("the only permit");
    // A plain lock of the same name: `unlock` must be told which one.
    let plain = a.lock("exports").acquire().await.expect("plain exports");
    let out = dlock(&["unlock", "exports", "--force", "--yes", "--url", &url]).await;
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("pick one with --kind"),
        "{}",
        text(&out.stderr)
    );

    let waiter = tokio::spawn({
        let b = b.clone();
        async move {
            b.semaphore("exports", 1)
                .wait(Duration::from_secs(20))
                .acquire()
                .await
        }
    });
    until("the semaphore waiter subscribed", || async {
        subscribers(std::slice::from_ref(&url), "dlock:{exports}:sem:chan").await == 1
    })
    .await;
    let unlocked = dlock_json(&[
        "unlock", "exports", "--force", "--yes", "--kind", "sem", "--url", &url,
    ])
    .await;
    assert_eq!(unlocked["unlocked"], true);
    let got = tokio::time::timeout(Duration::from_secs(10), waiter)
        .await
        .expect("woken")
        .unwrap();
    got.expect("the waiter takes the permit given back")
        .release()
        .await
        .unwrap();
    assert!(
        a.lock("exports").is_locked().await.unwrap(),
        "the plain lock of that name is untouched"
    );
    drop((permit, plain));
}

#[tokio::test]
async fn show_details_a_read_write_lock_with_a_waiting_writer() {
    let server = RedisServer::start().expect("start redis-server");
    let url = server.url();
    let (a, b) = (client(&server).await, client(&server).await);
    let reader = a
        .read_write_lock("prices")
        .read()
        .acquire()
        .await
        .expect("reader");
    let writer = tokio::spawn({
        let b = b.clone();
        async move {
            b.read_write_lock("prices")
                .write()
                .wait(Duration::from_secs(20))
                .acquire()
                .await
        }
    });
    until("the writer claimed its turn", || async {
        let shown = dlock_json(&["show", "prices", "--url", &url]).await;
        shown[0]["writer_waiting"].is_string()
    })
    .await;
    let shown = dlock_json(&["show", "prices", "--url", &url]).await;
    assert_eq!(
        shown.as_array().unwrap().len(),
        1,
        "only the rw kind is in use: {shown}"
    );
    let rw = &shown[0];
    assert_eq!(
        (rw["kind"].as_str(), rw["mode"].as_str()),
        (Some("rw"), Some("read"))
    );
    assert!(rw["writer_waiting"]
        .as_str()
        .unwrap()
        .starts_with(b.client_id()));
    let ttl = rw["holders"][0]["ttl_ms"].as_i64().unwrap();
    assert!(ttl > 0 && ttl <= 30_000, "a reader's own lease: {ttl}");

    let out = dlock(&["show", "prices", "--url", &url]).await;
    let detail = text(&out.stdout);
    assert!(
        detail.contains("mode         read") && detail.contains(a.client_id()),
        "{detail}"
    );

    let out = dlock(&["show", "nothing-here", "--url", &url]).await;
    assert!(out.status.success());
    assert!(text(&out.stderr).contains("is not held"));
    reader.release().await.unwrap();
    writer
        .await
        .unwrap()
        .expect("the writer gets in")
        .release()
        .await
        .unwrap();
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

#[tokio::test]
async fn watch_prints_each_holder_change_until_its_count() {
    let server = RedisServer::start().expect("start redis-server");
    let url = server.url();
    let a = client(&server).await;
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
    assert_eq!(
        next_json(&mut lines).await["held"],
        false,
        "the first line is the state at start"
    );
    let guard = a.lock("job").acquire().await.expect("acquire");
    let held = next_json(&mut lines).await;
    assert_eq!(held["held"], true);
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

    // --for ends a watch on a lock nobody touches, after its one line.
    let started = Instant::now();
    let out = dlock(&["watch", "idle", "--for", "300ms", "--url", &url]).await;
    assert!(out.status.success());
    assert!(started.elapsed() >= Duration::from_millis(300));
    let printed = text(&out.stdout);
    assert_eq!(printed.lines().count(), 1, "{printed}");
    assert!(printed.contains("free"), "{printed}");
}

#[tokio::test]
async fn passwords_in_urls_are_never_printed() {
    let server = RedisServer::builder()
        .user("inspector", "s3cret-pw")
        .start()
        .expect("start redis-server with an ACL user");
    let good = server.url_as("inspector", "s3cret-pw");
    let a = LockClient::connect(&good)
        .await
        .expect("connect as the ACL user");
    let held = a.lock("order:9").acquire().await.expect("acquire");
    let list = dlock_json(&["list", "--url", &good]).await;
    assert_eq!(entry(&list, "order:9", "plain")["held"], true);

    let bad = server.url_as("inspector", "wrong-pw-123");
    let out = dlock(&["list", "--url", &bad]).await;
    assert!(!out.status.success());
    let err = text(&out.stderr);
    assert!(
        err.contains("***") && !err.contains("wrong-pw-123"),
        "{err}"
    );

    let out = std::process::Command::new(BIN)
        .args(["list", "--help"])
        .env("DLOCK_URL", &good)
        .output()
        .unwrap();
    assert!(
        !text(&out.stdout).contains("s3cret-pw"),
        "--help shows no env password"
    );
    drop(held);
}

#[tokio::test]
async fn unlock_refuses_without_force() {
    let out = dlock(&["unlock", "job", "--url", "redis://127.0.0.1:1"]).await;
    assert_eq!(out.status.code(), Some(2), "a usage error");
    assert!(text(&out.stderr).contains("--force"));
}

#[tokio::test]
async fn a_key_of_another_type_under_the_prefix_is_flagged_and_the_rest_listed() {
    let server = RedisServer::start().expect("start redis-server");
    let url = server.url();
    let a = client(&server).await;
    let held = a.lock("order:1").acquire().await.expect("acquire order:1");
    let mut raw = redis::Client::open(url.as_str())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    // Somebody's own data where a plain lock and a semaphore would keep theirs.
    let _: () = raw.set("dlock:{junk}", "not a lock").await.unwrap();
    let _: () = raw.hset("dlock:{jobs}:sem", "x", 1).await.unwrap();

    let list = dlock_json(&["list", "--url", &url]).await;
    assert_eq!(entry(&list, "order:1", "plain")["held"], true, "{list:#}");
    let junk = entry(&list, "junk", "plain");
    assert_eq!(
        junk["wrong_type"],
        serde_json::json!([{"key": "dlock:{junk}", "holds": "string", "expected": "hash"}])
    );
    assert_eq!(junk["held"], false);
    let jobs = entry(&list, "jobs", "semaphore");
    assert_eq!(jobs["wrong_type"][0]["holds"], "hash");
    assert_eq!(jobs["wrong_type"][0]["expected"], "zset");

    let out = dlock(&["list", "--url", &url]).await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    let table = text(&out.stdout);
    assert!(
        table.lines().any(|l| l.starts_with("junk")
            && l.contains("WRONG TYPE: `dlock:{junk}` holds a string, not a hash")),
        "{table}"
    );

    let out = dlock(&["show", "junk", "--url", &url]).await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("wrong type  `dlock:{junk}` holds a string"),
        "{}",
        text(&out.stdout)
    );

    let out = dlock(&["unlock", "junk", "--force", "--yes", "--url", &url]).await;
    assert!(!out.status.success());
    let err = text(&out.stderr);
    assert!(err.contains("`junk` is not a lock"), "{err}");
    let left: String = raw.get("dlock:{junk}").await.unwrap();
    assert_eq!(left, "not a lock", "the data is left alone");
    drop(held);
}

#[tokio::test]
async fn the_waiting_column_counts_clients_not_tasks() {
    let server = RedisServer::start().expect("start redis-server");
    let url = server.url();
    let (a, b) = (client(&server).await, client(&server).await);
    let held = a.lock("order:7").acquire().await.expect("acquire order:7");
    let wait = |c: &LockClient| {
        let c = c.clone();
        tokio::spawn(async move {
            c.lock("order:7")
                .wait(Duration::from_secs(30))
                .acquire()
                .await
                .map(drop)
        })
    };
    // A task of the holder's own client and two tasks of another client wait: one client is
    // subscribed (b's first task; its second queues inside b, a's inside a).
    let waiters = [wait(&a), wait(&b), wait(&b)];
    let channel = a.lock("order:7").channel().to_owned();
    until("b's waiter subscribed", || async {
        subscribers(std::slice::from_ref(&url), &channel).await == 1
    })
    .await;

    let list = dlock_json(&["list", "--url", &url]).await;
    let row = entry(&list, "order:7", "plain");
    assert_eq!(row["waiting_clients"], 1, "{row}");
    assert!(row.get("waiting").is_none(), "the old name is gone: {row}");
    let out = dlock(&["list", "--url", &url]).await;
    let table = text(&out.stdout);
    assert!(
        table.lines().next().unwrap().contains("WAITING CLIENTS"),
        "{table}"
    );
    let out = dlock(&["show", "order:7", "--url", &url]).await;
    let detail = text(&out.stdout);
    assert!(
        detail.contains("1 client(s) subscribed (a client counts once"),
        "{detail}"
    );

    held.release().await.expect("release");
    for w in waiters {
        tokio::time::timeout(Duration::from_secs(20), w)
            .await
            .expect("every waiter gets its turn")
            .unwrap()
            .expect("acquired");
    }
}

#[tokio::test]
async fn help_names_the_environment_variables_without_a_stray_equals_sign() {
    let out = std::process::Command::new(BIN)
        .arg("--help")
        .env_remove("DLOCK_MASTER_USER")
        .output()
        .unwrap();
    let help = text(&out.stdout);
    assert!(help.contains("[env: DLOCK_MASTER_USER]"), "{help}");
    assert!(!help.contains("DLOCK_MASTER_USER="), "{help}");
}

#[tokio::test]
async fn stored_locks_refuses_redis_and_says_what_to_do_instead() {
    let server = RedisServer::start().expect("start redis-server");
    let a = client(&server).await;
    let err = dlock_runtime::inspect::stored_locks(&a, None)
        .await
        .expect_err("Redis answers no such query");
    let message = err.to_string();
    assert!(
        message.contains("stores that answer queries (PostgreSQL, ZooKeeper)")
            && message.contains("scan its keys"),
        "{message}"
    );
}

#[tokio::test]
async fn holders_say_which_client_and_which_lock_label_hold_them() {
    let server = RedisServer::start().expect("start redis-server");
    let url = server.url();
    let named = LockClient::builder(url.as_str())
        .name("orders-api@web-3")
        .build()
        .await
        .expect("connect");
    let held = (named.lock("order:9"))
        .label("order:{id}")
        .acquire()
        .await
        .expect("acquire");
    let list = dlock_json(&["list", "--url", &url]).await;
    let row = entry(&list, "order:9", "plain");
    let holder = &row["holders"][0];
    assert_eq!(holder["client"], "orders-api@web-3", "{row}");
    assert_eq!(holder["label"], "order:{id}", "{row}");
    let owner = holder["owner"].as_str().expect("owner");
    assert!(owner.starts_with(named.client_id()), "{owner}");
    let table = text(&dlock(&["list", "--url", &url]).await.stdout);
    assert!(table.contains("(orders-api@web-3 order:{id})"), "{table}");
    let detail = text(&dlock(&["show", "order:9", "--url", &url]).await.stdout);
    assert!(
        detail.contains("WHO") && detail.contains("orders-api@web-3 order:{id}"),
        "{detail}"
    );
    held.release().await.expect("release");
}
