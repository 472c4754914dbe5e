//! The family of kinds on every store: a semaphore, a read-write lock (the fair lock has its own
//! file, `fair.rs`), and a kind a store does not offer, refused at the call that asks for it,
//! naming the store and the kind.

use std::time::Duration;

use super::both::{stores, Need, Store};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_semaphore_lets_in_its_permits_and_no_more() {
    for store in stores() {
        if !store.can(Need::Semaphore) {
            continue;
        }
        let (a, b) = (store.client().await, store.client().await);
        let sem = a.semaphore("stores:sem", 2);
        let one = sem.acquire().await.expect("first permit");
        let two = b
            .semaphore("stores:sem", 2)
            .acquire()
            .await
            .expect("second permit");
        assert_eq!(
            sem.available().await.expect("available"),
            0,
            "{}",
            store.name()
        );
        assert!(
            sem.try_acquire().await.expect("try").is_none(),
            "{}: a third permit of two",
            store.name()
        );
        one.release().await.expect("release");
        let three = sem
            .try_acquire()
            .await
            .expect("try")
            .expect("a permit is free");
        three.release().await.expect("release");
        two.release().await.expect("release");
        assert_eq!(
            sem.available().await.expect("available"),
            2,
            "{}",
            store.name()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_share_and_a_writer_excludes() {
    for store in stores() {
        let (a, b) = (store.client().await, store.client().await);
        let rw_a = a.read_write_lock("stores:rw");
        let rw_b = b.read_write_lock("stores:rw");
        let r1 = rw_a.read().acquire().await.expect("read");
        let r2 = rw_b
            .read()
            .try_acquire()
            .await
            .expect("try")
            .expect("readers share");
        assert!(
            rw_b.write().try_acquire().await.expect("try").is_none(),
            "{}: a writer beside readers",
            store.name()
        );
        r1.release().await.expect("release");
        r2.release().await.expect("release");
        let w = (rw_b.write())
            .wait(Duration::from_secs(5))
            .acquire()
            .await
            .unwrap_or_else(|e| panic!("{}: {e}", store.name()));
        assert!(
            rw_a.read().try_acquire().await.expect("try").is_none(),
            "{}: a reader beside a writer",
            store.name()
        );
        w.release().await.expect("release");
    }
}

/// The Redisson kinds speak Redisson's protocol on Redis: PostgreSQL refuses each of them at the
/// acquire, naming the lock, the store and the kind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kind_the_store_lacks_is_a_clear_error() {
    for store in stores() {
        let client = store.client().await;
        let rw = client.redisson_read_write_lock("stores:redisson:rw");
        let locks = [
            ("redisson", client.redisson_lock("stores:redisson")),
            (
                "redisson_fenced",
                client.redisson_fenced_lock("stores:redisson:fenced"),
            ),
            ("redisson_read", rw.read()),
            ("redisson_write", rw.write()),
        ];
        for (kind, lock) in locks {
            let result = lock.try_acquire().await;
            match store {
                Store::Redis(_) => {
                    let g = result
                        .unwrap_or_else(|e| panic!("{kind} on redis: {e}"))
                        .expect("free");
                    g.release().await.expect("release");
                }
                Store::Postgres(_) | Store::Zookeeper(_) => {
                    let Err(e) = result else {
                        panic!("{}: the {kind} lock was granted", store.name());
                    };
                    let text = e.to_string();
                    let shown = if store.name() == "postgres" {
                        "PostgreSQL"
                    } else {
                        "ZooKeeper"
                    };
                    assert!(
                        text.contains(lock.name())
                            && text.contains(shown)
                            && text.contains(&format!("the {kind} lock kind")),
                        "{text}"
                    );
                }
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_multi_lock_takes_all_its_locks_or_none() {
    for store in stores() {
        let (a, b) = (store.client().await, store.client().await);
        let both = a
            .multi_lock(["stores:multi:1", "stores:multi:2"])
            .acquire()
            .await
            .unwrap_or_else(|e| panic!("{}: {e}", store.name()));
        assert!(
            b.lock("stores:multi:2")
                .try_acquire()
                .await
                .expect("try")
                .is_none(),
            "{}: a member of a held multi-lock was free",
            store.name()
        );
        both.release().await.expect("release");
        // One member taken elsewhere: the multi-lock is refused and leaves the other free.
        let one = b.lock("stores:multi:1").acquire().await.expect("acquire");
        let refused = (a.multi_lock(["stores:multi:1", "stores:multi:2"]))
            .wait(Duration::from_millis(300))
            .acquire()
            .await;
        assert!(
            refused.is_err(),
            "{}: a multi-lock beside a held member",
            store.name()
        );
        assert!(
            !a.lock("stores:multi:2")
                .is_locked()
                .await
                .expect("is_locked"),
            "{}: a refused multi-lock kept a member",
            store.name()
        );
        one.release().await.expect("release");
    }
}

/// Issue 36: a writer that takes the read side inside its write scope, gives it back and takes
/// it again is granted the second read like the first (a writer's reads share its owner, so
/// the first read's release must not leave a mark that refuses the next), and its write hold
/// is still its own afterwards: not lost, still excluding others, released without NotHeld.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writer_reads_again_after_giving_its_read_back() {
    for store in stores() {
        let (a, b) = (store.client().await, store.client().await);
        let rw = a.read_write_lock("stores:rw:reread");
        let other = b.read_write_lock("stores:rw:reread");
        let w = rw.write().acquire().await.expect("write");
        for round in 1..=3 {
            let read = w
                .scope(async { rw.read().wait(Duration::ZERO).acquire().await })
                .await
                .unwrap_or_else(|e| {
                    panic!("{}: read {round} inside the write scope: {e}", store.name())
                });
            assert_eq!(
                read.fencing_token(),
                w.fencing_token(),
                "{}: read {round} under the writer's token",
                store.name()
            );
            read.release()
                .await
                .unwrap_or_else(|e| panic!("{}: release of read {round}: {e}", store.name()));
            assert!(
                !w.is_lost(),
                "{}: the write hold reads lost after read {round}",
                store.name()
            );
        }
        assert!(
            other.read().try_acquire().await.expect("try").is_none(),
            "{}: another client reads beside the writer",
            store.name()
        );
        w.release()
            .await
            .unwrap_or_else(|e| panic!("{}: the write release: {e}", store.name()));
        let after = other
            .write()
            .try_acquire()
            .await
            .expect("try")
            .unwrap_or_else(|| panic!("{}: held after every release", store.name()));
        after.release().await.expect("release");
    }
}

/// A hard lease cannot be kept where the lease is the session: refused at the acquire on
/// ZooKeeper, naming the cause, and the lock stays free.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_zookeeper_store_refuses_a_hard_lease() {
    for store in stores() {
        if !matches!(store, Store::Zookeeper(_)) {
            continue;
        }
        let client = store.client().await;
        let hard = (client.lock("stores:zk:hard"))
            .lease(Duration::from_secs(5))
            .try_acquire()
            .await
            .expect_err("a hard lease on ZooKeeper");
        assert!(
            hard.to_string().contains("with a hard lease") && !hard.is_transient(),
            "{hard}"
        );
        let g = client
            .lock("stores:zk:hard")
            .acquire()
            .await
            .expect("plain");
        g.release().await.expect("release");
    }
}
