//! Local handoff on a cluster: the hold stays on its master under the first holder's owner id,
//! and the watchdog's per-node renewals go on for each new holder.

use std::time::{Duration, Instant};

use dlock::LockClient;

use crate::{bounded, names_on_master, shared_cluster};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handed_holds_on_a_non_first_master_are_renewed_past_many_leases() {
    let cluster = shared_cluster();
    let client = LockClient::cluster_builder(cluster.urls())
        .local_handoff_window(Duration::from_secs(60))
        .local_handoffs(1000)
        .build()
        .await
        .expect("cluster client");
    let port = cluster.masters().expect("masters")[1].port;
    let name = names_on_master(cluster, &client, "cluster:handoff", port, 1).remove(0);
    let ttl = Duration::from_millis(900);
    let lock = client.lock(name.as_str()).ttl(ttl);
    let step = Duration::from_secs(10);
    let mut guard = bounded(step, "acquire", lock.acquire()).await.unwrap();
    let first = guard.fencing_token();
    let until = Instant::now() + ttl * 4;
    let mut handoffs = 0;
    while Instant::now() < until {
        // Polled once: the next acquire queues at the gate behind this holder.
        let mut next = Box::pin(lock.acquire());
        assert!(futures_util::poll!(next.as_mut()).is_pending());
        tokio::time::sleep(Duration::from_millis(50)).await; // the holder works a while
        guard.release().await.unwrap();
        guard = bounded(step, "handed over", next).await.unwrap();
        assert!(!guard.is_lost(), "lost after {handoffs} handoffs");
        handoffs += 1;
    }
    assert_eq!(
        guard.fencing_token(),
        first + handoffs,
        "every holder came by local handoff"
    );
    assert!(lock.is_locked().await.unwrap());
    bounded(step, "release", guard.release())
        .await
        .expect("still held on its master after four leases");
    assert!(!lock.is_locked().await.unwrap());
}
