//! The watchdog keeps a held lock alive past its TTL, stops at release (no renewal recreates the
//! key), and turns a lock that vanished under its holder into the lost-lock signal.

use crate::common;

use std::time::{Duration, Instant};

use dlock::{LockClient, LockError};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_one_second_ttl_survives_five_seconds_of_work_and_stops_at_release() {
    let server = common::server();
    let client = common::client(&server).await;
    let lock = client.lock("long-work").ttl(Duration::from_secs(1));
    let guard = lock.acquire().await.unwrap();

    // Time is the subject: sample the lease through five TTLs of "work".
    let start = Instant::now();
    let mut samples = 0;
    while start.elapsed() < Duration::from_secs(5) {
        let left = lock.remaining_ttl().await.unwrap();
        assert!(
            left.is_some_and(|d| d > Duration::ZERO),
            "lease ran out at {:?}: {left:?}",
            start.elapsed()
        );
        assert!(!guard.is_lost());
        samples += 1;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(samples >= 20);

    guard.release().await.unwrap();
    assert!(!lock.is_locked().await.unwrap());
    // Longer than a renewal period (TTL/3) and than the TTL: a renewal racing the release
    // would have recreated or extended the key by now.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(
        !lock.is_locked().await.unwrap(),
        "a renewal outlived the release"
    );
    let mut conn = common::raw(&server.url()).await;
    assert!(common::lock_keys(&mut conn).await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_key_is_reported_lost_and_the_old_guard_cannot_free_the_new_hold() {
    let server = common::server();
    let client = common::client(&server).await;
    let lock = client.lock("deleted").ttl(Duration::from_secs(1));
    let old = lock.acquire().await.unwrap();
    assert!(!old.is_lost());

    let mut conn = common::raw(&server.url()).await;
    let deleted: i64 = dlock::redis::cmd("DEL")
        .arg(lock.key())
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(deleted, 1);

    // The next renewal (within TTL/3) finds the key gone.
    tokio::time::timeout(Duration::from_secs(5), old.lost())
        .await
        .expect("lost() did not complete within 5 s of the key being deleted");
    assert!(old.is_lost());

    let other = common::client(&server).await;
    let new = other
        .lock("deleted")
        .try_acquire()
        .await
        .unwrap()
        .expect("the lock is free for a new holder");
    assert!(new.fencing_token() > old.fencing_token());

    // The old holder's release is an error, not a panic, and touches nothing of the new one.
    match old.release().await {
        Err(LockError::NotHeld { name }) => assert_eq!(name, "deleted"),
        r => panic!("expected NotHeld, got {r:?}"),
    }
    assert!(
        lock.is_locked().await.unwrap(),
        "the new holder's lock was removed"
    );
    assert!(!new.is_lost());
    new.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hard_lease_is_lost_when_it_runs_out() {
    let server = common::server();
    let client = common::client(&server).await;
    let lock = client.lock("hard").lease(Duration::from_millis(500));
    let start = Instant::now();
    let guard = lock.acquire().await.unwrap();
    tokio::time::timeout(Duration::from_secs(5), guard.lost())
        .await
        .expect("hard lease never reported lost");
    let after = start.elapsed();
    assert!(after >= Duration::from_millis(450), "lost early: {after:?}");
    assert!(guard.is_lost());
    // No watchdog for a hard lease: the key expired in Redis as well.
    common::until_unlocked(&lock, Duration::from_secs(2)).await;
    assert!(matches!(
        guard.release().await,
        Err(LockError::NotHeld { .. })
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_redis_past_the_ttl_marks_the_hold_lost_and_a_new_holder_wins() {
    let mut server = common::server();
    // Short response timeout: renewals against the stopped server fail fast, so the watchdog
    // sees "unreachable until the lease must have run out" while Redis is still stopped.
    let client = LockClient::builder(server.url())
        .response_timeout(Duration::from_millis(300))
        .build()
        .await
        .unwrap();
    let lock = client.lock("paused-redis").ttl(Duration::from_secs(1));
    let old = lock.acquire().await.unwrap();
    let pid = server.pid().unwrap();
    // The lease certainly lasts this long from now: reporting the loss before would be wrong.
    let lease_left = lock.remaining_ttl().await.unwrap().expect("held");

    let stopped = common::Stopped::stop(pid);
    let stopped_at = Instant::now();
    tokio::time::timeout(Duration::from_secs(5), old.lost())
        .await
        .expect("lost() did not complete while redis was stopped past the TTL");
    let after = stopped_at.elapsed();
    // Not before the lease could have run out, and not long after.
    assert!(
        after + Duration::from_millis(150) >= lease_left,
        "lost reported {after:?} after the stop, lease had {lease_left:?} left"
    );
    assert!(after < Duration::from_secs(3), "{after:?}");
    assert!(old.is_lost());
    // Keep Redis stopped past the TTL, then resume: the key has expired meanwhile.
    let until = stopped_at + Duration::from_millis(1500);
    tokio::time::sleep_until(until.into()).await;
    drop(stopped);

    let other = common::client(&server).await;
    let new = other
        .lock("paused-redis")
        .wait(Duration::from_secs(5))
        .acquire()
        .await
        .expect("a new holder gets the expired lock");
    assert!(new.fencing_token() > old.fencing_token());
    let released = tokio::time::timeout(Duration::from_secs(10), old.release())
        .await
        .expect("old release hung");
    assert!(
        matches!(released, Err(LockError::NotHeld { .. })),
        "a lost hold cannot be released: {released:?}"
    );
    assert!(
        lock.is_locked().await.unwrap(),
        "the new holder's lock was removed"
    );
    new.release().await.unwrap();
    server.kill();
}
