//! `LockClient`: the public handle on a client, and the process-wide default client.

use std::sync::{Arc, RwLock};

use crate::builder::{LockClientBuilder, Target};
use crate::error::LockError;
use crate::lock::Lock;
use crate::multi::MultiLock;
use crate::rwlock::ReadWriteLock;
use crate::semaphore::Semaphore;
use crate::shared::Shared;

/// A connection to one Redis deployment: command connections, one pub/sub connection shared by
/// every waiter, and one watchdog task renewing every lock this client holds, all run on the
/// client's own background thread.
///
/// Cheap to clone (an `Arc`); clones share everything. Dropping the last clone stops the
/// watchdog, the subscriber and the thread. Build one per Redis deployment and process, and
/// share it: clones of one client re-enter each other's locks along a call chain, separate
/// clients do not.
///
/// ```no_run
/// # async fn demo() -> Result<(), dlock_runtime::LockError> {
/// use std::time::Duration;
/// use dlock_runtime::LockClient;
///
/// let client = LockClient::builder("redis://127.0.0.1:6379")
///     .default_wait(Duration::from_secs(2))
///     .build()
///     .await?;
/// // The default for `#[distributed_lock]` without `client = ...` (and `LockClient::global()`).
/// client.clone().install();
///
/// let guard = client.lock("invoice:7").acquire().await?;
/// // ... work under the lock ...
/// guard.release().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct LockClient {
    pub(crate) shared: Arc<Shared>,
}

static GLOBAL: RwLock<Option<LockClient>> = RwLock::new(None);

impl LockClient {
    /// Connects with default settings. `url` is a redis-rs URL (`redis://host:port/db`).
    pub async fn connect(url: &str) -> Result<Self, LockError> {
        Self::builder(url).build().await
    }

    /// Starts a builder for a client of one Redis server (`redis://host:port/db`,
    /// `redis://user:password@host:port`; `rediss://` for TLS).
    pub fn builder(url: impl Into<String>) -> LockClientBuilder {
        LockClientBuilder::new(Target::Single(url.into()))
    }

    /// Starts a builder for a client of a Redis Cluster, found through `nodes` (seed node URLs,
    /// `redis://host:port`; any reachable master or replica will do, the rest is discovered).
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), dlock_runtime::LockError> {
    /// let client = dlock_runtime::LockClient::cluster_builder([
    ///     "redis://10.0.0.1:6379",
    ///     "redis://10.0.0.2:6379",
    /// ])
    /// .build()
    /// .await?;
    /// # Ok(()) }
    /// ```
    pub fn cluster_builder<I, S>(nodes: I) -> LockClientBuilder
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        LockClientBuilder::new(Target::Cluster(nodes.into_iter().map(Into::into).collect()))
    }

    /// Starts a builder for a client of the primary that Redis Sentinel manages under
    /// `master_name`, found through `sentinels` (sentinel URLs, `redis://host:26379`). The
    /// client follows failovers: it asks the sentinels again when a command fails the way a
    /// failover makes it fail, and switches to the new primary. Credentials of the primary go
    /// in [`LockClientBuilder::master_auth`].
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), dlock_runtime::LockError> {
    /// let client = dlock_runtime::LockClient::sentinel_builder(
    ///     ["redis://10.0.0.1:26379", "redis://10.0.0.2:26379", "redis://10.0.0.3:26379"],
    ///     "mymaster",
    /// )
    /// .master_auth(Some("locks"), "secret")
    /// .build()
    /// .await?;
    /// # Ok(()) }
    /// ```
    pub fn sentinel_builder<I, S>(sentinels: I, master_name: impl Into<String>) -> LockClientBuilder
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        LockClientBuilder::new(Target::Sentinel {
            sentinels: sentinels.into_iter().map(Into::into).collect(),
            master: master_name.into(),
        })
    }

    /// A handle on the lock called `name`. Nothing is sent to Redis until you acquire it.
    ///
    /// The name may hold any text (`{`, `}`, `:` and unicode included); it is escaped where it
    /// becomes a Redis key. An empty name is rejected when the lock is used.
    pub fn lock(&self, name: impl Into<String>) -> Lock {
        Lock::new(self.shared.clone(), name.into())
    }

    /// A read-write lock called `name`: many readers or one writer (see [`ReadWriteLock`]).
    /// Its keys differ from a plain lock's of the same name.
    pub fn read_write_lock(&self, name: impl Into<String>) -> ReadWriteLock {
        ReadWriteLock::new(self.shared.clone(), name.into())
    }

    /// The plain locks of `names`, taken together: all or none, in one canonical order (sorted
    /// by Redis key, duplicates taken once), so callers listing the same names in any order
    /// never deadlock (see [`MultiLock`]). They are the locks [`LockClient::lock`] hands out:
    /// `client.lock("a")` and a multi-lock over `["a", "b"]` exclude each other. An empty list
    /// or an empty name is rejected when the multi-lock is used.
    pub fn multi_lock(&self, names: impl IntoIterator<Item = impl Into<String>>) -> MultiLock {
        MultiLock::new(
            self.shared.clone(),
            names.into_iter().map(Into::into).collect(),
        )
    }

    /// A semaphore called `name` with `permits` permits, each expiring on its own (see
    /// [`Semaphore`]). Every client must use the same count for one name; its keys differ from
    /// a lock's of the same name.
    pub fn semaphore(&self, name: impl Into<String>, permits: u32) -> Semaphore {
        Semaphore::new(self.shared.clone(), name.into(), permits)
    }

    /// A fair lock called `name`: granted first come, first served across processes. Its keys
    /// differ from a plain lock's of the same name.
    pub fn fair_lock(&self, name: impl Into<String>) -> Lock {
        Lock::of_kind(
            self.shared.clone(),
            name.into(),
            std::sync::Arc::new(crate::kind::Fair),
        )
    }

    /// Makes this client the process default, returned by [`LockClient::global`] and used by
    /// `#[distributed_lock]` without `client = ...`. Returns the client it replaces, if any.
    pub fn install(self) -> Option<LockClient> {
        let mut slot = GLOBAL.write().unwrap_or_else(|e| e.into_inner());
        slot.replace(self)
    }

    /// The default client: the one given to the running future with
    /// [`LockClient::with_default`], else the one installed with [`LockClient::install`], else
    /// [`LockError::NotConfigured`].
    pub fn global() -> Result<LockClient, LockError> {
        if let Some(client) = crate::task_default::task_default() {
            return Ok(client);
        }
        let slot = GLOBAL.read().unwrap_or_else(|e| e.into_inner());
        slot.clone().ok_or(LockError::NotConfigured)
    }

    /// The Redis URL this client talks to, password removed.
    pub fn url(&self) -> &str {
        &self.shared.url
    }

    /// The random id of this client; every owner id it creates starts with it.
    pub fn client_id(&self) -> &str {
        &self.shared.client_id
    }
}

impl std::fmt::Debug for LockClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LockClient")
            .field("url", &self.shared.url)
            .field("client_id", &self.shared.client_id)
            .finish_non_exhaustive()
    }
}
