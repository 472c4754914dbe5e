//! The read-write lock on a cluster: all its keys share the name's hash tag, so its scripts
//! run on the one master serving that slot (here one that is not the first).

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use dlock::redis::AsyncCommands;
use tokio::sync::Barrier;

use crate::{bounded, cluster_client, names_on_master, raw, shared_cluster};

/// On a name served by the second master: 4 readers over two clients hold at once (a barrier
/// inside the read section), a writer is refused while they hold; a waiting writer's claim
/// keeps a new reader out, it gets in when the readers leave, and while it holds no reader
/// gets in; a mixed run of writers (non-atomic increments) and readers (gauges sampled inside)
/// ends exact.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_overlap_and_a_writer_excludes_them_on_a_non_first_master() {
    const READERS: usize = 4;
    const ROUNDS: usize = 15;
    let cluster = shared_cluster();
    let a = cluster_client(cluster).await;
    let b = cluster_client(cluster).await;
    let port = cluster.masters().expect("masters")[1].port;
    let name = names_on_master(cluster, &a, "cluster:rw", port, 1).remove(0);
    let rw_a = a.read_write_lock(name.as_str());
    let rw_b = b.read_write_lock(name.as_str());
    let key = rw_a.write().key().to_owned();
    assert_eq!(cluster.master_for_key(&key).unwrap().port, port);
    assert_eq!(
        cluster
            .master_for_key(&format!("{key}:readers"))
            .unwrap()
            .port,
        port
    );

    // Readers overlap.
    let inside = Arc::new(Barrier::new(READERS + 1));
    let leave = Arc::new(Barrier::new(READERS + 1));
    let readers: Vec<_> = (0..READERS)
        .map(|i| {
            let read = if i % 2 == 0 { &rw_a } else { &rw_b }
                .read()
                .wait(Duration::from_secs(10));
            let (inside, leave) = (inside.clone(), leave.clone());
            tokio::spawn(async move {
                let g = read.acquire().await.expect("reader on the cluster");
                inside.wait().await;
                leave.wait().await;
                g.release().await.expect("reader release on the cluster");
            })
        })
        .collect();
    bounded(
        Duration::from_secs(10),
        "4 readers inside at once",
        inside.wait(),
    )
    .await;
    assert!(rw_a.write().try_acquire().await.unwrap().is_none());
    assert!(rw_b.write().try_acquire().await.unwrap().is_none());

    // A waiting writer keeps new readers out, and gets in when the readers leave.
    let writer = tokio::spawn({
        let write = rw_b.write().wait(Duration::from_secs(20));
        async move { write.acquire().await }
    });
    let mut conn = raw(cluster).await;
    let wwait = format!("{key}:wwait");
    let started = std::time::Instant::now();
    loop {
        let claimed: bool = conn.exists(&wwait).await.unwrap();
        if claimed {
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(10), "no claim");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert!(
        rw_a.read().try_acquire().await.unwrap().is_none(),
        "a new reader passed a waiting writer"
    );
    leave.wait().await;
    for r in readers {
        bounded(Duration::from_secs(10), "reader task", r)
            .await
            .unwrap();
    }
    let w = bounded(Duration::from_secs(5), "the waiting writer", writer)
        .await
        .unwrap()
        .expect("the writer gets in");
    assert!(rw_a.read().try_acquire().await.unwrap().is_none());
    assert!(rw_a.write().try_acquire().await.unwrap().is_none());
    w.release().await.unwrap();

    // Mixed run: 2 clients x (1 writer + 1 reader) x ROUNDS.
    let counter = format!("{{{name}}}:n");
    let readers_in = Arc::new(AtomicI64::new(0));
    let writers_in = Arc::new(AtomicI64::new(0));
    let mut tasks = Vec::new();
    for rw in [&rw_a, &rw_b] {
        let write = rw.write().wait(Duration::from_secs(30));
        let (r_in, w_in, counter) = (readers_in.clone(), writers_in.clone(), counter.clone());
        let mut conn = raw(cluster).await;
        tasks.push(tokio::spawn(async move {
            for _ in 0..ROUNDS {
                let g = write.acquire().await.expect("writer on the cluster");
                assert_eq!(w_in.fetch_add(1, Ordering::SeqCst), 0, "two writers");
                assert_eq!(r_in.load(Ordering::SeqCst), 0, "a reader beside a writer");
                let n: Option<u64> = conn.get(&counter).await.unwrap();
                tokio::task::yield_now().await;
                let _: () = conn.set(&counter, n.unwrap_or(0) + 1).await.unwrap();
                w_in.fetch_sub(1, Ordering::SeqCst);
                g.release().await.expect("writer release");
            }
        }));
        let read = rw.read().wait(Duration::from_secs(30));
        let (r_in, w_in) = (readers_in.clone(), writers_in.clone());
        tasks.push(tokio::spawn(async move {
            for _ in 0..ROUNDS {
                let g = read.acquire().await.expect("reader on the cluster");
                r_in.fetch_add(1, Ordering::SeqCst);
                assert_eq!(w_in.load(Ordering::SeqCst), 0, "a writer beside a reader");
                tokio::task::yield_now().await;
                assert_eq!(w_in.load(Ordering::SeqCst), 0, "a writer beside a reader");
                r_in.fetch_sub(1, Ordering::SeqCst);
                g.release().await.expect("reader release");
            }
        }));
    }
    bounded(
        Duration::from_secs(60),
        "the mixed run",
        futures_util::future::try_join_all(tasks),
    )
    .await
    .unwrap();
    let n: u64 = conn.get(&counter).await.unwrap();
    assert_eq!(n, 2 * ROUNDS as u64, "lost or doubled updates");
    assert!(!rw_a.write().is_locked().await.unwrap());
}
