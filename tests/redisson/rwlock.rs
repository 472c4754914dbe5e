//! `client.redisson_read_write_lock` against the Java side's RReadWriteLock on one server.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::common;
use crate::java::{parked_java_waiter, JavaClient, Side};
use crate::lock::{
    all_keys, assert_redisson_field, bump, hgetall, keys_kept_forever, only_redisson_keys, pttl,
    wait_subscribed, WOKEN_WITHIN,
};

#[tokio::test]
async fn the_layout_is_redissons_for_readers_writers_reentry_and_downgrade() {
    let server = common::server();
    let client = common::client(&server).await;
    let mut conn = common::raw(&server.url()).await;
    let java = JavaClient::single(&server.url(), Duration::from_secs(30)).await;
    let rw = client.redisson_read_write_lock("prices");
    assert_eq!(rw.read().key(), "prices");
    assert_eq!(rw.write().channel(), "redisson_rwlock:{prices}");

    // A dlock reader: mode read, its field, one hold timeout with the lease.
    let r = rw.read().acquire().await.unwrap();
    let fields = hgetall(&mut conn, "prices").await;
    assert_eq!(fields.len(), 2, "{fields:?}");
    assert_eq!(fields[1], ("mode".to_owned(), "read".to_owned()));
    let (uuid, chain) = assert_redisson_field(&fields[0].0);
    let timeout = format!("{{prices}}:{uuid}:{chain}:rwlock_timeout:1");
    let ttl = pttl(&mut conn, &timeout).await;
    assert!((29_000..=30_000).contains(&ttl), "{timeout}: {ttl}");

    // A Java reader joins at once; both hold.
    assert!(
        java.try_lock("prices", 1, Side::Read, Duration::ZERO, None)
            .await
    );
    let fields = hgetall(&mut conn, "prices").await;
    assert!(
        fields.contains(&(format!("{}:1", java.uuid), "1".to_owned())),
        "{fields:?}"
    );
    assert_eq!(fields.len(), 3, "{fields:?}");
    only_redisson_keys(&mut conn, &["prices"]).await;
    // No writer on either side while readers hold.
    assert!(rw.write().try_acquire().await.unwrap().is_none());
    assert!(
        !java
            .try_lock("prices", 2, Side::Write, Duration::ZERO, None)
            .await
    );

    assert_eq!(java.unlock("prices", 1, Side::Read).await, Ok(false));
    r.release().await.unwrap();
    assert!(all_keys(&mut conn)
        .await
        .iter()
        .all(|k| !k.contains("rwlock_timeout")));
    assert!(hgetall(&mut conn, "prices").await.is_empty());

    // A dlock writer, re-entered and downgraded inside its scope.
    let w = rw.write().acquire().await.unwrap();
    let fields = hgetall(&mut conn, "prices").await;
    assert_eq!(fields.len(), 2, "{fields:?}");
    let writer = fields[0].0.clone();
    assert!(writer.ends_with(":write"), "{writer}");
    assert_redisson_field(writer.trim_end_matches(":write"));
    assert_eq!(fields[1], ("mode".to_owned(), "write".to_owned()));
    assert!(
        !java
            .try_lock("prices", 1, Side::Read, Duration::ZERO, None)
            .await
    );
    let (rw2, url, writer2) = (rw.clone(), server.url(), writer.clone());
    let read_inside = w
        .scope(async move {
            let mut conn = common::raw(&url).await;
            let again = rw2.write().acquire().await.unwrap();
            let f = hgetall(&mut conn, "prices").await;
            assert!(f.contains(&(writer2.clone(), "2".to_owned())), "{f:?}");
            again.release().await.unwrap();
            // The writer reads as itself (Redisson lets a write holder take the read side).
            let r = rw2.read().acquire().await.unwrap();
            let f = hgetall(&mut conn, "prices").await;
            let reader = writer2.trim_end_matches(":write").to_owned();
            assert!(f.contains(&(reader, "1".to_owned())), "{f:?}");
            r
        })
        .await;
    w.release().await.unwrap();
    // The writer left, its read remains: the lock is read now, and Java readers join.
    let fields = hgetall(&mut conn, "prices").await;
    assert!(
        fields.contains(&("mode".to_owned(), "read".to_owned())),
        "{fields:?}"
    );
    assert!(
        java.try_lock("prices", 1, Side::Read, Duration::ZERO, None)
            .await
    );
    read_inside.release().await.unwrap();
    assert_eq!(java.unlock("prices", 1, Side::Read).await, Ok(true));
    assert!(all_keys(&mut conn)
        .await
        .iter()
        .all(|k| k.starts_with("redisson_")));
}

/// Java's `RReadWriteLock` keeps nothing of a released lock but latches that expire; dlock's
/// Redisson read-write lock must not keep more (issue 28, defect 6: it INCRed a token counter
/// per name that nothing expired).
#[tokio::test]
async fn released_redisson_read_write_locks_leave_no_key_that_never_expires() {
    let server = common::server();
    let client = common::client(&server).await;
    let mut conn = common::raw(&server.url()).await;
    for id in 0..20 {
        let rw = client.redisson_read_write_lock(format!("prices:{id}"));
        rw.read().acquire().await.unwrap().release().await.unwrap();
        let w = rw.write().acquire().await.unwrap();
        // A downgrade inside the writer's scope, released after the writer.
        let read = rw.read();
        let r = w.scope(async move { read.acquire().await.unwrap() }).await;
        w.release().await.unwrap();
        r.release().await.unwrap();
    }
    let forever = keys_kept_forever(&mut conn).await;
    assert!(forever.is_empty(), "keys that never expire: {forever:?}");
}

#[tokio::test]
async fn a_writer_on_either_side_excludes_readers_and_writers_of_both() {
    let server = common::server();
    let client = common::client(&server).await;
    let java = JavaClient::single(&server.url(), Duration::from_secs(30)).await;
    let rw = client.redisson_read_write_lock("doc");

    let w = rw.write().acquire().await.unwrap();
    assert!(
        !java
            .try_lock("doc", 1, Side::Read, Duration::ZERO, None)
            .await
    );
    assert!(
        !java
            .try_lock("doc", 1, Side::Write, Duration::ZERO, None)
            .await
    );
    let other = common::client(&server)
        .await
        .redisson_read_write_lock("doc");
    assert!(other.read().try_acquire().await.unwrap().is_none());
    assert!(other.write().try_acquire().await.unwrap().is_none());
    w.release().await.unwrap();

    assert!(
        java.try_lock("doc", 1, Side::Write, Duration::ZERO, None)
            .await
    );
    assert!(rw.read().try_acquire().await.unwrap().is_none());
    assert!(rw.write().try_acquire().await.unwrap().is_none());
    assert!(
        !java
            .try_lock("doc", 2, Side::Read, Duration::ZERO, None)
            .await
    );
    assert_eq!(java.unlock("doc", 1, Side::Write).await, Ok(true));

    // Readers of both sides overlap.
    let r = rw.read().acquire().await.unwrap();
    assert!(
        java.try_lock("doc", 1, Side::Read, Duration::ZERO, None)
            .await
    );
    let r2 = other
        .read()
        .try_acquire()
        .await
        .unwrap()
        .expect("a second dlock reader");
    assert!(
        java.try_lock("doc", 2, Side::Read, Duration::ZERO, None)
            .await
    );
    for g in [r, r2] {
        g.release().await.unwrap();
    }
    assert_eq!(java.unlock("doc", 1, Side::Read).await, Ok(false));
    assert_eq!(java.unlock("doc", 2, Side::Read).await, Ok(true));
}

/// Writers of both sides increment a counter non-atomically while readers of both sides
/// check that no writer is inside with them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writers_of_both_sides_never_overlap_each_other_or_readers() {
    const ROUNDS: usize = 15;
    let server = common::server();
    let client = common::client(&server).await;
    let java = Arc::new(JavaClient::single(&server.url(), Duration::from_secs(30)).await);
    let writing = Arc::new(AtomicUsize::new(0));
    let reads = Arc::new(AtomicUsize::new(0));
    let rw = client.redisson_read_write_lock("counter");
    let wait = Duration::from_secs(30);
    let mut tasks = Vec::new();
    for t in 0..2u64 {
        {
            let (java, writing, url) = (java.clone(), writing.clone(), server.url());
            tasks.push(tokio::spawn(async move {
                let mut conn = common::raw(&url).await;
                for _ in 0..ROUNDS {
                    assert!(java.try_lock("counter", t, Side::Write, wait, None).await);
                    bump(&mut conn, &writing).await;
                    assert_eq!(java.unlock("counter", t, Side::Write).await, Ok(true));
                }
            }));
        }
        {
            let (java, writing, reads) = (java.clone(), writing.clone(), reads.clone());
            tasks.push(tokio::spawn(async move {
                for _ in 0..ROUNDS {
                    assert!(
                        java.try_lock("counter", 10 + t, Side::Read, wait, None)
                            .await
                    );
                    assert_eq!(
                        writing.load(Ordering::SeqCst),
                        0,
                        "a writer beside a Java reader"
                    );
                    reads.fetch_add(1, Ordering::SeqCst);
                    tokio::task::yield_now().await;
                    assert!(java.unlock("counter", 10 + t, Side::Read).await.is_ok());
                }
            }));
        }
        {
            let (write, writing, url) = (rw.write().wait(wait), writing.clone(), server.url());
            tasks.push(tokio::spawn(async move {
                let mut conn = common::raw(&url).await;
                for _ in 0..ROUNDS {
                    let g = write.acquire().await.unwrap();
                    bump(&mut conn, &writing).await;
                    g.release().await.unwrap();
                }
            }));
        }
        {
            let (read, writing, reads) = (rw.read().wait(wait), writing.clone(), reads.clone());
            tasks.push(tokio::spawn(async move {
                for _ in 0..ROUNDS {
                    let g = read.acquire().await.unwrap();
                    assert_eq!(
                        writing.load(Ordering::SeqCst),
                        0,
                        "a writer beside a dlock reader"
                    );
                    reads.fetch_add(1, Ordering::SeqCst);
                    tokio::task::yield_now().await;
                    g.release().await.unwrap();
                }
            }));
        }
    }
    for t in tasks {
        t.await.unwrap();
    }
    let mut conn = common::raw(&server.url()).await;
    let n: usize = dlock::redis::cmd("GET")
        .arg("counter:value")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(n, 4 * ROUNDS, "lost updates: writers overlapped");
    assert_eq!(reads.load(Ordering::SeqCst), 4 * ROUNDS);
}

/// A Java writer's unlock (message 1) wakes a dlock reader; a dlock writer's release wakes a
/// Java reader.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writers_releases_wake_readers_of_the_other_side() {
    let server = common::server();
    let client = common::client(&server).await;
    let java = Arc::new(JavaClient::single(&server.url(), Duration::from_secs(30)).await);
    let rw = client.redisson_read_write_lock("wake");

    assert!(
        java.try_lock("wake", 1, Side::Write, Duration::ZERO, None)
            .await
    );
    let reader = tokio::spawn({
        let read = rw.read().wait(Duration::from_secs(20));
        async move {
            let g = read.acquire().await.unwrap();
            (Instant::now(), g)
        }
    });
    wait_subscribed("redisson_rwlock:{wake}", &java).await;
    let released = Instant::now();
    assert_eq!(java.unlock("wake", 1, Side::Write).await, Ok(true));
    let (got, g) = reader.await.unwrap();
    assert!(got - released < WOKEN_WITHIN, "{:?}", got - released);
    g.release().await.unwrap();

    let w = rw.write().acquire().await.unwrap();
    let java_reader = parked_java_waiter(&java, "wake", 2, Side::Read).await;
    let released = Instant::now();
    w.release().await.unwrap();
    let (got, ok) = java_reader.await.unwrap();
    assert!(ok);
    assert!(got - released < WOKEN_WITHIN, "{:?}", got - released);
    assert_eq!(java.unlock("wake", 2, Side::Read).await, Ok(true));
}
