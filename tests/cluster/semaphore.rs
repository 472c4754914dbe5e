//! The semaphore with expiring permits on a cluster, its keys on a master other than the
//! first seed: acquire, available, release, a waiter woken across nodes, watchdog renewals.

use std::time::{Duration, Instant};

use crate::{bounded, cluster_client, names_on_master, shared_cluster, until_subscribed};

const STEP: Duration = Duration::from_secs(30);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_semaphore_on_a_non_first_master_takes_counts_renews_and_wakes() {
    let cluster = shared_cluster();
    let holder = cluster_client(cluster).await;
    let other = cluster_client(cluster).await;
    let master = cluster.masters().expect("masters")[1].port;
    let name = names_on_master(cluster, &holder, "cluster:sem", master, 1).remove(0);
    let key = format!("dlock:{{{name}}}:sem");
    assert_eq!(cluster.master_for_key(&key).expect("master").port, master);

    // Short leases, held for several of them: the watchdog renews permits per slot here.
    let sem = holder
        .semaphore(name.as_str(), 2)
        .ttl(Duration::from_millis(300));
    let theirs = other.semaphore(name.as_str(), 2).wait(STEP);
    assert_eq!(
        bounded(STEP, "available", sem.available()).await.unwrap(),
        2
    );
    let a = bounded(STEP, "acquire", sem.acquire()).await.unwrap();
    assert_eq!(sem.available().await.unwrap(), 1);
    let b = bounded(STEP, "acquire", sem.acquire()).await.unwrap();
    assert_eq!(sem.available().await.unwrap(), 0);
    assert!(theirs.try_acquire().await.unwrap().is_none());

    let waiter = tokio::spawn({
        let theirs = theirs.clone();
        async move { theirs.acquire().await }
    });
    until_subscribed(cluster, &format!("{key}:chan")).await;
    let started = Instant::now();
    let mut checks = 0;
    // Four leases; bounded in count and time.
    while started.elapsed() < Duration::from_millis(1200) && checks < 30 {
        assert!(
            !a.is_lost() && !b.is_lost(),
            "lost after {:?}",
            started.elapsed()
        );
        assert!(
            !waiter.is_finished(),
            "a permit was free after {:?}",
            started.elapsed()
        );
        checks += 1;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(checks >= 5, "only {checks} checks");

    a.release().await.expect("still ours after four leases");
    let got = bounded(STEP, "the waiter", waiter)
        .await
        .unwrap()
        .expect("the waiter got the released permit");
    assert_eq!(sem.available().await.unwrap(), 0);
    b.release().await.unwrap();
    got.release().await.unwrap();
    assert_eq!(theirs.available().await.unwrap(), 2);
}
