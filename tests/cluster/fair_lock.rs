//! The fair lock on a cluster: its hash, queue and keep-alive keys share the name's hash tag
//! (one master, here not the first); grants are published on the waiter's client channel and
//! classic PUBLISH reaches the waiter's subscriber on whatever node it listens.

use std::time::Duration;

use dlock::redis::AsyncCommands;
use tokio::sync::mpsc;

use crate::{bounded, cluster_client, names_on_master, raw, shared_cluster};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_on_a_non_first_master_are_granted_in_arrival_order() {
    let cluster = shared_cluster();
    let holder = cluster_client(cluster).await;
    let first = cluster_client(cluster).await;
    let second = cluster_client(cluster).await;
    let port = cluster.masters().expect("masters")[1].port;
    let name = names_on_master(cluster, &holder, "cluster:fair", port, 1).remove(0);
    let key = holder.fair_lock(name.as_str()).key().to_owned();
    let queue = format!("{key}:queue");
    assert_eq!(cluster.master_for_key(&queue).unwrap().port, port);
    let mut conn = raw(cluster).await;

    let held = holder.fair_lock(name.as_str()).acquire().await.unwrap();
    let (tx, mut rx) = mpsc::unbounded_channel();
    let mut tasks = Vec::new();
    for (place, (client, tag)) in [(&first, "first"), (&second, "second")]
        .into_iter()
        .enumerate()
    {
        let lock = client
            .fair_lock(name.as_str())
            .wait(Duration::from_secs(20));
        let tx = tx.clone();
        tasks.push(tokio::spawn(async move {
            let guard = lock.acquire().await.unwrap();
            tx.send((tag, guard.fencing_token())).unwrap();
            guard.release().await.unwrap();
        }));
        bounded(Duration::from_secs(5), "the waiter is queued", async {
            loop {
                let n: usize = conn.zcard(&queue).await.unwrap();
                if n == place + 1 {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
        .await;
    }
    let token = held.fencing_token();
    held.release().await.unwrap();
    let a = bounded(Duration::from_secs(10), "first grant", rx.recv())
        .await
        .unwrap();
    let b = bounded(Duration::from_secs(10), "second grant", rx.recv())
        .await
        .unwrap();
    assert_eq!((a.0, b.0), ("first", "second"));
    assert!(
        token < a.1 && a.1 < b.1,
        "tokens rise: {token} {} {}",
        a.1,
        b.1
    );
    for t in tasks {
        t.await.unwrap();
    }
    let left: usize = conn.zcard(&queue).await.unwrap();
    assert_eq!(left, 0);
}
