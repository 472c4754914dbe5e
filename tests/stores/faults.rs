//! Faults of the store: a frozen server past the lease (the lost signal comes before anyone
//! else can acquire) and a crash with a restart from disk (the hold survives, the watchdog
//! goes on renewing it, tokens keep rising).

use std::time::{Duration, Instant};

use super::both::stores;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hold_frozen_past_its_lease_reads_lost_before_another_owner_gets_it() {
    for store in stores() {
        let a = store.client_with(Duration::from_millis(500)).await;
        let guard = (a.lock("stores:frozen"))
            .ttl(Duration::from_secs(2))
            .acquire()
            .await
            .expect("acquire");
        let token = guard.fencing_token();
        store.pause();
        let paused_at = Instant::now();
        // The holder cannot renew: its validity, counted from its last renewal's send, ends
        // within the 2 s lease.
        while !guard.is_lost() && paused_at.elapsed() < Duration::from_secs(10) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let lost_after = paused_at.elapsed();
        store.resume();
        assert!(
            guard.is_lost(),
            "{}: not lost 10 s into a pause",
            store.name()
        );
        assert!(
            lost_after <= Duration::from_secs(3),
            "{}: lost only {lost_after:?} into the pause of a 2 s lease",
            store.name()
        );
        let b = store.client().await;
        let other = (b.lock("stores:frozen"))
            .wait(Duration::from_secs(10))
            .acquire()
            .await
            .unwrap_or_else(|e| panic!("{}: {e}", store.name()));
        // At the moment another owner holds it, the old holder knows it does not.
        assert!(guard.is_lost(), "{}", store.name());
        assert!(other.fencing_token() > token, "{}", store.name());
        other.release().await.expect("release");
        assert!(
            guard.release().await.is_err(),
            "{}: a lost hold released",
            store.name()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hold_survives_a_crash_and_restart_of_the_store() {
    for mut store in stores() {
        let a = store.client().await;
        let guard = (a.lock("stores:restart"))
            .ttl(Duration::from_secs(3))
            .acquire()
            .await
            .expect("acquire");
        let token = guard.fencing_token();
        store.crash_and_restart();
        let b = store.client().await;
        assert!(
            b.lock("stores:restart")
                .try_acquire()
                .await
                .expect("try")
                .is_none(),
            "{}: the lock was lost in the restart",
            store.name()
        );
        // Past a whole lease: only the holder's renewals, reconnected, keep it.
        tokio::time::sleep(Duration::from_secs(4)).await;
        assert!(
            !guard.is_lost(),
            "{}: the hold was lost after the restart",
            store.name()
        );
        assert!(
            b.lock("stores:restart")
                .try_acquire()
                .await
                .expect("try")
                .is_none(),
            "{}: the lock expired although its holder renews it",
            store.name()
        );
        guard.release().await.expect("release");
        let next = b
            .lock("stores:restart")
            .try_acquire()
            .await
            .expect("try")
            .expect("free");
        assert!(next.fencing_token() > token, "{}", store.name());
        next.release().await.expect("release");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acquire_the_store_does_not_answer_fails_naming_that_store() {
    for store in stores() {
        let a = store.client().await;
        // A first call opens the client's connections before the server stops answering.
        assert!(!a
            .lock("stores:silent")
            .is_locked()
            .await
            .expect("is_locked"));
        store.pause();
        let result = (a.lock("stores:silent"))
            .wait(Duration::from_millis(500))
            .acquire()
            .await;
        store.resume();
        let Err(e) = result else {
            panic!("{}: acquired from a paused server", store.name());
        };
        let text = e.to_string();
        match &store {
            super::both::Store::Redis(_) => {
                assert!(matches!(e, dlock::LockError::Redis { .. }), "{text}")
            }
            super::both::Store::Postgres(_) => {
                assert!(
                    matches!(
                        e,
                        dlock::LockError::Store {
                            store: "postgres",
                            ..
                        }
                    ),
                    "{text}"
                );
                assert!(text.starts_with("postgres at "), "{text}");
            }
            super::both::Store::Zookeeper(_) => {
                assert!(
                    matches!(
                        e,
                        dlock::LockError::Store {
                            store: "zookeeper",
                            ..
                        }
                    ),
                    "{text}"
                );
                assert!(text.starts_with("zookeeper at "), "{text}");
            }
        }
        assert!(text.contains("stores:silent"), "{text}");
        assert!(e.is_transient(), "{}: {text}", store.name());
    }
}

/// A hold kept for several of its leases stays held and keeps others out: the watchdog renews
/// it in time on every store. On ZooKeeper the lease is two thirds of the session (2 s here),
/// whatever TTL is asked: a 30 s TTL must not schedule the first renewal at 10 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hold_kept_for_several_leases_stays_held() {
    for store in stores() {
        let (a, b) = (store.client().await, store.client().await);
        let ttl = if store.name() == "zookeeper" {
            Duration::from_secs(30)
        } else {
            Duration::from_secs(2)
        };
        let guard = (a.lock("stores:kept"))
            .ttl(ttl)
            .acquire()
            .await
            .expect("acquire");
        // Two and a half leases of 2 s: time is the subject here.
        tokio::time::sleep(Duration::from_secs(5)).await;
        assert!(!guard.is_lost(), "{}: lost while renewed", store.name());
        let other = b.lock("stores:kept").try_acquire().await.expect("try");
        assert!(other.is_none(), "{}: another owner got in", store.name());
        guard.release().await.expect("release");
        let again = b.lock("stores:kept").try_acquire().await.expect("try");
        again
            .expect("free after the release")
            .release()
            .await
            .expect("release");
    }
}
