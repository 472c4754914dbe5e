//! Replica-synced acquires after the same client's written release.

use std::time::{Duration, Instant};

use super::bounded;
use crate::common;
use dlock::{LockClient, LockError};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_synced_acquire_sees_the_same_clients_written_release() {
    let (primary, _replica) = crate::synced::primary_and_replica().await;
    let client = LockClient::builder(primary.url())
        .synced_replicas(1, Duration::from_secs(1))
        .build()
        .await
        .unwrap();
    let lock = client.lock("synced:written");
    common::until_synced_acquire(&lock).await;
    let rounds = 300;
    let started = Instant::now();
    let mut busy = Vec::new();
    for round in 0..rounds {
        assert!(
            started.elapsed() < Duration::from_secs(25),
            "round {round}: out of time"
        );
        let g = bounded("acquire", lock.acquire()).await.unwrap();
        g.release_written().await;
        match bounded("try_acquire", lock.try_acquire()).await.unwrap() {
            Some(g) => g.release().await.unwrap(),
            None => busy.push(round),
        }
    }
    println!(
        "{} of {rounds} rounds found the lock busy after release_written ({:?})",
        busy.len(),
        started.elapsed()
    );
    assert!(
        busy.is_empty(),
        "{} of {rounds} rounds: the synced try_acquire found the lock busy right after this \
         client's release_written (rounds {:?}...)",
        busy.len(),
        &busy[..busy.len().min(10)]
    );
}

#[dlock::distributed_lock(
    key = "synced:job",
    client = locks,
    ttl = "30s",
    wait = "0s",
    on_busy = "skip"
)]
async fn synced_job(locks: &LockClient) -> Result<Option<()>, LockError> {
    Ok(Some(()))
}

/// A skipping job run again and again by one task of a synced client is never skipped: the
/// only holder it could meet is its own previous run, whose release was written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_skipping_synced_job_is_never_skipped_by_its_own_last_run() {
    let (primary, _replica) = crate::synced::primary_and_replica().await;
    let client = LockClient::builder(primary.url())
        .synced_replicas(1, Duration::from_secs(1))
        .build()
        .await
        .unwrap();
    common::until_synced_acquire(&client.lock("synced:job")).await;
    let runs = 300;
    let started = Instant::now();
    let mut skipped = Vec::new();
    for run in 0..runs {
        assert!(
            started.elapsed() < Duration::from_secs(25),
            "run {run}: out of time"
        );
        if bounded("job", synced_job(&client)).await.unwrap().is_none() {
            skipped.push(run);
        }
    }
    println!(
        "{} of {runs} runs skipped ({:?})",
        skipped.len(),
        started.elapsed()
    );
    assert!(
        skipped.is_empty(),
        "{} of {runs} runs of a skipping job were skipped, with no other holder than its own \
         last run (runs {:?}...)",
        skipped.len(),
        &skipped[..skipped.len().min(10)]
    );
}
