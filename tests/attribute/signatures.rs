//! The shapes of functions `#[distributed_lock]` must accept and keep intact: generics and
//! where clauses, `impl Trait` arguments and results, lifetimes and borrowed results, pattern
//! and `mut` parameters, trait impls, `Send` handlers, other attributes, a renamed facade, and
//! user names that look like the generated ones. Each is also called against a real Redis and
//! checked to hold the lock it names.

use std::fmt::Display;
use std::future::Future;

use dlock::testing::RedisServer;
use dlock::{distributed_lock, LockClient, LockError};

#[derive(Debug)]
struct AppError(#[allow(dead_code)] LockError);

impl From<LockError> for AppError {
    fn from(e: LockError) -> Self {
        AppError(e)
    }
}

async fn held(locks: &LockClient, name: &str) -> Result<bool, AppError> {
    Ok(locks.lock(name).is_locked().await?)
}

#[distributed_lock(key = "generic:{key}", client = locks)]
async fn generic<K, T>(locks: &LockClient, key: K, value: T) -> Result<(T, bool), AppError>
where
    K: Display + Send + Sync,
    T: Send,
{
    let name = format!("generic:{key}");
    Ok((value, held(locks, &name).await?))
}

#[distributed_lock(key = "impl:{id}", client = locks)]
async fn impl_trait_arg(
    locks: &LockClient,
    id: impl Display + Send + Sync,
) -> Result<impl Display, AppError> {
    let name = format!("impl:{id}");
    held(locks, &name).await
}

#[distributed_lock(key = "borrowed:{name}", client = locks)]
async fn borrowed<'a>(locks: &LockClient, name: &'a str) -> Result<&'a str, AppError> {
    Ok(&name[..1])
}

struct Wrapper(u32);

#[distributed_lock(key = "pattern:{a}-{b}-{inner}-{n}", client = locks)]
async fn patterns(
    locks: &LockClient,
    (a, b): (u8, u8),
    Wrapper(inner): Wrapper,
    mut n: u32,
) -> Result<bool, AppError> {
    let name = format!("pattern:{a}-{b}-{inner}-{n}");
    n += 1;
    Ok(held(locks, &name).await? && n > 0)
}

/// Names that look like the generated ones: the generated locals are hygienic, so these are
/// the user's own and nothing is shadowed either way.
#[distributed_lock(key = "hygiene:{__dlock_key}:{__dlock_guard}", client = locks)]
async fn hygiene(
    locks: &LockClient,
    __dlock_key: u32,
    __dlock_guard: &str,
) -> Result<u32, AppError> {
    let __dlock_ret = __dlock_key + 1;
    let name = format!("hygiene:{__dlock_key}:{__dlock_guard}");
    assert!(held(locks, &name).await?);
    Ok(__dlock_ret)
}

/// `LockError` itself as the error type: the generated conversion is the identity.
#[distributed_lock(key = "plain:{id}", client = locks)]
async fn plain_lock_error(locks: &LockClient, id: u8) -> Result<u8, LockError> {
    Ok(id)
}

/// A `Result` alias with the error type fixed.
type JobResult<T> = Result<T, AppError>;

#[distributed_lock(key = "alias:{id}", client = locks)]
async fn aliased_result(locks: &LockClient, id: u8) -> JobResult<u8> {
    Ok(id)
}

/// Docs, other attributes and inner attributes stay where they were.
#[inline]
#[must_use = "it is a Result"]
#[distributed_lock(key = "attrs", client = locks)]
async fn attributes(locks: &LockClient, unused_but_allowed: u8) -> Result<(), AppError> {
    #![allow(unused_variables)]
    Ok(())
}

mod renamed_facade {
    use super::AppError;
    // A facade reachable under another path, as after `dlock2 = { package = "dlock" }`.
    use ::dlock as locking;

    #[locking::distributed_lock(key = "renamed:{id}", client = locks, crate = "locking")]
    pub async fn renamed(locks: &locking::LockClient, id: u8) -> Result<bool, AppError> {
        super::held(locks, &format!("renamed:{id}")).await
    }
}

// ---- trait impls ---------------------------------------------------------------------------------

trait Job {
    fn run(&self, id: u32) -> impl Future<Output = Result<bool, AppError>> + Send;
}

trait NativeAsyncJob {
    async fn run_native(&mut self, id: u32) -> Result<bool, AppError>;
}

/// A default method body in a trait definition, keyed on `self` as a whole (`Display`).
trait Named: std::fmt::Display + Sync {
    fn locks(&self) -> &LockClient;

    #[distributed_lock(key = "named:{self}", client = self.locks())]
    async fn touch(&self) -> Result<bool, AppError> {
        held(self.locks(), &format!("named:{self}")).await
    }
}

struct Worker {
    locks: LockClient,
    runs: u32,
}

impl std::fmt::Display for Worker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "worker-{}", self.runs)
    }
}

impl Named for Worker {
    fn locks(&self) -> &LockClient {
        &self.locks
    }
}

impl Job for Worker {
    #[distributed_lock(key = "worker:{id}", client = self.locks)]
    async fn run(&self, id: u32) -> Result<bool, AppError> {
        held(&self.locks, &format!("worker:{id}")).await
    }
}

impl NativeAsyncJob for Worker {
    #[distributed_lock(key = "native:{id}", client = self.locks)]
    async fn run_native(&mut self, id: u32) -> Result<bool, AppError> {
        self.runs += 1;
        held(&self.locks, &format!("native:{id}")).await
    }
}

// ---- a handler stays a handler -------------------------------------------------------------------

/// The shape of an axum extractor pattern, `State(state): State<AppState>`.
struct State<T>(T);

#[derive(Clone)]
struct AppState {
    locks: LockClient,
}

#[distributed_lock(key = "cart:{user}", client = state.locks, wait = "2s")]
async fn handler(State(state): State<AppState>, user: u64) -> Result<String, AppError> {
    Ok(format!(
        "{user}:{}",
        held(&state.locks, &format!("cart:{user}")).await?
    ))
}

/// What axum requires of a handler's future.
fn assert_handler_future<F: Future + Send + 'static>(f: F) -> F {
    f
}

// ---- tracing::instrument above and below ---------------------------------------------------------

// Below: #[distributed_lock] expands first, so the span also covers waiting for the lock.
#[distributed_lock(key = "traced:{id}", client = locks)]
#[tracing::instrument(skip_all, fields(id), err(Debug))]
async fn traced_below(locks: &LockClient, id: u8) -> Result<bool, AppError> {
    held(locks, &format!("traced:{id}")).await
}

// Above: the span covers the body only; the lock is taken outside it.
#[tracing::instrument(skip_all, fields(id), err(Debug))]
#[distributed_lock(key = "traced:{id}", client = locks)]
async fn traced_above(locks: &LockClient, id: u8) -> Result<bool, AppError> {
    held(locks, &format!("traced:{id}")).await
}

#[tokio::test]
async fn every_shape_holds_the_lock_it_names() {
    let server = RedisServer::start().unwrap();
    let locks = LockClient::connect(&server.url()).await.unwrap();

    assert_eq!(generic(&locks, "k", 5u8).await.unwrap(), (5, true));
    assert_eq!(impl_trait_arg(&locks, 3).await.unwrap().to_string(), "true");
    let owned = String::from("xyz");
    assert_eq!(borrowed(&locks, &owned).await.unwrap(), "x");
    assert!(patterns(&locks, (1, 2), Wrapper(3), 4).await.unwrap());
    assert_eq!(hygiene(&locks, 41, "g").await.unwrap(), 42);
    attributes(&locks, 0).await.unwrap();
    assert_eq!(plain_lock_error(&locks, 4).await.unwrap(), 4);
    assert_eq!(aliased_result(&locks, 5).await.unwrap(), 5);
    assert!(renamed_facade::renamed(&locks, 1).await.unwrap());

    let mut worker = Worker {
        locks: locks.clone(),
        runs: 0,
    };
    assert!(worker.run(1).await.unwrap());
    assert!(worker.run_native(2).await.unwrap());
    assert_eq!(worker.runs, 1);
    assert!(worker.touch().await.unwrap());
    assert!(!held(&locks, "named:worker-1").await.unwrap());

    let state = AppState {
        locks: locks.clone(),
    };
    let fut = assert_handler_future(handler(State(state.clone()), 9));
    assert_eq!(tokio::spawn(fut).await.unwrap().unwrap(), "9:true");

    assert!(traced_below(&locks, 1).await.unwrap());
    assert!(traced_above(&locks, 2).await.unwrap());

    for name in [
        "generic:k",
        "impl:3",
        "borrowed:xyz",
        "worker:1",
        "cart:9",
        "traced:1",
    ] {
        assert!(!held(&locks, name).await.unwrap(), "{name} still held");
    }
}
