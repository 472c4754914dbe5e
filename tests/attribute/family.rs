//! The lock family through the attribute, against a real redis-server: `kind = "read"` bodies
//! overlap while `kind = "write"` excludes them, `kind = "fair"` releases on `?` and panic,
//! `keys = [...]` transfers in opposite orders never deadlock and keep exact totals,
//! `#[distributed_semaphore]` admits at most `permits` bodies at once and gives its permit back
//! on panic, and `on_busy = "skip"` works for a semaphore and a multi-lock.
//!
//! No sleep orders events: overlap is proven with barriers and gauges the bodies update, and
//! "released" is proven by another owner getting the hold within a bound far below the TTLs.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use dlock::testing::RedisServer;
use dlock::{current_lock, distributed_lock, distributed_semaphore, LockClient, LockError};
use redis::aio::MultiplexedConnection;
use redis::AsyncCommands;
use tokio::sync::{oneshot, Barrier};

#[derive(Debug)]
enum AppError {
    Lock(LockError),
    // Read through `Debug` when a test fails.
    Redis(#[allow(dead_code)] redis::RedisError),
    Refused,
}

impl From<LockError> for AppError {
    fn from(e: LockError) -> Self {
        AppError::Lock(e)
    }
}

impl From<redis::RedisError> for AppError {
    fn from(e: redis::RedisError) -> Self {
        AppError::Redis(e)
    }
}

struct Env {
    _server: RedisServer,
    url: String,
    locks: LockClient,
    data: MultiplexedConnection,
}

async fn env() -> Env {
    let server = RedisServer::start().expect("redis-server on PATH");
    let url = server.url();
    let locks = LockClient::connect(&url).await.unwrap();
    let data = redis::Client::open(url.as_str())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    Env {
        _server: server,
        url,
        locks,
        data,
    }
}

impl Env {
    /// Another client (as another process would be) whose acquires prove a release.
    async fn other(&self) -> LockClient {
        LockClient::connect(&self.url).await.unwrap()
    }
}

const FREE_SOON: Duration = Duration::from_secs(5);

// ---- kind = "read" / "write" ------------------------------------------------------------------

/// Readers meet at a barrier: they pass only if they are all inside at once.
#[distributed_lock(key = "doc:{id}", kind = "read", client = locks, ttl = "60s", wait = "30s")]
async fn read_doc(
    locks: &LockClient,
    id: u32,
    barrier: &Barrier,
    inside: &AtomicUsize,
    writing: &AtomicBool,
) -> Result<(), AppError> {
    assert!(
        !writing.load(Ordering::SeqCst),
        "a reader ran during a write"
    );
    inside.fetch_add(1, Ordering::SeqCst);
    barrier.wait().await;
    // Inside: the lock the body holds is the read side of `doc:<id>`.
    assert_eq!(current_lock().expect("held").name(), format!("doc:{id}"));
    inside.fetch_sub(1, Ordering::SeqCst);
    Ok(())
}

#[distributed_lock(key = "doc:{id}", kind = "write", client = locks, ttl = "60s", wait = "30s")]
async fn write_doc(
    locks: &LockClient,
    id: u32,
    inside: &AtomicUsize,
    writing: &AtomicBool,
    started: oneshot::Sender<()>,
    finish: oneshot::Receiver<()>,
) -> Result<(), AppError> {
    assert_eq!(
        inside.load(Ordering::SeqCst),
        0,
        "the write overlapped a reader"
    );
    writing.store(true, Ordering::SeqCst);
    let _ = started.send(());
    let _ = finish.await;
    writing.store(false, Ordering::SeqCst);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn readers_overlap_writer_excludes() {
    let env = env().await;
    let inside = AtomicUsize::new(0);
    let writing = AtomicBool::new(false);

    // Four readers inside at once: the barrier of 4 passes only if they overlap.
    let barrier = Barrier::new(4);
    let readers = async {
        tokio::try_join!(
            read_doc(&env.locks, 1, &barrier, &inside, &writing),
            read_doc(&env.locks, 1, &barrier, &inside, &writing),
            read_doc(&env.locks, 1, &barrier, &inside, &writing),
            read_doc(&env.locks, 1, &barrier, &inside, &writing),
        )
    };
    tokio::time::timeout(Duration::from_secs(20), readers)
        .await
        .expect("the readers did not run at the same time")
        .unwrap();

    // A writer holds; a reader started meanwhile must wait for it (it asserts `writing` is
    // false when it gets in, and the writer asserts no reader is inside).
    let (started_tx, started_rx) = oneshot::channel();
    let (finish_tx, finish_rx) = oneshot::channel();
    let writer = write_doc(&env.locks, 1, &inside, &writing, started_tx, finish_rx);
    let one = Barrier::new(1);
    let reader = async {
        started_rx.await.unwrap();
        // The write lock is held now: another client's read waits, so a try fails.
        let other = env.other().await;
        let rw = other.read_write_lock("doc:1");
        assert!(rw.read().try_acquire().await.unwrap().is_none());
        let late = read_doc(&env.locks, 1, &one, &inside, &writing);
        tokio::pin!(late);
        // Not in while the writer holds.
        assert!(tokio::time::timeout(Duration::from_millis(300), &mut late)
            .await
            .is_err());
        finish_tx.send(()).unwrap();
        late.await
    };
    let (w, r) = tokio::time::timeout(Duration::from_secs(20), async {
        tokio::join!(writer, reader)
    })
    .await
    .expect("write then read finished");
    w.unwrap();
    r.unwrap();

    // Both released: another client takes the write side at once.
    let other = env.other().await;
    let g = other
        .read_write_lock("doc:1")
        .write()
        .wait(FREE_SOON)
        .acquire()
        .await
        .expect("released");
    g.release().await.unwrap();
}

// ---- kind = "fair" ---------------------------------------------------------------------------

#[distributed_lock(key = "queue:{id}", kind = "fair", client = locks, ttl = "60s", wait = "30s")]
async fn fair_job(locks: &LockClient, id: u32, how: u8) -> Result<u32, AppError> {
    assert_eq!(current_lock().expect("held").name(), format!("queue:{id}"));
    match how {
        0 => Ok(id),
        1 => Err(AppError::Refused)?,
        _ => panic!("boom"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fair_kind_works_and_releases() {
    let env = env().await;
    let other = env.other().await;
    assert_eq!(fair_job(&env.locks, 1, 0).await.unwrap(), 1);
    // Ok: free again at once, for the fair lock of that name.
    let g = other.fair_lock("queue:1").wait(FREE_SOON).acquire().await;
    g.expect("released after Ok").release().await.unwrap();

    // `?`: the error comes back and the lock is free.
    assert!(matches!(
        fair_job(&env.locks, 2, 1).await,
        Err(AppError::Refused)
    ));
    let g = other.fair_lock("queue:2").wait(FREE_SOON).acquire().await;
    g.expect("released after ?").release().await.unwrap();

    // Panic: the guard's drop releases in the background.
    let locks = env.locks.clone();
    let joined = tokio::spawn(async move { fair_job(&locks, 3, 2).await }).await;
    assert!(joined.unwrap_err().is_panic());
    let g = other.fair_lock("queue:3").wait(FREE_SOON).acquire().await;
    g.expect("released after panic").release().await.unwrap();

    // Busy: another owner holds it, a short wait gives a timeout, the body does not run.
    let held = other.fair_lock("queue:4").acquire().await.unwrap();
    let res = fair_job_try(&env.locks, 4).await;
    assert!(
        matches!(res, Err(AppError::Lock(LockError::Timeout { .. }))),
        "{res:?}"
    );
    held.release().await.unwrap();
}

#[distributed_lock(key = "queue:{id}", kind = "fair", client = locks, wait = "0s")]
async fn fair_job_try(locks: &LockClient, id: u32) -> Result<u32, AppError> {
    panic!("ran while another owner held queue:{id}")
}

// ---- keys = [...] ------------------------------------------------------------------------------

/// A read-modify-write of two balances in several round trips: exact only if no two transfers
/// touching an account overlap.
#[distributed_lock(
    keys = ["acct:{from}", "acct:{to}"],
    client = locks,
    ttl = "60s",
    wait = "60s"
)]
async fn transfer(
    locks: &LockClient,
    mut data: MultiplexedConnection,
    from: &str,
    to: &str,
    cents: i64,
) -> Result<(), AppError> {
    let a: i64 = data.get::<_, Option<i64>>(from).await?.unwrap_or(0);
    let b: i64 = data.get::<_, Option<i64>>(to).await?.unwrap_or(0);
    tokio::task::yield_now().await;
    let () = data.set(from, a - cents).await?;
    let () = data.set(to, b + cents).await?;
    // The innermost lock seen by the body is one of the two.
    let name = current_lock().expect("held").name().to_owned();
    assert!(
        name == format!("acct:{from}") || name == format!("acct:{to}"),
        "{name}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn multi_lock_transfers_in_both_orders() {
    let env = env().await;
    let mut tasks = Vec::new();
    for i in 0..32 {
        let (locks, data) = (env.locks.clone(), env.data.clone());
        tasks.push(tokio::spawn(async move {
            if i % 2 == 0 {
                transfer(&locks, data, "a", "b", 3).await
            } else {
                transfer(&locks, data, "b", "a", 1).await
            }
        }));
    }
    let all = async {
        for t in tasks {
            t.await.unwrap().unwrap();
        }
    };
    tokio::time::timeout(Duration::from_secs(60), all)
        .await
        .expect("the transfers deadlocked");
    let mut data = env.data.clone();
    let a: i64 = data.get("a").await.unwrap();
    let b: i64 = data.get("b").await.unwrap();
    // 16 x 3 from a to b, 16 x 1 back.
    assert_eq!((a, b), (-32, 32), "lost updates: transfers overlapped");
    // Both released at the end.
    let other = env.other().await;
    let g = other
        .multi_lock(["acct:a", "acct:b"])
        .wait(FREE_SOON)
        .acquire()
        .await;
    g.expect("released").release().await.unwrap();
}

#[distributed_lock(
    keys = ["acct:{from}", "acct:{to}"],
    client = locks,
    wait = "0s",
    on_busy = "skip"
)]
async fn transfer_or_skip(
    locks: &LockClient,
    from: &str,
    to: &str,
) -> Result<Option<u8>, AppError> {
    Ok(Some(1))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multi_lock_skip_when_busy() {
    let env = env().await;
    let other = env.other().await;
    // One of the two locks held elsewhere: skipped, and the other lock was given back.
    let held = other.lock("acct:y").acquire().await.unwrap();
    assert_eq!(transfer_or_skip(&env.locks, "x", "y").await.unwrap(), None);
    let g = other.lock("acct:x").wait(FREE_SOON).acquire().await;
    g.expect("the half taken was given back")
        .release()
        .await
        .unwrap();
    held.release().await.unwrap();
    // Free: runs.
    assert_eq!(
        transfer_or_skip(&env.locks, "x", "y").await.unwrap(),
        Some(1)
    );
}

// ---- #[distributed_semaphore] ---------------------------------------------------------------

#[distributed_semaphore(key = "exports:{tenant}", permits = 2, client = locks, ttl = "60s", wait = "60s")]
async fn export(
    locks: &LockClient,
    tenant: &str,
    gauge: &AtomicUsize,
    peak: &AtomicUsize,
) -> Result<(), AppError> {
    let now = gauge.fetch_add(1, Ordering::SeqCst) + 1;
    peak.fetch_max(now, Ordering::SeqCst);
    // Stay inside a little so the others pile up at the semaphore.
    tokio::time::sleep(Duration::from_millis(20)).await;
    gauge.fetch_sub(1, Ordering::SeqCst);
    Ok(())
}

#[distributed_semaphore(key = "exports:{tenant}", permits = 2, client = locks, ttl = "60s", wait = "30s")]
async fn export_meet(locks: &LockClient, tenant: &str, barrier: &Barrier) -> Result<(), AppError> {
    // Passes only when both bodies are inside at once.
    barrier.wait().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn semaphore_admits_at_most_permits() {
    let env = env().await;
    // Two permits: two bodies are inside together.
    let barrier = Barrier::new(2);
    let both = async {
        tokio::try_join!(
            export_meet(&env.locks, "t1", &barrier),
            export_meet(&env.locks, "t1", &barrier)
        )
    };
    tokio::time::timeout(Duration::from_secs(20), both)
        .await
        .expect("two permits did not admit two bodies at once")
        .unwrap();
    // Never three: a gauge sampled inside each of 12 concurrent bodies.
    let gauge = Arc::new(AtomicUsize::new(0));
    let peak = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for _ in 0..12 {
        let (locks, gauge, peak) = (env.locks.clone(), gauge.clone(), peak.clone());
        tasks.push(tokio::spawn(async move {
            export(&locks, "t1", &gauge, &peak).await
        }));
    }
    for t in tasks {
        t.await.unwrap().unwrap();
    }
    let peak = peak.load(Ordering::SeqCst);
    assert!(peak <= 2, "{peak} bodies ran at once with 2 permits");
    assert!(peak >= 1);
    // Both permits back.
    let sem = env.locks.semaphore("exports:t1", 2);
    assert_eq!(sem.available().await.unwrap(), 2);
}

#[distributed_semaphore(key = "slots:{id}", permits = 2, client = locks, ttl = "60s")]
async fn slot(locks: &LockClient, id: u32, how: u8) -> Result<u32, AppError> {
    match how {
        0 => Ok(id),
        1 => Err(AppError::Refused)?,
        _ => panic!("boom"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn semaphore_releases_on_every_path() {
    let env = env().await;
    let sem = env.locks.semaphore("slots:1", 2);
    assert_eq!(slot(&env.locks, 1, 0).await.unwrap(), 1);
    assert_eq!(sem.available().await.unwrap(), 2);
    assert!(matches!(
        slot(&env.locks, 1, 1).await,
        Err(AppError::Refused)
    ));
    assert_eq!(sem.available().await.unwrap(), 2);
    let locks = env.locks.clone();
    let joined = tokio::spawn(async move { slot(&locks, 1, 2).await }).await;
    assert!(joined.unwrap_err().is_panic());
    // Given back in the background: both permits can be taken by another client soon.
    let other = env.other().await;
    let sem = other.semaphore("slots:1", 2).wait(FREE_SOON);
    let p1 = sem.acquire().await.expect("first permit");
    let p2 = sem
        .acquire()
        .await
        .expect("the panicked body's permit came back");
    p1.release().await.unwrap();
    p2.release().await.unwrap();
}

#[distributed_semaphore(key = "reports", permits = 1, client = locks, wait = "0s", on_busy = "skip")]
async fn report_or_skip(locks: &LockClient) -> Result<Option<u8>, AppError> {
    Ok(Some(7))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn semaphore_skip_when_busy() {
    let env = env().await;
    let other = env.other().await;
    let held = other.semaphore("reports", 1).acquire().await.unwrap();
    assert_eq!(report_or_skip(&env.locks).await.unwrap(), None);
    held.release().await.unwrap();
    assert_eq!(report_or_skip(&env.locks).await.unwrap(), Some(7));
}

// ---- re-entry along the call chain, per kind -----------------------------------------------------

#[distributed_lock(key = "acct:{id}", client = locks, wait = "0s")]
async fn touch_account(locks: &LockClient, id: &str) -> Result<(), AppError> {
    Ok(())
}

/// The multi-lock's scope: a plain-lock call on one of its keys re-enters instead of waiting
/// (with `wait = "0s"` a wait would be an immediate `Timeout`).
#[distributed_lock(keys = ["acct:{from}", "acct:{to}"], client = locks, wait = "5s")]
async fn transfer_and_touch(locks: &LockClient, from: &str, to: &str) -> Result<(), AppError> {
    touch_account(locks, from).await?;
    touch_account(locks, to).await
}

#[distributed_lock(key = "doc:{id}", kind = "read", client = locks, wait = "0s")]
async fn peek_doc(locks: &LockClient, id: u32) -> Result<(), AppError> {
    Ok(())
}

#[distributed_lock(key = "doc:{id}", kind = "write", client = locks, wait = "0s")]
async fn rewrite_doc(locks: &LockClient, id: u32) -> Result<(), AppError> {
    Ok(())
}

/// A writer reads its own document (a downgrade): allowed.
#[distributed_lock(key = "doc:{id}", kind = "write", client = locks, wait = "5s")]
async fn write_then_peek(locks: &LockClient, id: u32) -> Result<(), AppError> {
    peek_doc(locks, id).await
}

/// A reader asks to write its own document (an upgrade): refused at once.
#[distributed_lock(key = "doc:{id}", kind = "read", client = locks, wait = "5s")]
async fn read_then_write(locks: &LockClient, id: u32) -> Result<(), AppError> {
    rewrite_doc(locks, id).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nested_calls_reenter_per_kind() {
    let env = env().await;
    transfer_and_touch(&env.locks, "p", "q").await.unwrap();
    write_then_peek(&env.locks, 9).await.unwrap();
    let started = std::time::Instant::now();
    let res = read_then_write(&env.locks, 9).await;
    assert!(
        matches!(res, Err(AppError::Lock(LockError::WouldDeadlock { .. }))),
        "{res:?}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "the upgrade waited"
    );
    // Everything released: another client takes each lock at once.
    let other = env.other().await;
    let g = other
        .multi_lock(["acct:p", "acct:q"])
        .wait(FREE_SOON)
        .acquire()
        .await;
    g.expect("released").release().await.unwrap();
    let g = other
        .read_write_lock("doc:9")
        .write()
        .wait(FREE_SOON)
        .acquire()
        .await;
    g.expect("released").release().await.unwrap();
}
