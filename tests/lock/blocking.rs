//! `dlock::blocking`: the locks from code without an async runtime (issue 29). Plain `#[test]`
//! functions: no runtime anywhere in the caller.

use std::time::{Duration, Instant};

use dlock::blocking::LockClient;
use dlock::testing::RedisServer;

fn server() -> RedisServer {
    RedisServer::start().expect("start redis-server")
}

#[test]
fn a_plain_thread_takes_waits_for_and_releases_a_lock() {
    let redis = server();
    let a = LockClient::connect(&redis.url()).unwrap();
    let b = LockClient::connect(&redis.url()).unwrap();
    let guard = a.lock("blocking:plain").acquire().unwrap();
    assert!(guard.fencing_token() > 0);
    assert!(b.lock("blocking:plain").is_locked().unwrap());
    // This thread holds it through `a`: asking through `b` would wait for itself.
    match b.lock("blocking:plain").try_acquire() {
        Err(dlock::LockError::SelfDeadlock { name, .. }) => assert_eq!(name, "blocking:plain"),
        other => panic!("the same thread through another client: {other:?}"),
    }
    let busy = std::thread::scope(|s| {
        s.spawn(|| b.lock("blocking:plain").try_acquire().map(|g| g.is_none()))
            .join()
            .unwrap()
    });
    assert!(busy.unwrap(), "another client got a held lock");
    // A waiter on another thread gets it once the holder releases.
    let waiter = std::thread::spawn(move || {
        let lock = b.lock("blocking:plain").wait(Duration::from_secs(10));
        let got = lock.acquire().map(|g| g.fencing_token());
        (got, b)
    });
    let token = guard.fencing_token();
    guard.release().unwrap();
    let (got, b) = waiter.join().unwrap();
    let next = got.expect("the waiter gets the lock after the release");
    assert!(next > token, "tokens rise: {next} after {token}");
    // Its guard was dropped with its thread's closure: released in the background.
    let started = Instant::now();
    while b.lock("blocking:plain").is_locked().unwrap() {
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "a dropped blocking guard was not released"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn re_entry_follows_the_thread_and_not_the_client() {
    let redis = server();
    let locks = LockClient::connect(&redis.url()).unwrap();
    let lock = locks.lock("blocking:reentry").wait(Duration::ZERO);
    let outer = lock.acquire().unwrap();
    let inner = lock.acquire().expect("the same thread re-enters its hold");
    assert_eq!(inner.hold_count(), 2);
    assert_eq!(inner.fencing_token(), outer.fencing_token());
    // Another thread of the same client is another owner.
    let other = std::thread::scope(|s| {
        s.spawn(|| lock.try_acquire().map(|g| g.is_some()))
            .join()
            .unwrap()
    });
    assert!(
        !other.unwrap(),
        "another thread re-entered this thread's hold"
    );
    inner.release().unwrap();
    assert!(
        lock.is_locked().unwrap(),
        "the inner release freed the outer hold"
    );
    outer.release().unwrap();
    assert!(!lock.is_locked().unwrap());
    // With the guards gone, the thread holds nothing: a new acquire is a new hold.
    let again = lock.acquire().unwrap();
    assert_eq!(again.hold_count(), 1);
    again.release().unwrap();
}

#[test]
fn the_watchdog_renews_a_blocking_hold_past_its_ttl() {
    let redis = server();
    let locks = LockClient::connect(&redis.url()).unwrap();
    let ttl = Duration::from_millis(300);
    let lock = locks.lock("blocking:renewed").ttl(ttl);
    let guard = lock.acquire().unwrap();
    // Time is the subject: four leases pass while the thread does blocking work.
    std::thread::sleep(ttl * 4);
    assert!(
        !guard.is_lost(),
        "the hold was lost while its thread worked"
    );
    assert!(
        lock.is_locked().unwrap(),
        "the lock expired under its holder"
    );
    guard.release().unwrap();
}

#[test]
fn a_blocking_call_works_inside_spawn_blocking_of_a_runtime() {
    let redis = server();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let url = redis.url();
    let token = rt.block_on(async move {
        tokio::task::spawn_blocking(move || {
            let locks = LockClient::connect(&url).unwrap();
            let guard = locks.lock("blocking:inside").acquire().unwrap();
            let token = guard.fencing_token();
            guard.release().unwrap();
            token
        })
        .await
        .unwrap()
    });
    assert!(token > 0);
}

#[test]
fn bad_input_is_an_error_naming_the_lock() {
    let redis = server();
    let locks = LockClient::connect(&redis.url()).unwrap();
    let err = locks
        .lock("blocking:bad")
        .ttl(Duration::ZERO)
        .acquire()
        .unwrap_err();
    assert!(err.to_string().contains("blocking:bad"), "{err}");
    let err = LockClient::connect("redis://127.0.0.1:1").unwrap_err();
    assert!(err.to_string().contains("127.0.0.1:1"), "{err}");
}

/// A blocking call on the only worker of a multi-thread runtime, through a client built on
/// that runtime (which drives the client's connections while it lives): the worker's other
/// tasks must move out of the way, or the call waits for the thread it blocks.
#[test]
fn a_blocking_call_on_the_only_worker_that_drives_its_client_answers() {
    let redis = server();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let url = redis.url();
    let (got, took) = rt.block_on(async move {
        let client = dlock::LockClient::connect(&url).await.unwrap();
        // A task on the one worker, as a handler calling synchronous code would be.
        tokio::spawn(async move {
            let locks = LockClient::from(client);
            let started = Instant::now();
            let got = locks
                .lock("blocking:one-worker")
                .acquire()
                .and_then(|guard| {
                    let token = guard.fencing_token();
                    guard.release().map(|()| token)
                });
            (got, started.elapsed())
        })
        .await
        .unwrap()
    });
    // Before: the acquire hung for the response timeout (5 s), then failed blaming Redis.
    let token = got.unwrap_or_else(|e| panic!("after {took:?}: {e}"));
    assert!(token > 0);
    assert!(
        took < Duration::from_secs(2),
        "the call took {took:?} on the worker its client depends on"
    );
}

/// The same on a `current_thread` runtime (the flavor of `#[tokio::test]`): the client built
/// there is driven by its own thread, so a blocking call in the runtime's one thread answers.
#[test]
fn a_blocking_call_inside_a_current_thread_runtime_answers() {
    let redis = server();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let url = redis.url();
    let (got, took) = rt.block_on(async move {
        let locks = LockClient::from(dlock::LockClient::connect(&url).await.unwrap());
        let started = Instant::now();
        let got = locks
            .lock("blocking:current-thread")
            .acquire()
            .and_then(|guard| {
                let token = guard.fencing_token();
                guard.release().map(|()| token)
            });
        (got, started.elapsed())
    });
    let token = got.unwrap_or_else(|e| panic!("after {took:?}: {e}"));
    assert!(token > 0);
    assert!(took < Duration::from_secs(2), "the call took {took:?}");
}

/// Redisson's kinds (Redis only: they speak its protocol) through the blocking client:
/// `RLock` and `RFencedLock` re-enter per thread, `RReadWriteLock` shares, excludes and
/// downgrades on one thread.
#[test]
fn the_redisson_kinds_from_a_plain_thread() {
    let redis = server();
    let locks = LockClient::connect(&redis.url()).unwrap();
    let other = LockClient::connect(&redis.url()).unwrap();
    for lock in [
        locks.redisson_lock("blocking:rlock"),
        locks.redisson_fenced_lock("blocking:rfenced"),
    ] {
        let lock = lock.wait(Duration::ZERO);
        let outer = lock.acquire().unwrap();
        let inner = lock.acquire().expect("the same thread re-enters");
        assert_eq!(inner.hold_count(), 2, "{}", lock.name());
        let busy = std::thread::scope(|s| {
            s.spawn(|| {
                let theirs = other.redisson_lock(lock.name());
                theirs.try_acquire().map(|g| g.is_none())
            })
            .join()
            .unwrap()
        });
        assert!(
            busy.unwrap(),
            "{}: another owner got a held RLock",
            lock.name()
        );
        inner.release().unwrap();
        outer.release().unwrap();
        assert!(!lock.is_locked().unwrap(), "{}", lock.name());
    }
    let rw = locks.redisson_read_write_lock("blocking:rrw");
    let theirs = other.redisson_read_write_lock("blocking:rrw");
    let w = rw.write().acquire().unwrap();
    let r = rw
        .read()
        .wait(Duration::ZERO)
        .acquire()
        .expect("a downgrade");
    w.release().unwrap();
    let (reader, writer) = std::thread::scope(|s| {
        s.spawn(|| {
            let reader = theirs.read().try_acquire().map(|g| g.is_some());
            let writer = theirs.write().try_acquire().map(|g| g.is_some());
            (reader, writer)
        })
        .join()
        .unwrap()
    });
    assert!(reader.unwrap(), "readers share an RReadWriteLock");
    assert!(!writer.unwrap(), "a writer beside the downgraded reader");
    r.release().unwrap();
    let w = theirs
        .write()
        .wait(Duration::from_secs(5))
        .acquire()
        .unwrap();
    w.release().unwrap();
}
