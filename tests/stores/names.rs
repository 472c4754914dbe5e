//! Any text is a lock name on every store (issue 36): names far longer than an index entry may
//! be, names holding NUL, and names that differ only after a long shared prefix, on every kind
//! the store offers. Each lock must exclude another client and be freed by its release.

use std::time::Duration;

use dlock::{Lock, LockClient};

use super::both::{stores, Need, Store};

/// `a` takes `lock`, `b`'s handle on the same name is refused while it is held and served
/// after the release.
async fn excludes(store: &str, name: &str, held: &Lock, other: &Lock) {
    let what = |step: &str| format!("{store}: {step} (a name of {} bytes)", name.len());
    let guard = held
        .acquire()
        .await
        .unwrap_or_else(|e| panic!("{}: {e}", what("acquire")));
    assert!(
        held.is_locked()
            .await
            .unwrap_or_else(|e| panic!("{}: {e}", what("is_locked"))),
        "{}",
        what("free while held")
    );
    let refused = other
        .try_acquire()
        .await
        .unwrap_or_else(|e| panic!("{}: {e}", what("try_acquire")));
    assert!(refused.is_none(), "{}", what("another client got it too"));
    guard
        .release()
        .await
        .unwrap_or_else(|e| panic!("{}: {e}", what("release")));
    let after = other
        .try_acquire()
        .await
        .unwrap_or_else(|e| panic!("{}: {e}", what("try_acquire after the release")))
        .unwrap_or_else(|| panic!("{}", what("still held after the release")));
    after.release().await.expect("release");
}

/// `len` characters no compression shrinks much (PostgreSQL compresses a long index entry
/// before it measures it, so a repeated character would pass where a real long name fails):
/// letters drawn by a small linear congruential generator, one sequence per `seed`.
fn noise(len: usize, seed: u64) -> String {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x = x
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            let pick = (x >> 33) % 62;
            char::from(
                b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"[pick as usize],
            )
        })
        .collect()
}

fn plain(client: &LockClient, name: &str) -> Lock {
    client.lock(name).wait(Duration::from_secs(5))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn long_names_and_names_with_nul_are_lock_names() {
    for store in stores() {
        let (a, b) = (store.client().await, store.client().await);
        let names = [
            format!("stores:names:4k:{}", noise(4096, 1)),
            format!("stores:names:100k:{}", noise(100_000, 2)),
            format!("stores:names:unicode:{}", "é".repeat(50_000)),
            "stores:names:nul:\0".to_owned(),
            "stores:names:nul:a\0b\0".to_owned(),
            format!("stores:names:long-nul:{}\0", noise(3000, 3)),
        ];
        for name in &names {
            excludes(store.name(), name, &plain(&a, name), &plain(&b, name)).await;
        }
    }
}

/// Names that a careless escape or a short hash would map to one stored key: NUL beside its
/// percent-escaped spelling, and long names equal up to their last character. Each is held
/// while the others are taken by another client.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn distinct_names_stay_distinct_locks() {
    for store in stores() {
        let (a, b) = (store.client().await, store.client().await);
        let shared = noise(8000, 4);
        let groups = [
            vec![
                "stores:distinct:a\0".to_owned(),
                "stores:distinct:a%00".to_owned(),
                "stores:distinct:a".to_owned(),
                "stores:distinct:a%2500".to_owned(),
            ],
            vec![
                format!("stores:distinct:{shared}1"),
                format!("stores:distinct:{shared}2"),
                format!("stores:distinct:{shared}"),
            ],
        ];
        for group in &groups {
            for (i, name) in group.iter().enumerate() {
                let guard = a.lock(name).acquire().await.unwrap_or_else(|e| {
                    panic!("{}: acquire name {i} of {}: {e}", store.name(), group.len())
                });
                for (j, other) in group.iter().enumerate().filter(|(j, _)| *j != i) {
                    let got = b.lock(other).try_acquire().await.expect("try_acquire");
                    let got = got.unwrap_or_else(|| {
                        panic!(
                            "{}: name {j} is refused while name {i} is held: two names, one lock",
                            store.name()
                        )
                    });
                    got.release().await.expect("release");
                }
                guard.release().await.expect("release");
            }
        }
    }
}

/// Every kind a store offers takes a long name (with a NUL in it): the read-write lock's two
/// sides, the semaphore's permits and the fair lock's queue.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_kind_takes_a_long_name() {
    for store in stores() {
        if !store.can(Need::FairQueue) {
            continue;
        }
        let (a, b) = (store.client().await, store.client().await);
        let name = format!("stores:kinds:{}\0end", noise(6000, 5));
        let s = store.name();

        let (rw_a, rw_b) = (a.read_write_lock(&name), b.read_write_lock(&name));
        let r1 = rw_a
            .read()
            .acquire()
            .await
            .unwrap_or_else(|e| panic!("{s}: read: {e}"));
        let r2 = (rw_b.read().try_acquire().await)
            .unwrap_or_else(|e| panic!("{s}: read: {e}"))
            .unwrap_or_else(|| panic!("{s}: readers do not share"));
        assert!(
            rw_b.write().try_acquire().await.expect("try").is_none(),
            "{s}: a writer beside readers"
        );
        r1.release().await.expect("release");
        r2.release().await.expect("release");
        let w = (rw_a.write().wait(Duration::from_secs(5)).acquire().await)
            .unwrap_or_else(|e| panic!("{s}: write: {e}"));
        assert!(
            rw_b.read().try_acquire().await.expect("try").is_none(),
            "{s}: a reader beside a writer"
        );
        w.release().await.expect("release");

        let (sem_a, sem_b) = (a.semaphore(&name, 2), b.semaphore(&name, 2));
        let p1 = sem_a
            .acquire()
            .await
            .unwrap_or_else(|e| panic!("{s}: permit: {e}"));
        let p2 = sem_b
            .acquire()
            .await
            .unwrap_or_else(|e| panic!("{s}: permit: {e}"));
        assert_eq!(sem_a.available().await.expect("available"), 0, "{s}");
        assert!(
            sem_b.try_acquire().await.expect("try").is_none(),
            "{s}: a third permit of two"
        );
        p1.release().await.expect("release");
        p2.release().await.expect("release");
        assert_eq!(sem_b.available().await.expect("available"), 2, "{s}");

        // The fair lock: it excludes, and a waiter queued under the name is handed the lock
        // by the release.
        let (fair_a, fair_b) = (a.fair_lock(&name), b.fair_lock(&name));
        excludes(s, &name, &fair_a, &fair_b).await;
        let held = (fair_a.acquire().await).unwrap_or_else(|e| panic!("{s}: fair: {e}"));
        let waiting = tokio::spawn({
            let lock = fair_b.clone().wait(Duration::from_secs(10));
            async move { lock.acquire().await }
        });
        let key = fair_a.key().to_owned();
        let (st, k) = (&store, key.as_str());
        crate::common::eventually(
            Duration::from_secs(10),
            "the fair waiter queued",
            move || async move { st.fair_queue(k) == 1 },
        )
        .await;
        held.release().await.expect("release");
        let next = (waiting.await.unwrap()).unwrap_or_else(|e| panic!("{s}: fair waiter: {e}"));
        next.release().await.expect("release");

        // The plain lock of that name is yet another lock, free beside them.
        excludes(s, &name, &plain(&a, &name), &plain(&b, &name)).await;
    }
}

/// A key prefix holding NUL: a key like any other on Redis, refused up front on PostgreSQL
/// (where NUL in a name is written `%00`, which a prefix could spell too), naming the cause.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prefix_with_nul_is_refused_where_it_cannot_be_kept() {
    for store in stores() {
        let build = || {
            LockClient::builder(store.url())
                .key_prefix("pre\0fix:")
                .build()
        };
        let built = build().await;
        match &store {
            Store::Redis(_) => {
                let a = built.expect("a prefix with NUL on redis");
                let b = build().await.expect("a prefix with NUL on redis");
                let name = "stores:prefix";
                excludes("redis", name, &plain(&a, name), &plain(&b, name)).await;
            }
            Store::Postgres(_) | Store::Zookeeper(_) => {
                let Err(e) = built else {
                    panic!("{}: a prefix with NUL was accepted", store.name());
                };
                let text = e.to_string();
                assert!(text.contains("prefix") && text.contains("NUL"), "{text}");
            }
        }
    }
}
