//! `#[distributed_lock]` and `#[distributed_semaphore]` on plain (non-async) `fn`s, through the
//! blocking client, against a real redis-server: exclusion, the kinds, multi-locks, methods and
//! generics, re-entry along the thread, release on every way out (return, `?`, panic).
//!
//! Plain `#[test]`s: no runtime anywhere in the caller. "Released" is proven by another owner
//! taking the lock at once (`wait = 0`), or within a bound when the release is a background one.

use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

use dlock::blocking::LockClient;
use dlock::testing::RedisServer;
use dlock::{current_lock, distributed_lock, distributed_semaphore, LockError};

#[derive(Debug)]
enum AppError {
    Lock(LockError),
    Refused,
}

impl From<LockError> for AppError {
    fn from(e: LockError) -> Self {
        AppError::Lock(e)
    }
}

/// Bodies meeting inside their locks: proof that `n` of them hold at once. Bounded, so a
/// lock that lets fewer in fails the test instead of hanging it.
#[derive(Default)]
struct Meeting {
    inside: Mutex<usize>,
    arrived: Condvar,
}

impl Meeting {
    /// Counts this body in and waits (at most 5 s) until `n` are inside; whether they were.
    fn meet(&self, n: usize) -> bool {
        let mut inside = self.inside.lock().unwrap();
        *inside += 1;
        self.arrived.notify_all();
        let (inside, _) = self
            .arrived
            .wait_timeout_while(inside, Duration::from_secs(5), |i| *i < n)
            .unwrap();
        *inside >= n
    }
}

struct Env {
    _server: RedisServer,
    locks: LockClient,
}

fn env() -> Env {
    let server = RedisServer::start().expect("redis-server on PATH");
    let locks = LockClient::connect(&server.url()).unwrap();
    Env {
        _server: server,
        locks,
    }
}

/// A read and a write in two steps: only exclusion keeps every increment.
#[distributed_lock(key = "sync:count:{name}", client = locks, wait = "20s")]
fn bump(locks: &LockClient, name: &str, counter: &AtomicUsize) -> Result<(), AppError> {
    let seen = counter.load(Ordering::SeqCst);
    std::thread::yield_now();
    counter.store(seen + 1, Ordering::SeqCst);
    Ok(())
}

#[test]
fn threads_calling_a_sync_fn_are_excluded_and_the_lock_is_free_after() {
    let env = env();
    let counter = AtomicUsize::new(0);
    std::thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| {
                for _ in 0..5 {
                    bump(&env.locks, "n", &counter).unwrap();
                }
            });
        }
    });
    assert_eq!(counter.load(Ordering::SeqCst), 20, "lost updates");
    let lock = env.locks.lock("sync:count:n");
    assert!(!lock.is_locked().unwrap(), "held after every call returned");
}

/// Every way out of the body: `return`, `?`, the end.
#[distributed_lock(key = "sync:exit:{how}", client = locks, wait = "0s")]
fn exits(locks: &LockClient, how: &str) -> Result<u32, AppError> {
    let held = locks.lock(format!("sync:exit:{how}")).is_locked()?;
    assert!(held, "the body ran without its lock");
    if how == "return" {
        return Err(AppError::Refused);
    }
    let parsed: u32 = how.parse().map_err(|_| AppError::Refused)?;
    Ok(parsed)
}

#[test]
fn return_and_question_mark_release_before_the_call_returns() {
    let env = env();
    assert!(matches!(
        exits(&env.locks, "return"),
        Err(AppError::Refused)
    ));
    assert!(matches!(exits(&env.locks, "nan"), Err(AppError::Refused)));
    assert_eq!(exits(&env.locks, "7").unwrap(), 7);
    for how in ["return", "nan", "7"] {
        // Another thread is another owner: it takes the lock at once only if it is free.
        let free = std::thread::scope(|s| {
            s.spawn(|| {
                let lock = env.locks.lock(format!("sync:exit:{how}"));
                lock.try_acquire().map(|g| g.is_some())
            })
            .join()
            .unwrap()
        });
        assert!(free.unwrap(), "`{how}` left the lock held");
    }
}

#[distributed_lock(key = "sync:panic", client = locks, wait = "0s")]
fn panics(locks: &LockClient) -> Result<(), AppError> {
    panic!("the body panicked");
}

#[test]
fn a_panicking_body_releases_its_lock() {
    let env = env();
    let unwound = std::panic::catch_unwind(AssertUnwindSafe(|| panics(&env.locks)));
    assert!(unwound.is_err(), "the panic did not reach the caller");
    // The guard's drop released in the background: another thread's waiter is woken by it.
    let started = Instant::now();
    let got = std::thread::scope(|s| {
        s.spawn(|| {
            let lock = env.locks.lock("sync:panic").wait(Duration::from_secs(5));
            lock.acquire().map(|g| g.release())
        })
        .join()
        .unwrap()
    });
    got.unwrap_or_else(|e| panic!("after {:?}: {e}", started.elapsed()))
        .unwrap();
    // Nothing of the unwound guard is left on this thread: an acquire here is a new hold, not
    // a re-entry of a released one.
    let here = env.locks.lock("sync:panic").acquire().unwrap();
    assert_eq!(here.hold_count(), 1);
    here.release().unwrap();
}

#[distributed_lock(key = "sync:account:{id}", client = locks, wait = "0s")]
fn outer(locks: &LockClient, id: u32) -> Result<(u32, u64), AppError> {
    let outer = current_lock().expect("inside a locked body");
    let inner_count = inner(locks, id)?;
    Ok((inner_count, outer.fencing_token()))
}

#[distributed_lock(key = "sync:account:{id}", client = locks, wait = "0s")]
fn inner(locks: &LockClient, id: u32) -> Result<u32, AppError> {
    let lock = locks
        .lock(format!("sync:account:{id}"))
        .wait(Duration::ZERO);
    // A third hold shows the count: outer + inner + this one.
    let guard = lock.acquire()?;
    Ok(guard.hold_count())
}

#[test]
fn a_sync_fn_calling_another_on_the_same_key_re_enters() {
    let env = env();
    let (count, token) = outer(&env.locks, 1).expect("re-entered, not waited for itself");
    assert_eq!(
        count, 3,
        "outer, inner and the explicit acquire share one hold"
    );
    assert!(token > 0);
    let lock = env.locks.lock("sync:account:1");
    assert!(
        !lock.is_locked().unwrap(),
        "held after the outer call returned"
    );
}

#[distributed_lock(key = "sync:doc:{id}", kind = "read", client = locks, wait = "5s")]
fn show(locks: &LockClient, id: u32, readers: &Meeting) -> Result<bool, AppError> {
    // Two readers meet here: they hold the read side at once.
    Ok(readers.meet(2))
}

#[distributed_lock(key = "sync:doc:{id}", kind = "write", client = locks, wait = "0s")]
fn edit(locks: &LockClient, id: u32) -> Result<bool, AppError> {
    // A downgrade: the write holder takes the read side.
    let read = locks.read_write_lock(format!("sync:doc:{id}")).read();
    let got = read.wait(Duration::ZERO).acquire()?;
    got.release()?;
    Ok(true)
}

#[test]
fn read_and_write_kinds_on_sync_fns() {
    let env = env();
    let readers = Meeting::default();
    std::thread::scope(|s| {
        let calls: Vec<_> = (0..2)
            .map(|_| s.spawn(|| show(&env.locks, 7, &readers)))
            .collect();
        for c in calls {
            assert!(
                c.join().unwrap().unwrap(),
                "two readers did not hold at once"
            );
        }
    });
    assert!(edit(&env.locks, 7).unwrap());
    // A reader holding the read side keeps a writer out.
    let reading = env
        .locks
        .read_write_lock("sync:doc:7")
        .read()
        .acquire()
        .unwrap();
    let busy = std::thread::scope(|s| s.spawn(|| edit(&env.locks, 7)).join().unwrap());
    assert!(
        matches!(busy, Err(AppError::Lock(LockError::Timeout { .. }))),
        "a writer beside a reader: {busy:?}"
    );
    // On this thread, the write inside its own read is an upgrade: refused at once.
    match edit(&env.locks, 7) {
        Err(AppError::Lock(LockError::WouldDeadlock { name, .. })) => {
            assert_eq!(name, "sync:doc:7")
        }
        other => panic!("an upgrade: {other:?}"),
    }
    reading.release().unwrap();
}

#[distributed_lock(keys = ["sync:acct:{from}", "sync:acct:{to}"], client = locks, wait = "10s")]
fn transfer(locks: &LockClient, from: u32, to: u32, moves: &AtomicUsize) -> Result<(), AppError> {
    // Re-entry lock by lock: one of the held locks, alone.
    let one = locks.lock(format!("sync:acct:{to}")).wait(Duration::ZERO);
    let guard = one.acquire()?;
    assert_eq!(guard.hold_count(), 2);
    moves.fetch_add(1, Ordering::SeqCst);
    Ok(())
}

#[test]
fn a_sync_multi_lock_in_both_orders_completes_and_holds_every_lock() {
    let env = env();
    let moves = AtomicUsize::new(0);
    std::thread::scope(|s| {
        let a = s.spawn(|| (0..5).try_for_each(|_| transfer(&env.locks, 1, 2, &moves)));
        let b = s.spawn(|| (0..5).try_for_each(|_| transfer(&env.locks, 2, 1, &moves)));
        a.join().unwrap().unwrap();
        b.join().unwrap().unwrap();
    });
    assert_eq!(moves.load(Ordering::SeqCst), 10);
    // While one account is held elsewhere, the transfer gives up and holds nothing.
    let held = env.locks.lock("sync:acct:2").acquire().unwrap();
    let busy = std::thread::scope(|s| {
        s.spawn(|| {
            let quick = env.locks.multi_lock(["sync:acct:1", "sync:acct:2"]);
            quick.wait(Duration::from_millis(100)).acquire().map(|_| ())
        })
        .join()
        .unwrap()
    });
    assert!(matches!(busy, Err(LockError::Timeout { .. })), "{busy:?}");
    assert!(!env.locks.lock("sync:acct:1").is_locked().unwrap());
    held.release().unwrap();
}

#[distributed_semaphore(key = "sync:sem", permits = 2, client = locks, wait = "20s")]
fn inside_semaphore(
    locks: &LockClient,
    now: &AtomicUsize,
    peak: &AtomicUsize,
) -> Result<(), AppError> {
    let n = now.fetch_add(1, Ordering::SeqCst) + 1;
    peak.fetch_max(n, Ordering::SeqCst);
    std::thread::yield_now();
    now.fetch_sub(1, Ordering::SeqCst);
    Ok(())
}

#[distributed_semaphore(key = "sync:sem2", permits = 2, client = locks, wait = "5s")]
fn two_at_once(locks: &LockClient, holders: &Meeting) -> Result<bool, AppError> {
    Ok(holders.meet(2))
}

#[distributed_semaphore(key = "sync:sem", permits = 2, client = locks, wait = "0s", on_busy = "skip")]
fn skipped_when_full(locks: &LockClient) -> Result<Option<()>, AppError> {
    Ok(Some(()))
}

#[test]
fn a_sync_semaphore_lets_in_its_permits_and_gives_them_back() {
    let env = env();
    let (now, peak) = (AtomicUsize::new(0), AtomicUsize::new(0));
    std::thread::scope(|s| {
        let calls: Vec<_> = (0..6)
            .map(|_| s.spawn(|| (0..5).try_for_each(|_| inside_semaphore(&env.locks, &now, &peak))))
            .collect();
        for c in calls {
            c.join().unwrap().unwrap();
        }
    });
    assert!(
        peak.load(Ordering::SeqCst) <= 2,
        "more than 2 permits at once"
    );
    let holders = Meeting::default();
    std::thread::scope(|s| {
        let calls: Vec<_> = (0..2)
            .map(|_| s.spawn(|| two_at_once(&env.locks, &holders)))
            .collect();
        for c in calls {
            assert!(c.join().unwrap().unwrap(), "2 permits did not let 2 in");
        }
    });
    let sem = env.locks.semaphore("sync:sem", 2);
    assert_eq!(sem.available().unwrap(), 2, "permits not given back");
    let (p1, p2) = (sem.acquire().unwrap(), sem.acquire().unwrap());
    assert_eq!(skipped_when_full(&env.locks).unwrap(), None);
    drop(p1);
    p2.release().unwrap();
}

struct Repo<T> {
    locks: LockClient,
    name: T,
}

impl<T: std::fmt::Display> Repo<T> {
    #[distributed_lock(key = "sync:repo:{self.name}", client = self.locks, wait = "0s")]
    fn name_under_lock(&self) -> Result<String, AppError> {
        let me = current_lock().expect("inside a locked body");
        Ok(me.name().to_owned())
    }

    #[distributed_lock(client = self.locks, wait = "0s")]
    fn default_key(&self) -> Result<String, AppError> {
        Ok(current_lock()
            .expect("inside a locked body")
            .name()
            .to_owned())
    }
}

#[test]
fn methods_and_generics_on_sync_fns() {
    let env = env();
    let repo = Repo {
        locks: env.locks.clone(),
        name: 42u16,
    };
    assert_eq!(repo.name_under_lock().unwrap(), "sync:repo:42");
    let key = repo.default_key().unwrap();
    assert!(key.ends_with("::Repo<u16>::default_key"), "{key}");
    assert!(current_lock().is_none(), "a lock outside the body");
}

/// `kind = "fair"` and the Redisson kinds on plain `fn`s: the same keys and scripts as on the
/// async form, so the lock is held inside (seen from another client) and free after.
#[distributed_lock(key = "sync:fair:{id}", kind = "fair", client = locks, wait = "5s")]
fn fair_job(locks: &LockClient, other: &LockClient, id: u32) -> Result<bool, AppError> {
    Ok(other.fair_lock(format!("sync:fair:{id}")).is_locked()?)
}

#[distributed_lock(key = "sync:redisson:{id}", kind = "redisson", client = locks, wait = "5s")]
fn redisson_job(locks: &LockClient, other: &LockClient, id: u32) -> Result<bool, AppError> {
    Ok(other
        .redisson_lock(format!("sync:redisson:{id}"))
        .is_locked()?)
}

#[test]
fn fair_and_redisson_kinds_on_sync_fns() {
    let env = env();
    let other = LockClient::connect(env.locks.url()).expect("a second client");
    assert!(
        fair_job(&env.locks, &other, 1).expect("fair"),
        "not held inside"
    );
    // Asked through the caller's own client, whose next call waits for the release the
    // function wrote (answered in the background); another client could ask before it lands.
    assert!(
        !env.locks.fair_lock("sync:fair:1").is_locked().unwrap(),
        "held after"
    );
    assert!(
        redisson_job(&env.locks, &other, 1).expect("redisson"),
        "not held inside"
    );
    assert!(
        !env.locks
            .redisson_lock("sync:redisson:1")
            .is_locked()
            .unwrap(),
        "held after"
    );
}
