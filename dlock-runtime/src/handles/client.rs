//! `LockClient`: the public handle on a client, and the lock handles it makes. Its
//! constructors are in `builder.rs`, the default client in `default_client.rs`.

use std::sync::Arc;

use crate::handles::lock::Lock;
use crate::handles::multi::MultiLock;
use crate::handles::rwlock::ReadWriteLock;
use crate::handles::semaphore::Semaphore;
use crate::kinds::Fair;
use crate::machinery::shared::Shared;

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
/// # extern crate dlock_runtime as dlock;
/// # async fn demo() -> Result<(), dlock::LockError> {
/// use std::time::Duration;
/// use dlock::LockClient;
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

impl LockClient {
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
        Lock::of_kind(self.shared.clone(), name.into(), Arc::new(Fair))
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
