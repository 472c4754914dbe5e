//! Replica-synced locks on a cluster (issue 17 item 5): with one master's replica stopped
//! (SIGSTOP), synced acquires of locks on that master fail with `NotSynced` and leave no lock,
//! while those on other masters, and unsynced ones anywhere, work.

use std::time::{Duration, Instant};

use dlock::testing::Role;
use dlock::{LockClient, LockError};

use crate::{bounded, common, names_on_master, node_conn, own_cluster};

/// Generous: a replica on a loaded 2-core machine can take a few hundred ms to confirm.
const WITHIN: Duration = Duration::from_secs(1);
const STEP: Duration = Duration::from_secs(30);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_masters_replica_stopped_synced_acquires_there_fail_and_leave_no_lock() {
    let (cluster, _turn) = own_cluster().await;
    let client = LockClient::cluster_builder(cluster.urls())
        .synced_replicas(1, WITHIN)
        .build()
        .await
        .unwrap();
    let masters = cluster.masters().expect("masters");
    let (stopped_master, healthy_master) = (&masters[0], &masters[1]);
    let replica = cluster
        .nodes()
        .expect("nodes")
        .into_iter()
        .find(|n| n.role == Role::Replica && n.master_port == Some(stopped_master.port))
        .expect("a replica of master 0");
    let there =
        names_on_master(&cluster, &client, "cluster:synced", stopped_master.port, 1).remove(0);
    let elsewhere = names_on_master(
        &cluster,
        &client,
        "cluster:synced:ok",
        healthy_master.port,
        1,
    )
    .remove(0);

    // Healthy: both confirm (a replica fresh from its first sync may need a moment).
    for name in [&there, &elsewhere] {
        let lock = client.lock(name.as_str());
        common::until_synced_acquire(&lock).await;
    }

    let stopped = common::Stopped::stop(replica.pid);
    let started = Instant::now();
    let refused = bounded(
        STEP,
        "synced acquire",
        client.lock(there.as_str()).acquire(),
    )
    .await;
    let took = started.elapsed();
    assert!(
        matches!(&refused, Err(LockError::NotSynced { name, wanted: 1, acked: 0, .. }) if *name == there),
        "{refused:?}"
    );
    assert!(took >= WITHIN && took < Duration::from_secs(5), "{took:?}");
    let key = client.lock(there.as_str()).key().to_owned();
    let master_conn = node_conn(&stopped_master.url).await;
    common::until_key_gone(&master_conn, &key).await;

    let g = bounded(
        STEP,
        "synced acquire elsewhere",
        client.lock(elsewhere.as_str()).acquire(),
    )
    .await
    .expect("a synced acquire on a master whose replica runs");
    g.release().await.unwrap();
    let unsynced = client.lock(there.as_str()).synced_replicas(0, WITHIN);
    let g = bounded(STEP, "unsynced acquire", unsynced.try_acquire())
        .await
        .unwrap()
        .expect("an unsynced acquire on the stopped replica's master");
    g.release().await.unwrap();
    drop(stopped);
}
