//! `#[distributed_lock]` (also with `kind = "fair"`) and `#[distributed_semaphore]` on a client
//! of either store: the same annotated functions, unchanged, whichever URL the client was built
//! from.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use dlock::{current_lock, distributed_lock, distributed_semaphore, LockClient, LockError};

use super::both::{stores, Need};

#[derive(Debug)]
struct AppError(String);

impl From<LockError> for AppError {
    fn from(e: LockError) -> Self {
        AppError(e.to_string())
    }
}

/// A read and a write in two steps: only exclusion keeps every increment.
#[distributed_lock(key = "stores:attr:{name}", client = locks, ttl = "30s", wait = "20s")]
async fn bump(locks: &LockClient, name: &str, counter: &AtomicUsize) -> Result<(), AppError> {
    let seen = counter.load(Ordering::SeqCst);
    tokio::task::yield_now().await;
    counter.store(seen + 1, Ordering::SeqCst);
    Ok(())
}

#[distributed_semaphore(key = "stores:attr:sem", permits = 2, client = locks, ttl = "30s", wait = "20s")]
async fn inside(locks: &LockClient, now: &AtomicUsize, peak: &AtomicUsize) -> Result<(), AppError> {
    let n = now.fetch_add(1, Ordering::SeqCst) + 1;
    peak.fetch_max(n, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(10)).await;
    now.fetch_sub(1, Ordering::SeqCst);
    Ok(())
}

/// The same increment under the fair lock of that name; `held` says whether the fair lock was
/// held (and the plain lock of the same name free) while the body ran.
#[distributed_lock(key = "stores:attr:fair:{name}", kind = "fair", client = locks, ttl = "30s", wait = "20s")]
async fn bump_fairly(
    locks: &LockClient,
    name: &str,
    counter: &AtomicUsize,
    held: &AtomicUsize,
) -> Result<(), AppError> {
    let key = format!("stores:attr:fair:{name}");
    if locks.fair_lock(&key).is_locked().await? && !locks.lock(&key).is_locked().await? {
        held.fetch_add(1, Ordering::SeqCst);
    }
    let seen = counter.load(Ordering::SeqCst);
    tokio::task::yield_now().await;
    counter.store(seen + 1, Ordering::SeqCst);
    Ok(())
}

#[distributed_lock(key = "stores:attr:fails", client = locks, wait = "0s")]
async fn fails(locks: &LockClient) -> Result<(), AppError> {
    Err(AppError("the body failed".into()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_annotated_functions_run_on_every_store() {
    for store in stores() {
        if !store.can(Need::Semaphore) {
            continue;
        }
        let (a, b) = (store.client().await, store.client().await);
        let counter = AtomicUsize::new(0);
        let calls = (0..10).map(|i| {
            let client = if i % 2 == 0 { &a } else { &b };
            bump(client, "n", &counter)
        });
        for r in futures_util::future::join_all(calls).await {
            r.unwrap_or_else(|e| panic!("{}: {e:?}", store.name()));
        }
        assert_eq!(
            counter.load(Ordering::SeqCst),
            10,
            "{}: lost updates",
            store.name()
        );

        let (now, peak) = (AtomicUsize::new(0), AtomicUsize::new(0));
        let calls = (0..6).map(|i| inside(if i % 2 == 0 { &a } else { &b }, &now, &peak));
        for r in futures_util::future::join_all(calls).await {
            r.unwrap_or_else(|e| panic!("{}: {e:?}", store.name()));
        }
        let peak = peak.load(Ordering::SeqCst);
        assert!(
            (1..=2).contains(&peak),
            "{}: {peak} bodies inside 2 permits",
            store.name()
        );

        // The body's error comes back, and the lock is given back on that way out too.
        let Err(AppError(said)) = fails(&a).await else {
            panic!("{}: the failing body succeeded", store.name());
        };
        assert_eq!(said, "the body failed");
        assert!(
            !a.lock("stores:attr:fails")
                .is_locked()
                .await
                .expect("is_locked"),
            "{}: held after the body failed",
            store.name()
        );
    }
}

/// The read side of a document; inside `edit_doc` it is the writer's own read.
#[distributed_lock(key = "stores:attr:doc:{id}", kind = "read", client = locks, wait = "0s")]
async fn read_doc(locks: &LockClient, id: u32) -> Result<bool, AppError> {
    Ok(current_lock().is_some_and(|l| !l.is_lost()))
}

/// A writer calling a read helper on its own key twice: each call takes and gives back the
/// read side. Returns whether both reads and the write hold were unlost inside.
#[distributed_lock(key = "stores:attr:doc:{id}", kind = "write", client = locks, wait = "5s")]
async fn edit_doc(locks: &LockClient, id: u32) -> Result<bool, AppError> {
    let first = read_doc(locks, id).await?;
    let second = read_doc(locks, id).await?;
    Ok(first && second && current_lock().is_some_and(|l| !l.is_lost()))
}

/// Issue 36 through the attribute: a `kind = "write"` function calling a `kind = "read"`
/// helper on the same key twice gets both reads, and keeps its write hold to the end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_function_calls_a_read_helper_twice() {
    for store in stores() {
        let (a, b) = (store.client().await, store.client().await);
        let kept = edit_doc(&a, 7)
            .await
            .unwrap_or_else(|e| panic!("{}: {e:?}", store.name()));
        assert!(
            kept,
            "{}: a hold was lost inside the write function",
            store.name()
        );
        // The attribute's release is written when the function returns, and answered in
        // the background: another client gets the lock once it lands (woken by it).
        let after = b
            .read_write_lock("stores:attr:doc:7")
            .write()
            .wait(Duration::from_secs(5))
            .acquire()
            .await
            .unwrap_or_else(|e| panic!("{}: held after the write function: {e}", store.name()));
        after.release().await.expect("release");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kind_fair_runs_on_every_store() {
    for store in stores() {
        let (a, b) = (store.client().await, store.client().await);
        let (counter, held) = (AtomicUsize::new(0), AtomicUsize::new(0));
        let calls = (0..10).map(|i| {
            let client = if i % 2 == 0 { &a } else { &b };
            bump_fairly(client, "n", &counter, &held)
        });
        for r in futures_util::future::join_all(calls).await {
            r.unwrap_or_else(|e| panic!("{}: {e:?}", store.name()));
        }
        assert_eq!(
            counter.load(Ordering::SeqCst),
            10,
            "{}: lost updates",
            store.name()
        );
        assert_eq!(
            held.load(Ordering::SeqCst),
            10,
            "{}: a body ran without the fair lock",
            store.name()
        );
        // Each call returns once its release is written on its client's connection; the
        // last one may have been `b`'s, whose release `a` does not see before it lands.
        let lock = a.fair_lock("stores:attr:fair:n");
        let what = format!("{}: given back after the calls returned", store.name());
        super::common::eventually(Duration::from_secs(5), &what, || {
            let lock = lock.clone();
            async move { !lock.is_locked().await.expect("is_locked") }
        })
        .await;
    }
}
