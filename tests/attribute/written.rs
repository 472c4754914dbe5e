//! `#[distributed_lock]` returns once its release is written, not when Redis answers it
//! (`LockGuard::release_written`): this client still sees the lock free at once, the release
//! reaches Redis, and a release whose connection dies before the reply still frees the lock.

use std::time::Duration;

use dlock::testing::RedisServer;
use dlock::{distributed_lock, LockClient, LockError};
use redis::aio::MultiplexedConnection;

#[derive(Debug)]
enum AppError {
    // Read through `Debug` when a test fails.
    Lock(#[allow(dead_code)] LockError),
    Redis(#[allow(dead_code)] redis::RedisError),
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

async fn data(url: &str) -> MultiplexedConnection {
    redis::Client::open(url)
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap()
}

#[distributed_lock(key = "written:{id}", client = locks, ttl = "60s", wait = "5s")]
async fn locked(locks: &LockClient, id: u32) -> Result<u32, AppError> {
    Ok(id)
}

/// Whether the lock hash of `written:{id}` exists, asked on a connection of its own.
async fn exists(conn: &mut MultiplexedConnection, id: u32) -> bool {
    let key = format!("{}{{written:{id}}}", dlock::DEFAULT_PREFIX);
    redis::cmd("EXISTS")
        .arg(&key)
        .query_async::<i64>(conn)
        .await
        .unwrap()
        == 1
}

/// Polls until the lock hash of `written:{id}` is gone; panics after 10 s (the lease is 60 s, so
/// a release left to expire fails the test).
async fn gone_soon(conn: &mut MultiplexedConnection, id: u32) {
    for _ in 0..1000 {
        if !exists(conn, id).await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("the release of written:{id} did not reach Redis within 10 s");
}

/// The same client's next acquire, sent right after the call returned, is queued behind the
/// release on the key's connection: a single try finds the lock free, every time, on every
/// one of the client's connections (several, so the key's connection is not the only one).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn same_client_sees_the_lock_free_at_once() {
    let redis = RedisServer::start().unwrap();
    let locks = LockClient::builder(redis.url())
        .connections(4)
        .build()
        .await
        .unwrap();
    let mut data = data(&redis.url()).await;
    for id in 0..300 {
        assert_eq!(locked(&locks, id).await.unwrap(), id);
        let lock = locks.lock(format!("written:{id}"));
        assert!(!lock.is_locked().await.unwrap(), "written:{id} still held");
        let again = lock.try_acquire().await.unwrap();
        let again = again.unwrap_or_else(|| panic!("written:{id} still held"));
        again.release().await.unwrap();
        assert!(!exists(&mut data, id).await);
    }
}

/// The same on a current-thread runtime, where the connections are driven by the client's
/// own thread.
#[tokio::test]
async fn same_client_sees_the_lock_free_from_a_current_thread_runtime() {
    let redis = RedisServer::start().unwrap();
    let locks = LockClient::connect(&redis.url()).await.unwrap();
    for id in 0..100 {
        locked(&locks, id).await.unwrap();
        let again = locks.lock(format!("written:{id}")).try_acquire().await;
        let again = again
            .unwrap()
            .unwrap_or_else(|| panic!("written:{id} held"));
        again.release().await.unwrap();
    }
}

/// Another process's view: the release arrives (the key goes), and its waiter is woken.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_release_reaches_redis() {
    let redis = RedisServer::start().unwrap();
    let locks = LockClient::connect(&redis.url()).await.unwrap();
    let mut data = data(&redis.url()).await;
    locked(&locks, 1).await.unwrap();
    gone_soon(&mut data, 1).await;

    // A waiter of another client, parked on the lock, is woken by the release's message.
    let other = LockClient::connect(&redis.url()).await.unwrap();
    let held = other.lock("written:2").acquire().await.unwrap();
    let waiting = tokio::spawn({
        let locks = locks.clone();
        async move { locked(&locks, 2).await }
    });
    held.release().await.unwrap();
    assert_eq!(waiting.await.unwrap().unwrap(), 2);
    gone_soon(&mut data, 2).await;
}

/// Pauses Redis's writes from inside the body, so the release waits in Redis unanswered.
#[distributed_lock(key = "written:{id}", client = locks, ttl = "60s", wait = "5s")]
async fn pausing(
    locks: &LockClient,
    id: u32,
    mut data: MultiplexedConnection,
) -> Result<u32, AppError> {
    // 10 s: the bound on how long the call could wait for the reply if it did (it does not).
    let () = redis::cmd("CLIENT")
        .arg("PAUSE")
        .arg(10_000)
        .arg("WRITE")
        .query_async(&mut data)
        .await?;
    Ok(id)
}

/// The call returns while Redis cannot answer the release yet (its writes paused), and when
/// the connection carrying the release is killed before it ran, the release is sent again in
/// the background (same request id) and the lock is freed, not left to its 60 s lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn returns_before_the_reply_and_a_killed_release_still_frees() {
    let redis = RedisServer::start().unwrap();
    let locks = LockClient::connect(&redis.url()).await.unwrap();
    let mut data = data(&redis.url()).await;
    assert_eq!(pausing(&locks, 7, data.clone()).await.unwrap(), 7);
    // Returned while the release still waits in Redis (reads are served during the pause).
    assert!(
        exists(&mut data, 7).await,
        "the call waited for the release"
    );
    // Every command connection goes (the release with it, never run), then writes resume.
    let killed: i64 = redis::cmd("CLIENT")
        .arg("KILL")
        .arg("TYPE")
        .arg("normal")
        .arg("SKIPME")
        .arg("yes")
        .query_async(&mut data)
        .await
        .unwrap();
    assert!(killed >= 1, "no connection of the client was killed");
    let () = redis::cmd("CLIENT")
        .arg("UNPAUSE")
        .query_async(&mut data)
        .await
        .unwrap();
    gone_soon(&mut data, 7).await;
    // And the client works on.
    assert_eq!(locked(&locks, 8).await.unwrap(), 8);
    gone_soon(&mut data, 8).await;
}

/// Dropping the client right after an annotated call, on a current-thread runtime (what
/// `#[tokio::test]` and `#[tokio::main(flavor = "current_thread")]` build): the drop waits for
/// the release's reply, so that reply must not be awaited by a task on the very thread the drop
/// blocks (issue 28 item 4: the drop stalled for its whole 2 s bound, then warned that
/// releases were unanswered while the lock was free).
#[tokio::test]
async fn dropping_the_client_after_a_call_on_a_current_thread_runtime_does_not_stall() {
    let redis = RedisServer::start().unwrap();
    let logs = crate::common::logs::Logs::default();
    let _logging = tracing::subscriber::set_default(logs.subscriber(tracing::Level::WARN));
    let mut data = data(&redis.url()).await;
    for id in 0..5 {
        let locks = LockClient::connect(&redis.url()).await.unwrap();
        assert_eq!(locked(&locks, id).await.unwrap(), id);
        let started = std::time::Instant::now();
        drop(locks);
        let took = started.elapsed();
        // A round trip takes well under a millisecond here; the stall was 2.000 s.
        assert!(
            took < Duration::from_secs(1),
            "dropping the client took {took:?}"
        );
        gone_soon(&mut data, id).await;
    }
    let logged = logs.text();
    assert!(
        !logged.contains("had not answered"),
        "a false warning at the drop: {logged}"
    );
}

/// Flushes dlock's scripts from the server inside the body, so the release that follows is
/// the call that finds them missing (FUNCTION FLUSH where the server has FUNCTION).
#[distributed_lock(key = "flushed:{id}", client = locks, ttl = "60s", wait = "5s")]
async fn flushing_inside(
    locks: &LockClient,
    id: u32,
    admin: &mut MultiplexedConnection,
    functions: bool,
) -> Result<u32, AppError> {
    if functions {
        redis::cmd("FUNCTION")
            .arg("FLUSH")
            .query_async::<()>(admin)
            .await?;
    }
    redis::cmd("SCRIPT")
        .arg("FLUSH")
        .query_async::<()>(admin)
        .await?;
    Ok(id)
}

/// A written release whose script the server lost (a restart, a flush, Redis 6.2's first use
/// of a script) is re-sent with the script's text once its reply says so, which puts it
/// behind the same client's next request on the connection: that request must still see the
/// lock free (issue 29 item 2; on 7.0 after FUNCTION FLUSH + SCRIPT FLUSH it found it held).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn same_client_sees_the_lock_free_after_the_server_lost_the_scripts() {
    let redis = RedisServer::start().unwrap();
    let functions = redis.version() >= dlock::testing::RedisVersion::new(7, 0, 0);
    if !functions {
        println!(
            "no FUNCTION on {:?}: flushing the script cache only",
            redis.version()
        );
    }
    let locks = LockClient::connect(&redis.url()).await.unwrap();
    let mut admin = data(&redis.url()).await;
    let mut busy = 0;
    for id in 0..100 {
        assert_eq!(
            flushing_inside(&locks, id, &mut admin, functions)
                .await
                .unwrap(),
            id
        );
        match locks
            .lock(format!("flushed:{id}"))
            .try_acquire()
            .await
            .unwrap()
        {
            Some(guard) => guard.release().await.unwrap(),
            None => busy += 1,
        }
    }
    assert_eq!(
        busy, 0,
        "rounds of 100 where the same client found its released lock busy"
    );
}
