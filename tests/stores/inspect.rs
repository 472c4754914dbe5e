//! `dlock::inspect::stored_locks` on every store that answers queries (PostgreSQL, ZooKeeper),
//! from one body: who holds each kind (owner ids, read and write sides), a semaphore's permit
//! count, a read-write lock's waiting writer and a writer's own read, a fair lock's queue in
//! order, reading one name only, and the lock gone from the list once released. Where a store shows every kind's
//! waiters (ZooKeeper's children), their order too. Redis refuses the call, by name.

use std::time::Duration;

use dlock::inspect::{stored_locks, StoredLock};
use dlock::LockClient;

use super::both::{stores, Need, Store};
use crate::common::eventually;

/// The stored lock at `key` (`None`: not in use), read through `client`.
async fn stored(client: &LockClient, name: &str, key: &str) -> Option<StoredLock> {
    let locks = stored_locks(client, Some(name))
        .await
        .unwrap_or_else(|e| panic!("stored_locks({name}): {e}"));
    locks.into_iter().find(|l| l.key == key)
}

/// Waits (10 s at most) until `key`'s stored lock satisfies `check`, and returns it.
async fn until_stored(
    client: &LockClient,
    name: &str,
    key: &str,
    what: &str,
    check: impl Fn(&StoredLock) -> bool,
) -> StoredLock {
    let check = &check;
    eventually(Duration::from_secs(10), what, || async move {
        stored(client, name, key).await.is_some_and(|l| check(&l))
    })
    .await;
    stored(client, name, key).await.expect("still there")
}

/// The owners of `lock`'s holders, in the order listed (by owner).
fn owners(lock: &StoredLock) -> Vec<&str> {
    lock.holders.iter().map(|h| h.owner.as_str()).collect()
}

/// Whether `owner` (with its `r:` / `w:` side, if any) is one of `client`'s.
fn of(owner: &str, side: &str, client: &LockClient) -> bool {
    owner
        .strip_prefix(side)
        .is_some_and(|o| o.starts_with(&format!("{}:", client.client_id())))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stored_locks_show_holders_permits_writers_and_queues_on_query_stores() {
    for store in stores() {
        let name = store.name();
        let (a, b, c) = (
            store.client().await,
            store.client().await,
            store.client().await,
        );
        if !store.can(Need::StoredLocks) {
            let refused = stored_locks(&a, None).await.expect_err("Redis answered");
            assert!(
                refused.to_string().contains("PostgreSQL, ZooKeeper"),
                "{name}: {refused}"
            );
            continue;
        }
        // The lease each store reports: PostgreSQL's row's time left (the default 30 s
        // ttl); ZooKeeper's -1, the holder's session.
        let lease_ok = |ttl: i64| match store {
            Store::Zookeeper(_) => ttl == -1,
            _ => ttl > 0 && ttl <= 30_000,
        };

        let plain = a.lock("insp:plain").acquire().await.expect("plain");
        let sem = (
            a.semaphore("insp:sem", 3)
                .acquire()
                .await
                .expect("permit a"),
            b.semaphore("insp:sem", 3)
                .acquire()
                .await
                .expect("permit b"),
        );
        let reads = (
            a.read_write_lock("insp:rw")
                .read()
                .acquire()
                .await
                .expect("read a"),
            b.read_write_lock("insp:rw")
                .read()
                .acquire()
                .await
                .expect("read b"),
        );
        let fair = a.fair_lock("insp:fair").acquire().await.expect("fair");

        let lock = stored(&a, "insp:plain", "dlock:{insp:plain}")
            .await
            .unwrap_or_else(|| panic!("{name}: the plain lock is not listed"));
        assert_eq!(lock.holders.len(), 1, "{name}: {lock:?}");
        assert!(of(&lock.holders[0].owner, "", &a), "{name}: {lock:?}");
        assert_eq!(lock.holders[0].count, 1, "{name}: {lock:?}");
        assert!(lease_ok(lock.holders[0].ttl_ms), "{name}: {lock:?}");
        assert!(lock.queue.is_empty(), "{name}: {lock:?}");

        let lock = stored(&a, "insp:sem", "dlock:{insp:sem}:sem")
            .await
            .unwrap_or_else(|| panic!("{name}: the semaphore is not listed"));
        assert_eq!(lock.permits, Some(3), "{name}: {lock:?}");
        let mut holders = owners(&lock);
        holders.sort_by_key(|o| of(o, "", &b));
        assert!(
            holders.len() == 2 && of(holders[0], "", &a) && of(holders[1], "", &b),
            "{name}: {lock:?}"
        );

        // Every lock of the store, the plain one among them.
        let all = stored_locks(&c, None).await.expect("stored_locks(None)");
        let keys: Vec<&str> = all.iter().map(|l| l.key.as_str()).collect();
        for key in [
            "dlock:{insp:fair}:fair",
            "dlock:{insp:plain}",
            "dlock:{insp:rw}:rw",
            "dlock:{insp:sem}:sem",
        ] {
            assert!(keys.contains(&key), "{name}: {key} not in {keys:?}");
        }

        // A writer waits behind two readers, and keeps new readers out.
        let writer = tokio::spawn({
            let lock = c
                .read_write_lock("insp:rw")
                .write()
                .wait(Duration::from_secs(30));
            async move { lock.acquire().await.map(drop) }
        });
        let rw = until_stored(
            &a,
            "insp:rw",
            "dlock:{insp:rw}:rw",
            "a waiting writer",
            |l| l.writer_waiting.is_some(),
        )
        .await;
        let readers = owners(&rw);
        assert!(
            readers.len() == 2
                && readers.iter().any(|o| of(o, "r:", &a))
                && readers.iter().any(|o| of(o, "r:", &b)),
            "{name}: a's and b's reads: {rw:?}"
        );
        let waiting = rw.writer_waiting.as_ref().expect("a waiting writer");
        assert!(of(&waiting.owner, "", &c), "{name}: {rw:?}");

        // Two waiters of the fair lock, listed first in line first.
        let fair_b = tokio::spawn({
            let lock = b.fair_lock("insp:fair").wait(Duration::from_secs(30));
            async move { lock.acquire().await.map(drop) }
        });
        until_stored(&a, "insp:fair", "dlock:{insp:fair}:fair", "b queued", |l| {
            l.queue.len() == 1
        })
        .await;
        let fair_c = tokio::spawn({
            let lock = c.fair_lock("insp:fair").wait(Duration::from_secs(30));
            async move { lock.acquire().await.map(drop) }
        });
        let queued = until_stored(&a, "insp:fair", "dlock:{insp:fair}:fair", "c queued", |l| {
            l.queue.len() == 2
        })
        .await;
        assert!(
            of(&queued.queue[0], "", &b) && of(&queued.queue[1], "", &c),
            "{name}: b first, then c: {queued:?}"
        );
        assert!(of(&queued.holders[0].owner, "", &a), "{name}: {queued:?}");

        // A writer reading inside its write scope (a downgrade): both its sides hold, nobody
        // waits (on ZooKeeper its read child carries the writer's sequence, ahead of it).
        let rw = a.read_write_lock("insp:down");
        let write = rw.write().acquire().await.expect("write");
        let read = write
            .scope(async { rw.read().acquire().await })
            .await
            .expect("read inside the write scope");
        let down = stored(&a, "insp:down", "dlock:{insp:down}:rw")
            .await
            .unwrap_or_else(|| panic!("{name}: the downgraded lock is not listed"));
        let sides = owners(&down);
        assert!(
            sides.len() == 2 && of(sides[0], "r:", &a) && of(sides[1], "w:", &a),
            "{name}: a's read and write: {down:?}"
        );
        assert!(
            down.writer_waiting.is_none() && down.queue.is_empty(),
            "{name}: {down:?}"
        );
        read.release().await.expect("release the read");
        write.release().await.expect("release the write");

        if store.can(Need::WaitersInLine) {
            waiters_in_line(&a, &b, &c).await;
        }

        // Released: gone from the list.
        plain.release().await.expect("release plain");
        assert_eq!(
            stored(&a, "insp:plain", "dlock:{insp:plain}").await,
            None,
            "{name}: listed after its release"
        );
        drop(reads);
        writer.await.unwrap().expect("the writer gets in");
        drop(fair);
        fair_b.await.unwrap().expect("b gets the fair lock");
        fair_c.await.unwrap().expect("c gets the fair lock");
        drop(sem);
        for client in [a, b, c] {
            client.shutdown().await;
        }
    }
}

/// A plain lock's and a full semaphore's waiters, in line order (a store whose waiters stand
/// in line where others can see them).
async fn waiters_in_line(a: &LockClient, b: &LockClient, c: &LockClient) {
    let held = a.lock("insp:line").acquire().await.expect("plain");
    let wait_b = tokio::spawn({
        let lock = b.lock("insp:line").wait(Duration::from_secs(30));
        async move { lock.acquire().await.map(drop) }
    });
    until_stored(a, "insp:line", "dlock:{insp:line}", "b in line", |l| {
        l.queue.len() == 1
    })
    .await;
    let wait_c = tokio::spawn({
        let lock = c.lock("insp:line").wait(Duration::from_secs(30));
        async move { lock.acquire().await.map(drop) }
    });
    let line = until_stored(a, "insp:line", "dlock:{insp:line}", "c in line", |l| {
        l.queue.len() == 2
    })
    .await;
    assert!(of(&line.holders[0].owner, "", a), "{line:?}");
    assert!(
        of(&line.queue[0], "", b) && of(&line.queue[1], "", c),
        "b first, then c: {line:?}"
    );

    // A semaphore of one permit, full: the waiters after the holder, in order.
    let permit = a.semaphore("insp:one", 1).acquire().await.expect("permit");
    let sem_b = tokio::spawn({
        let sem = b.semaphore("insp:one", 1).wait(Duration::from_secs(30));
        async move { sem.acquire().await.map(drop) }
    });
    until_stored(a, "insp:one", "dlock:{insp:one}:sem", "b waits", |l| {
        l.queue.len() == 1
    })
    .await;
    let sem_c = tokio::spawn({
        let sem = c.semaphore("insp:one", 1).wait(Duration::from_secs(30));
        async move { sem.acquire().await.map(drop) }
    });
    let sem = until_stored(a, "insp:one", "dlock:{insp:one}:sem", "c waits", |l| {
        l.queue.len() == 2
    })
    .await;
    assert_eq!(sem.permits, Some(1), "{sem:?}");
    assert_eq!(sem.holders.len(), 1, "{sem:?}");
    assert!(of(&sem.holders[0].owner, "", a), "{sem:?}");
    assert!(
        of(&sem.queue[0], "", b) && of(&sem.queue[1], "", c),
        "b first, then c: {sem:?}"
    );

    drop(held);
    wait_b.await.unwrap().expect("b gets the lock");
    wait_c.await.unwrap().expect("c gets the lock");
    permit.release().await.expect("release the permit");
    sem_b.await.unwrap().expect("b gets the permit");
    sem_c.await.unwrap().expect("c gets the permit");
}
