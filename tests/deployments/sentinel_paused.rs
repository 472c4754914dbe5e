//! A Sentinel primary paused past `down-after-milliseconds` (SIGSTOP, or a DEBUG SLEEP): the
//! sentinels promote its replica, and the old primary wakes up still calling itself master and
//! accepting writes until they reconfigure it, seconds later. A client must not lock on it
//! then, nor believe a grant it sends after the promotion: another client, on the new primary,
//! can take the same lock.

use crate::common;

use std::time::{Duration, Instant};

use dlock::testing::RedisSentinel;
use dlock::LockClient;

/// How long the old primary stays paused after the promotion: long enough for a client that
/// listens to the sentinels to have moved, short enough that it wakes as a master.
const AFTER_PROMOTION: Duration = Duration::from_millis(300);

async fn client(s: &RedisSentinel, response_timeout: Duration) -> LockClient {
    LockClient::sentinel_builder(s.sentinel_urls(), s.master_name())
        .response_timeout(response_timeout)
        .build()
        .await
        .expect("connect through the sentinels")
}

/// SIGSTOPs the primary until the sentinels have promoted its replica, then `AFTER_PROMOTION`
/// more, and resumes it. Returns the old and the new primary's URLs.
async fn pause_through_a_promotion(s: &RedisSentinel) -> (String, String) {
    let old = s.master_url().unwrap();
    let stopped = common::Stopped::stop(s.master_pid().unwrap());
    let new = tokio::task::block_in_place(|| s.wait_for_new_master(&old))
        .expect("the sentinels promote the replica of the paused primary");
    // Time is the subject here: the old primary must wake after the promotion.
    tokio::time::sleep(AFTER_PROMOTION).await;
    drop(stopped); // SIGCONT
    (old, new)
}

/// The first element of ROLE on `url`.
async fn role(url: &str) -> String {
    let mut conn = common::raw(url).await;
    let role: Vec<dlock::redis::Value> = dlock::redis::cmd("ROLE")
        .query_async(&mut conn)
        .await
        .expect("ROLE");
    match role.first() {
        Some(dlock::redis::Value::BulkString(r)) => String::from_utf8_lossy(r).into_owned(),
        other => format!("{other:?}"),
    }
}

/// Warms the client (its library and connections) with one acquire and release.
async fn warm(client: &LockClient) {
    client
        .lock("paused:warm")
        .acquire()
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_of_a_paused_primary_locks_on_the_new_one_once_it_is_promoted() {
    let s = RedisSentinel::start().expect("start primary, replica and sentinels");
    let a = client(&s, Duration::from_secs(2)).await;
    warm(&a).await;

    let (old, new) = pause_through_a_promotion(&s).await;
    // The test means something only while the old primary still takes writes.
    assert_eq!(
        role(&old).await,
        "master",
        "the old primary was already demoted"
    );

    let started = Instant::now();
    let mut last = None;
    let held = loop {
        assert!(
            started.elapsed() < Duration::from_secs(15),
            "no acquire within 15 s: {last:?}"
        );
        match a
            .lock("paused:order")
            .wait(Duration::from_secs(2))
            .acquire()
            .await
        {
            Ok(g) => break g,
            Err(e) => last = Some(e),
        }
    };
    let key = a.lock("paused:order").key().to_owned();
    // At this moment `held` believes it holds the lock: nobody may take it on the new primary.
    let b = client(&s, Duration::from_secs(2)).await;
    let other = b.lock("paused:order").try_acquire().await.unwrap();
    let mut on_new = common::raw(&new).await;
    assert!(
        other.is_none() || held.is_lost(),
        "another client took the lock on the new primary {new} while the client of the \
         paused one ({old}) believes it holds it: {}",
        common::describe_lock(&mut on_new, &key).await
    );
    let exists: bool = dlock::redis::cmd("EXISTS")
        .arg(&key)
        .query_async(&mut on_new)
        .await
        .unwrap();
    assert!(exists, "the hold is not on the new primary {new}");
    held.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_the_paused_primary_sends_after_the_promotion_is_not_believed() {
    let s = RedisSentinel::start().expect("start primary, replica and sentinels");
    // A response timeout longer than the pause: the in-flight acquire's reply is awaited, not
    // dropped by the client, so what decides is whether it is believed.
    let a = client(&s, Duration::from_secs(20)).await;
    warm(&a).await;
    let old = s.master_url().unwrap();
    let mut old_admin = common::raw(&old).await;
    let fcalls_before = common::command_calls(&mut old_admin).await;

    let stopped = common::Stopped::stop(s.master_pid().unwrap());
    // Sent to the paused primary: it waits in its socket until the primary wakes.
    let in_flight = tokio::spawn({
        let lock = a.lock("paused:inflight").wait(Duration::from_secs(20));
        async move { lock.acquire().await }
    });
    let new = tokio::task::block_in_place(|| s.wait_for_new_master(&old))
        .expect("the sentinels promote the replica of the paused primary");
    let b = client(&s, Duration::from_secs(2)).await;
    let b_guard = b
        .lock("paused:inflight")
        .ttl(Duration::from_secs(30))
        .try_acquire()
        .await
        .unwrap()
        .expect("the lock is free on the new primary");
    tokio::time::sleep(AFTER_PROMOTION).await;
    drop(stopped); // SIGCONT: the old primary runs the acquire and answers it
    assert_eq!(
        role(&old).await,
        "master",
        "the old primary was already demoted"
    );

    let outcome = tokio::time::timeout(Duration::from_secs(30), in_flight)
        .await
        .expect("the in-flight acquire ends within 30 s")
        .unwrap();
    // The moment that matters: the reply has arrived. Does `a` believe it holds the lock that
    // `b` holds on the new primary?
    if let Ok(g) = &outcome {
        let mut on_new = common::raw(&new).await;
        assert!(
            g.is_lost() || b_guard.is_lost(),
            "both clients believe they hold the lock: a by a grant of the old primary {old}, \
             b on the new primary {new} ({})",
            common::describe_lock(&mut on_new, a.lock("paused:inflight").key()).await
        );
    }
    // And the run meant something: the old primary did execute the acquire.
    let fcalls_after = common::command_calls(&mut old_admin).await;
    let ran = common::script_calls_between(&fcalls_before, &fcalls_after);
    assert!(
        ran.values().sum::<u64>() >= 1,
        "the old primary ran no script: {ran:?}"
    );
    println!("in-flight acquire through the promotion: {outcome:?}");
    assert!(!b_guard.is_lost());
    b_guard.release().await.unwrap();
}

/// The promoted replica lacks a hold (wiped from it before the promotion, as a replica that
/// missed the write would): the holder is told as soon as its client switches, not at its next
/// scheduled renewal, which the paused old primary, awake again, would still have answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hold_the_promoted_replica_lacks_is_lost_as_soon_as_the_client_switches() {
    let s = RedisSentinel::start().expect("start primary, replica and sentinels");
    let a = client(&s, Duration::from_secs(2)).await;
    warm(&a).await;
    let lock = a.lock("paused:missed").ttl(Duration::from_secs(45));
    let held = lock.acquire().await.unwrap();
    let key = lock.key().to_owned();

    // The replica gets the hold, then loses it: writable for a moment, the key deleted there.
    let replica_port = replica_port(&s).await;
    let replica_url = format!("redis://127.0.0.1:{replica_port}");
    let mut replica = common::raw(&replica_url).await;
    common::eventually(Duration::from_secs(10), "the replica has the hold", || {
        let mut r = replica.clone();
        let key = key.clone();
        async move {
            dlock::redis::cmd("EXISTS")
                .arg(&key)
                .query_async::<bool>(&mut r)
                .await
                .unwrap()
        }
    })
    .await;
    let _: () = dlock::redis::cmd("CONFIG")
        .arg(&["SET", "replica-read-only", "no"])
        .query_async(&mut replica)
        .await
        .unwrap();
    let _: i64 = dlock::redis::cmd("DEL")
        .arg(&key)
        .query_async(&mut replica)
        .await
        .unwrap();

    let told = tokio::spawn({
        let lost = held.lost();
        async move {
            lost.await;
            Instant::now()
        }
    });
    let old = s.master_url().unwrap();
    let stopped = common::Stopped::stop(s.master_pid().unwrap());
    let new = tokio::task::block_in_place(|| s.wait_for_new_master(&old))
        .expect("the sentinels promote the replica of the paused primary");
    assert_eq!(new, replica_url);
    let b = client(&s, Duration::from_secs(2)).await;
    let other = b
        .lock("paused:missed")
        .try_acquire()
        .await
        .unwrap()
        .expect("the new primary lacks the hold");
    let b_acquired = Instant::now();
    tokio::time::sleep(AFTER_PROMOTION).await;
    drop(stopped);

    // Its 45 s lease is far from over, and the old primary, awake, still has the key: only the
    // new primary can tell the holder, at the switch.
    let told = tokio::time::timeout(Duration::from_secs(2), told)
        .await
        .expect("the holder is told within 2 s of the other client's acquire")
        .unwrap();
    let gap = |a: Instant, b: Instant| {
        if a >= b {
            format!("{:?} after", a - b)
        } else {
            format!("{:?} before", b - a)
        }
    };
    println!(
        "hold missed by the promoted replica: the holder was told {} the other client acquired",
        gap(told, b_acquired)
    );
    other.release().await.unwrap();
}

/// The port of the replica (the data node that is not the primary).
async fn replica_port(s: &RedisSentinel) -> u16 {
    let mut primary = common::raw(&s.master_url().unwrap()).await;
    let info: String = dlock::redis::cmd("INFO")
        .arg("replication")
        .query_async(&mut primary)
        .await
        .unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix("slave0:"))
        .and_then(|l| l.split(',').find_map(|f| f.strip_prefix("port=")))
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("no replica in INFO replication: {info}"))
}

/// After the switch the waiters' subscriber listens on the new primary, where releases are now
/// published: with it left on the old primary (awake and answering), a waiter would sleep
/// until the holder's lease ran out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_of_a_client_that_switched_is_woken_by_a_release_on_the_new_primary() {
    let s = RedisSentinel::start().expect("start primary, replica and sentinels");
    let a = client(&s, Duration::from_secs(2)).await;
    warm(&a).await;
    let (_old, new) = pause_through_a_promotion(&s).await;

    let b = client(&s, Duration::from_secs(2)).await;
    let held = b
        .lock("paused:wake")
        .ttl(Duration::from_secs(30))
        .acquire()
        .await
        .unwrap();
    let mut on_new = common::raw(&new).await;
    let scripts_before = common::script_calls(&mut on_new).await;
    let waiter = tokio::spawn({
        let lock = a.lock("paused:wake").wait(Duration::from_secs(25));
        async move {
            let g = lock.acquire().await;
            (g, Instant::now())
        }
    });
    // Parked: subscribed on the new primary, and its try and its retry refused there.
    let channel = format!("{}:chan", a.lock("paused:wake").key());
    common::eventually(
        Duration::from_secs(10),
        "the waiter subscribed on the new primary and refused twice",
        || {
            let (mut conn, channel) = (on_new.clone(), channel.clone());
            async move {
                let (_, subs): (String, i64) = dlock::redis::cmd("PUBSUB")
                    .arg("NUMSUB")
                    .arg(&channel)
                    .query_async(&mut conn)
                    .await
                    .unwrap();
                subs >= 1 && common::script_calls(&mut conn).await >= scripts_before + 2
            }
        },
    )
    .await;
    held.release().await.unwrap();
    let released = Instant::now();
    let (g, acquired) = tokio::time::timeout(Duration::from_secs(25), waiter)
        .await
        .expect("the waiter ends within its wait")
        .unwrap();
    let g = g.expect("the waiter gets the lock");
    let woke_after = acquired - released;
    println!("waiter woken {woke_after:?} after the release on the new primary");
    // The holder's lease was 30 s: a waiter that missed the release sleeps for most of it.
    assert!(
        woke_after < Duration::from_secs(5),
        "woken only {woke_after:?} after the release"
    );
    g.release().await.unwrap();
}
