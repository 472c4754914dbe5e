//! `LockClient`: the public handle on a client, and the lock handles it makes. Its
//! constructors are in `builder.rs`, the default client in `default_client.rs`.

use std::sync::Arc;
use std::time::Duration;

use crate::handles::lock::Lock;
use crate::handles::multi::MultiLock;
use crate::handles::rwlock::ReadWriteLock;
use crate::handles::semaphore::Semaphore;
use crate::machinery::shared::Shared;
use crate::store::redis::kinds::{Fair, RedissonLock, RedissonRead, RedissonWrite};

/// A connection to one Redis deployment: command connections, one pub/sub connection shared by
/// every waiter (on a cluster, one per master it waits on too), and one watchdog task renewing every lock this client holds, all run on the
/// client's own background thread.
///
/// Cheap to clone (an `Arc`); clones share everything. Dropping the last clone waits (at most
/// the response timeout, capped at 2 s) for releases still queued on the client's thread, so a
/// guard dropped just before `main` returns does not leave its lock held; the watchdog, the
/// subscriber and the thread stop once no lock handle or guard is left either.
/// [`LockClient::shutdown`] does more: it also releases the locks still held. Build one per Redis deployment and process, and
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
    /// Shared by the clones of this client only (not by its lock handles or guards): its drop
    /// is the drop of the last clone.
    _last: Arc<LastHandle>,
}

/// Flushes the client's queued clean-ups when the last `LockClient` clone goes.
struct LastHandle(Arc<Shared>);

impl Drop for LastHandle {
    fn drop(&mut self) {
        let bound = self.0.response_timeout.min(LAST_DROP_BOUND);
        if !self.0.bg.flushed_blocking(bound) {
            tracing::warn!(url = %self.0.url, "dlock: the last client handle was dropped with releases Redis had not answered; those locks end with their leases");
        }
    }
}

/// The longest the drop of a client's last handle blocks its thread for queued releases.
pub(crate) const LAST_DROP_BOUND: Duration = Duration::from_secs(2);

impl LockClient {
    pub(crate) fn new(shared: Arc<Shared>) -> Self {
        LockClient {
            _last: Arc::new(LastHandle(shared.clone())),
            shared,
        }
    }

    /// Shuts the client down before the process exits: releases every lock it still holds
    /// (their guards then read as lost, and their release or drop sends nothing), sends the
    /// releases and clean-ups still queued on its thread, and stops its watchdog and
    /// subscriber; returns when Redis has answered, or after the response timeout (default
    /// 5 s) per step. Other clones, lock handles and guards of this client stay usable as
    /// values, but acquires fail with [`LockError::Closed`](crate::LockError::Closed). Locks
    /// held with a hard [`lease`](crate::Lock::lease) are not renewed by the client and are
    /// left to end with their lease.
    ///
    /// For a service, call it after the server stops taking requests, e.g. in axum:
    ///
    /// ```no_run
    /// # extern crate dlock_runtime as dlock;
    /// # async fn demo(app: std::future::Ready<()>) -> Result<(), dlock::LockError> {
    /// let locks = dlock::LockClient::connect("redis://127.0.0.1:6379").await?;
    /// // axum::serve(listener, app).with_graceful_shutdown(sigterm()).await?;
    /// locks.shutdown().await;
    /// # Ok(()) }
    /// ```
    pub async fn shutdown(self) {
        crate::machinery::shutdown::shutdown(&self.shared).await;
    }

    /// A handle on the lock called `name`. Nothing is sent to Redis until you acquire it.
    ///
    /// The name may hold any text (`{`, `}`, `:`, NUL and unicode included, of any length); it
    /// is escaped where it becomes a Redis key, and on PostgreSQL a long one is stored hashed
    /// (see the crate docs, "Stores"). An empty name is rejected when the lock is used.
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
    /// differ from a plain lock's of the same name. On Redis and on PostgreSQL alike.
    pub fn fair_lock(&self, name: impl Into<String>) -> Lock {
        Lock::of_kind(self.shared.clone(), name.into(), Arc::new(Fair))
    }

    /// Redisson's reentrant lock `name` (`RLock`), spoken on the wire exactly as Redisson 3.24+
    /// and 4.x speak it: a Java service calling `redisson.getLock(name)` and this lock exclude
    /// each other, and wake each other on release. The same [`Lock`] API as
    /// [`LockClient::lock`]; the lease defaults to Redisson's 30 s watchdog timeout (a handle's
    /// [`Lock::ttl`] overrides it). Its keys are Redisson's, not dlock's: see the
    /// `dlock::redisson` page for the layout, the fencing tokens, and where compatibility stops.
    ///
    /// Like `RLock` it writes nothing but the lock's hash (gone on release) and unlock latches
    /// (which expire), so locking one name per order id does not grow Redis. A guard's
    /// [`LockGuard::fencing_token`](crate::LockGuard::fencing_token) is the Redis server's clock
    /// in µs at the grant, not a stored counter; for `RFencedLock`'s counter, shared with Java,
    /// use [`LockClient::redisson_fenced_lock`].
    ///
    /// Redis only (it speaks Redisson's protocol): on a PostgreSQL client its acquire fails,
    /// naming the store and the kind.
    pub fn redisson_lock(&self, name: impl Into<String>) -> Lock {
        let kind = Arc::new(RedissonLock {
            sharded: self.shared.sharded_pubsub,
            fenced: false,
        });
        Lock::of_kind(self.shared.clone(), name.into(), kind)
    }

    /// Redisson's fenced lock `name` (`RFencedLock`): the lock of [`LockClient::redisson_lock`]
    /// (Java's `getLock(name)` and `getFencedLock(name)` holders exclude it alike), plus
    /// `RFencedLock`'s token counter `redisson_lock_token:{<name>}`, INCRemented on every grant
    /// (re-entries included) as Java does: a guard's
    /// [`LockGuard::fencing_token`](crate::LockGuard::fencing_token) and a Java
    /// `tryLockAndGetToken` draw from one sequence.
    ///
    /// That counter is one key per lock name which nobody deletes, as in Java: a Java
    /// `RFencedLock` counts on from it, so an expiry would hand out tokens again from 1. Use
    /// it for a bounded set of names; see the `dlock::redisson` page.
    ///
    /// Redis only (it speaks Redisson's protocol): on a PostgreSQL client its acquire fails,
    /// naming the store and the kind.
    pub fn redisson_fenced_lock(&self, name: impl Into<String>) -> Lock {
        let kind = Arc::new(RedissonLock {
            sharded: self.shared.sharded_pubsub,
            fenced: true,
        });
        Lock::of_kind(self.shared.clone(), name.into(), kind)
    }

    /// Redisson's read-write lock `name` (`RReadWriteLock`), spoken on the wire as Redisson
    /// 3.24+ and 4.x speak it: readers of a Java service calling
    /// `redisson.getReadWriteLock(name)` and of this lock hold side by side, and a writer on
    /// either side excludes both. Its `read()` and `write()` are ordinary [`Lock`] handles with
    /// Redisson's semantics (no writer preference; see the `dlock::redisson` page). Like
    /// `RReadWriteLock` it keeps no token counter: a guard's fencing token is the Redis
    /// server's clock in µs at the grant.
    ///
    /// Redis only (it speaks Redisson's protocol): on a PostgreSQL client its acquire fails,
    /// naming the store and the kind.
    pub fn redisson_read_write_lock(&self, name: impl Into<String>) -> ReadWriteLock {
        let sharded = self.shared.sharded_pubsub;
        ReadWriteLock::of_kinds(
            self.shared.clone(),
            name.into(),
            Arc::new(RedissonRead { sharded }),
            Arc::new(RedissonWrite { sharded }),
        )
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
