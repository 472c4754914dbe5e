//! Waiting: `wait` is honoured, waiters are woken by the release message (not by polling), a
//! crashed holder's waiter gets the lock when the lease runs out, `force_unlock` wakes waiters.

use crate::common;

use std::time::{Duration, Instant};

use dlock::{LockClient, LockError};
use tokio::sync::oneshot;

/// Spawns a task in `client` that acquires `name` (wait 20 s) and reports the instant it got it;
/// the guard is sent along so the test decides when it is released.
fn spawn_waiter(
    client: &dlock::LockClient,
    name: &str,
) -> oneshot::Receiver<(Instant, dlock::LockGuard)> {
    let lock = client.lock(name).wait(Duration::from_secs(20));
    let (tx, rx) = oneshot::channel();
    tokio::spawn(async move {
        let guard = lock.acquire().await.expect("waiter acquire");
        let _ = tx.send((Instant::now(), guard));
    });
    rx
}

/// Waits until `n` connections are subscribed to the lock's channel: the waiters are parked
/// on pub/sub, so a release from now on must reach them as a message.
async fn until_subscribed(server: &dlock::testing::RedisServer, channel: &str, n: i64) {
    let conn = common::raw(&server.url()).await;
    common::eventually(Duration::from_secs(5), "waiter subscribed", || {
        let mut conn = conn.clone();
        async move {
            let (_, subs): (String, i64) = dlock::redis::cmd("PUBSUB")
                .arg("NUMSUB")
                .arg(channel)
                .query_async(&mut conn)
                .await
                .unwrap();
            subs >= n
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acquire_times_out_after_its_wait_and_try_acquire_returns_at_once() {
    let server = common::server();
    let holder = common::client(&server).await;
    let other = common::client(&server).await;
    let _held = holder.lock("busy").acquire().await.unwrap();

    let lock = other.lock("busy").wait(Duration::from_secs(1));
    let start = Instant::now();
    let err = lock.acquire().await.expect_err("the lock is held");
    let took = start.elapsed();
    assert!(took >= Duration::from_secs(1), "gave up early: {took:?}");
    assert!(
        took < Duration::from_secs(2),
        "waited far past wait: {took:?}"
    );
    match &err {
        LockError::Timeout { name, waited, .. } => {
            assert_eq!(name, "busy");
            assert!(*waited >= Duration::from_secs(1), "{waited:?}");
        }
        e => panic!("expected Timeout, got {e:?}"),
    }
    assert!(
        err.to_string().contains("busy"),
        "message names the lock: {err}"
    );
    assert_eq!(err.lock_name(), Some("busy"));

    let start = Instant::now();
    assert!(lock.try_acquire().await.unwrap().is_none());
    assert!(
        start.elapsed() < Duration::from_secs(1),
        "try_acquire waited"
    );
    // Still the holder's.
    assert!(lock.is_locked().await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blocked_waiter_acquires_promptly_after_the_release() {
    let server = common::server();
    let holder = common::client(&server).await;
    let other = common::client(&server).await;
    let lock = holder.lock("handoff").ttl(Duration::from_secs(30));
    let guard = lock.acquire().await.unwrap();
    let token = guard.fencing_token();

    let waiter = spawn_waiter(&other, "handoff");
    until_subscribed(&server, lock.channel(), 1).await;

    let released_at = Instant::now();
    guard.release().await.unwrap();
    let (acquired_at, g) = tokio::time::timeout(Duration::from_secs(10), waiter)
        .await
        .expect("waiter not woken within 10 s (TTL 30 s)")
        .unwrap();
    let handoff = acquired_at - released_at;
    // Pub/sub wake-up: far below the 30 s lease and any polling interval worth the name.
    assert!(handoff < Duration::from_secs(1), "handoff took {handoff:?}");
    assert!(g.fencing_token() > token);
    g.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_waiter_of_a_crashed_holder_acquires_when_the_lease_runs_out() {
    let server = common::server();
    // The "crashed" holder: a hard lease of 1.5 s and a guard that is never dropped, so nobody
    // releases and nothing renews. Its own client is leaked with it.
    let crashed = common::client(&server).await;
    let guard = crashed
        .lock("crashed")
        .lease(Duration::from_millis(1500))
        .acquire()
        .await
        .unwrap();
    let held_at = Instant::now();
    std::mem::forget(guard);

    let other = common::client(&server).await;
    let (_, g) = tokio::time::timeout(Duration::from_secs(10), spawn_waiter(&other, "crashed"))
        .await
        .expect("waiter still blocked 10 s after a 1.5 s lease")
        .unwrap();
    let after = held_at.elapsed();
    assert!(
        after >= Duration::from_millis(1400),
        "acquired before the lease ran out: {after:?}"
    );
    assert!(
        after < Duration::from_secs(3),
        "woke long after the lease: {after:?}"
    );
    g.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_foreign_holder_without_release_is_waited_out_by_its_pttl() {
    // The same from Redis' side: a hash some other process wrote, with a 1.5 s PTTL, never
    // released and never published.
    let server = common::server();
    let client = common::client(&server).await;
    let lock = client.lock("foreign");
    let mut conn = common::raw(&server.url()).await;
    let () = dlock::redis::pipe()
        .cmd("HSET")
        .arg(lock.key())
        .arg("someone-else:1")
        .arg(1)
        .ignore()
        .cmd("PEXPIRE")
        .arg(lock.key())
        .arg(1500)
        .ignore()
        .query_async(&mut conn)
        .await
        .unwrap();
    let start = Instant::now();
    let g = lock.wait(Duration::from_secs(10)).acquire().await.unwrap();
    let took = start.elapsed();
    assert!(took >= Duration::from_millis(1400), "{took:?}");
    assert!(took < Duration::from_secs(3), "{took:?}");
    g.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn force_unlock_wakes_a_waiter_and_the_old_guard_cannot_free_the_new_hold() {
    let server = common::server();
    let holder = common::client(&server).await;
    let waiting = common::client(&server).await;
    let admin = common::client(&server).await;
    let lock = admin.lock("forced");
    assert!(!lock.force_unlock().await.unwrap(), "nothing to unlock yet");

    let old = holder.lock("forced").acquire().await.unwrap();
    let waiter = spawn_waiter(&waiting, "forced");
    until_subscribed(&server, lock.channel(), 1).await;

    let forced_at = Instant::now();
    assert!(lock.force_unlock().await.unwrap());
    let (acquired_at, new) = tokio::time::timeout(Duration::from_secs(10), waiter)
        .await
        .expect("force_unlock did not wake the waiter")
        .unwrap();
    assert!(acquired_at - forced_at < Duration::from_secs(1));
    assert!(new.fencing_token() > old.fencing_token());

    assert!(matches!(
        old.release().await,
        Err(LockError::NotHeld { .. })
    ));
    assert!(
        lock.is_locked().await.unwrap(),
        "old guard freed the new holder's lock"
    );
    new.release().await.unwrap();
    assert!(!lock.is_locked().await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn remaining_ttl_is_none_when_free_and_within_the_lease_when_held() {
    let server = common::server();
    let client = common::client(&server).await;
    let lock = client.lock("ttl").ttl(Duration::from_secs(10));
    assert_eq!(lock.remaining_ttl().await.unwrap(), None);
    let g = lock.acquire().await.unwrap();
    let left = lock.remaining_ttl().await.unwrap().expect("held");
    assert!(
        left > Duration::from_secs(8) && left <= Duration::from_secs(10),
        "{left:?}"
    );
    g.release().await.unwrap();
    assert_eq!(lock.remaining_ttl().await.unwrap(), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_do_not_grow_with_the_number_of_waiters() {
    const KEYS: usize = 50;
    const TASKS: usize = 200;
    let server = common::server();
    let holder = common::client(&server).await;
    let waiting = LockClient::builder(server.url())
        .connections(2)
        .build()
        .await
        .unwrap();
    let mut admin = common::raw(&server.url()).await;
    let before = connected_clients(&mut admin).await;

    let mut guards = Vec::new();
    for k in 0..KEYS {
        guards.push(holder.lock(format!("many:{k}")).acquire().await.unwrap());
    }
    let tasks: Vec<_> = (0..TASKS)
        .map(|t| {
            let lock = waiting
                .lock(format!("many:{}", t % KEYS))
                .wait(Duration::from_secs(30));
            tokio::spawn(async move { lock.acquire().await?.release().await })
        })
        .collect();
    // Every key has a waiter parked on pub/sub (one per key: the others queue locally).
    common::eventually(Duration::from_secs(10), "all keys waited on", || {
        let mut conn = admin.clone();
        async move {
            let channels: Vec<String> = dlock::redis::cmd("PUBSUB")
                .arg("CHANNELS")
                .arg("dlock:*")
                .query_async(&mut conn)
                .await
                .unwrap();
            channels.len() == KEYS
        }
    })
    .await;
    assert_eq!(
        connected_clients(&mut admin).await,
        before,
        "{TASKS} waiters opened connections"
    );

    for g in guards {
        g.release().await.unwrap();
    }
    let all = futures_util::future::try_join_all(tasks);
    for r in tokio::time::timeout(Duration::from_secs(20), all)
        .await
        .expect("not every waiter got its lock within 20 s")
        .unwrap()
    {
        r.unwrap();
    }
    assert!(common::lock_keys(&mut admin).await.is_empty());
}

/// `connected_clients` from INFO clients.
async fn connected_clients(conn: &mut dlock::redis::aio::MultiplexedConnection) -> u64 {
    let info: String = dlock::redis::cmd("INFO")
        .arg("clients")
        .query_async(conn)
        .await
        .unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix("connected_clients:"))
        .and_then(|v| v.trim().parse().ok())
        .expect("connected_clients in INFO")
}
