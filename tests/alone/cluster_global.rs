//! `#[distributed_lock]` without `client = ...` on a cluster: the installed client is a cluster
//! client. Alone in its own test binary because the installed client is process-wide.

use std::collections::BTreeSet;
use std::time::Duration;

use dlock::testing::RedisCluster;
use dlock::{distributed_lock, LockClient, LockError};

/// Whether the lock was held, as the installed client sees it, while the body ran.
#[distributed_lock(key = "cluster:global:{id}", ttl = "20s", wait = "10s")]
async fn guarded(id: u32) -> Result<bool, LockError> {
    LockClient::global()?
        .lock(format!("cluster:global:{id}"))
        .is_locked()
        .await
}

/// Fails at once when another owner holds the lock.
#[distributed_lock(key = "cluster:global:busy", wait = "0s")]
async fn busy() -> Result<(), LockError> {
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_installed_cluster_client_serves_the_attribute() {
    let cluster = tokio::task::spawn_blocking(|| RedisCluster::start(3, 1))
        .await
        .expect("cluster start task")
        .expect("start a local redis cluster");
    assert!(matches!(guarded(0).await, Err(LockError::NotConfigured)));

    let client = LockClient::cluster_builder(cluster.urls())
        .build()
        .await
        .expect("cluster client");
    assert!(client.clone().install().is_none());
    let masters: BTreeSet<u16> = (0..9)
        .map(|id| {
            let key = client.lock(format!("cluster:global:{id}")).key().to_owned();
            cluster.master_for_key(&key).expect("master").port
        })
        .collect();
    assert_eq!(masters.len(), 3, "the locks must spread over all 3 masters");
    for id in 0..9 {
        let held = tokio::time::timeout(Duration::from_secs(30), guarded(id))
            .await
            .expect("guarded hung")
            .expect("guarded");
        assert!(held, "lock {id} not held while the body ran");
        let lock = client.lock(format!("cluster:global:{id}"));
        assert!(!lock.is_locked().await.unwrap(), "lock {id} left held");
    }

    // Another client (another process, as far as the lock is concerned) holds it: the
    // installed client's attribute call fails fast without running the body.
    let other = LockClient::cluster_builder(cluster.urls())
        .build()
        .await
        .expect("second cluster client");
    let g = other.lock("cluster:global:busy").acquire().await.unwrap();
    assert!(matches!(busy().await, Err(LockError::Timeout { .. })));
    g.release().await.unwrap();
    tokio::time::timeout(Duration::from_secs(30), busy())
        .await
        .expect("busy hung")
        .expect("free again");
}
