//! Where a cluster waiter listens: on the master of its key, the node whose script publishes
//! the release, so the message never crosses the cluster bus (which delays 1-2 % of messages
//! by 30-43 ms: `perf/cluster-bus/publish_latency.py`). And what happens when that
//! subscription's connection is killed.

use std::time::{Duration, Instant};

use dlock::LockClient;

use crate::{
    bounded, cluster_client, names_on_master, node_conn, own_cluster, shared_cluster,
    subscribers_by_node, until_subscribed,
};

/// Ids of the connections on a node that hold classic subscriptions (`CLIENT LIST`'s `sub=`).
async fn subscriber_ids(conn: &mut dlock::redis::aio::MultiplexedConnection) -> Vec<u64> {
    let list: String = dlock::redis::cmd("CLIENT")
        .arg("LIST")
        .arg("TYPE")
        .arg("pubsub")
        .query_async(conn)
        .await
        .expect("CLIENT LIST");
    list.lines()
        .filter(|l| l.split(' ').any(|f| f.starts_with("sub=") && f != "sub=0"))
        .filter_map(|l| {
            l.split(' ')
                .find_map(|f| f.strip_prefix("id=")?.parse().ok())
        })
        .collect()
}

/// A waiter of lock `name` (held by `holder` for 20 s), started; its guard and how long after
/// `released` it held, once awaited.
fn wait_for(
    waiter: &LockClient,
    name: &str,
) -> tokio::task::JoinHandle<Result<(dlock::LockGuard, Instant), dlock::LockError>> {
    let w = waiter.lock(name).wait(Duration::from_secs(30));
    tokio::spawn(async move { w.acquire().await.map(|g| (g, Instant::now())) })
}

/// Releases `held` and asserts that `waiting` (a [`wait_for`] of the same lock) then holds it
/// within 5 s: woken by the release, not by the holder's 20 s lease.
async fn release_wakes(
    held: dlock::LockGuard,
    waiting: tokio::task::JoinHandle<Result<(dlock::LockGuard, Instant), dlock::LockError>>,
) {
    let released = Instant::now();
    bounded(Duration::from_secs(30), "the release", held.release())
        .await
        .unwrap();
    let (g, held_at) = bounded(Duration::from_secs(30), "the waiter", waiting)
        .await
        .unwrap()
        .expect("the waiter acquires");
    let after = held_at - released;
    println!("  the waiter held {after:?} after the release");
    assert!(
        after < Duration::from_secs(5),
        "woken by the holder's TTL, not the release: {after:?}"
    );
    g.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_listens_on_the_master_that_publishes_its_release() {
    let cluster = shared_cluster();
    let holder = cluster_client(cluster).await;
    let waiter = cluster_client(cluster).await;
    let masters = cluster.masters().expect("cluster masters");
    assert_eq!(masters.len(), 3);
    // One lock per master: whichever node the client's other connections went to, two of the
    // three keys live elsewhere.
    for master in &masters {
        let name = &names_on_master(cluster, &holder, "near:wake", master.port, 1)[0];
        let channel = holder.lock(name.as_str()).channel().to_owned();
        let lock = holder.lock(name.as_str()).ttl(Duration::from_secs(20));
        let g = lock.acquire().await.unwrap();
        let waiting = wait_for(&waiter, name);
        let counts = until_subscribed(cluster, &channel).await;
        assert_eq!(counts.len(), 6, "every node must answer: {counts:?}");
        let elsewhere: Vec<_> = counts.iter().filter(|(p, _)| *p != master.port).collect();
        println!(
            "{name} on 127.0.0.1:{}: subscribers by node {counts:?}",
            master.port
        );
        assert!(
            counts.contains(&(master.port, 1)) && elsewhere.iter().all(|(_, n)| *n == 0),
            "the waiter of {name} must listen on its master 127.0.0.1:{} alone: {counts:?}",
            master.port
        );
        release_wakes(g, waiting).await;
    }
}

/// The connection carrying a waiter's subscription is killed on the master: it is placed again
/// there, and the release still wakes the waiter (not the holder's 20 s lease).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_subscriber_connection_is_placed_again_and_its_waiter_still_woken() {
    let (cluster, _turn) = own_cluster().await;
    let holder = cluster_client(&cluster).await;
    let waiter = cluster_client(&cluster).await;
    let master = cluster.masters().expect("cluster masters")[1].clone();
    let name = &names_on_master(&cluster, &holder, "near:kill", master.port, 1)[0];
    let channel = holder.lock(name.as_str()).channel().to_owned();
    let lock = holder.lock(name.as_str()).ttl(Duration::from_secs(20));
    let g = lock.acquire().await.unwrap();
    let waiting = wait_for(&waiter, name);
    let counts = until_subscribed(&cluster, &channel).await;
    assert!(counts.contains(&(master.port, 1)), "{counts:?}");

    // Kill the connection on the master that holds the waiter's classic subscription.
    let mut conn = node_conn(&master.url).await;
    let subscribed = subscriber_ids(&mut conn).await;
    assert_eq!(subscribed.len(), 1, "one subscriber connection expected");
    let killed: i64 = dlock::redis::cmd("CLIENT")
        .arg("KILL")
        .arg("ID")
        .arg(subscribed[0])
        .query_async(&mut conn)
        .await
        .expect("CLIENT KILL");
    assert_eq!(killed, 1);
    let killed_at = Instant::now();
    // Placed again on the same master, on a new connection, within a few checks (one a second).
    loop {
        let now = subscriber_ids(&mut conn).await;
        if !now.is_empty() && !now.contains(&subscribed[0]) {
            assert_eq!(now.len(), 1, "one subscriber connection expected");
            break;
        }
        assert!(
            killed_at.elapsed() < Duration::from_secs(10),
            "not subscribed again on 127.0.0.1:{} within 10 s",
            master.port
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let again = subscribers_by_node(&cluster, &channel).await;
    println!(
        "subscribed again {:?} after the kill: {again:?}",
        killed_at.elapsed()
    );
    assert!(again.contains(&(master.port, 1)), "{again:?}");
    assert!(
        !waiting.is_finished(),
        "the waiter must still be waiting: the lock is held"
    );
    release_wakes(g, waiting).await;
}

/// 120 waiters on 60 keys over every master subscribe at once (their subscribes go to the
/// nodes in bursts, one SUBSCRIBE per node): each channel ends up on its own master, and
/// every waiter is woken by the releases.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_waiters_is_placed_on_their_masters() {
    const KEYS: usize = 60;
    let cluster = shared_cluster();
    let holder = cluster_client(cluster).await;
    let waiter = cluster_client(cluster).await;
    let names: Vec<String> = (0..KEYS).map(|i| format!("near:burst:{i}")).collect();
    let mut guards = Vec::new();
    for name in &names {
        let lock = holder.lock(name.as_str()).ttl(Duration::from_secs(20));
        guards.push(lock.acquire().await.unwrap());
    }
    // Each waiter lets go as soon as it holds: two waiters of one key queue in their client,
    // and either may be first.
    let waiting: Vec<_> = names
        .iter()
        .chain(names.iter())
        .map(|name| {
            let w = waiter.lock(name.as_str()).wait(Duration::from_secs(30));
            tokio::spawn(async move { w.acquire().await?.release().await })
        })
        .collect();
    // Every channel subscribed on its master, and on no other node.
    let started = Instant::now();
    for name in &names {
        let channel = holder.lock(name.as_str()).channel().to_owned();
        let master = cluster
            .master_for_key(holder.lock(name.as_str()).key())
            .expect("master of the key")
            .port;
        let counts = until_subscribed(cluster, &channel).await;
        assert_eq!(counts.len(), 6, "every node must answer: {counts:?}");
        assert!(
            counts
                .iter()
                .all(|(port, n)| (*port == master) == (*n == 1) && *n <= 1),
            "{name} must be subscribed once, on 127.0.0.1:{master}: {counts:?}"
        );
    }
    println!("{KEYS} channels placed within {:?}", started.elapsed());
    let released = Instant::now();
    for g in guards {
        g.release().await.unwrap();
    }
    for w in waiting {
        bounded(Duration::from_secs(30), "a waiter", w)
            .await
            .unwrap()
            .expect("every waiter acquires and releases");
    }
    let all = released.elapsed();
    println!("all {} waiters held and released within {all:?}", 2 * KEYS);
    assert!(
        all < Duration::from_secs(15),
        "the waiters were woken by the holders' 20 s leases, not the releases: {all:?}"
    );
}

/// CLUSTER FAILOVER of the key's master while a waiter waits: its channel moves to the promoted
/// master and leaves the old one (which, as a replica, still hears every PUBLISH over the bus
/// and would wake the waiter a second time), and the release wakes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_failover_a_waiter_listens_on_the_new_master_alone() {
    let (mut cluster, _turn) = own_cluster().await;
    let holder = cluster_client(&cluster).await;
    let waiter = cluster_client(&cluster).await;
    let old = cluster.masters().expect("cluster masters")[1].clone();
    let name = &names_on_master(&cluster, &holder, "near:failover", old.port, 1)[0];
    let channel = holder.lock(name.as_str()).channel().to_owned();
    let lock = holder.lock(name.as_str()).ttl(Duration::from_secs(20));
    let g = lock.acquire().await.unwrap();
    let waiting = wait_for(&waiter, name);
    let counts = until_subscribed(&cluster, &channel).await;
    assert!(counts.contains(&(old.port, 1)), "{counts:?}");

    let promoted = tokio::task::block_in_place(|| cluster.failover(1)).expect("failover");
    assert_ne!(promoted.port, old.port);
    let moved_at = Instant::now();
    let counts = loop {
        let counts = subscribers_by_node(&cluster, &channel).await;
        let on = |port| counts.iter().find(|(p, _)| *p == port).map(|(_, n)| *n);
        if on(promoted.port) == Some(1) && on(old.port) == Some(0) {
            break counts;
        }
        assert!(
            moved_at.elapsed() < Duration::from_secs(10),
            "the channel must move from 127.0.0.1:{} to 127.0.0.1:{} within 10 s: {counts:?}",
            old.port,
            promoted.port
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    println!(
        "moved {:?} after the failover: {counts:?}",
        moved_at.elapsed()
    );
    assert_eq!(
        counts.iter().map(|(_, n)| n).sum::<i64>(),
        1,
        "subscribed on one node: {counts:?}"
    );
    release_wakes(g, waiting).await;
}

/// A master frozen (SIGSTOP) while a waiter's channel is placed on it: the subscriber spends
/// seconds finding it dead and trying to connect to it again, and a release on another master
/// must not wait for that (its message is delivered by its own connection, not queued behind
/// the subscriber's work). Once the node runs again, its own waiter is woken too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_master_does_not_hold_up_wake_ups_from_the_others() {
    let (cluster, _turn) = own_cluster().await;
    let holder = cluster_client(&cluster).await;
    let waiter = cluster_client(&cluster).await;
    let masters = cluster.masters().expect("cluster masters");
    let (healthy, frozen) = (masters[0].clone(), masters[1].clone());
    let a = &names_on_master(&cluster, &holder, "near:healthy", healthy.port, 1)[0];
    let b = &names_on_master(&cluster, &holder, "near:frozen", frozen.port, 1)[0];
    let mut guards = Vec::new();
    let mut waiting = Vec::new();
    for name in [a, b] {
        let lock = holder.lock(name.as_str()).ttl(Duration::from_secs(20));
        guards.push(lock.acquire().await.unwrap());
        waiting.push(wait_for(&waiter, name));
        let channel = holder.lock(name.as_str()).channel().to_owned();
        until_subscribed(&cluster, &channel).await;
    }
    let stopped = crate::common::Stopped::stop(frozen.pid);
    // Time is the subject: within 2.5 s the subscriber's check (every second) has PINGed the
    // frozen node in vain (1 s) and is trying to connect to it again (5 s connect timeout).
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    let guard_b = guards.pop().expect("b's guard");
    let released = Instant::now();
    bounded(
        Duration::from_secs(10),
        "release a",
        guards.pop().unwrap().release(),
    )
    .await
    .unwrap();
    let waiting_b = waiting.pop().expect("b's waiter");
    let (g, held_at) = bounded(
        Duration::from_secs(30),
        "a's waiter",
        waiting.pop().unwrap(),
    )
    .await
    .unwrap()
    .expect("a's waiter acquires");
    let after = held_at - released;
    println!(
        "a's waiter held {after:?} after the release, 127.0.0.1:{} frozen",
        frozen.port
    );
    assert!(
        after < Duration::from_secs(2),
        "a release on a healthy master waited for the frozen one: {after:?}"
    );
    g.release().await.unwrap();
    drop(stopped);
    let released = Instant::now();
    bounded(Duration::from_secs(30), "release b", guard_b.release())
        .await
        .unwrap();
    let (g, held_at) = bounded(Duration::from_secs(30), "b's waiter", waiting_b)
        .await
        .unwrap()
        .expect("b's waiter acquires once its master runs again");
    println!("b's waiter held {:?} after its release", held_at - released);
    g.release().await.unwrap();
}
