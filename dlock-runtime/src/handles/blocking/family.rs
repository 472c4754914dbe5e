//! The blocking read-write lock and semaphore.

use std::sync::Arc;
use std::time::Duration;

use crate::error::LockError;
use crate::handles::blocking::call::run;
use crate::handles::blocking::lock::Lock;
use crate::handles::rwlock::ReadWriteLock as AsyncReadWriteLock;
use crate::handles::semaphore::{Permit as AsyncPermit, Semaphore as AsyncSemaphore};
use crate::machinery::shared::Shared;

/// A [`crate::ReadWriteLock`] for blocking code; made by
/// [`LockClient::read_write_lock`](super::LockClient::read_write_lock) (or
/// [`redisson_read_write_lock`](super::LockClient::redisson_read_write_lock)). Its sides are
/// blocking [`Lock`]s, their guards blocking [`LockGuard`](super::LockGuard)s held by the
/// thread that took them.
///
/// Everything [`crate::ReadWriteLock`] promises holds, with the thread as the call chain: a
/// thread holding the write side may take the read side (a downgrade: release the write guard
/// and the read guard still holds), a thread holding the read side asking for the write side
/// gets [`LockError::WouldDeadlock`] at once (an upgrade would wait for itself).
///
/// ```no_run
/// # extern crate dlock_runtime as dlock;
/// # fn demo(locks: dlock::blocking::LockClient) -> Result<(), dlock::LockError> {
/// let prices = locks.read_write_lock("prices");
/// let writing = prices.write().acquire()?;
/// let reading = prices.read().acquire()?; // a downgrade: same thread
/// writing.release()?; // readers of other threads may come in now
/// reading.release()?;
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
#[must_use]
pub struct ReadWriteLock {
    shared: Arc<Shared>,
    rw: AsyncReadWriteLock,
}

impl ReadWriteLock {
    pub(super) fn new(shared: Arc<Shared>, rw: AsyncReadWriteLock) -> Self {
        ReadWriteLock { shared, rw }
    }

    /// The shared side: held by many readers at once, never beside a writer.
    pub fn read(&self) -> Lock {
        Lock::new(self.shared.clone(), self.rw.read())
    }

    /// The exclusive side: one writer, no readers.
    pub fn write(&self) -> Lock {
        Lock::new(self.shared.clone(), self.rw.write())
    }

    /// The lock's name, as given.
    pub fn name(&self) -> &str {
        self.rw.name()
    }
}

/// A [`crate::Semaphore`] for blocking code; made by
/// [`LockClient::semaphore`](super::LockClient::semaphore). Every acquire is a new permit, as
/// on the async semaphore: permits are not re-entrant.
///
/// ```no_run
/// # extern crate dlock_runtime as dlock;
/// # fn demo(locks: dlock::blocking::LockClient) -> Result<(), dlock::LockError> {
/// use std::time::Duration;
/// let exports = locks.semaphore("exports", 3).wait(Duration::from_secs(5));
/// let permit = exports.acquire()?; // at most 3 holders across the fleet
/// permit.release()?;
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
#[must_use]
pub struct Semaphore {
    shared: Arc<Shared>,
    sem: AsyncSemaphore,
}

impl Semaphore {
    pub(super) fn new(shared: Arc<Shared>, sem: AsyncSemaphore) -> Self {
        Semaphore { shared, sem }
    }

    /// See [`crate::Semaphore::ttl`].
    pub fn ttl(self, ttl: Duration) -> Self {
        self.map(|s| s.ttl(ttl))
    }

    /// See [`crate::Semaphore::lease`].
    pub fn lease(self, lease: Duration) -> Self {
        self.map(|s| s.lease(lease))
    }

    /// See [`crate::Semaphore::wait`].
    pub fn wait(self, wait: Duration) -> Self {
        self.map(|s| s.wait(wait))
    }

    /// See [`crate::Semaphore::label`].
    pub fn label(self, template: impl Into<String>) -> Self {
        let template = template.into();
        self.map(|s| s.label(template))
    }

    /// The semaphore's name, as given.
    pub fn name(&self) -> &str {
        self.sem.name()
    }

    /// The number of permits this handle was made with.
    pub fn permits(&self) -> u32 {
        self.sem.permits()
    }

    /// Takes a permit, waiting up to the handle's `wait` (see [`crate::Semaphore::acquire`]).
    pub fn acquire(&self) -> Result<Permit, LockError> {
        let sem = self.sem.clone();
        let permit = run(
            &self.shared,
            self.name(),
            async move { sem.acquire().await },
        )??;
        Ok(Permit::new(&self.shared, permit))
    }

    /// One attempt: `Ok(None)` when every permit is taken (see
    /// [`crate::Semaphore::try_acquire`]).
    pub fn try_acquire(&self) -> Result<Option<Permit>, LockError> {
        let sem = self.sem.clone();
        let got = run(
            &self.shared,
            self.name(),
            async move { sem.try_acquire().await },
        )??;
        Ok(got.map(|permit| Permit::new(&self.shared, permit)))
    }

    /// How many permits are free right now (see [`crate::Semaphore::available`]).
    pub fn available(&self) -> Result<u32, LockError> {
        let sem = self.sem.clone();
        run(
            &self.shared,
            self.name(),
            async move { sem.available().await },
        )?
    }

    fn map(self, f: impl FnOnce(AsyncSemaphore) -> AsyncSemaphore) -> Self {
        Semaphore {
            shared: self.shared,
            sem: f(self.sem),
        }
    }
}

/// One permit of a blocking [`Semaphore`]. [`Permit::release`] gives it back and waits for the
/// store's answer; dropping it (on any thread, also during a panic) stops its renewals and
/// gives it back in the background. `Send`: nothing re-enters a permit, so it does not belong
/// to the thread that took it.
#[must_use = "dropping the permit gives it back at once"]
pub struct Permit {
    shared: Arc<Shared>,
    permit: AsyncPermit,
}

impl Permit {
    fn new(shared: &Arc<Shared>, permit: AsyncPermit) -> Self {
        Permit {
            shared: shared.clone(),
            permit,
        }
    }

    /// The semaphore's name.
    pub fn name(&self) -> &str {
        self.permit.name()
    }

    /// See [`crate::Permit::is_lost`].
    pub fn is_lost(&self) -> bool {
        self.permit.is_lost()
    }

    /// Gives the permit back and waits for the store to confirm (see
    /// [`crate::Permit::release`]).
    pub fn release(self) -> Result<(), LockError> {
        let name = self.permit.name().to_owned();
        run(&self.shared, &name, self.permit.release())?
    }

    /// [`Permit::release`], logging a failure at warn instead of returning it. Used by
    /// `#[distributed_semaphore]` on a plain `fn`.
    pub fn release_logged(self) {
        let name = self.permit.name().to_owned();
        if let Err(e) = run(&self.shared, &name, self.permit.release_logged()) {
            // The permit went with the call, and its drop gives it back in the background.
            tracing::warn!(semaphore = %name, error = %e, "dlock: release failed; the permit expires on its own");
        }
    }
}

impl std::fmt::Debug for Permit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.permit.fmt(f)
    }
}
