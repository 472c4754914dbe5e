//! dlock on a local Redis Cluster (3 masters, 1 replica each, started by the test harness).
//!
//! One area binary: the cluster is started once for the tests that only read and write
//! locks (`shared_cluster`), and once per test that fails nodes over or kills them.

mod basics;

use std::sync::OnceLock;

use dlock::testing::RedisCluster;
use dlock::LockClient;

/// The cluster the non-destructive tests share; it dies with the test process.
pub fn shared_cluster() -> &'static RedisCluster {
    static CLUSTER: OnceLock<RedisCluster> = OnceLock::new();
    CLUSTER.get_or_init(|| RedisCluster::start(3, 1).expect("start a local redis cluster"))
}

/// A `LockClient` on the cluster, default settings.
pub async fn cluster_client(cluster: &RedisCluster) -> LockClient {
    LockClient::cluster_builder(cluster.urls())
        .build()
        .await
        .expect("connect a cluster LockClient")
}

/// A plain redis-rs cluster connection for the test's own reads and writes.
pub async fn raw(cluster: &RedisCluster) -> dlock::redis::cluster_async::ClusterConnection {
    dlock::redis::cluster::ClusterClient::new(cluster.urls())
        .expect("cluster client")
        .get_async_connection()
        .await
        .expect("raw cluster connection")
}

/// Waits until some node of the cluster has a subscriber on `channel` (classic pub/sub
/// subscriptions are node-local, so every node is asked).
pub async fn until_subscribed(cluster: &RedisCluster, channel: &str) {
    let nodes = cluster.nodes().expect("cluster nodes");
    let started = std::time::Instant::now();
    loop {
        for node in &nodes {
            let Ok(client) = dlock::redis::Client::open(node.url.as_str()) else {
                continue;
            };
            let Ok(mut conn) = client.get_multiplexed_async_connection().await else {
                continue;
            };
            let reply: Vec<dlock::redis::Value> = dlock::redis::cmd("PUBSUB")
                .arg("NUMSUB")
                .arg(channel)
                .query_async(&mut conn)
                .await
                .unwrap_or_default();
            if matches!(reply.get(1), Some(dlock::redis::Value::Int(n)) if *n > 0) {
                return;
            }
        }
        assert!(
            started.elapsed() < std::time::Duration::from_secs(10),
            "nobody subscribed to {channel} within 10 s"
        );
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
}
