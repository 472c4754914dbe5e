//! `#[distributed_lock]` against a real redis-server: mutual exclusion, parallelism across keys,
//! keys built from fields and receivers, release on every way out, reentrancy along the call
//! chain, fail-fast waits.
//!
//! No sleep is used to order events: overlap is detected with shared state the bodies update,
//! and "released" is proven by another owner getting the lock within a bound far below the TTL.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use dlock::testing::RedisServer;
use dlock::{distributed_lock, LockClient, LockError};
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

/// Everything one test needs: its own redis-server, a lock client, a data connection.
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
    /// Another owner (another client, as another process would be) takes `name` within 5 s,
    /// far below the 60 s TTLs used here: proof the lock was released, not left to expire.
    async fn assert_free_soon(&self, name: &str) {
        let other = LockClient::connect(&self.url).await.unwrap();
        let guard = other
            .lock(name)
            .wait(Duration::from_secs(5))
            .acquire()
            .await
            .unwrap_or_else(|e| panic!("`{name}` was not released: {e}"));
        guard.release().await.unwrap();
    }
}

// ---- same key serializes, different keys run in parallel -------------------------------------

/// A read-modify-write in two round trips: correct only under mutual exclusion.
#[distributed_lock(key = "counter:{name}", client = locks, ttl = "60s", wait = "30s")]
async fn bump(
    locks: &LockClient,
    mut data: MultiplexedConnection,
    name: &str,
) -> Result<(), AppError> {
    let n: u64 = data.get::<_, Option<u64>>(name).await?.unwrap_or(0);
    // Let every other caller run up to its own GET if the lock did not stop it.
    tokio::task::yield_now().await;
    let () = redis::cmd("PING").query_async(&mut data).await?;
    let () = data.set(name, n + 1).await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn same_key_serializes() {
    let env = env().await;
    let mut tasks = Vec::new();
    for _ in 0..16 {
        let (locks, data) = (env.locks.clone(), env.data.clone());
        tasks.push(tokio::spawn(
            async move { bump(&locks, data, "hits").await },
        ));
    }
    for t in tasks {
        t.await.unwrap().unwrap();
    }
    let total: u64 = env.data.clone().get("hits").await.unwrap();
    assert_eq!(total, 16, "lost updates: the calls overlapped");
}

#[distributed_lock(key = "pair:{id}", client = locks, ttl = "60s", wait = "30s")]
async fn meet(locks: &LockClient, id: u32, barrier: &Barrier) -> Result<u32, AppError> {
    // Both calls must be inside at once to pass the barrier.
    barrier.wait().await;
    Ok(id)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn different_keys_run_in_parallel() {
    let env = env().await;
    let barrier = Barrier::new(2);
    let both =
        async { tokio::try_join!(meet(&env.locks, 1, &barrier), meet(&env.locks, 2, &barrier)) };
    let (a, b) = tokio::time::timeout(Duration::from_secs(20), both)
        .await
        .expect("the two keys did not run at the same time")
        .unwrap();
    assert_eq!((a, b), (1, 2));
}

// ---- keys from fields and receivers ------------------------------------------------------------

struct User {
    name: String,
}

struct Order {
    id: u64,
    user: User,
}

#[distributed_lock(key = "order:{order.id}:{order.user.name}", client = locks, ttl = "60s")]
async fn held_name_is(locks: &LockClient, order: &Order, expected: &str) -> Result<bool, AppError> {
    Ok(locks.lock(expected).is_locked().await?)
}

struct Account {
    id: u64,
    locks: Arc<LockClient>,
    balance: u64,
}

impl Account {
    #[distributed_lock(key = "account:{self.id}", client = self.locks, ttl = "60s")]
    async fn is_held(&self) -> Result<bool, AppError> {
        Ok(self
            .locks
            .lock(format!("account:{}", self.id))
            .is_locked()
            .await?)
    }

    #[distributed_lock(key = "account:{self.id}", client = self.locks, ttl = "60s")]
    async fn deposit(&mut self, amount: u64) -> Result<u64, AppError> {
        self.balance += amount;
        Ok(self.balance)
    }

    #[distributed_lock(key = "account:{self.id}", client = self.locks, ttl = "60s")]
    async fn close(self) -> Result<u64, AppError> {
        Ok(self.balance)
    }
}

#[tokio::test]
async fn keys_from_fields_and_receivers() {
    let env = env().await;
    let order = Order {
        id: 7,
        user: User { name: "ann".into() },
    };
    assert!(held_name_is(&env.locks, &order, "order:7:ann")
        .await
        .unwrap());
    assert!(!env.locks.lock("order:7:ann").is_locked().await.unwrap());

    // Values are escaped (`:` -> `%3A`) exactly as `KeyPart` does for hand-built names.
    let tricky = Order {
        id: 8,
        user: User {
            name: "a:b{c}".into(),
        },
    };
    let name = format!("order:8:{}", dlock::KeyPart(&"a:b{c}"));
    assert_eq!(name, "order:8:a%3Ab%7Bc%7D");
    assert!(held_name_is(&env.locks, &tricky, &name).await.unwrap());

    let mut account = Account {
        id: 3,
        locks: Arc::new(env.locks.clone()),
        balance: 0,
    };
    assert!(account.is_held().await.unwrap());
    assert_eq!(account.deposit(5).await.unwrap(), 5);
    assert_eq!(account.close().await.unwrap(), 5);
    assert!(!env.locks.lock("account:3").is_locked().await.unwrap());
}

// ---- release on every way out --------------------------------------------------------------------

#[distributed_lock(key = "exit:{id}", client = locks, ttl = "60s")]
async fn fail_with_question_mark(locks: &LockClient, id: u32) -> Result<(), AppError> {
    let refused: Result<(), AppError> = Err(AppError::Refused);
    refused?;
    unreachable!()
}

#[distributed_lock(key = "exit:{id}", client = locks, ttl = "60s")]
async fn panic_inside(locks: &LockClient, id: u32) -> Result<(), AppError> {
    panic!("boom")
}

#[distributed_lock(key = "exit:{id}", client = locks, ttl = "60s")]
async fn hang_inside(
    locks: &LockClient,
    id: u32,
    entered: oneshot::Sender<()>,
) -> Result<(), AppError> {
    entered.send(()).unwrap();
    std::future::pending().await
}

#[tokio::test]
async fn early_return_releases_before_returning() {
    let env = env().await;
    let err = fail_with_question_mark(&env.locks, 1).await.unwrap_err();
    assert!(matches!(err, AppError::Refused), "{err:?}");
    // Awaited release: free the moment the call returns, no waiting.
    assert!(!env.locks.lock("exit:1").is_locked().await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn panic_releases() {
    let env = env().await;
    let locks = env.locks.clone();
    let joined = tokio::spawn(async move { panic_inside(&locks, 2).await }).await;
    assert!(joined.unwrap_err().is_panic());
    env.assert_free_soon("exit:2").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelled_call_releases() {
    let env = env().await;
    // Dropped once the body is running (event-driven: no guess at how long acquiring takes).
    let (tx, rx) = oneshot::channel();
    tokio::select! {
        r = hang_inside(&env.locks, 3, tx) => panic!("the body cannot finish: {r:?}"),
        _ = rx => {}
    }
    env.assert_free_soon("exit:3").await;

    // The request-timeout shape: a timeout wrapper drops the call.
    let (tx, rx) = oneshot::channel();
    let timed_out =
        tokio::time::timeout(Duration::from_secs(1), hang_inside(&env.locks, 4, tx)).await;
    assert!(timed_out.is_err());
    assert!(
        rx.await.is_ok(),
        "the body never ran; acquiring took more than a second"
    );
    env.assert_free_soon("exit:4").await;
}

// ---- reentrancy follows the call chain -----------------------------------------------------------

type OtherTask = tokio::task::JoinHandle<Result<(), AppError>>;

#[distributed_lock(key = "job:{id}", client = locks, ttl = "60s", wait = "30s")]
async fn outer(locks: &LockClient, id: u32) -> Result<(u32, OtherTask), AppError> {
    // A spawned task is another owner: it must wait until this whole call chain has released.
    let outer_done = Arc::new(AtomicBool::new(false));
    let (l, seen) = (locks.clone(), outer_done.clone());
    let other = tokio::spawn(async move { in_other_task(&l, id, &seen).await });
    let depth = inner(locks, id).await?;
    outer_done.store(true, Ordering::SeqCst);
    Ok((depth, other))
}

#[distributed_lock(key = "job:{id}", client = locks, ttl = "60s", wait = "1s")]
async fn inner(locks: &LockClient, id: u32) -> Result<u32, AppError> {
    // Re-entered, not waited for: with `wait = "1s"` a deadlock would be a Timeout error.
    Ok(2)
}

#[distributed_lock(key = "job:{id}", client = locks, ttl = "60s", wait = "30s")]
async fn in_other_task(
    locks: &LockClient,
    id: u32,
    outer_done: &AtomicBool,
) -> Result<(), AppError> {
    assert!(
        outer_done.load(Ordering::SeqCst),
        "a spawned task entered while the caller's chain held the lock"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nested_calls_reenter_and_spawned_tasks_wait() {
    let env = env().await;
    let (depth, other) = outer(&env.locks, 5).await.unwrap();
    assert_eq!(depth, 2);
    // Entered only after `outer` released (it asserts so itself).
    other.await.unwrap().unwrap();
}

#[distributed_lock(key = "joined:{id}", client = locks, ttl = "60s", wait = "30s")]
async fn exclusive_section(
    locks: &LockClient,
    id: u32,
    inside: &AtomicUsize,
    mut data: MultiplexedConnection,
) -> Result<(), AppError> {
    assert_eq!(
        inside.fetch_add(1, Ordering::SeqCst),
        0,
        "two holders at once"
    );
    // Give the other joined call many chances to run (each PING is a real round trip the
    // executor interleaves with it); if reentrancy followed the task, it would enter here.
    for _ in 0..20 {
        let () = redis::cmd("PING").query_async(&mut data).await?;
        tokio::task::yield_now().await;
        assert_eq!(
            inside.load(Ordering::SeqCst),
            1,
            "the joined call overlapped"
        );
    }
    inside.fetch_sub(1, Ordering::SeqCst);
    Ok(())
}

#[tokio::test]
async fn joined_calls_in_one_task_do_not_overlap() {
    let env = env().await;
    let inside = AtomicUsize::new(0);
    let (a, b) = tokio::join!(
        exclusive_section(&env.locks, 6, &inside, env.data.clone()),
        exclusive_section(&env.locks, 6, &inside, env.data.clone()),
    );
    a.unwrap();
    b.unwrap();
}

// ---- failing to get the lock never runs the body --------------------------------------------------

#[distributed_lock(key = "busy:{id}", client = locks, wait = "0s")]
async fn try_once(locks: &LockClient, id: u32, ran: &AtomicBool) -> Result<(), AppError> {
    ran.store(true, Ordering::SeqCst);
    Ok(())
}

#[tokio::test]
async fn zero_wait_fails_fast_into_the_fns_error() {
    let env = env().await;
    let held = env.locks.lock("busy:9").acquire().await.unwrap();
    let ran = AtomicBool::new(false);
    let started = std::time::Instant::now();
    let err = try_once(&env.locks, 9, &ran).await.unwrap_err();
    assert!(
        matches!(&err, AppError::Lock(LockError::Timeout { name, .. }) if name == "busy:9"),
        "{err:?}"
    );
    assert!(!ran.load(Ordering::SeqCst), "the body ran without the lock");
    // Generous bound: the default wait (10 s) would blow it.
    assert!(started.elapsed() < Duration::from_secs(5));
    held.release().await.unwrap();
    try_once(&env.locks, 9, &ran).await.unwrap();
    assert!(ran.load(Ordering::SeqCst));
}
