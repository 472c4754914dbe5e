//! The fair lock on every store: first come, first served across clients and processes; a
//! release hands the lock to the head of the store's queue and tells it, so it holds without
//! asking again; a waiter that stops keeping its place (its process died) is skipped within a
//! few seconds; one that gives up leaves the queue at once. From `dlock::blocking` and
//! `#[distributed_lock(kind = "fair")]` (in `attribute.rs`) too.
//!
//! The dead-waiter test re-executes this binary (`--exact fair::child_process_entry`) with
//! `DLOCK_STORES_FAIR_CHILD_URL` set: the child queues for the lock and is killed while queued.

use std::time::Duration;

use dlock::{LockClient, LockError};
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::both::{stores, Need, Store};
use crate::common;
use crate::common::child;

const NAME: &str = "stores:fair:line";

/// The child side: queue for `NAME` (held by the parent) until killed.
#[test]
fn child_process_entry() {
    let Ok(url) = std::env::var("DLOCK_STORES_FAIR_CHILD_URL") else {
        return;
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async move {
        let client = LockClient::connect(&url).await.unwrap();
        println!("QUEUEING");
        let got = client
            .fair_lock(NAME)
            .wait(Duration::from_secs(60))
            .acquire()
            .await;
        println!("GOT {}", got.is_ok());
        std::future::pending::<()>().await;
    });
}

/// The store key of the fair lock `NAME`.
fn key(client: &LockClient) -> String {
    client.fair_lock(NAME).key().to_owned()
}

/// Waits (bounded) until the store shows `n` places in the queue.
async fn until_queued(store: &Store, key: &str, n: usize) {
    until_queue_is(store, key, n, Duration::from_secs(10)).await;
}

/// Waits until the store shows `n` places in the queue; panics after `within`.
async fn until_queue_is(store: &Store, key: &str, n: usize, within: Duration) {
    let what = format!("{}: {n} queued", store.name());
    common::eventually(
        within,
        &what,
        move || async move { store.fair_queue(key) == n },
    )
    .await;
}

/// Starts a waiter of `client` that reports `tag` on `order` when it holds, then releases.
fn waiter(
    client: &LockClient,
    tag: &'static str,
    order: &mpsc::UnboundedSender<&'static str>,
) -> tokio::task::JoinHandle<Result<(), LockError>> {
    let lock = client.fair_lock(NAME).wait(Duration::from_secs(20));
    let order = order.clone();
    tokio::spawn(async move {
        let guard = lock.acquire().await?;
        order.send(tag).unwrap();
        guard.release().await
    })
}

/// A waiter that returns its guard and when it got it.
fn holder_to_be(
    client: &LockClient,
    ttl: Duration,
) -> tokio::task::JoinHandle<Result<(Instant, dlock::LockGuard), LockError>> {
    let lock = client
        .fair_lock(NAME)
        .ttl(ttl)
        .wait(Duration::from_secs(20));
    tokio::spawn(async move { lock.acquire().await.map(|g| (Instant::now(), g)) })
}

/// The tags of the next `n` waiters that got their turn, in that order.
async fn turns(rx: &mut mpsc::UnboundedReceiver<&'static str>, n: usize) -> Vec<&'static str> {
    let mut got = Vec::new();
    for _ in 0..n {
        let tag = tokio::time::timeout(Duration::from_secs(10), rx.recv())
            .await
            .expect("each waiter gets its turn")
            .unwrap();
        got.push(tag);
    }
    got
}

/// Clients stand for processes; the order they queued in is not the order they were made in,
/// and tasks of the holder's own client keep their place among the others' (they queue in the
/// store, not in their client first).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_get_the_lock_in_the_order_they_asked_whichever_client_asked() {
    for store in stores() {
        if !store.can(Need::FairQueue) {
            continue;
        }
        let holder = store.client().await;
        let (a, b) = (store.client().await, store.client().await);
        let key = key(&holder);
        let held = holder.fair_lock(NAME).acquire().await.unwrap();
        let first_token = held.fencing_token();
        let (tx, mut rx) = mpsc::unbounded_channel();
        let plan = [("b", &b), ("h1", &holder), ("a", &a), ("h2", &holder)];
        let mut tasks = Vec::new();
        for (place, (tag, client)) in plan.into_iter().enumerate() {
            tasks.push(waiter(client, tag, &tx));
            until_queued(&store, &key, place + 1).await;
        }
        held.release().await.unwrap();
        let got = turns(&mut rx, plan.len()).await;
        assert_eq!(got, ["b", "h1", "a", "h2"], "{}", store.name());
        for t in tasks {
            t.await.unwrap().unwrap();
        }
        assert_eq!(store.fair_queue(&key), 0, "{}", store.name());
        let again = holder.fair_lock(NAME).acquire().await.unwrap();
        assert!(again.fencing_token() > first_token, "{}", store.name());
        again.release().await.unwrap();
    }
}

/// The release grants the waiter itself and tells it: the waiter holds a lease of the grant's
/// life (2 s) that no request of its own set (one would have set its 30 s lease), then renews
/// it to its lease within that life and keeps it past it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_hands_the_lock_to_the_waiter_and_tells_it() {
    for store in stores() {
        if !store.can(Need::FairQueue) {
            continue;
        }
        let (holder, waiter) = (store.client().await, store.client().await);
        let key = key(&holder);
        let held = holder.fair_lock(NAME).acquire().await.unwrap();
        let waiting = holder_to_be(&waiter, Duration::from_secs(30));
        until_queued(&store, &key, 1).await;
        // Its next visit to keep its place comes after it subscribed (it subscribes after its
        // first refusal, then asks again), so the grant reaches it as a message. Released right
        // after that visit: its first renewal, due a third of the grant's life after its last
        // request, comes well after the grant is read below.
        let seen = store.fair_keep_alive(&key);
        let (s, k, seen) = (&store, key.as_str(), seen.as_str());
        common::eventually(
            Duration::from_secs(5),
            "the waiter's next visit",
            move || async move { s.fair_keep_alive(k) != seen },
        )
        .await;
        let released = Instant::now();
        held.release().await.unwrap();
        let (got_at, guard) = waiting.await.unwrap().unwrap();
        let at_grant = waiter.fair_lock(NAME).remaining_ttl().await.unwrap();
        let handoff = got_at - released;
        assert!(
            handoff < Duration::from_secs(1),
            "{}: handed over in {handoff:?}",
            store.name()
        );
        assert!(
            at_grant.is_some_and(|t| t > Duration::ZERO && t <= Duration::from_secs(2)),
            "{}: held from the grant's message, whose life is 2 s: {at_grant:?} left",
            store.name()
        );
        let lock = waiter.fair_lock(NAME);
        let what = format!("{}: renewed to the 30 s lease", store.name());
        common::eventually(Duration::from_secs(3), &what, || {
            let lock = lock.clone();
            async move {
                (lock.remaining_ttl().await.unwrap()).is_some_and(|t| t > Duration::from_secs(2))
            }
        })
        .await;
        // Past the grant's own life: still this holder's, and nobody else's.
        tokio::time::sleep_until(got_at + Duration::from_millis(2_500)).await;
        assert!(!guard.is_lost(), "{}", store.name());
        assert!(
            holder
                .fair_lock(NAME)
                .try_acquire()
                .await
                .unwrap()
                .is_none(),
            "{}: taken past the grant's life",
            store.name()
        );
        guard.release().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_queued_waiter_is_skipped_within_a_few_seconds() {
    for store in stores() {
        if !store.can(Need::FairQueue) {
            continue;
        }
        let (holder, next) = (store.client().await, store.client().await);
        let key = key(&holder);
        let held = holder.fair_lock(NAME).acquire().await.unwrap();

        let url = store.url();
        let env = [("DLOCK_STORES_FAIR_CHILD_URL", url.as_str())];
        let (mut child, mut lines) = child::spawn(module_path!(), "child_process_entry", &env);
        child::expect_line(&mut lines, "QUEUEING").await;
        until_queued(&store, &key, 1).await;
        // Then a live waiter behind it.
        let waiting = holder_to_be(&next, Duration::from_secs(30));
        until_queued(&store, &key, 2).await;
        child.kill().await.unwrap();
        let killed = Instant::now();
        // The dead waiter stops keeping its place: it is dropped once its keep-alive deadline
        // (2 s after its last visit, made at most 2/3 s before the kill) passes by the store's
        // clock, at the live waiter's next visit. Not before 1 s, within 4 s.
        until_queued(&store, &key, 1).await;
        let dropped = killed.elapsed();
        assert!(
            dropped > Duration::from_secs(1) && dropped < Duration::from_secs(4),
            "{}: dropped after {dropped:?}",
            store.name()
        );
        // Skipped: the release hands the lock straight to the live waiter.
        let released = Instant::now();
        held.release().await.unwrap();
        let (got_at, guard) = waiting
            .await
            .unwrap()
            .unwrap_or_else(|e| panic!("{}: the live waiter: {e}", store.name()));
        let took = got_at - released;
        assert!(
            took < Duration::from_secs(1),
            "{}: handed over after {took:?}",
            store.name()
        );
        assert_eq!(store.fair_queue(&key), 0, "{}", store.name());
        guard.release().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reentry_and_exclusion_work_like_the_plain_lock() {
    for store in stores() {
        let (a, b) = (store.client().await, store.client().await);
        let lock = a.fair_lock(NAME);
        let outer = lock.acquire().await.unwrap();
        let inner = outer
            .scope(async { lock.clone().wait(Duration::ZERO).acquire().await })
            .await
            .unwrap_or_else(|e| panic!("{}: re-entry: {e}", store.name()));
        assert_eq!(inner.hold_count(), 2, "{}", store.name());
        assert!(b.fair_lock(NAME).try_acquire().await.unwrap().is_none());
        inner.release().await.unwrap();
        assert!(
            b.fair_lock(NAME).try_acquire().await.unwrap().is_none(),
            "{}: free after the inner release",
            store.name()
        );
        // A plain lock of the same name is another lock.
        let plain = b.lock(NAME).try_acquire().await.unwrap();
        assert!(plain.is_some(), "{}", store.name());
        outer.release().await.unwrap();
        let g = b.fair_lock(NAME).try_acquire().await.unwrap();
        assert!(
            g.is_some(),
            "{}: held after the outer release",
            store.name()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_that_times_out_or_is_cancelled_leaves_the_queue_at_once() {
    for store in stores() {
        if !store.can(Need::FairQueue) {
            continue;
        }
        let (holder, quitter, next) = (
            store.client().await,
            store.client().await,
            store.client().await,
        );
        let key = key(&holder);
        let held = holder.fair_lock(NAME).acquire().await.unwrap();

        // Cancelled: the future is dropped while queued.
        let cancelled = tokio::spawn({
            let lock = quitter.fair_lock(NAME).wait(Duration::from_secs(30));
            async move { lock.acquire().await.map(|_| ()) }
        });
        until_queued(&store, &key, 1).await;
        cancelled.abort();
        // The cancelled waiter left.
        until_queue_is(&store, &key, 0, Duration::from_secs(2)).await;

        // Timed out: gone by the time the error is returned.
        let err = quitter
            .fair_lock(NAME)
            .wait(Duration::from_millis(300))
            .acquire()
            .await
            .unwrap_err();
        assert!(matches!(err, LockError::Timeout { .. }), "{err:?}");
        assert_eq!(store.fair_queue(&key), 0, "{}", store.name());

        // Neither blocks the next waiter: it gets the lock right after the release.
        let waiting = holder_to_be(&next, Duration::from_secs(30));
        until_queued(&store, &key, 1).await;
        let released = Instant::now();
        held.release().await.unwrap();
        let (got_at, guard) = waiting.await.unwrap().unwrap();
        assert!(
            got_at - released < Duration::from_secs(1),
            "{}: handed over in {:?}",
            store.name(),
            got_at - released
        );
        guard.release().await.unwrap();
    }
}

/// A guard dropped without a release (a panic, a cancelled body) gives the lock to the next
/// waiter at once, not after its 30 s lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_guard_hands_the_lock_on() {
    for store in stores() {
        if !store.can(Need::FairQueue) {
            continue;
        }
        let (holder, next) = (store.client().await, store.client().await);
        let key = key(&holder);
        let held = holder.fair_lock(NAME).acquire().await.unwrap();
        let waiting = holder_to_be(&next, Duration::from_secs(30));
        until_queued(&store, &key, 1).await;
        let dropped = Instant::now();
        drop(held);
        let (got_at, guard) = tokio::time::timeout(Duration::from_secs(10), waiting)
            .await
            .unwrap_or_else(|_| panic!("{}: not handed on within 10 s", store.name()))
            .unwrap()
            .unwrap();
        assert!(
            got_at - dropped < Duration::from_secs(2),
            "{}: handed on {:?} after the drop",
            store.name(),
            got_at - dropped
        );
        assert_eq!(store.fair_queue(&key), 0, "{}", store.name());
        guard.release().await.unwrap();
    }
}

/// Drives `acquire` (which must not finish) until `check` holds, then stops polling it.
async fn drive_until<F, Fut>(acquire: &mut common::Acquiring, what: &str, check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    tokio::select! {
        got = acquire.as_mut() => panic!("{what}: the acquire ended first: {:?}", got.map(|_| ())),
        _ = common::eventually(Duration::from_secs(10), what, check) => {}
    }
}

/// Issue 28, defect 7: a waiter granted the lock by a release and dropped before it took the
/// grant hands the lock on at once (its give-up release, or the undo of an attempt still on
/// the wire, finds the grant and grants the next). B's acquire is polled by hand and not
/// between A's release (which grants B) and its drop, so B is always dropped with the grant
/// made and unseen. "At once" is under the grant's 2 s life, after which it would expire.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_to_an_acquire_dropped_as_it_is_granted_goes_on_to_the_next_waiter() {
    for store in stores() {
        if !store.can(Need::FairQueue) {
            continue;
        }
        let (a, b, c) = (
            store.client().await,
            store.client().await,
            store.client().await,
        );
        let key = key(&a);
        let held = a.fair_lock(NAME).acquire().await.unwrap();
        let mut b_acquire: common::Acquiring = Box::pin({
            let lock = b.fair_lock(NAME).wait(Duration::from_secs(20));
            async move { lock.acquire().await }
        });
        let (s, k) = (&store, key.as_str());
        drive_until(&mut b_acquire, "B queued", move || async move {
            s.fair_queue(k) == 1
        })
        .await;
        let c_waiting = holder_to_be(&c, Duration::from_secs(30));
        // B is still driven, so it keeps its place while C queues behind it.
        drive_until(&mut b_acquire, "C queued behind B", move || async move {
            s.fair_queue(k) == 2
        })
        .await;

        let released = Instant::now();
        held.release().await.unwrap();
        assert_eq!(
            store.fair_queue(&key),
            1,
            "{}: B was granted, C still queued",
            store.name()
        );
        drop(b_acquire);

        let (got_at, guard) = tokio::time::timeout(Duration::from_secs(5), c_waiting)
            .await
            .unwrap_or_else(|_| panic!("{}: C did not get the lock within 5 s", store.name()))
            .unwrap()
            .expect("C gets the lock");
        let took = got_at - released;
        assert!(
            took < Duration::from_secs(1),
            "{}: handed on after {took:?}: B's grant was left to expire",
            store.name()
        );
        assert!(!guard.is_lost());
        assert!(a.fair_lock(NAME).try_acquire().await.unwrap().is_none());
        guard.release().await.unwrap();
    }
}

/// `dlock::blocking`'s fair lock, from plain threads: a waiter on another thread (another
/// client) queues in the store and is handed the lock by the release.
#[test]
fn the_blocking_fair_lock_queues_and_is_handed_over() {
    for store in stores() {
        if !store.can(Need::FairQueue) {
            continue;
        }
        let a = dlock::blocking::LockClient::connect(&store.url()).unwrap();
        let b = dlock::blocking::LockClient::connect(&store.url()).unwrap();
        let key = key(a.as_async());
        let guard = a.fair_lock(NAME).acquire().unwrap();
        let token = guard.fencing_token();
        let waiter = std::thread::spawn(move || {
            let got = (b.fair_lock(NAME).wait(Duration::from_secs(20)).acquire())
                .map(|g| (std::time::Instant::now(), g.fencing_token()));
            (got, b)
        });
        let started = std::time::Instant::now();
        while store.fair_queue(&key) != 1 {
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "{}: the blocking waiter never queued",
                store.name()
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        let released = std::time::Instant::now();
        guard.release().unwrap();
        let (got, b) = waiter.join().unwrap();
        let (got_at, next) = got.unwrap_or_else(|e| panic!("{}: {e}", store.name()));
        assert!(next > token, "{}: tokens rise", store.name());
        assert!(
            got_at - released < Duration::from_secs(1),
            "{}: handed over after {:?}",
            store.name(),
            got_at - released
        );
        drop(b);
        assert_eq!(store.fair_queue(&key), 0, "{}", store.name());
    }
}
