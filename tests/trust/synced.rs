//! Replica-synced locks (issue 17 item 5) on a primary with one replica: with the replica
//! stopped (SIGSTOP), a synced acquire fails with `NotSynced` after its bound and leaves no lock
//! behind, a synced hold reads as lost once its unconfirmed renewals let its lease run out, and
//! unsynced locks of the same client keep working. The cluster and Sentinel versions are in
//! their areas.

use crate::common;

use std::time::{Duration, Instant};

use dlock::testing::RedisServer;
use dlock::{LockClient, LockError};

/// Generous: a replica on a loaded 2-core machine can take a few hundred ms to confirm.
const WITHIN: Duration = Duration::from_secs(1);

/// A primary and a replica of it, replicating (also used by `transient.rs`).
pub(crate) async fn primary_and_replica() -> (RedisServer, RedisServer) {
    let primary = common::server();
    let port = primary.port().to_string();
    let replica = RedisServer::start_with_args(&["--replicaof", "127.0.0.1", &port]).unwrap();
    let admin = common::raw(&primary.url()).await;
    // Online is not enough: a replica fresh from its first sync answers WAIT only a moment
    // later. Ready when it confirms a write.
    common::eventually(
        Duration::from_secs(10),
        "the replica confirming writes",
        || {
            let mut admin = admin.clone();
            async move {
                let _: () = dlock::redis::cmd("SET")
                    .arg("synced:probe")
                    .arg(1)
                    .query_async(&mut admin)
                    .await
                    .unwrap();
                let acked: i64 = dlock::redis::cmd("WAIT")
                    .arg(1)
                    .arg(100)
                    .query_async(&mut admin)
                    .await
                    .unwrap();
                acked == 1
            }
        },
    )
    .await;
    (primary, replica)
}

async fn synced_client(primary: &RedisServer) -> LockClient {
    LockClient::builder(primary.url())
        .synced_replicas(1, WITHIN)
        .build()
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_replica_stopped_a_synced_acquire_fails_clearly_and_leaves_no_lock() {
    let (primary, replica) = primary_and_replica().await;
    let mut admin = common::raw(&primary.url()).await;
    let client = synced_client(&primary).await;
    let lock = client.lock("synced:order");
    common::until_synced_acquire(&lock).await;

    let stopped = common::Stopped::stop(replica.pid().unwrap());
    let started = Instant::now();
    let refused = lock.acquire().await;
    let took = started.elapsed();
    match &refused {
        Err(LockError::NotSynced {
            name,
            wanted: 1,
            acked: 0,
            ..
        }) => assert_eq!(name, "synced:order"),
        other => panic!("synced acquire with the replica stopped: {other:?}"),
    }
    let text = refused.unwrap_err().to_string();
    assert!(
        text.contains("synced:order") && text.contains("replica"),
        "{text}"
    );
    // Time is the subject: WAIT ran its whole bound, and not much longer.
    assert!(took >= WITHIN && took < Duration::from_secs(3), "{took:?}");
    // The grant was given back (in the background, right after the error).
    let key = lock.key().to_owned();
    common::until_key_gone(&admin, &key).await;

    // Unsynced locks of the same client, and of another client, work as before.
    let unsynced = lock.clone().synced_replicas(0, WITHIN);
    let quick = Instant::now();
    let g = unsynced
        .try_acquire()
        .await
        .unwrap()
        .expect("unsynced acquire");
    assert!(quick.elapsed() < WITHIN, "{:?}", quick.elapsed());
    g.release().await.unwrap();
    let other = common::client(&primary).await;
    other
        .lock("synced:order")
        .try_acquire()
        .await
        .unwrap()
        .expect("plain client")
        .release()
        .await
        .unwrap();

    drop(stopped);
    // The resumed replica catches up, then confirms again.
    common::until_synced_acquire(&lock).await;
    assert!(common::lock_keys(&mut admin).await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_synced_hold_whose_renewals_go_unconfirmed_reads_as_lost_by_the_end_of_its_lease() {
    let (primary, replica) = primary_and_replica().await;
    let client = synced_client(&primary).await;
    let ttl = Duration::from_millis(1200);
    let held = client.lock("synced:held").ttl(ttl);
    common::until_synced_acquire(&held).await;
    let synced = held.acquire().await.expect("the replica confirms by now");
    let unsynced = client
        .lock("synced:plain")
        .synced_replicas(0, WITHIN)
        .ttl(ttl)
        .acquire()
        .await
        .unwrap();

    let _stopped = common::Stopped::stop(replica.pid().unwrap());
    let stopped_at = Instant::now();
    tokio::time::timeout(Duration::from_secs(5), synced.lost())
        .await
        .expect("a hold nobody confirms any more still reads as held after 5 s");
    let lost_after = stopped_at.elapsed();
    // Its last confirmed renewal was at most a third of the lease before the stop.
    assert!(
        lost_after <= ttl + Duration::from_millis(500),
        "lost after {lost_after:?}"
    );
    assert!(!unsynced.is_lost(), "the unsynced hold was lost too");
    unsynced
        .release()
        .await
        .expect("the unsynced hold is still ours");
}

#[tokio::test]
async fn a_bound_that_the_connection_would_time_out_first_is_refused() {
    let server = common::server();
    let built = LockClient::builder(server.url())
        .response_timeout(Duration::from_secs(1))
        .synced_replicas(1, Duration::from_secs(2))
        .build()
        .await;
    match built {
        Err(LockError::InvalidArgument { reason, .. }) => {
            assert!(
                reason.contains("synced_replicas") && reason.contains("response_timeout"),
                "{reason}"
            );
        }
        other => panic!("{:?}", other.map(|_| "built")),
    }
    let client = common::client(&server).await;
    let refused = client
        .lock("synced:bad")
        .synced_replicas(1, Duration::ZERO)
        .acquire()
        .await;
    assert!(
        matches!(&refused, Err(LockError::InvalidArgument { name, .. }) if name == "synced:bad"),
        "{refused:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_wait_after_a_grant_gives_the_lock_back() {
    let (primary, _replica) = primary_and_replica().await;
    let mut admin = common::raw(&primary.url()).await;
    let _: () = dlock::redis::cmd("ACL")
        .arg(&[
            "SETUSER", "locks", "on", ">pw", "~*", "&*", "+@all", "-wait",
        ])
        .query_async(&mut admin)
        .await
        .unwrap();
    let url = format!("redis://locks:pw@127.0.0.1:{}", primary.port());
    let client = LockClient::builder(url)
        .synced_replicas(1, WITHIN)
        .build()
        .await
        .unwrap();
    let lock = client.lock("synced:no-wait");
    let refused = lock.acquire().await;
    let text = refused.expect_err("WAIT is refused").to_string();
    assert!(
        text.contains("synced:no-wait") && text.contains("WAIT"),
        "{text}"
    );
    let key = lock.key().to_owned();
    common::until_key_gone(&admin, &key).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handle_waiting_for_more_replicas_does_not_hold_up_another() {
    let (primary, _replica) = primary_and_replica().await;
    let mut admin = common::raw(&primary.url()).await;
    let client = common::client(&primary).await;
    // Two replicas are asked for, one exists: this acquire's WAIT runs its whole 4 s.
    let greedy = client
        .lock("synced:two")
        .synced_replicas(2, Duration::from_secs(4));
    let blocked = tokio::spawn(async move { greedy.acquire().await.map(|_| ()) });
    common::eventually(Duration::from_secs(5), "a client blocked in WAIT", || {
        let mut admin = admin.clone();
        async move {
            let list: String = dlock::redis::cmd("CLIENT")
                .arg("LIST")
                .query_async(&mut admin)
                .await
                .unwrap();
            list.lines()
                .any(|l| l.contains("cmd=wait") && l.contains("flags=b"))
        }
    })
    .await;
    let started = Instant::now();
    let g = client
        .lock("synced:one")
        .synced_replicas(1, Duration::from_millis(1500))
        .acquire()
        .await
        .expect("one replica confirms");
    let took = started.elapsed();
    assert!(
        took < Duration::from_secs(3),
        "waited {took:?} behind the other handle's WAIT"
    );
    g.release().await.unwrap();
    let greedy = blocked.await.unwrap();
    assert!(
        matches!(
            greedy,
            Err(LockError::NotSynced {
                wanted: 2,
                acked: 1,
                ..
            })
        ),
        "{greedy:?}"
    );
    assert!(common::lock_keys(&mut admin).await.len() <= 1);
}
