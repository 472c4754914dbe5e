//! Locks on a cluster: exclusion across masters, reentrancy, fencing, force-unlock, waiters.

use std::time::{Duration, Instant};

use dlock::redis::AsyncCommands;

use crate::{cluster_client, raw, shared_cluster};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_clients_keep_64_counters_over_every_master_exact() {
    const KEYS: usize = 64;
    const ROUNDS: usize = 10;
    let cluster = shared_cluster();
    let masters: std::collections::BTreeSet<u16> = (0..KEYS)
        .map(|k| {
            cluster
                .master_for_key(&format!("dlock:{{cluster:counter:{k}}}"))
                .expect("master for key")
                .port
        })
        .collect();
    assert_eq!(
        masters.len(),
        3,
        "the 64 lock keys must spread over all 3 masters"
    );
    let a = cluster_client(cluster).await;
    let b = cluster_client(cluster).await;
    let work = |client: dlock::LockClient| async move {
        let mut conn = raw(shared_cluster()).await;
        for _ in 0..ROUNDS {
            for k in 0..KEYS {
                let name = format!("cluster:counter:{k}");
                let guard = client
                    .lock(name.as_str())
                    .wait(Duration::from_secs(20))
                    .acquire()
                    .await
                    .expect("acquire on the cluster");
                // Non-atomic read-modify-write: only the lock keeps it exact.
                let n: Option<u64> = conn.get(format!("{{{name}}}:n")).await.unwrap();
                tokio::task::yield_now().await;
                let _: () = conn
                    .set(format!("{{{name}}}:n"), n.unwrap_or(0) + 1)
                    .await
                    .unwrap();
                guard.release().await.expect("release on the cluster");
            }
        }
    };
    let (ra, rb) = tokio::join!(tokio::spawn(work(a)), tokio::spawn(work(b)));
    ra.unwrap();
    rb.unwrap();
    let mut conn = raw(cluster).await;
    for k in 0..KEYS {
        let n: u64 = conn
            .get(format!("{{cluster:counter:{k}}}:n"))
            .await
            .unwrap();
        assert_eq!(
            n,
            2 * ROUNDS as u64,
            "counter {k} lost or doubled an update"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reentry_fencing_and_force_unlock_work_on_a_cluster() {
    let client = cluster_client(shared_cluster()).await;
    let lock = client.lock("cluster:reentry");
    let outer = lock.acquire().await.unwrap();
    let t1 = outer.fencing_token();
    let inner = outer
        .scope(async { lock.acquire().await })
        .await
        .expect("re-entry on a cluster");
    assert_eq!(inner.hold_count(), 2);
    inner.release().await.unwrap();
    outer.release().await.unwrap();
    let again = lock.acquire().await.unwrap();
    assert!(again.fencing_token() > t1, "tokens must rise on a cluster");
    assert!(lock.force_unlock().await.unwrap());
    assert!(!lock.is_locked().await.unwrap());
    assert!(matches!(
        again.release().await,
        Err(dlock::LockError::NotHeld { .. })
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_on_every_master_are_woken_by_the_release_not_the_ttl() {
    let cluster = shared_cluster();
    let holder = cluster_client(cluster).await;
    let waiter = cluster_client(cluster).await;
    // One lock per master, so releases are published on every node.
    let mut names = Vec::new();
    let mut seen = std::collections::BTreeSet::new();
    for i in 0..200 {
        let name = format!("cluster:wake:{i}");
        let port = cluster
            .master_for_key(holder.lock(name.as_str()).key())
            .unwrap()
            .port;
        if seen.insert(port) {
            names.push(name);
        }
    }
    assert_eq!(names.len(), 3);
    for name in &names {
        let ttl = Duration::from_secs(20);
        let g = holder.lock(name.as_str()).ttl(ttl).acquire().await.unwrap();
        let w = waiter.lock(name.as_str()).wait(Duration::from_secs(30));
        let started = Instant::now();
        let waiting =
            tokio::spawn(async move { w.acquire().await.map(|g| (g, started.elapsed())) });
        // The waiter found the lock held and subscribed: now a release must wake it.
        crate::until_subscribed(cluster, holder.lock(name.as_str()).channel()).await;
        let released = Instant::now();
        g.release().await.unwrap();
        let (g2, _) = waiting.await.unwrap().expect("waiter acquires");
        let woken_after = released.elapsed();
        println!("{name}: waiter held {woken_after:?} after the release");
        assert!(
            woken_after < Duration::from_secs(5),
            "woken by the TTL, not the release"
        );
        g2.release().await.unwrap();
    }
}
