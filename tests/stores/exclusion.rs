//! Exclusion, re-entry along the call chain, release on every way out, fencing tokens.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use super::both::stores;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_holder_at_a_time_across_clients_with_rising_tokens() {
    for store in stores() {
        let (a, b) = (store.client().await, store.client().await);
        // A counter read and written in two steps: only exclusion keeps every increment.
        let counter = Arc::new(AtomicU64::new(0));
        let last_token = Arc::new(AtomicU64::new(0));
        let mut tasks = Vec::new();
        for (i, client) in [a.clone(), b.clone(), a, b].into_iter().enumerate() {
            let (counter, last_token) = (counter.clone(), last_token.clone());
            tasks.push(tokio::spawn(async move {
                for _ in 0..25 {
                    let guard = (client.lock("stores:exclusion"))
                        .wait(Duration::from_secs(20))
                        .acquire()
                        .await
                        .unwrap_or_else(|e| panic!("task {i}: {e}"));
                    let token = guard.fencing_token();
                    let before = last_token.swap(token, Ordering::SeqCst);
                    assert!(token > before, "token {token} after {before}");
                    let seen = counter.load(Ordering::SeqCst);
                    tokio::task::yield_now().await;
                    counter.store(seen + 1, Ordering::SeqCst);
                    guard.release().await.expect("release");
                }
            }));
        }
        for t in tasks {
            t.await.unwrap_or_else(|e| panic!("{}: {e}", store.name()));
        }
        assert_eq!(counter.load(Ordering::SeqCst), 100, "{}", store.name());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_client_is_refused_while_held_and_served_after() {
    for store in stores() {
        let (a, b) = (store.client().await, store.client().await);
        let lock = a.lock("stores:busy");
        let guard = lock.acquire().await.expect("acquire");
        assert!(
            lock.is_locked().await.expect("is_locked"),
            "{}",
            store.name()
        );
        let left = lock.remaining_ttl().await.expect("remaining_ttl");
        assert!(
            left.is_some_and(|l| l > Duration::ZERO && l <= Duration::from_secs(30)),
            "{}: {left:?}",
            store.name()
        );
        let other = b.lock("stores:busy");
        assert!(
            other.try_acquire().await.expect("try").is_none(),
            "{}: a second owner got in",
            store.name()
        );
        guard.release().await.expect("release");
        assert!(
            !lock.is_locked().await.expect("is_locked"),
            "{}",
            store.name()
        );
        let again = other.try_acquire().await.expect("try").expect("free now");
        again.release().await.expect("release");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn re_entry_along_the_call_chain_counts_and_the_last_release_frees() {
    for store in stores() {
        let client = store.client().await;
        let lock = client.lock("stores:reentry");
        let outer = lock.acquire().await.expect("acquire");
        let inner_count = outer
            .scope(async {
                let inner = lock.acquire().await.expect("re-enter");
                let n = inner.hold_count();
                inner.release().await.expect("inner release");
                n
            })
            .await;
        assert_eq!(inner_count, 2, "{}", store.name());
        assert!(
            lock.is_locked().await.expect("is_locked"),
            "{}: the outer hold remains",
            store.name()
        );
        outer.release().await.expect("outer release");
        assert!(
            !lock.is_locked().await.expect("is_locked"),
            "{}",
            store.name()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_body_and_a_dropped_guard_release_the_lock() {
    for store in stores() {
        let client = store.client().await;
        let lock = client.lock("stores:panic");
        let held = lock.clone();
        let body = tokio::spawn(async move {
            let _guard = held.acquire().await.expect("acquire");
            panic!("the body fails");
        });
        assert!(body.await.is_err());
        // Released in the background: free within a bound, not at the end of the 30 s lease.
        let other = store.client().await;
        let got = other
            .lock("stores:panic")
            .wait(Duration::from_secs(5))
            .acquire()
            .await
            .unwrap_or_else(|e| panic!("{}: {e}", store.name()));
        got.release().await.expect("release");
    }
}
