//! On a Redis 7 cluster both sides publish with SPUBLISH and wait on shard channels (Redisson's
//! sharded mode AUTO), and keep waking each other after a failover moved the channel's slot.

use std::sync::Arc;
use std::time::Duration;

use dlock::testing::RedisCluster;
use dlock::LockClient;
use tokio::time::Instant;

use crate::common;
use crate::java::{java_woken_by_release, JavaClient, Side};
use crate::lock::WOKEN_WITHIN;

async fn cluster_client(cluster: &RedisCluster) -> LockClient {
    LockClient::cluster_builder(cluster.urls())
        .build()
        .await
        .expect("connect to the cluster")
}

/// Shard subscribers of `channel` on the master serving its slot now.
async fn shard_subscribers(cluster: &RedisCluster, channel: &str) -> i64 {
    let Ok(master) = cluster.master_for_key(channel) else {
        return 0;
    };
    let mut conn = common::raw(&master.url).await;
    let reply: Vec<dlock::redis::Value> = dlock::redis::cmd("PUBSUB")
        .arg("SHARDNUMSUB")
        .arg(channel)
        .query_async(&mut conn)
        .await
        .unwrap_or_default();
    reply
        .get(1)
        .and_then(|n| dlock::redis::from_redis_value::<i64>(n.clone()).ok())
        .unwrap_or(0)
}

async fn until_shard_subscribed(cluster: &RedisCluster, channel: &str) {
    common::eventually(
        Duration::from_secs(15),
        &format!("a shard subscriber of {channel} on its slot's master"),
        || async { shard_subscribers(cluster, channel).await > 0 },
    )
    .await;
}

/// The master number serving `key`'s slot.
fn master_index(cluster: &RedisCluster, key: &str) -> usize {
    let owner = cluster.master_for_key(key).unwrap();
    cluster
        .masters()
        .unwrap()
        .iter()
        .position(|m| m.port == owner.port)
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_cluster_both_sides_wake_each_other_over_shard_channels_also_after_a_failover() {
    if !common::sharded_pubsub_or_skip("Redisson's shard channels on a cluster") {
        return;
    }
    let mut cluster = RedisCluster::start(3, 1).expect("start a cluster");
    let client = cluster_client(&cluster).await;
    let java = Arc::new(JavaClient::cluster(&cluster.urls(), Duration::from_secs(30)).await);
    let name = "order:7";
    let channel = JavaClient::channel(name, Side::Plain);
    let lock = client.redisson_lock(name).wait(Duration::from_secs(20));

    // Java holds; a dlock waiter subscribes the shard channel on the slot's master.
    assert!(
        java.try_lock(name, 1, Side::Plain, Duration::ZERO, None)
            .await
    );
    let waiter = tokio::spawn({
        let lock = lock.clone();
        async move {
            let g = lock.acquire().await.unwrap();
            (Instant::now(), g)
        }
    });
    until_shard_subscribed(&cluster, &channel).await;
    let released = Instant::now();
    assert_eq!(java.unlock(name, 1, Side::Plain).await, Ok(true));
    let (got, g) = waiter.await.unwrap();
    assert!(
        got - released < WOKEN_WITHIN,
        "dlock woke {:?} after SPUBLISH",
        got - released
    );

    // dlock's release reaches a Java shard subscriber: it was an SPUBLISH.
    let java_woken = java_woken_by_release(&java, name, 2, g).await;
    assert!(java_woken < WOKEN_WITHIN, "Java woke {java_woken:?}");

    // Java holds again and dlock waits; the slot's master fails over while it waits.
    let waiter = tokio::spawn({
        let lock = lock.clone();
        async move {
            let g = lock.acquire().await.unwrap();
            (Instant::now(), g)
        }
    });
    until_shard_subscribed(&cluster, &channel).await;
    let old = cluster.master_for_key(&channel).unwrap().port;
    let index = master_index(&cluster, &channel);
    let promoted = tokio::task::block_in_place(|| cluster.failover(index)).unwrap();
    assert_ne!(promoted.port, old);
    // dlock's shard subscriber follows the slot to the new master by itself.
    until_shard_subscribed(&cluster, &channel).await;
    // (Redisson resubscribes after a failover too; the Java side does it explicitly.)
    java.resubscribe(&channel).await;
    let released = Instant::now();
    assert_eq!(java.unlock(name, 2, Side::Plain).await, Ok(true));
    let (got, g) = waiter.await.unwrap();
    assert!(
        got - released < WOKEN_WITHIN,
        "after the failover dlock woke {:?} after the release",
        got - released
    );

    let java_woken = java_woken_by_release(&java, name, 3, g).await;
    assert!(java_woken < WOKEN_WITHIN, "Java woke {java_woken:?}");
    assert_eq!(java.unlock(name, 3, Side::Plain).await, Ok(true));
}

/// A read-write lock on the cluster: a Java writer's SPUBLISHed 1 wakes a dlock reader.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_cluster_a_java_writers_release_wakes_a_dlock_reader() {
    if !common::sharded_pubsub_or_skip("Redisson's shard channels on a cluster") {
        return;
    }
    let cluster = RedisCluster::start(3, 0).expect("start a cluster");
    let client = cluster_client(&cluster).await;
    let java = JavaClient::cluster(&cluster.urls(), Duration::from_secs(30)).await;
    assert!(
        java.try_lock("prices", 1, Side::Write, Duration::ZERO, None)
            .await
    );
    let reader = tokio::spawn({
        let read = client
            .redisson_read_write_lock("prices")
            .read()
            .wait(Duration::from_secs(20));
        async move {
            let g = read.acquire().await.unwrap();
            (Instant::now(), g)
        }
    });
    until_shard_subscribed(&cluster, "redisson_rwlock:{prices}").await;
    let released = Instant::now();
    assert_eq!(java.unlock("prices", 1, Side::Write).await, Ok(true));
    let (got, g) = reader.await.unwrap();
    assert!(got - released < WOKEN_WITHIN, "{:?}", got - released);
    assert!(
        java.try_lock("prices", 2, Side::Read, Duration::ZERO, None)
            .await
    );
    g.release().await.unwrap();
    assert_eq!(java.unlock("prices", 2, Side::Read).await, Ok(true));
}

/// The master serving the lock's slot is SIGKILLed while a dlock waiter waits: its shard
/// connection drops, and once a replica is promoted the channel is subscribed there and the
/// waiter is still woken by the next release (not at the holder's lease end).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_is_still_woken_after_the_slots_master_was_killed_and_replaced() {
    if !common::sharded_pubsub_or_skip("Redisson's shard channels on a cluster") {
        return;
    }
    let mut cluster = RedisCluster::start(3, 1).expect("start a cluster");
    let client = cluster_client(&cluster).await;
    let java = Arc::new(JavaClient::cluster(&cluster.urls(), Duration::from_secs(30)).await);
    // Slot 6174, master 1: not master 0, where the client's classic subscriber connects.
    // Losing that connection wakes every waiter of the client, and a retry while the slot's
    // master is down fails the acquire with a Redis error (dlock's acquire loop does not retry
    // errors); that is not what this test is about.
    let name = "invoice:9";
    assert_eq!(master_index(&cluster, name), 1);
    let channel = JavaClient::channel(name, Side::Plain);
    assert!(
        java.try_lock(name, 1, Side::Plain, Duration::ZERO, None)
            .await
    );
    // The hold must be on the replica before its master dies (replication is asynchronous).
    let old = cluster.master_for_key(name).unwrap();
    let replica = cluster
        .nodes()
        .unwrap()
        .into_iter()
        .find(|n| n.master_port == Some(old.port))
        .expect("a replica of the slot's master");
    let mut on_replica = common::raw(&replica.url).await;
    let _: () = dlock::redis::cmd("READONLY")
        .query_async(&mut on_replica)
        .await
        .unwrap();
    common::eventually(Duration::from_secs(10), "the hold replicated", || {
        let mut conn = on_replica.clone();
        async move {
            dlock::redis::cmd("EXISTS")
                .arg(name)
                .query_async::<i64>(&mut conn)
                .await
                .unwrap_or(0)
                == 1
        }
    })
    .await;

    let waiter = tokio::spawn({
        let lock = client.redisson_lock(name).wait(Duration::from_secs(25));
        async move {
            let g = lock.acquire().await.unwrap();
            (Instant::now(), g)
        }
    });
    until_shard_subscribed(&cluster, &channel).await;
    let index = master_index(&cluster, name);
    let promoted = tokio::task::block_in_place(|| cluster.kill_master(index)).unwrap();
    assert_eq!(promoted.port, replica.port);
    until_shard_subscribed(&cluster, &channel).await;
    java.resubscribe(&channel).await;
    let released = Instant::now();
    assert_eq!(java.unlock(name, 1, Side::Plain).await, Ok(true));
    let (got, g) = waiter.await.unwrap();
    assert!(
        got - released < WOKEN_WITHIN,
        "after the master was replaced dlock woke {:?} after the release",
        got - released
    );
    g.release().await.unwrap();
}
