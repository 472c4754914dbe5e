//! `#[distributed_lock]` options added for day-to-day use, against a real redis-server: the body
//! reaching its lock (`current_lock()`), `on_busy = "skip"`, `map_err`, per-type default keys
//! of methods, and the human duration forms (`1.5s`, `1h30m`, `wait = "forever"`).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use dlock::testing::RedisServer;
use dlock::{current_lock, distributed_lock, LockClient, LockError};

struct Env {
    _server: RedisServer,
    url: String,
    locks: LockClient,
}

async fn env() -> Env {
    let server = RedisServer::start().expect("redis-server on PATH");
    let url = server.url();
    let locks = LockClient::connect(&url).await.unwrap();
    Env {
        _server: server,
        url,
        locks,
    }
}

impl Env {
    /// Another client, as another process would be.
    async fn other(&self) -> LockClient {
        LockClient::connect(&self.url).await.unwrap()
    }
}

// ---- current_lock() ------------------------------------------------------------------------------

/// What the body saw of its lock.
#[derive(Debug)]
struct Seen {
    name: String,
    token: u64,
    lost: bool,
}

fn seen() -> Seen {
    let lock = current_lock().expect("inside a locked body");
    Seen {
        name: lock.name().to_owned(),
        token: lock.fencing_token(),
        lost: lock.is_lost(),
    }
}

#[distributed_lock(key = "outer:{id}", client = locks, ttl = "60s")]
async fn outer(locks: &LockClient, id: u32) -> Result<(Seen, Seen, Seen), LockError> {
    let before = seen();
    let inner = inner(locks, id).await?;
    // Back in the outer body: the innermost lock is the outer one again.
    Ok((before, inner, seen()))
}

#[distributed_lock(key = "inner:{id}", client = locks, ttl = "60s")]
async fn inner(locks: &LockClient, id: u32) -> Result<Seen, LockError> {
    // Through a helper and an await: the lock follows the call chain, not the stack frame.
    tokio::task::yield_now().await;
    Ok(seen())
}

#[tokio::test]
async fn current_lock_names_the_innermost_hold() {
    let env = env().await;
    assert!(current_lock().is_none(), "no lock outside a body");
    let (before, inner, after) = outer(&env.locks, 4).await.unwrap();
    assert_eq!(before.name, "outer:4");
    assert_eq!(inner.name, "inner:4");
    assert_eq!(after.name, "outer:4");
    assert!(!before.lost && !inner.lost && !after.lost);
    assert_eq!(before.token, after.token);
    assert!(before.token > 0 && inner.token > 0);
    assert!(current_lock().is_none(), "no lock after the call");

    // The token is the hold's: the next holder of `outer:4` gets a larger one.
    let guard = env.locks.lock("outer:4").acquire().await.unwrap();
    assert!(guard.fencing_token() > before.token);
    // And `LockGuard::scope` exposes its hold the same way.
    let in_scope = guard.scope(async { seen() }).await;
    assert_eq!(in_scope.name, "outer:4");
    assert_eq!(in_scope.token, guard.fencing_token());
    guard.release().await.unwrap();

    // A task spawned from a body starts a new call chain: no lock there.
    #[distributed_lock(key = "spawner", client = locks)]
    async fn spawner(locks: &LockClient) -> Result<bool, LockError> {
        Ok(tokio::spawn(async { current_lock().is_none() })
            .await
            .unwrap())
    }
    assert!(spawner(&env.locks).await.unwrap());
}

/// A hard lease shorter than the work: the body learns it lost the lock and stops.
#[distributed_lock(key = "lease-job", client = locks, lease = "400ms")]
async fn outlives_its_lease(locks: &LockClient) -> Result<&'static str, LockError> {
    let lock = current_lock().expect("inside the body");
    assert!(!lock.is_lost());
    tokio::select! {
        _ = lock.lost() => {
            assert!(lock.is_lost());
            Ok("stopped: lost")
        }
        _ = tokio::time::sleep(Duration::from_secs(20)) => Ok("finished"),
    }
}

#[tokio::test]
async fn body_stops_when_its_lease_runs_out() {
    let env = env().await;
    let started = Instant::now();
    assert_eq!(
        outlives_its_lease(&env.locks).await.unwrap(),
        "stopped: lost"
    );
    let took = started.elapsed();
    assert!(took < Duration::from_secs(5), "lost() fired after {took:?}");
    // Lost no later than the lease: another owner can take it now.
    let other = env.other().await;
    other
        .lock("lease-job")
        .wait(Duration::from_secs(5))
        .acquire()
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
}

// ---- on_busy = "skip" ----------------------------------------------------------------------------

static NIGHTLY_RUNS: AtomicUsize = AtomicUsize::new(0);

#[distributed_lock(key = "nightly:{day}", client = locks, wait = "0s", on_busy = "skip")]
async fn nightly(locks: &LockClient, day: &str) -> Result<Option<u32>, LockError> {
    NIGHTLY_RUNS.fetch_add(1, Ordering::SeqCst);
    Ok(Some(42))
}

#[tokio::test]
async fn on_busy_skip_returns_none_without_running_the_body() {
    let env = env().await;
    assert_eq!(nightly(&env.locks, "mon").await.unwrap(), Some(42));
    assert_eq!(NIGHTLY_RUNS.load(Ordering::SeqCst), 1);

    // Another node is running it: skipped, not an error, body not run.
    let other = env.other().await;
    let held = other.lock("nightly:mon").acquire().await.unwrap();
    assert_eq!(nightly(&env.locks, "mon").await.unwrap(), None);
    assert_eq!(NIGHTLY_RUNS.load(Ordering::SeqCst), 1);
    held.release().await.unwrap();
    assert_eq!(nightly(&env.locks, "mon").await.unwrap(), Some(42));
    assert_eq!(NIGHTLY_RUNS.load(Ordering::SeqCst), 2);
}

/// Skip covers "busy" only: every other failure is still an error.
#[distributed_lock(key = "{name}", client = locks, wait = "0s", on_busy = "skip")]
async fn skip_named(locks: &LockClient, name: &str) -> Result<Option<()>, LockError> {
    Ok(Some(()))
}

#[tokio::test]
async fn on_busy_skip_keeps_other_errors() {
    let env = env().await;
    // An empty name is refused by the runtime: InvalidArgument, not a skip.
    let err = skip_named(&env.locks, "").await.unwrap_err();
    assert!(matches!(err, LockError::InvalidArgument { .. }), "{err:?}");
    // A waited skip: busy through a short wait.
    #[distributed_lock(key = "waited", client = locks, wait = "200ms", on_busy = "skip")]
    async fn waited(locks: &LockClient) -> Result<Option<()>, LockError> {
        Ok(Some(()))
    }
    let held = env.other().await.lock("waited").acquire().await.unwrap();
    let started = Instant::now();
    assert_eq!(waited(&env.locks).await.unwrap(), None);
    assert!(started.elapsed() >= Duration::from_millis(200));
    held.release().await.unwrap();
    assert_eq!(waited(&env.locks).await.unwrap(), Some(()));
}

// ---- default keys of methods carry the receiver type ----------------------------------------------

trait Job {
    async fn run(&self) -> Result<String, LockError>;
}

struct Cleanup {
    locks: LockClient,
}

struct Report {
    locks: LockClient,
}

impl Job for Cleanup {
    #[distributed_lock(client = self.locks, wait = "0s")]
    async fn run(&self) -> Result<String, LockError> {
        Ok(current_lock().unwrap().name().to_owned())
    }
}

impl Job for Report {
    #[distributed_lock(client = self.locks, wait = "0s")]
    async fn run(&self) -> Result<String, LockError> {
        Ok(current_lock().unwrap().name().to_owned())
    }
}

struct Repo<T>(LockClient, std::marker::PhantomData<T>);

impl<T: Send + Sync> Repo<T> {
    #[distributed_lock(client = self.0)]
    async fn sync(&self) -> Result<String, LockError> {
        Ok(current_lock().unwrap().name().to_owned())
    }
}

#[distributed_lock(client = locks)]
async fn free_fn(locks: &LockClient) -> Result<String, LockError> {
    Ok(current_lock().unwrap().name().to_owned())
}

#[tokio::test]
async fn default_keys_of_methods_name_the_receiver_type() {
    let env = env().await;
    let cleanup = Cleanup {
        locks: env.locks.clone(),
    };
    let report = Report {
        locks: env.locks.clone(),
    };
    assert_eq!(
        cleanup.run().await.unwrap(),
        "attribute::options::Cleanup::run"
    );
    assert_eq!(
        report.run().await.unwrap(),
        "attribute::options::Report::run"
    );
    // Free functions keep `module::fn`.
    assert_eq!(
        free_fn(&env.locks).await.unwrap(),
        "attribute::options::free_fn"
    );
    // Generic receivers: one lock per instance type.
    let strings = Repo::<String>(env.locks.clone(), Default::default());
    let numbers = Repo::<u64>(env.locks.clone(), Default::default());
    assert_eq!(
        strings.sync().await.unwrap(),
        "attribute::options::Repo<String>::sync"
    );
    assert_eq!(
        numbers.sync().await.unwrap(),
        "attribute::options::Repo<u64>::sync"
    );

    // The two impls do not block each other (they did when both were `macro_attr::run`).
    let other = env.other().await;
    let held = other
        .lock("attribute::options::Cleanup::run")
        .acquire()
        .await
        .unwrap();
    assert!(matches!(
        cleanup.run().await,
        Err(LockError::Timeout { .. })
    ));
    assert_eq!(
        report.run().await.unwrap(),
        "attribute::options::Report::run"
    );
    held.release().await.unwrap();
}

// ---- durations -------------------------------------------------------------------------------------

#[distributed_lock(key = "ttl-frac", client = locks, ttl = "1.5s")]
async fn ttl_one_and_a_half(locks: &LockClient) -> Result<Duration, LockError> {
    Ok(locks.lock("ttl-frac").remaining_ttl().await?.unwrap())
}

#[distributed_lock(key = "ttl-long", client = locks, ttl = "1h30m")]
async fn ttl_hour_and_a_half(locks: &LockClient) -> Result<Duration, LockError> {
    Ok(locks.lock("ttl-long").remaining_ttl().await?.unwrap())
}

#[distributed_lock(key = "ttl-min", client = locks, lease = "2min")]
async fn lease_two_minutes(locks: &LockClient) -> Result<Duration, LockError> {
    Ok(locks.lock("ttl-min").remaining_ttl().await?.unwrap())
}

#[distributed_lock(key = "short-wait", client = locks, wait = "250ms")]
async fn short_wait(locks: &LockClient) -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(key = "patient", client = locks, wait = "forever")]
async fn patient(locks: &LockClient) -> Result<(), LockError> {
    Ok(())
}

#[tokio::test]
async fn human_durations_reach_redis() {
    let env = env().await;
    let ttl = ttl_one_and_a_half(&env.locks).await.unwrap();
    assert!(
        ttl > Duration::from_millis(1_000) && ttl <= Duration::from_millis(1_500),
        "{ttl:?}"
    );
    let ttl = ttl_hour_and_a_half(&env.locks).await.unwrap();
    assert!(
        ttl > Duration::from_secs(5_390) && ttl <= Duration::from_secs(5_400),
        "{ttl:?}"
    );
    let ttl = lease_two_minutes(&env.locks).await.unwrap();
    assert!(
        ttl > Duration::from_secs(110) && ttl <= Duration::from_secs(120),
        "{ttl:?}"
    );

    let other = env.other().await;
    let held = other.lock("short-wait").acquire().await.unwrap();
    let started = Instant::now();
    let err = short_wait(&env.locks).await.unwrap_err();
    let waited = started.elapsed();
    assert!(matches!(err, LockError::Timeout { .. }), "{err:?}");
    assert!(
        waited >= Duration::from_millis(250) && waited < Duration::from_secs(5),
        "{waited:?}"
    );
    held.release().await.unwrap();
}

#[tokio::test]
async fn wait_forever_outlasts_the_default_wait() {
    let env = env().await;
    // A client whose default wait is short: `wait = "forever"` must not fall back to it.
    let locks = LockClient::builder(env.url.clone())
        .default_wait(Duration::from_millis(100))
        .build()
        .await
        .unwrap();
    let other = env.other().await;
    let held = other.lock("patient").acquire().await.unwrap();
    let call = tokio::spawn({
        let locks = locks.clone();
        async move { patient(&locks).await }
    });
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert!(!call.is_finished(), "gave up while the lock was held");
    held.release().await.unwrap();
    tokio::time::timeout(Duration::from_secs(10), call)
        .await
        .expect("not woken by the release")
        .unwrap()
        .unwrap();
}

// ---- self-deadlock through a second client -----------------------------------------------------------

#[distributed_lock(key = "account:{id}", client = first, wait = "10s")]
async fn outer_first(first: &LockClient, second: &LockClient, id: u32) -> Result<(), LockError> {
    inner_second(second, id).await
}

#[distributed_lock(key = "account:{id}", client = second, wait = "10s")]
async fn inner_second(second: &LockClient, id: u32) -> Result<(), LockError> {
    Ok(())
}

#[tokio::test]
async fn nested_call_through_another_client_fails_at_once() {
    let env = env().await;
    let second = env.other().await;
    let started = Instant::now();
    let err = outer_first(&env.locks, &second, 1).await.unwrap_err();
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "waited {:?} for itself",
        started.elapsed()
    );
    match &err {
        LockError::SelfDeadlock { name, holder } => {
            assert_eq!(name, "account:1");
            assert_eq!(holder, env.locks.client_id());
        }
        other => panic!("{other:?}"),
    }
    assert!(
        err.to_string().contains("use the same `LockClient`"),
        "{err}"
    );
    // The outer hold was released on the way out. Asked through the client that released it:
    // its written release is ordered ahead of its own next request, not of another client's
    // (on Redis 6.2 the release's first EVALSHA meets NOSCRIPT and is re-sent after a reply).
    assert!(!env.locks.lock("account:1").is_locked().await.unwrap());
    // The same client re-enters, as before.
    outer_first(&env.locks, &env.locks, 2).await.unwrap();
}
