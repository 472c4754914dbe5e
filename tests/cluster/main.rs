//! dlock on a local Redis Cluster (3 masters, 1 replica each, started by the test harness).
//!
//! One area binary: the cluster is started once for the tests that only read and write
//! locks (`shared_cluster`), and once per test that fails nodes over or kills them, or that
//! counts commands per node (`own_cluster`).

mod attribute;
mod bad_input;
mod basics;
#[path = "../common/mod.rs"]
mod common;
mod failover;
mod fair_lock;
mod fence;
mod handoff;
mod multi_lock;
mod rwlock;
mod semaphore;
mod stock;
mod synced;
mod wakeups;
mod watchdog;

use std::future::Future;
use std::sync::OnceLock;
use std::time::Duration;

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

/// Subscribers of `channel` on each node of the cluster that answers, by port (classic pub/sub
/// subscriptions are node-local, so `PUBSUB NUMSUB` on one node counts only its own).
pub async fn subscribers_by_node(cluster: &RedisCluster, channel: &str) -> Vec<(u16, i64)> {
    let mut counts = Vec::new();
    for node in cluster.nodes().expect("cluster nodes") {
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
        if let Some(dlock::redis::Value::Int(n)) = reply.get(1) {
            counts.push((node.port, *n));
        }
    }
    counts.sort_unstable();
    counts
}

/// Waits (at most 10 s) until some node of the cluster has a subscriber on `channel`; the
/// subscribers by node then.
pub async fn until_subscribed(cluster: &RedisCluster, channel: &str) -> Vec<(u16, i64)> {
    let started = std::time::Instant::now();
    loop {
        let counts = subscribers_by_node(cluster, channel).await;
        if counts.iter().any(|(_, n)| *n > 0) {
            return counts;
        }
        assert!(
            started.elapsed() < std::time::Duration::from_secs(10),
            "nobody subscribed to {channel} within 10 s"
        );
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
}

/// A cluster of 3 masters with 1 replica each for one test alone (it fails nodes over, or
/// counts the commands each node serves). Started off the runtime's threads: it takes ~3 s.
///
/// The tests that own a cluster run one at a time (hold the returned guard): two clusters
/// failing over side by side on a 2-core machine starve each other's nodes of CPU (replicas
/// time out and resync), and a killed node's port could be reused by the other cluster.
pub async fn own_cluster() -> (RedisCluster, tokio::sync::MutexGuard<'static, ()>) {
    static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    let turn = ONE_AT_A_TIME.lock().await;
    let cluster = tokio::task::spawn_blocking(|| RedisCluster::start(3, 1))
        .await
        .expect("cluster start task")
        .expect("start a local redis cluster");
    (cluster, turn)
}

/// `fut`, or a panic naming `what` if it takes longer than `limit`: no await in these tests
/// may hang the binary.
pub async fn bounded<T>(limit: Duration, what: &str, fut: impl Future<Output = T>) -> T {
    match tokio::time::timeout(limit, fut).await {
        Ok(v) => v,
        Err(_) => panic!("{what}: no answer within {limit:?}"),
    }
}

/// `n` lock names `<tag>:<i>` whose keys (under `client`'s prefix) are served by the master on
/// `port`, by the cluster's slot map as it is now and `dlock::stock::cluster_slot`.
pub fn names_on_master(
    cluster: &RedisCluster,
    client: &LockClient,
    tag: &str,
    port: u16,
    n: usize,
) -> Vec<String> {
    let master = cluster
        .masters()
        .expect("cluster masters")
        .into_iter()
        .find(|m| m.port == port)
        .unwrap_or_else(|| panic!("127.0.0.1:{port} is not a master"));
    let names: Vec<String> = (0..100 * n)
        .map(|i| format!("{tag}:{i}"))
        .filter(|name| {
            let slot = dlock::stock::cluster_slot(client.lock(name.as_str()).key());
            master.slots.iter().any(|r| r.contains(&slot))
        })
        .take(n)
        .collect();
    assert_eq!(names.len(), n, "not enough names on 127.0.0.1:{port}");
    names
}

/// A plain connection to one node (not following redirects): INFO, WAIT, CONFIG. Replies may
/// take up to 10 s (a WAIT for a replica), not redis-rs's default 500 ms.
pub async fn node_conn(url: &str) -> dlock::redis::aio::MultiplexedConnection {
    let config = dlock::redis::AsyncConnectionConfig::new()
        .set_response_timeout(Some(Duration::from_secs(10)));
    dlock::redis::Client::open(url)
        .expect("node url")
        .get_multiplexed_async_connection_with_config(&config)
        .await
        .expect("connection to a cluster node")
}
