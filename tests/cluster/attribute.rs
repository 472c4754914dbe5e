//! `#[distributed_lock]` with a cluster client passed as an argument (the installed-client form
//! is in `tests/alone/cluster_global.rs`: installing is process-wide).

use std::collections::BTreeSet;
use std::time::Duration;

use dlock::redis::cluster_async::ClusterConnection;
use dlock::redis::AsyncCommands;
use dlock::{distributed_lock, LockClient, LockError};

use crate::{bounded, cluster_client, raw, shared_cluster};

#[derive(Debug)]
enum AppError {
    // Read through `Debug` when a test fails.
    Lock(#[allow(dead_code)] LockError),
    Redis(#[allow(dead_code)] dlock::redis::RedisError),
}

impl From<LockError> for AppError {
    fn from(e: LockError) -> Self {
        AppError::Lock(e)
    }
}

impl From<dlock::redis::RedisError> for AppError {
    fn from(e: dlock::redis::RedisError) -> Self {
        AppError::Redis(e)
    }
}

const IDS: u32 = 12;
const CALLS: usize = 5;

fn counter(id: u32) -> String {
    format!("cluster:attr:n:{id}")
}

/// A read-modify-write in two round trips: exact only under the lock. Returns whether the
/// lock was held, as seen through the client, while the body ran.
#[distributed_lock(key = "cluster:attr:{id}", client = locks, ttl = "20s", wait = "30s")]
async fn bump(locks: &LockClient, mut data: ClusterConnection, id: u32) -> Result<bool, AppError> {
    let held = locks.lock(format!("cluster:attr:{id}")).is_locked().await?;
    let n: Option<u64> = data.get(counter(id)).await?;
    tokio::task::yield_now().await;
    let () = data.set(counter(id), n.unwrap_or(0) + 1).await?;
    Ok(held)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_attribute_with_a_cluster_client_excludes_across_two_clients() {
    let cluster = shared_cluster();
    let clients = [cluster_client(cluster).await, cluster_client(cluster).await];
    let masters: BTreeSet<u16> = (0..IDS)
        .map(|id| {
            let key = clients[0]
                .lock(format!("cluster:attr:{id}"))
                .key()
                .to_owned();
            cluster.master_for_key(&key).expect("master").port
        })
        .collect();
    assert_eq!(masters.len(), 3, "the locks must spread over all 3 masters");
    let data = raw(cluster).await;
    // Four callers (two per client) bump every counter CALLS times each.
    let callers = (0..4).map(|c| {
        let locks = clients[c % 2].clone();
        let data = data.clone();
        tokio::spawn(async move {
            for _ in 0..CALLS {
                for id in 0..IDS {
                    let held = bump(&locks, data.clone(), id).await.expect("bump");
                    assert!(held, "the body ran without the lock held");
                }
            }
        })
    });
    for done in bounded(
        Duration::from_secs(60),
        "callers",
        futures_util::future::join_all(callers),
    )
    .await
    {
        done.expect("caller task");
    }
    let mut data = data;
    for id in 0..IDS {
        let n: u64 = data.get(counter(id)).await.unwrap();
        assert_eq!(n, 4 * CALLS as u64, "counter {id}: lost or doubled update");
        let lock = clients[1].lock(format!("cluster:attr:{id}"));
        assert!(!lock.is_locked().await.unwrap(), "lock {id} left held");
    }
}
