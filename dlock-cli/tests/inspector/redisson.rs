//! The Redisson kinds (`redisson_lock`, `redisson_fenced_lock`, `redisson_read_write_lock`),
//! held by dlock's own clients: found by `list --redisson`, shown, and force-unlocked.

use std::time::Duration;

use dlock_runtime::inspect::redisson_uuid;
use dlock_runtime::redis::{self, AsyncCommands};
use dlock_runtime::testing::RedisServer;
use dlock_runtime::LockClient;

use crate::common::{dlock, dlock_json, entry, subscribers, text, until};

#[tokio::test]
async fn redisson_kinds_are_listed_shown_and_force_unlocked() {
    let server = RedisServer::start().expect("start redis-server");
    let url = server.url();
    let connect = || LockClient::connect(&url);
    let (a, b) = (connect().await.unwrap(), connect().await.unwrap());
    let plain = a.redisson_lock("r:plain").acquire().await.expect("RLock");
    let fenced = a
        .redisson_fenced_lock("r:fenced")
        .acquire()
        .await
        .expect("RFencedLock");
    let readers = (
        a.redisson_read_write_lock("r:rw")
            .read()
            .acquire()
            .await
            .expect("reader a"),
        b.redisson_read_write_lock("r:rw")
            .read()
            .acquire()
            .await
            .expect("reader b"),
    );
    let waiter = tokio::spawn({
        let b = b.clone();
        async move {
            b.redisson_lock("r:plain")
                .wait(Duration::from_secs(20))
                .acquire()
                .await
        }
    });
    until("the r:plain waiter subscribed", || async {
        subscribers(
            std::slice::from_ref(&url),
            "redisson_lock__channel:{r:plain}",
        )
        .await
            == 1
    })
    .await;
    // Hashes that are not locks: no expiry, other fields, a dlock-shaped owner.
    let mut raw = redis::Client::open(url.as_str())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let uuid_a = redisson_uuid(a.client_id());
    let _: () = raw.hset(format!("{uuid_a}:9"), "x", 1).await.unwrap();
    let _: () = raw.hset("session:1", "user", "ann").await.unwrap();
    let _: () = raw.expire("session:1", 600).await.unwrap();
    let _: () = raw.hset("forever", format!("{uuid_a}:3"), 1).await.unwrap();

    let without = dlock_json(&["list", "--url", &url]).await;
    assert_eq!(without, serde_json::json!([]), "only with --redisson");

    let list = dlock_json(&["list", "--redisson", "--url", &url]).await;
    let names: Vec<(&str, &str)> = list
        .as_array()
        .unwrap()
        .iter()
        .map(|v| (v["name"].as_str().unwrap(), v["kind"].as_str().unwrap()))
        .collect();
    assert_eq!(
        names,
        [
            ("r:fenced", "redisson-fenced"),
            ("r:plain", "redisson"),
            ("r:rw", "redisson-rw")
        ]
    );
    let row = entry(&list, "r:plain", "redisson");
    assert_eq!(row["key"], "r:plain");
    assert!(
        row["holders"][0]["owner"]
            .as_str()
            .unwrap()
            .starts_with(&uuid_a),
        "{row}"
    );
    assert_eq!(row["waiting_clients"], 1, "{row}");
    let pttl = row["pttl_ms"].as_i64().unwrap();
    assert!(pttl > 0 && pttl <= 30_000, "{pttl}");
    let rw = entry(&list, "r:rw", "redisson-rw");
    assert_eq!(rw["mode"], "read");
    let sides: Vec<&str> = rw["holders"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["side"].as_str().unwrap())
        .collect();
    assert_eq!(sides, ["read", "read"]);

    let out = dlock(&["list", "--redisson", "--url", &url]).await;
    let table = text(&out.stdout);
    assert!(
        table
            .lines()
            .any(|l| l.starts_with("r:fenced") && l.contains("redisson-fenced")),
        "{table}"
    );

    let shown = dlock_json(&["show", "r:plain", "--kind", "redisson", "--url", &url]).await;
    assert_eq!(shown[0]["held"], true, "{shown}");
    // Unasked, `show` finds the Redisson lock by its hash's shape.
    let shown = dlock_json(&["show", "r:rw", "--url", &url]).await;
    assert_eq!(shown.as_array().unwrap().len(), 1, "{shown}");
    assert_eq!(shown[0]["kind"], "redisson-rw");
    // Asked for, a hash of another shape is flagged, not read as a lock.
    let shown = dlock_json(&["show", "session:1", "--kind", "redisson", "--url", &url]).await;
    assert_eq!(
        shown[0]["wrong_type"][0]["holds"], "hash of other fields",
        "{shown}"
    );

    let unlocked = dlock_json(&["unlock", "r:plain", "--force", "--yes", "--url", &url]).await;
    assert_eq!(
        unlocked,
        serde_json::json!({"name": "r:plain", "kind": "redisson", "unlocked": true})
    );
    let got = tokio::time::timeout(Duration::from_secs(20), waiter)
        .await
        .expect("the waiter is woken")
        .unwrap()
        .expect("and takes the lock");
    let unlocked = dlock_json(&[
        "unlock",
        "r:rw",
        "--force",
        "--yes",
        "--kind",
        "redisson-rw",
        "--url",
        &url,
    ])
    .await;
    assert_eq!(unlocked["unlocked"], true);
    let left: bool = raw.exists("r:rw").await.unwrap();
    assert!(!left, "both readers' hash is gone");
    let shown = dlock_json(&["show", "r:plain", "--kind", "redisson", "--url", &url]).await;
    assert!(
        shown[0]["holders"][0]["owner"]
            .as_str()
            .unwrap()
            .starts_with(&redisson_uuid(b.client_id())),
        "the woken waiter holds it now: {shown}"
    );
    got.release().await.unwrap();
    drop((plain, fenced, readers));
}
