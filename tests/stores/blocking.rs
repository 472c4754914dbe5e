//! `dlock::blocking` on every store: the plain lock, the read-write lock, the semaphore and the
//! multi-lock from plain threads, and the attributes on plain `fn`s. Plain `#[test]`s: no
//! runtime anywhere in the caller.

use std::time::{Duration, Instant};

use dlock::blocking::LockClient;
use dlock::{distributed_lock, distributed_semaphore, LockError};

use super::both::{stores, Need, Store};

fn client(store: &Store) -> LockClient {
    let builder = dlock::LockClient::builder(store.url()).response_timeout(Duration::from_secs(2));
    LockClient::build(builder).unwrap_or_else(|e| panic!("{}: connect: {e}", store.name()))
}

/// `f` on another thread (another owner for every blocking lock), its result.
fn elsewhere<T: Send>(f: impl FnOnce() -> T + Send) -> T {
    std::thread::scope(|s| s.spawn(f).join().expect("the other thread panicked"))
}

#[test]
fn a_blocking_lock_excludes_re_enters_per_thread_and_wakes_a_waiter() {
    for store in stores() {
        let (a, b) = (client(&store), client(&store));
        let name = store.name();
        let lock = a.lock("stores:blocking:plain").wait(Duration::ZERO);
        let outer = lock.acquire().unwrap_or_else(|e| panic!("{name}: {e}"));
        let inner = lock.acquire().expect("the same thread re-enters");
        assert_eq!(inner.hold_count(), 2, "{name}");
        assert_eq!(inner.fencing_token(), outer.fencing_token(), "{name}");
        let other = elsewhere(|| lock.try_acquire().map(|g| g.is_some()));
        assert!(!other.unwrap(), "{name}: another thread re-entered");
        inner.release().expect("release");
        assert!(
            lock.is_locked().unwrap(),
            "{name}: the inner release freed it"
        );
        // A waiter of another client, on another thread, is woken by the release.
        std::thread::scope(|s| {
            let waiter = s.spawn(|| {
                let started = Instant::now();
                let lock = b
                    .lock("stores:blocking:plain")
                    .wait(Duration::from_secs(10));
                let got = lock.acquire().map(|g| (g.fencing_token(), g.release()));
                (got, started.elapsed())
            });
            // Not a synchronisation: the waiter gets in whether it asked before or after.
            let token = outer.fencing_token();
            outer.release().expect("release");
            let (got, took) = waiter.join().unwrap();
            let (next, released) = got.unwrap_or_else(|e| panic!("{name}: after {took:?}: {e}"));
            released.expect("release");
            assert!(next > token, "{name}: tokens rise: {next} after {token}");
            assert!(
                took < Duration::from_secs(5),
                "{name}: woken after {took:?}"
            );
        });
    }
}

#[test]
fn a_blocking_read_write_lock_shares_excludes_downgrades_and_refuses_upgrades() {
    for store in stores() {
        let (a, b) = (client(&store), client(&store));
        let name = store.name();
        let rw_a = a.read_write_lock("stores:blocking:rw");
        let rw_b = b.read_write_lock("stores:blocking:rw");
        let r1 = rw_a
            .read()
            .acquire()
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        let r2 = elsewhere(|| rw_b.read().try_acquire().map(|g| g.map(|g| g.release())));
        r2.unwrap().expect("readers share").expect("release");
        let writer = elsewhere(|| rw_b.write().try_acquire().map(|g| g.is_some()));
        assert!(!writer.unwrap(), "{name}: a writer beside a reader");
        // An upgrade on this thread would wait for itself.
        match rw_a.write().try_acquire() {
            Err(LockError::WouldDeadlock { name: lock, .. }) => {
                assert_eq!(lock, "stores:blocking:rw", "{name}")
            }
            other => panic!("{name}: an upgrade: {other:?}"),
        }
        r1.release().expect("release");
        // A downgrade: the writer takes the read side, lets the write side go, still reads.
        let w = rw_a
            .write()
            .acquire()
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        let r = rw_a
            .read()
            .wait(Duration::ZERO)
            .acquire()
            .expect("a downgrade");
        let reader = elsewhere(|| rw_b.read().try_acquire().map(|g| g.is_some()));
        assert!(
            !reader.unwrap(),
            "{name}: a reader of another owner beside a writer"
        );
        w.release().expect("release");
        let writer = elsewhere(|| rw_b.write().try_acquire().map(|g| g.is_some()));
        assert!(
            !writer.unwrap(),
            "{name}: the downgraded read hold was lost"
        );
        r.release().expect("release");
        let writer = elsewhere(|| rw_b.write().try_acquire().map(|g| g.is_some()));
        assert!(writer.unwrap(), "{name}: still held after every release");
    }
}

#[test]
fn a_blocking_semaphore_lets_in_its_permits_and_no_more() {
    for store in stores() {
        if !store.can(Need::Semaphore) {
            continue;
        }
        let (a, b) = (client(&store), client(&store));
        let name = store.name();
        let sem = a.semaphore("stores:blocking:sem", 2);
        let one = sem.acquire().unwrap_or_else(|e| panic!("{name}: {e}"));
        // A permit is `Send`: taken on one thread, given back on another.
        let two = elsewhere(|| b.semaphore("stores:blocking:sem", 2).acquire()).expect("second");
        assert_eq!(sem.available().expect("available"), 0, "{name}");
        assert!(sem.try_acquire().expect("try").is_none(), "{name}: a third");
        elsewhere(move || one.release()).expect("release");
        let three = sem.try_acquire().expect("try").expect("a permit is free");
        drop(three); // given back in the background
        two.release().expect("release");
        // Both permits come back: a waiter is woken by the dropped one's background release.
        let waiting = sem.wait(Duration::from_secs(5));
        let (p1, p2) = (waiting.acquire(), waiting.acquire());
        let p1 = p1.unwrap_or_else(|e| panic!("{name}: {e}"));
        let p2 = p2.unwrap_or_else(|e| panic!("{name}: a dropped permit stayed taken: {e}"));
        p1.release().expect("release");
        p2.release().expect("release");
    }
}

#[test]
fn a_blocking_multi_lock_takes_all_or_none() {
    for store in stores() {
        let (a, b) = (client(&store), client(&store));
        let name = store.name();
        let names = ["stores:blocking:m2", "stores:blocking:m1"];
        let both = a
            .multi_lock(names)
            .acquire()
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(both.names().len(), 2, "{name}");
        // Re-entry lock by lock on this thread.
        let one = a
            .lock(names[0])
            .wait(Duration::ZERO)
            .acquire()
            .expect("re-entry");
        assert_eq!(one.hold_count(), 2, "{name}");
        one.release().expect("release");
        let other = elsewhere(|| b.lock(names[1]).try_acquire().map(|g| g.is_some()));
        assert!(
            !other.unwrap(),
            "{name}: a held lock taken by another owner"
        );
        both.release().expect("release");
        // All or none: with one lock held elsewhere, nothing is left held.
        let held = b.lock(names[1]).acquire().expect("acquire");
        let busy = elsewhere(|| a.multi_lock(names).try_acquire().map(|g| g.is_some()));
        assert!(!busy.unwrap(), "{name}: a multi-lock beside a held lock");
        assert!(
            !a.lock(names[0]).is_locked().unwrap(),
            "{name}: kept a lock"
        );
        held.release().expect("release");
    }
}

#[derive(Debug)]
// Read through `Debug` when a test fails.
struct AppError(#[allow(dead_code)] String);

impl From<LockError> for AppError {
    fn from(e: LockError) -> Self {
        AppError(e.to_string())
    }
}

#[distributed_lock(key = "stores:blocking:attr:{id}", client = locks, wait = "0s")]
fn locked(locks: &LockClient, id: u32) -> Result<u32, AppError> {
    // Re-entry: the same key, the same thread.
    Ok(nested(locks, id)? + 1)
}

#[distributed_lock(key = "stores:blocking:attr:{id}", client = locks, wait = "0s")]
fn nested(locks: &LockClient, id: u32) -> Result<u32, AppError> {
    let held = locks.lock(format!("stores:blocking:attr:{id}"));
    assert!(held.is_locked()?, "the body ran without its lock");
    Ok(id)
}

#[distributed_lock(key = "stores:blocking:attr:panic", client = locks, wait = "0s")]
fn panics(locks: &LockClient) -> Result<(), AppError> {
    panic!("the body panicked");
}

#[distributed_lock(keys = ["stores:blocking:attr:{x}", "stores:blocking:attr:{y}"], client = locks)]
fn both_read(locks: &LockClient, x: u32, y: u32) -> Result<(), AppError> {
    Ok(())
}

#[distributed_lock(key = "stores:blocking:attr:rw", kind = "read", client = locks)]
fn read(locks: &LockClient) -> Result<(), AppError> {
    Ok(())
}

#[distributed_semaphore(key = "stores:blocking:attr:sem", permits = 1, client = locks, wait = "0s", on_busy = "skip")]
fn one_at_a_time(locks: &LockClient) -> Result<Option<()>, AppError> {
    Ok(Some(()))
}

#[test]
fn the_attributes_on_plain_fns_run_on_every_store() {
    for store in stores() {
        if !store.can(Need::Semaphore) {
            continue;
        }
        let locks = client(&store);
        let name = store.name();
        assert_eq!(
            locked(&locks, 4).unwrap_or_else(|e| panic!("{name}: {e:?}")),
            5
        );
        assert!(
            !locks.lock("stores:blocking:attr:4").is_locked().unwrap(),
            "{name}"
        );
        both_read(&locks, 1, 2).unwrap_or_else(|e| panic!("{name}: {e:?}"));
        read(&locks).unwrap_or_else(|e| panic!("{name}: {e:?}"));
        assert_eq!(one_at_a_time(&locks).unwrap(), Some(()), "{name}");
        let permit = locks
            .semaphore("stores:blocking:attr:sem", 1)
            .acquire()
            .unwrap();
        assert_eq!(
            one_at_a_time(&locks).unwrap(),
            None,
            "{name}: a second permit of one"
        );
        permit.release().unwrap();
        let unwound = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| panics(&locks)));
        assert!(unwound.is_err(), "{name}");
        let lock = locks
            .lock("stores:blocking:attr:panic")
            .wait(Duration::from_secs(5));
        let after = elsewhere(|| lock.acquire().map(|g| g.release()));
        after
            .unwrap_or_else(|e| panic!("{name}: the panicked body's lock: {e}"))
            .unwrap();
    }
}
