//! Release on every way out (DESIGN §4): `?`, panic and cancellation all drop the guard, which
//! releases in the background. With a 60 s TTL the key must be gone within a small bound, so a
//! pass here cannot be the lease running out.

use crate::common;

use std::time::Duration;

use dlock::{Lock, LockError};

const LONG_TTL: Duration = Duration::from_secs(60);
const SMALL_BOUND: Duration = Duration::from_secs(2);

#[derive(Debug)]
enum AppError {
    Lock(#[allow(dead_code)] LockError),
    Business,
}

impl From<LockError> for AppError {
    fn from(e: LockError) -> Self {
        AppError::Lock(e)
    }
}

/// Takes the lock, then fails half-way: the `?` returns with the guard still alive.
async fn pay(lock: &Lock, fail: bool) -> Result<u64, AppError> {
    let guard = lock.acquire().await?;
    let check: Result<(), AppError> = if fail {
        Err(AppError::Business)
    } else {
        Ok(())
    };
    check?;
    let token = guard.fencing_token();
    guard.release().await?;
    Ok(token)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_error_return_with_question_mark_releases() {
    let server = common::server();
    let client = common::client(&server).await;
    let lock = client.lock("question-mark").ttl(LONG_TTL);

    // The normal path releases before returning: free as soon as the call is back.
    pay(&lock, false).await.unwrap();
    assert!(!lock.is_locked().await.unwrap());

    assert!(matches!(pay(&lock, true).await, Err(AppError::Business)));
    common::until_unlocked(&lock, SMALL_BOUND).await;
    // And another client can take it right away.
    let other = common::client(&server).await;
    let g = other.lock("question-mark").try_acquire().await.unwrap();
    assert!(g.is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panic_in_the_holding_task_releases() {
    let server = common::server();
    let client = common::client(&server).await;
    let lock = client.lock("panic").ttl(LONG_TTL);

    let l = lock.clone();
    let task = tokio::spawn(async move {
        let _guard = l.acquire().await.unwrap();
        assert!(l.is_locked().await.unwrap());
        panic!("the body failed while holding the lock");
    });
    let err = task.await.expect_err("the task panicked");
    assert!(err.is_panic());
    common::until_unlocked(&lock, SMALL_BOUND).await;
    // The client's own queue for the key was given back too.
    common::until_taken_here(&lock, SMALL_BOUND).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_future_dropped_mid_hold_releases() {
    let server = common::server();
    let client = common::client(&server).await;
    let lock = client.lock("cancelled").ttl(LONG_TTL);

    let (held_tx, held_rx) = tokio::sync::oneshot::channel();
    let body = async {
        let _guard = lock.acquire().await.unwrap();
        let _ = held_tx.send(());
        // A request handler that never finishes: only a timeout ends it.
        std::future::pending::<()>().await;
    };
    // The timeout (generous, so the acquire inside finishes first even on a loaded machine)
    // drops the body while it holds the guard; `held_rx` proves the body got that far.
    let outcome = tokio::time::timeout(Duration::from_secs(1), body).await;
    assert!(outcome.is_err(), "the body cannot finish");
    held_rx
        .await
        .expect("the body held the lock before it was cancelled");
    common::until_unlocked(&lock, SMALL_BOUND).await;
    common::until_taken_here(&lock, SMALL_BOUND).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_aborted_task_releases() {
    let server = common::server();
    let client = common::client(&server).await;
    let lock = client.lock("aborted").ttl(LONG_TTL);
    let (held_tx, held_rx) = tokio::sync::oneshot::channel();
    let l = lock.clone();
    let task = tokio::spawn(async move {
        let _guard = l.acquire().await.unwrap();
        let _ = held_tx.send(());
        std::future::pending::<()>().await;
    });
    held_rx.await.unwrap();
    task.abort();
    assert!(task.await.unwrap_err().is_cancelled());
    common::until_unlocked(&lock, SMALL_BOUND).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_in_the_same_client_gets_the_lock_of_a_dropped_guard() {
    // Dropping gives the client's local queue back as well, not only the Redis key.
    let server = common::server();
    let client = common::client(&server).await;
    let lock = client.lock("local-handoff").ttl(LONG_TTL);
    let guard = lock.acquire().await.unwrap();
    let first = guard.fencing_token();
    let l = lock.clone().wait(Duration::from_secs(10));
    let waiter = tokio::spawn(async move { l.acquire().await.map(|g| g.fencing_token()) });
    drop(guard);
    let token = tokio::time::timeout(Duration::from_secs(5), waiter)
        .await
        .expect("local waiter not served within 5 s of the drop")
        .unwrap()
        .unwrap();
    assert!(token > first);
}
