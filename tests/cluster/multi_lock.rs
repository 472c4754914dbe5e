//! Multi-locks on a cluster: names whose keys live on different masters are taken together,
//! all or none, and transfers across nodes racing in opposite orders stay exact.

use std::time::Duration;

use dlock::redis::AsyncCommands;
use dlock::LockClient;

use crate::{bounded, cluster_client, names_on_master, raw, shared_cluster};

const LONG_TTL: Duration = Duration::from_secs(60);

/// One name per master, so the multi-lock spans every node of the cluster.
fn names_on_every_master(client: &LockClient, tag: &str) -> Vec<String> {
    let cluster = shared_cluster();
    let masters = cluster.masters().expect("cluster masters");
    assert_eq!(masters.len(), 3);
    masters
        .iter()
        .enumerate()
        .map(|(i, m)| names_on_master(cluster, client, &format!("{tag}{i}"), m.port, 1).remove(0))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_multi_lock_over_three_masters_takes_and_gives_back_all() {
    let cluster = shared_cluster();
    let client = cluster_client(cluster).await;
    let other = cluster_client(cluster).await;
    let names = names_on_every_master(&client, "cluster:multi:");
    let ports: std::collections::BTreeSet<u16> = names
        .iter()
        .map(|n| {
            let key = client.lock(n.as_str()).key().to_owned();
            cluster.master_for_key(&key).expect("master").port
        })
        .collect();
    assert_eq!(ports.len(), 3, "{names:?} must live on three masters");

    let multi = client.multi_lock(names.iter().rev()).ttl(LONG_TTL);
    let guard = bounded(Duration::from_secs(10), "acquire", multi.acquire())
        .await
        .expect("acquire across masters");
    for name in &names {
        assert!(
            other
                .lock(name.as_str())
                .try_acquire()
                .await
                .unwrap()
                .is_none(),
            "{name} held"
        );
        assert!(guard.fencing_token(name).unwrap() > 0);
    }
    // All or none against a held multi-lock: nothing of the others is taken.
    let theirs = other.multi_lock(&names).ttl(LONG_TTL);
    assert!(theirs.try_acquire().await.unwrap().is_none());
    guard.release().await.expect("release across masters");
    for name in &names {
        assert!(
            !other.lock(name.as_str()).is_locked().await.unwrap(),
            "{name} free"
        );
    }

    // One name held elsewhere: the multi-lock times out naming it, the others are free.
    let held = other
        .lock(names[1].as_str())
        .ttl(LONG_TTL)
        .acquire()
        .await
        .unwrap();
    let err = multi
        .clone()
        .wait(Duration::from_millis(200))
        .acquire()
        .await
        .expect_err("one name is held");
    assert_eq!(err.lock_name(), Some(names[1].as_str()), "{err}");
    for name in [&names[0], &names[2]] {
        assert!(
            !other.lock(name.as_str()).is_locked().await.unwrap(),
            "{name} free"
        );
    }
    held.release().await.unwrap();
    let again = theirs.try_acquire().await.unwrap().expect("all free");
    again.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transfers_across_masters_in_opposite_orders_stay_exact() {
    const TASKS: usize = 4;
    const TRANSFERS: usize = 10;
    const OPENING: i64 = 1_000;
    let cluster = shared_cluster();
    let clients = [cluster_client(cluster).await, cluster_client(cluster).await];
    let accounts = names_on_every_master(&clients[0], "cluster:acct:");
    let (from, to) = (accounts[0].clone(), accounts[2].clone());
    let balance = |account: &str| format!("{{{account}}}:balance");
    let mut conn = raw(cluster).await;
    for account in [&from, &to] {
        let () = conn.set(balance(account), OPENING).await.unwrap();
    }

    let mut tasks = Vec::new();
    // What `from` pays `to` in all, net.
    let mut moved = 0;
    for (c, client) in clients.iter().enumerate() {
        for t in 0..TASKS {
            let forward = (c + t) % 2 == 0;
            let (a, b, amount) = if forward {
                (from.clone(), to.clone(), 3)
            } else {
                (to.clone(), from.clone(), 2)
            };
            moved += if forward { 3 } else { -2 } * TRANSFERS as i64;
            let (client, mut conn) = (client.clone(), conn.clone());
            tasks.push(tokio::spawn(async move {
                for _ in 0..TRANSFERS {
                    let guard = client
                        .multi_lock([&a, &b])
                        .wait(Duration::from_secs(120))
                        .acquire()
                        .await
                        .expect("multi-lock on the cluster");
                    // Non-atomic read-modify-write on two nodes: exact only under the lock.
                    let x: i64 = conn.get(balance(&a)).await.unwrap();
                    let y: i64 = conn.get(balance(&b)).await.unwrap();
                    tokio::task::yield_now().await;
                    let () = conn.set(balance(&a), x - amount).await.unwrap();
                    let () = conn.set(balance(&b), y + amount).await.unwrap();
                    guard.release().await.expect("release on the cluster");
                }
            }));
        }
    }
    bounded(
        Duration::from_secs(60),
        "transfers across masters (a deadlock?)",
        futures_util::future::try_join_all(tasks),
    )
    .await
    .expect("a transfer task failed");
    let x: i64 = conn.get(balance(&from)).await.unwrap();
    let y: i64 = conn.get(balance(&to)).await.unwrap();
    assert_eq!(x + y, 2 * OPENING, "money created or destroyed");
    assert_eq!(
        (x, y),
        (OPENING - moved, OPENING + moved),
        "a transfer was lost or doubled"
    );
}
