//! `dlock::fence` on a cluster connection: one key per resource, so every key works whatever
//! its slot, and a server's lost script cache is reloaded on the node that lost it.

use std::collections::BTreeSet;
use std::time::Duration;

use dlock::fence::{self, Outcome};
use dlock::LockError;

use crate::{bounded, node_conn, raw, shared_cluster};

const KEYS: usize = 30;

fn key(i: usize) -> String {
    format!("fence:resource:{i}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn set_if_newer_keeps_the_highest_token_on_every_master() {
    let cluster = shared_cluster();
    let masters: BTreeSet<u16> = (0..KEYS)
        .map(|i| cluster.master_for_key(&key(i)).expect("master").port)
        .collect();
    assert_eq!(masters.len(), 3, "the keys must spread over all 3 masters");
    let mut conn = raw(cluster).await;
    let limit = Duration::from_secs(10);

    for i in 0..KEYS {
        let k = key(i);
        let out = bounded(
            limit,
            "write",
            fence::set_if_newer(&mut conn, &k, 10, "ten"),
        )
        .await;
        assert_eq!(out.unwrap(), Outcome::Written, "{k}");
    }
    // Every node forgets the script: the next call on each is answered by EVAL.
    for node in cluster.nodes().expect("cluster nodes") {
        let mut n = node_conn(&node.url).await;
        let () = dlock::redis::cmd("SCRIPT")
            .arg("FLUSH")
            .query_async(&mut n)
            .await
            .expect("SCRIPT FLUSH");
    }
    for i in 0..KEYS {
        let k = key(i);
        let out = bounded(
            limit,
            "stale write",
            fence::set_if_newer(&mut conn, &k, 9, "nine"),
        );
        assert_eq!(out.await.unwrap(), Outcome::Stale { highest: 10 }, "{k}");
        let read = bounded(limit, "read", fence::get::<String, _>(&mut conn, &k)).await;
        let read = read.unwrap().expect("a value");
        assert_eq!((read.value.as_str(), read.token), ("ten", 10), "{k}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_type_at_a_fenced_key_is_a_wrongtype_error_on_a_cluster() {
    let cluster = shared_cluster();
    let mut conn = raw(cluster).await;
    let () = dlock::redis::cmd("SET")
        .arg("fence:theirs")
        .arg("x")
        .query_async(&mut conn)
        .await
        .unwrap();
    let err = fence::set_if_newer(&mut conn, "fence:theirs", 1, "mine")
        .await
        .unwrap_err();
    assert!(
        matches!(&err, LockError::WrongType { key, .. } if key == "fence:theirs"),
        "{err:?}"
    );
}
