//! Blocking faces of the client, lock and guard, for code without an async runtime: a CLI
//! tool, a batch job, a service on a synchronous framework.
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
//! # Ok(()) }
//! ```
//!
//! Each call runs the async operation on the client's own thread (the one that already drives
//! its connections, watchdog and subscriber) and blocks the calling thread until it ends; no
//! runtime is built per call, and none is needed by the caller. Everything the async API
//! promises holds: the watchdog, the lost signal, fencing tokens, release on drop (a guard
//! dropped during a panic's unwinding is released in the background).
//!
//! Re-entry follows the thread, which is the call chain of synchronous code: an acquire of a
//! lock that a guard alive on the same thread holds (through the same client) counts one more
//! hold, as Redisson's synchronous `RLock` does. That is why a blocking guard is not `Send`:
//! it belongs to the thread that took it. To hand work under a lock to another thread, use the
//! async API ([`crate::LockGuard`] is `Send`).
//!
//! Do not call these from async code: they block the thread, and a runtime worker blocked
//! waiting stalls every task on it. Use the async API there, or call these inside
//! `tokio::task::spawn_blocking`.

use std::cell::RefCell;
use std::future::Future;
use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;

use crate::error::LockError;
use crate::handles::builder::LockClientBuilder;
use crate::handles::client::LockClient as AsyncClient;
use crate::handles::guard::LockGuard as AsyncGuard;
use crate::handles::lock::Lock as AsyncLock;
use crate::machinery::hold::Hold;
use crate::machinery::scope;
use crate::machinery::shared::Shared;

thread_local! {
    /// The holds that blocking guards alive on this thread own, outermost first, with their
    /// client's URL: the thread's call chain, for re-entry.
    static HELD_HERE: RefCell<Vec<(Arc<str>, Arc<Hold>)>> = const { RefCell::new(Vec::new()) };
}

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

    /// The async client behind this one, for the parts of the API this module does not
    /// mirror (read-write locks, multi-locks, semaphores, stock).
    pub fn as_async(&self) -> &AsyncClient {
        &self.inner
    }

    /// A handle on the lock called `name` (see [`crate::LockClient::lock`]).
    pub fn lock(&self, name: impl Into<String>) -> Lock {
        self.wrap(self.inner.lock(name))
    }

    /// A fair lock called `name` (see [`crate::LockClient::fair_lock`]).
    pub fn fair_lock(&self, name: impl Into<String>) -> Lock {
        self.wrap(self.inner.fair_lock(name))
    }

    /// Redisson's `RLock` called `name` (see [`crate::LockClient::redisson_lock`]).
    pub fn redisson_lock(&self, name: impl Into<String>) -> Lock {
        self.wrap(self.inner.redisson_lock(name))
    }

    /// Releases what the client holds and stops it (see [`crate::LockClient::shutdown`]).
    pub fn shutdown(self) {
        let shared = self.inner.shared.clone();
        let _ = run(&shared, "", self.inner.shutdown());
    }

    fn wrap(&self, lock: AsyncLock) -> Lock {
        Lock {
            shared: self.inner.shared.clone(),
            lock,
        }
    }
}

impl From<AsyncClient> for LockClient {
    /// The blocking face of an async client: both share its connections and its locks.
    fn from(inner: AsyncClient) -> Self {
        LockClient { inner }
    }
}

/// A [`crate::Lock`] for blocking code; made by [`LockClient::lock`].
#[derive(Clone, Debug)]
#[must_use]
pub struct Lock {
    shared: Arc<Shared>,
    lock: AsyncLock,
}

impl Lock {
    /// See [`crate::Lock::ttl`].
    pub fn ttl(self, ttl: Duration) -> Self {
        self.map(|l| l.ttl(ttl))
    }

    /// See [`crate::Lock::lease`].
    pub fn lease(self, lease: Duration) -> Self {
        self.map(|l| l.lease(lease))
    }

    /// See [`crate::Lock::wait`].
    pub fn wait(self, wait: Duration) -> Self {
        self.map(|l| l.wait(wait))
    }

    /// The lock's name.
    pub fn name(&self) -> &str {
        self.lock.name()
    }

    /// Takes the lock, waiting up to the handle's `wait` (see [`crate::Lock::acquire`]).
    /// Re-enters a hold of this lock that a guard alive on this thread owns.
    pub fn acquire(&self) -> Result<LockGuard, LockError> {
        let lock = self.lock.clone();
        self.take(async move { lock.acquire().await })
    }

    /// One attempt: `Ok(None)` when someone else holds the lock (see
    /// [`crate::Lock::try_acquire`]).
    pub fn try_acquire(&self) -> Result<Option<LockGuard>, LockError> {
        let lock = self.lock.clone();
        let got = self.take(async move {
            match lock.try_acquire().await {
                Ok(Some(guard)) => Ok(guard),
                Ok(None) => Err(Busy(None)),
                Err(e) => Err(Busy(Some(e))),
            }
        });
        match got {
            Ok(guard) => Ok(Some(guard)),
            Err(Busy(None)) => Ok(None),
            Err(Busy(Some(e))) => Err(e),
        }
    }

    /// Whether anybody holds the lock right now.
    pub fn is_locked(&self) -> Result<bool, LockError> {
        let lock = self.lock.clone();
        run(&self.shared, self.lock.name(), async move {
            lock.is_locked().await
        })?
    }

    /// Deletes the lock whoever holds it (see [`crate::Lock::force_unlock`]).
    pub fn force_unlock(&self) -> Result<bool, LockError> {
        let lock = self.lock.clone();
        run(&self.shared, self.lock.name(), async move {
            lock.force_unlock().await
        })?
    }

    fn map(self, f: impl FnOnce(AsyncLock) -> AsyncLock) -> Self {
        Lock {
            shared: self.shared,
            lock: f(self.lock),
        }
    }

    /// Runs an acquire inside this thread's scope of holds, and wraps what it got.
    fn take<E: Send + 'static + From<LockError>>(
        &self,
        acquire: impl Future<Output = Result<AsyncGuard, E>> + Send + 'static,
    ) -> Result<LockGuard, E> {
        let chain = HELD_HERE.with(|held| held.borrow().clone());
        let acquire = scope::with_holds(&chain, acquire);
        let guard = run(&self.shared, self.lock.name(), acquire)??;
        Ok(LockGuard::on_this_thread(guard))
    }
}

/// A try's answer: `None` when the lock was busy.
struct Busy(Option<LockError>);

impl From<LockError> for Busy {
    fn from(e: LockError) -> Self {
        Busy(Some(e))
    }
}

/// A [`crate::LockGuard`] owned by the thread that took it (hence not `Send`); dropping it
/// releases in the background, [`LockGuard::release`] waits for Redis's answer.
#[must_use = "dropping the guard releases the lock at once"]
pub struct LockGuard {
    /// `None` once released.
    guard: Option<AsyncGuard>,
    /// Not `Send` or `Sync`: this thread's scope lists its hold.
    _thread: PhantomData<*const ()>,
}

impl LockGuard {
    fn on_this_thread(guard: AsyncGuard) -> Self {
        let entry = (Arc::from(guard.client_url()), guard.hold().clone());
        HELD_HERE.with(|held| held.borrow_mut().push(entry));
        LockGuard {
            guard: Some(guard),
            _thread: PhantomData,
        }
    }

    fn async_guard(&self) -> &AsyncGuard {
        self.guard
            .as_ref()
            .unwrap_or_else(|| unreachable!("a released guard is consumed"))
    }

    /// The lock's name.
    pub fn name(&self) -> &str {
        self.async_guard().name()
    }

    /// See [`crate::LockGuard::fencing_token`].
    pub fn fencing_token(&self) -> u64 {
        self.async_guard().fencing_token()
    }

    /// See [`crate::LockGuard::hold_count`].
    pub fn hold_count(&self) -> u32 {
        self.async_guard().hold_count()
    }

    /// See [`crate::LockGuard::is_lost`].
    pub fn is_lost(&self) -> bool {
        self.async_guard().is_lost()
    }

    /// Releases this hold and waits for Redis to confirm (see [`crate::LockGuard::release`]).
    pub fn release(mut self) -> Result<(), LockError> {
        let guard = self.take_guard();
        let shared = guard.shared().clone();
        let name = guard.name().to_owned();
        run(&shared, &name, guard.release())?
    }

    /// Takes the async guard out and removes its hold from this thread's scope.
    fn take_guard(&mut self) -> AsyncGuard {
        let guard = self
            .guard
            .take()
            .unwrap_or_else(|| unreachable!("a guard is released once"));
        let hold = guard.hold();
        // `try_with`: a guard dropped by another thread-local's destructor, after this one is
        // gone, has no scope left to leave.
        let _ = HELD_HERE.try_with(|held| {
            let mut held = held.borrow_mut();
            // The innermost entry of this hold: a re-entry shares its hold with the outer one.
            if let Some(at) = held.iter().rposition(|(_, h)| Arc::ptr_eq(h, hold)) {
                held.remove(at);
            }
        });
        guard
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        if self.guard.is_some() {
            // The async guard's drop releases in the background on the client's thread.
            drop(self.take_guard());
        }
    }
}

impl std::fmt::Debug for LockGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.guard {
            Some(guard) => guard.fmt(f),
            None => f.write_str("LockGuard(released)"),
        }
    }
}

/// Runs `fut` on the client's own thread and blocks this one until it ends.
/// [`LockError::Closed`] (naming `name`) if that thread stopped first: the client was torn
/// down, or the operation panicked there.
fn run<T: Send + 'static>(
    shared: &Shared,
    name: &str,
    fut: impl Future<Output = T> + Send + 'static,
) -> Result<T, LockError> {
    let (tx, rx) = std::sync::mpsc::sync_channel(1);
    shared.bg.spawn(async move {
        let _ = tx.send(fut.await);
    });
    rx.recv().map_err(|_| LockError::Closed {
        name: name.to_owned(),
    })
}
