//! Reentrancy follows the call chain (DESIGN §4): an acquire inside `guard.scope(..)` of the
//! same lock re-enters the hold; a spawned task, or a second top-level acquire joined beside the
//! first in the same task, is another owner and waits.

use crate::common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use dlock::LockError;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nested_acquire_in_scope_counts_holds_and_the_last_release_frees() {
    let server = common::server();
    let client = common::client(&server).await;
    let lock = client.lock("reentrant");

    let outer = lock.acquire().await.unwrap();
    assert_eq!(outer.hold_count(), 1);
    let token = outer.fencing_token();

    outer
        .scope(async {
            // A deeper call in the holder's chain takes the same lock: it must not wait for
            // itself (wait 0 would time out at once if it did).
            let inner = lock
                .clone()
                .wait(Duration::ZERO)
                .acquire()
                .await
                .expect("re-entry");
            assert_eq!(inner.hold_count(), 2);
            assert_eq!(outer.hold_count(), 2);
            assert_eq!(
                inner.fencing_token(),
                token,
                "re-entry keeps the holder's token"
            );
            inner.release().await.unwrap();
        })
        .await;

    // One of two holds released: still held, by us.
    assert_eq!(outer.hold_count(), 1);
    assert!(lock.is_locked().await.unwrap());
    let other = common::client(&server).await;
    assert!(other
        .lock("reentrant")
        .try_acquire()
        .await
        .unwrap()
        .is_none());

    outer.release().await.unwrap();
    assert!(
        !lock.is_locked().await.unwrap(),
        "last release frees at once"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn re_entry_inside_a_nested_call_chain_and_drop_order_do_not_matter() {
    let server = common::server();
    let client = common::client(&server).await;
    let lock = client.lock("chain");

    async fn deeper(lock: &dlock::Lock) -> Result<u32, LockError> {
        let g = lock.acquire().await?;
        let n = g.hold_count();
        // Dropped, not released: the re-entry's drop must only give back its own hold.
        drop(g);
        Ok(n)
    }

    let outer = lock.acquire().await.unwrap();
    let (a, b) = outer
        .scope(async {
            let g2 = lock.acquire().await.unwrap();
            let n = deeper(&lock).await.unwrap();
            (g2, n)
        })
        .await;
    assert_eq!(b, 3);
    // Release the outer guard first: the re-entered one still holds the lock.
    outer.release().await.unwrap();
    assert!(lock.is_locked().await.unwrap(), "a re-entered hold remains");
    a.release().await.unwrap();
    assert!(!lock.is_locked().await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_spawned_by_the_holder_is_another_owner() {
    let server = common::server();
    let client = common::client(&server).await;
    let lock = client.lock("spawned");
    let guard = lock.acquire().await.unwrap();
    let released = Arc::new(AtomicBool::new(false));

    let (try_result, waiter) = guard
        .scope(async {
            // Spawned from inside the holder's scope: the scope does not follow it.
            let l = lock.clone();
            let tried = tokio::spawn(async move { l.try_acquire().await.map(|g| g.is_some()) });
            let l = lock.clone();
            let flag = released.clone();
            let waiter = tokio::spawn(async move {
                let g = l.wait(Duration::from_secs(20)).acquire().await.unwrap();
                // Only possible after the holder gave the lock back.
                let after_release = flag.load(Ordering::SeqCst);
                g.release().await.unwrap();
                after_release
            });
            (tried.await.unwrap(), waiter)
        })
        .await;
    assert!(
        !try_result.unwrap(),
        "spawned try_acquire must not re-enter"
    );

    // Hold a while so a wrongly re-entering waiter would get in before the flag is set.
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(
        !waiter.is_finished(),
        "spawned waiter got the lock while it was held"
    );
    released.store(true, Ordering::SeqCst);
    guard.release().await.unwrap();
    let got_it_after_release = tokio::time::timeout(Duration::from_secs(5), waiter)
        .await
        .expect("waiter did not get the lock within 5 s of the release")
        .unwrap();
    assert!(got_it_after_release);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_top_level_acquires_joined_in_one_task_never_overlap() {
    let server = common::server();
    let client = common::client(&server).await;
    let lock = client.lock("joined").wait(Duration::from_secs(20));
    let log = Mutex::new(Vec::new());

    let critical = |who: &'static str| {
        let (lock, log) = (&lock, &log);
        async move {
            let g = lock.acquire().await.unwrap();
            log.lock().unwrap().push((who, "enter"));
            // Work that yields: a wrongly shared hold would let the other future in here.
            for _ in 0..10 {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            log.lock().unwrap().push((who, "exit"));
            g.release().await.unwrap();
        }
    };
    tokio::join!(critical("a"), critical("b"));

    let log = log.into_inner().unwrap();
    assert_eq!(log.len(), 4);
    assert_eq!(
        log[0].0, log[1].0,
        "the first holder must exit before anyone enters: {log:?}"
    );
    assert_eq!(log[1].1, "exit", "{log:?}");
    assert_eq!(log[2].0, log[3].0, "{log:?}");
    assert_ne!(log[0].0, log[2].0, "{log:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn futures_joined_inside_the_scope_share_the_hold() {
    // The documented other side of the rule: children of the holder re-enter its hold, even
    // when run concurrently.
    let server = common::server();
    let client = common::client(&server).await;
    let lock = client.lock("shared-children");
    let guard = lock.acquire().await.unwrap();
    let child = || async {
        let g = lock.clone().wait(Duration::ZERO).acquire().await.unwrap();
        let count = g.hold_count();
        tokio::task::yield_now().await;
        g.release().await.unwrap();
        count
    };
    let joined = guard.scope(async { tokio::join!(child(), child()) });
    let (a, b) = tokio::time::timeout(Duration::from_secs(5), joined)
        .await
        .expect("children of the holder must not wait for it");
    assert!(a >= 2 && b >= 2, "each child re-entered: {a}, {b}");
    assert_eq!(guard.hold_count(), 1);
    guard.release().await.unwrap();
    assert!(!lock.is_locked().await.unwrap());
}

// Regression (fixed in 0133e04): a re-entry dropped while its request was in flight used to
// leak one local hold, so the last `release()` was not seen as the last and the client kept the
// free lock's local queue until the watchdog's next tick.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_re_entry_gives_back_exactly_its_own_hold() {
    let server = common::server();
    let client = common::client(&server).await;
    let lock = client.lock("cancelled-reentry");
    let mut rng = common::Rng::from_clock();

    let guard = lock.acquire().await.unwrap();
    guard
        .scope(async {
            for _ in 0..50 {
                // Dropped at once or after a few polls: the re-entry request is in flight.
                let attempt = lock.acquire();
                let _ = tokio::time::timeout(Duration::from_micros(rng.below(300)), attempt).await;
            }
        })
        .await;

    // Whatever was granted and cancelled has been undone: one local hold, one in Redis.
    assert_eq!(
        guard.hold_count(),
        1,
        "local hold count leaked by cancelled re-entries"
    );
    let mut conn = common::raw(&server.url()).await;
    common::eventually(Duration::from_secs(2), "redis hold count back to 1", || {
        let mut conn = conn.clone();
        let key = lock.key().to_owned();
        async move {
            let h: Vec<String> = dlock::redis::cmd("HVALS")
                .arg(&key)
                .query_async(&mut conn)
                .await
                .unwrap();
            h == ["1"]
        }
    })
    .await;
    guard.release().await.unwrap();
    assert!(
        !lock.is_locked().await.unwrap(),
        "one release frees the lock"
    );
    // The client's local queue for the key is free too: a new owner gets it at once.
    let again = lock.try_acquire().await.unwrap();
    assert!(
        again.is_some(),
        "lock free in Redis but this client cannot take it"
    );
    assert_eq!(common::lock_keys(&mut conn).await, [lock.key()]);
}
