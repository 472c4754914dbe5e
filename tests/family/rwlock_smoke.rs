//! Smoke checks of the read-write lock (the full suite is rwlock.rs).

use crate::common;

use std::time::Duration;

use dlock::LockError;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_share_writers_exclude_downgrade_and_upgrade() {
    let server = common::server();
    let a = common::client(&server).await;
    let b = common::client(&server).await;
    let rw_a = a.read_write_lock("prices");
    let rw_b = b.read_write_lock("prices");

    let r1 = rw_a.read().acquire().await.unwrap();
    let r2 = rw_b
        .read()
        .wait(Duration::ZERO)
        .acquire()
        .await
        .expect("readers share");
    assert!(
        rw_b.write().try_acquire().await.unwrap().is_none(),
        "a writer waits for readers"
    );
    // A try that gave up left no claim: readers still join.
    let r3 = rw_a
        .read()
        .wait(Duration::ZERO)
        .acquire()
        .await
        .expect("no claim left");
    r3.release().await.unwrap();
    let writer = tokio::spawn({
        let w = rw_b.write().wait(Duration::from_secs(10));
        async move { w.acquire().await.map(|g| g.fencing_token()) }
    });
    let raw = common::raw(&server.url()).await;
    common::eventually(Duration::from_secs(5), "the writer's claim", || {
        let mut raw = raw.clone();
        async move {
            redis::cmd("EXISTS")
                .arg("dlock:{prices}:rw:wwait")
                .query_async::<i64>(&mut raw)
                .await
                .unwrap()
                == 1
        }
    })
    .await;
    // The waiting writer keeps new readers out.
    assert!(
        rw_a.read().try_acquire().await.unwrap().is_none(),
        "a new reader queues behind a waiting writer"
    );
    let up = r1
        .scope(async { rw_a.write().wait(Duration::from_secs(5)).acquire().await })
        .await;
    assert!(matches!(up, Err(LockError::WouldDeadlock { .. })), "{up:?}");
    r1.release().await.unwrap();
    r2.release().await.unwrap();
    writer
        .await
        .unwrap()
        .expect("the writer gets in once the readers left");
    // The writer task dropped its guard: released in the background.
    common::until_unlocked(&rw_a.write(), Duration::from_secs(5)).await;

    let w = rw_a
        .write()
        .wait(Duration::from_secs(3))
        .acquire()
        .await
        .unwrap();
    let token = w.fencing_token();
    assert!(rw_b.read().try_acquire().await.unwrap().is_none());
    let read = w
        .scope(async { rw_a.read().wait(Duration::ZERO).acquire().await })
        .await
        .expect("downgrade");
    assert_eq!(read.fencing_token(), token);
    w.release().await.unwrap();
    // Still reading: other readers join, writers wait.
    let other = rw_b
        .read()
        .wait(Duration::from_secs(3))
        .acquire()
        .await
        .expect("reader after downgrade");
    assert!(rw_b.write().try_acquire().await.unwrap().is_none());
    read.release().await.unwrap();
    other.release().await.unwrap();
    assert!(!rw_a.write().is_locked().await.unwrap());
    let w2 = rw_b
        .write()
        .wait(Duration::from_secs(3))
        .acquire()
        .await
        .unwrap();
    assert!(w2.fencing_token() > token);
    w2.release().await.unwrap();
}
