//! The inspector on a local Redis Cluster (3 masters, 1 replica each): locks spread over the
//! masters, a waiter subscribed on whichever node its client picked, a fair queue and a
//! semaphore; then a force unlock that wakes the waiter.

use std::collections::BTreeSet;
use std::time::Duration;

use dlock_runtime::inspect::{Kind, Layout};
use dlock_runtime::testing::RedisCluster;
use dlock_runtime::LockClient;

use crate::common::{dlock, dlock_json, entry, subscribers, text, until};

async fn client(cluster: &RedisCluster) -> LockClient {
    LockClient::cluster_builder(cluster.urls())
        .build()
        .await
        .expect("connect a cluster LockClient")
}

/// Names of plain locks whose keys land on `n` different masters.
fn names_on_distinct_masters(cluster: &RedisCluster, n: usize) -> Vec<String> {
    let mut masters = BTreeSet::new();
    let mut names = Vec::new();
    for i in 0..1_000 {
        let name = format!("order:{i}");
        let key = Layout::new("dlock:", Kind::Plain, &name).key;
        let master = cluster.master_for_key(&key).expect("the key's master").port;
        if masters.insert(master) {
            names.push(name);
        }
        if names.len() == n {
            return names;
        }
    }
    panic!("no {n} names on distinct masters among 1000");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_walks_every_master_counts_waiters_on_every_node_and_unlock_wakes_them() {
    let cluster = tokio::task::spawn_blocking(|| RedisCluster::start(3, 1))
        .await
        .unwrap()
        .expect("start a local cluster");
    let seeds = cluster.urls().join(",");
    let node_urls: Vec<String> = cluster
        .nodes()
        .unwrap()
        .into_iter()
        .map(|n| n.url)
        .collect();
    let (a, b) = (client(&cluster).await, client(&cluster).await);

    let names = names_on_distinct_masters(&cluster, 3);
    let mut held = Vec::new();
    for name in &names {
        held.push(
            a.lock(name.as_str())
                .ttl(Duration::from_secs(120))
                .acquire()
                .await
                .expect("acquire"),
        );
    }
    let waited = names[0].clone();
    let waiter = tokio::spawn({
        let (b, name) = (b.clone(), waited.clone());
        async move { b.lock(name).wait(Duration::from_secs(30)).acquire().await }
    });
    let channel = a.lock(waited.as_str()).channel().to_owned();
    until("the waiter subscribed on some node", || async {
        subscribers(&node_urls, &channel).await == 1
    })
    .await;

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
        exports.acquire().await.unwrap(),
        exports.acquire().await.unwrap(),
    );
    until("the report waiter queued and subscribed", || async {
        let shown = dlock_json(&["show", "report", "--kind", "fair", "--cluster", &seeds]).await;
        shown[0]["queue"].as_array().map(Vec::len) == Some(1) && shown[0]["waiting_clients"] == 1
    })
    .await;

    let list = dlock_json(&["list", "--cluster", &seeds]).await;
    assert_eq!(list.as_array().unwrap().len(), 5, "{list:#}");
    for name in &names {
        let e = entry(&list, name, "plain");
        assert!(
            e["holders"][0]["owner"]
                .as_str()
                .unwrap()
                .starts_with(a.client_id()),
            "{e}"
        );
        let expected_waiting = if *name == waited { 1 } else { 0 };
        assert_eq!(e["waiting_clients"], expected_waiting, "{e}");
    }
    assert_eq!(
        entry(&list, "report", "fair")["queue"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
    assert_eq!(entry(&list, "report", "fair")["waiting_clients"], 1);
    assert_eq!(
        entry(&list, "exports", "semaphore")["permits"],
        serde_json::json!({"used": 2, "total": 3})
    );

    let out = dlock(&["list", "--cluster", &seeds]).await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    let table = text(&out.stdout);
    println!("dlock list --cluster {seeds}\n{table}");
    assert_eq!(table.lines().count(), 6, "{table}");

    let unlocked = dlock_json(&["unlock", &waited, "--force", "--yes", "--cluster", &seeds]).await;
    assert_eq!(unlocked["unlocked"], true);
    let guard = tokio::time::timeout(Duration::from_secs(10), waiter)
        .await
        .expect("the waiter is woken well before the 120 s lease")
        .unwrap()
        .expect("the waiter takes the lock");
    let shown = dlock_json(&["show", &waited, "--cluster", &seeds]).await;
    assert!(
        shown[0]["holders"][0]["owner"]
            .as_str()
            .unwrap()
            .starts_with(b.client_id()),
        "{shown}"
    );
    guard.release().await.unwrap();
    drop((held, permits, report));
    fair_waiter
        .await
        .unwrap()
        .expect("the report waiter gets its turn")
        .release()
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_redisson_finds_redisson_locks_on_every_master() {
    let cluster = tokio::task::spawn_blocking(|| RedisCluster::start(3, 0))
        .await
        .unwrap()
        .expect("start a local cluster");
    let seeds = cluster.urls().join(",");
    let a = client(&cluster).await;
    // Redisson's hash is the bare name: names whose hashes land on three masters.
    let mut masters = BTreeSet::new();
    let names: Vec<String> = (0..1_000)
        .map(|i| format!("job:{i}"))
        .filter(|name| masters.insert(cluster.master_for_key(name).expect("a master").port))
        .take(3)
        .collect();
    assert_eq!(names.len(), 3, "three masters");
    let mut held = Vec::new();
    for name in &names[..2] {
        held.push(
            a.redisson_lock(name.as_str())
                .acquire()
                .await
                .expect("RLock"),
        );
    }
    let writer = a
        .redisson_read_write_lock(names[2].as_str())
        .write()
        .acquire()
        .await
        .expect("RReadWriteLock writer");

    let list = dlock_json(&["list", "--redisson", "--cluster", &seeds]).await;
    assert_eq!(list.as_array().unwrap().len(), 3, "{list:#}");
    for name in &names[..2] {
        let row = entry(&list, name, "redisson");
        assert_eq!(row["held"], true);
        // SSUBSCRIBE'd waiters are invisible to PUBSUB NUMSUB: not counted, not a wrong 0.
        assert_eq!(row["waiting_clients"], serde_json::Value::Null, "{row}");
    }
    let rw = entry(&list, &names[2], "redisson-rw");
    assert_eq!(
        (rw["mode"].as_str(), rw["holders"][0]["side"].as_str()),
        (Some("write"), Some("write"))
    );

    let unlocked =
        dlock_json(&["unlock", &names[2], "--force", "--yes", "--cluster", &seeds]).await;
    assert_eq!(unlocked["kind"], "redisson-rw");
    assert_eq!(unlocked["unlocked"], true);
    assert!(!a
        .redisson_read_write_lock(names[2].as_str())
        .write()
        .is_locked()
        .await
        .unwrap());
    drop((held, writer));
}
