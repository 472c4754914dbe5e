//! Blocking faces of the client and of every lock kind, for code without an async runtime: a
//! CLI tool, a batch job, a service on a synchronous framework.
//!
//! ```no_run
//! # extern crate dlock_runtime as dlock;
//! # fn rebuild_report(_token: u64) {}
//! # fn demo() -> Result<(), dlock::LockError> {
//! use std::time::Duration;
//! use dlock::blocking::LockClient;
//!
//! let locks = LockClient::connect("redis://127.0.0.1:6379")?;
//! let guard = locks.lock("report:nightly").wait(Duration::from_secs(5)).acquire()?;
//! rebuild_report(guard.fencing_token()); // the watchdog renews the lease meanwhile
//! guard.release()?;
//!
//! // The family, as on the async client: read-write locks, semaphores, multi-locks.
//! let reading = locks.read_write_lock("prices").read().acquire()?;
//! reading.release()?;
//! let permit = locks.semaphore("exports", 3).acquire()?;
//! permit.release()?;
//! let both = locks.multi_lock(["account:4", "account:17"]).acquire()?;
//! both.release()?;
//! # Ok(()) }
//! ```
//!
//! Each call runs the async operation on the client's own thread (the one that already drives
//! its connections, watchdog and subscriber) and blocks the calling thread until it ends; no
//! runtime is built per call, and none is needed by the caller. Everything the async API
//! promises holds: the watchdog, the lost signal, fencing tokens, release on drop (a guard
//! dropped during a panic's unwinding is released in the background).
//!
//! | async | blocking | re-entry |
//! |---|---|---|
//! | [`crate::LockClient::lock`], `fair_lock`, `redisson_lock`, `redisson_fenced_lock` | [`LockClient::lock`], ... ([`Lock`], [`LockGuard`]) | per thread |
//! | [`crate::LockClient::read_write_lock`], `redisson_read_write_lock` | [`LockClient::read_write_lock`], ... ([`ReadWriteLock`]: its sides are [`Lock`]s) | per thread; a read inside one's write is a downgrade, a write inside one's read is [`LockError::WouldDeadlock`] at once |
//! | [`crate::LockClient::semaphore`] | [`LockClient::semaphore`] ([`Semaphore`], [`Permit`]) | none: every acquire is a new permit |
//! | [`crate::LockClient::multi_lock`] | [`LockClient::multi_lock`] ([`MultiLock`], [`MultiGuard`]) | per thread, lock by lock |
//!
//! Re-entry follows the thread, which is the call chain of synchronous code: an acquire of a
//! lock that a guard alive on the same thread holds (through the same client) counts one more
//! hold, as Redisson's synchronous `RLock` does. That is why a blocking [`LockGuard`] and
//! [`MultiGuard`] are not `Send`: they belong to the thread that took them. To hand work
//! under a lock to another thread, use the async API ([`crate::LockGuard`] is `Send`). A
//! [`Permit`] is not re-entered by anything, so it is `Send`.
//!
//! # Calling from async code
//!
//! Don't, where you can: a blocking call blocks the thread, and a runtime worker blocked
//! waiting stalls every task queued on it. Use the async API there, or call these inside
//! `tokio::task::spawn_blocking`. Where it happens anyway:
//!
//! * On a worker of a multi-thread runtime, the wait runs inside
//!   `tokio::task::block_in_place`, which hands the worker's other tasks to another thread
//!   first. Those tasks include the client's own connections when the client was built on
//!   that runtime (it drives them while it lives), so even a runtime of one worker answers.
//! * On a `current_thread` runtime the call blocks its only thread (and every task of that
//!   runtime) until it ends. The client never depends on such a runtime: its connections are
//!   driven by its own thread then.
//! * On the client's own thread (code run by the client itself, such as a `tracing` layer
//!   called from there), waiting would wait for that very thread: the call fails at once with
//!   [`LockError::BlockingCall`].

pub(crate) mod call;
mod family;
mod lock;
mod multi;
mod stock;
#[cfg(all(test, feature = "testing"))]
mod tests;

use std::sync::Arc;

use crate::error::LockError;
use crate::handles::blocking::call::run;
use crate::handles::builder::LockClientBuilder;
use crate::handles::client::LockClient as AsyncClient;
use crate::machinery::shared::Shared;

pub use family::{Permit, ReadWriteLock, Semaphore};
pub use lock::{Lock, LockGuard};
pub use multi::{MultiGuard, MultiLock};
pub use stock::SegmentedStock;

/// A [`crate::LockClient`] for blocking code. Cheap to clone; the connections and background
/// work are the async client's own.
#[derive(Clone, Debug)]
pub struct LockClient {
    inner: AsyncClient,
}

impl LockClient {
    /// Connects with default settings (see [`crate::LockClient::connect`]).
    pub fn connect(url: &str) -> Result<Self, LockError> {
        Self::build(AsyncClient::builder(url))
    }

    /// Builds a client from any builder (a cluster, Sentinel, TLS, other settings).
    pub fn build(builder: LockClientBuilder) -> Result<Self, LockError> {
        // Built on a runtime of its own, on a thread of its own: the client moves its work to
        // its own thread when the building runtime is not a multi-thread one, and a thread
        // that is itself inside a runtime could not block on another.
        let built = std::thread::scope(|s| {
            s.spawn(|| {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .map_err(|e| LockError::Connect {
                        url: String::new(),
                        source: redis::RedisError::from(e),
                    })?;
                rt.block_on(builder.build())
            })
            .join()
        });
        let inner = built.unwrap_or_else(|panic| std::panic::resume_unwind(panic))?;
        Ok(LockClient { inner })
    }

    /// The blocking face of the default client ([`crate::LockClient::global`]: the running
    /// future's default, else the installed one), as `#[distributed_lock]` on a plain `fn`
    /// uses it; [`LockError::NotConfigured`] when there is none.
    pub fn global() -> Result<Self, LockError> {
        AsyncClient::global().map(LockClient::from)
    }

    /// Makes this client the process default (see [`crate::LockClient::install`]): the one
    /// [`LockClient::global`], `#[distributed_lock]` without `client = ...` (on plain and
    /// async functions) and [`crate::LockClient::global`] use. Returns the client it replaces.
    pub fn install(self) -> Option<AsyncClient> {
        self.inner.install()
    }

    /// The async client behind this one, for the parts of the API this module does not
    /// mirror (stock, fence checks, inspection).
    pub fn as_async(&self) -> &AsyncClient {
        &self.inner
    }

    /// A handle on the lock called `name` (see [`crate::LockClient::lock`]).
    pub fn lock(&self, name: impl Into<String>) -> Lock {
        Lock::new(self.shared(), self.inner.lock(name))
    }

    /// A fair lock called `name` (see [`crate::LockClient::fair_lock`]).
    pub fn fair_lock(&self, name: impl Into<String>) -> Lock {
        Lock::new(self.shared(), self.inner.fair_lock(name))
    }

    /// Redisson's `RLock` called `name` (see [`crate::LockClient::redisson_lock`]).
    pub fn redisson_lock(&self, name: impl Into<String>) -> Lock {
        Lock::new(self.shared(), self.inner.redisson_lock(name))
    }

    /// Redisson's `RFencedLock` called `name` (see
    /// [`crate::LockClient::redisson_fenced_lock`]).
    pub fn redisson_fenced_lock(&self, name: impl Into<String>) -> Lock {
        Lock::new(self.shared(), self.inner.redisson_fenced_lock(name))
    }

    /// A read-write lock called `name` (see [`crate::LockClient::read_write_lock`]).
    pub fn read_write_lock(&self, name: impl Into<String>) -> ReadWriteLock {
        ReadWriteLock::new(self.shared(), self.inner.read_write_lock(name))
    }

    /// Redisson's `RReadWriteLock` called `name` (see
    /// [`crate::LockClient::redisson_read_write_lock`]).
    pub fn redisson_read_write_lock(&self, name: impl Into<String>) -> ReadWriteLock {
        ReadWriteLock::new(self.shared(), self.inner.redisson_read_write_lock(name))
    }

    /// A semaphore called `name` with `permits` permits (see
    /// [`crate::LockClient::semaphore`]).
    pub fn semaphore(&self, name: impl Into<String>, permits: u32) -> Semaphore {
        Semaphore::new(self.shared(), self.inner.semaphore(name, permits))
    }

    /// The plain locks of `names`, taken together, all or none, in one canonical order (see
    /// [`crate::LockClient::multi_lock`]).
    pub fn multi_lock(&self, names: impl IntoIterator<Item = impl Into<String>>) -> MultiLock {
        MultiLock::new(self.shared(), self.inner.multi_lock(names))
    }

    /// One hot item's stock over `segments` Redis keys (see [`crate::SegmentedStock::new`]):
    /// refused at once on a store other than Redis, naming the item.
    pub fn segmented_stock(
        &self,
        name: impl Into<String>,
        segments: u32,
    ) -> Result<SegmentedStock, LockError> {
        let stock = crate::handles::stock::SegmentedStock::new(&self.inner, name, segments)?;
        Ok(SegmentedStock::new(self.shared(), stock))
    }

    /// Releases what the client holds and stops it (see [`crate::LockClient::shutdown`]).
    pub fn shutdown(self) {
        let shared = self.shared();
        let _ = run(&shared, "", self.inner.shutdown());
    }

    /// The URL this client talks to, password removed.
    pub fn url(&self) -> &str {
        self.inner.url()
    }

    /// The random id of this client (see [`crate::LockClient::client_id`]).
    pub fn client_id(&self) -> &str {
        self.inner.client_id()
    }

    fn shared(&self) -> Arc<Shared> {
        self.inner.shared.clone()
    }
}

impl From<AsyncClient> for LockClient {
    /// The blocking face of an async client: both share its connections and its locks.
    fn from(inner: AsyncClient) -> Self {
        LockClient { inner }
    }
}
