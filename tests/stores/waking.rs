//! Waiters are woken by the release (pub/sub on Redis, NOTIFY on PostgreSQL), not by polling
//! or the lease's end; a cancelled acquire leaves nothing behind.

use std::time::{Duration, Instant};

use super::both::stores;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_is_woken_by_the_release_long_before_the_lease_ends() {
    for store in stores() {
        let (a, b) = (store.client().await, store.client().await);
        let guard = (a.lock("stores:wake"))
            .ttl(Duration::from_secs(30))
            .acquire()
            .await
            .expect("acquire");
        let waiter = tokio::spawn(async move {
            let got = (b.lock("stores:wake"))
                .wait(Duration::from_secs(20))
                .acquire()
                .await;
            (got, Instant::now())
        });
        // Time is the subject here: the waiter must be parked (subscribed, refused) before the
        // release, and nothing says from outside when it is. 300 ms is far more than that
        // takes; were it not, the waiter would find the lock free, which passes too.
        tokio::time::sleep(Duration::from_millis(300)).await;
        let released_at = Instant::now();
        guard.release().await.expect("release");
        let (got, at) = waiter.await.expect("waiter");
        let got = got.unwrap_or_else(|e| panic!("{}: {e}", store.name()));
        let after = at.duration_since(released_at);
        // Polling at the holder's lease would take 30 s; a lost wake-up at least a health
        // interval (2 s).
        assert!(
            after < Duration::from_secs(1),
            "{}: woken {after:?} after the release",
            store.name()
        );
        got.release().await.expect("release");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twenty_waiters_of_one_client_all_get_their_turn() {
    for store in stores() {
        let holder = store.client().await;
        let waiting = store.client().await;
        let guard = holder
            .lock("stores:queue")
            .acquire()
            .await
            .expect("acquire");
        let mut tasks = Vec::new();
        for i in 0..20 {
            let lock = waiting.lock("stores:queue").wait(Duration::from_secs(30));
            tasks.push(tokio::spawn(async move {
                let g = lock
                    .acquire()
                    .await
                    .unwrap_or_else(|e| panic!("waiter {i}: {e}"));
                g.release().await.expect("release");
            }));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
        guard.release().await.expect("release");
        let all = async {
            for t in tasks {
                t.await.expect("waiter");
            }
        };
        tokio::time::timeout(Duration::from_secs(20), all)
            .await
            .unwrap_or_else(|_| {
                panic!(
                    "{}: 20 waiters did not all get the lock in 20 s",
                    store.name()
                )
            });
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_acquire_leaves_the_lock_free() {
    for store in stores() {
        let (a, b) = (store.client().await, store.client().await);
        let guard = a.lock("stores:cancel").acquire().await.expect("acquire");
        // Cancelled while waiting.
        let waiting = b.lock("stores:cancel").wait(Duration::from_secs(10));
        let cancelled = tokio::time::timeout(Duration::from_millis(200), waiting.acquire()).await;
        assert!(cancelled.is_err(), "{}: acquired a held lock", store.name());
        guard.release().await.expect("release");
        // Cancelled right after it was sent (the grant, if any, is undone).
        for _ in 0..20 {
            let lock = b.lock("stores:cancel");
            if let Ok(got) = tokio::time::timeout(Duration::from_micros(50), lock.acquire()).await {
                got.expect("acquire").release().await.expect("release");
            }
        }
        let c = store.client().await;
        let got = (c.lock("stores:cancel"))
            .wait(Duration::from_secs(5))
            .acquire()
            .await
            .unwrap_or_else(|e| panic!("{}: {e}", store.name()));
        got.release().await.expect("release");
    }
}
