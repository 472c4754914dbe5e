//! The blocking `Lock` and `LockGuard`: one lock of any kind (plain, fair, a side of a
//! read-write lock, Redisson's), held by the thread that took it.

use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;

use crate::error::LockError;
use crate::handles::blocking::call::{acquire_here, enter, leave, run};
use crate::handles::guard::LockGuard as AsyncGuard;
use crate::handles::lock::Lock as AsyncLock;
use crate::machinery::shared::Shared;

/// A [`crate::Lock`] for blocking code; made by [`LockClient::lock`](super::LockClient::lock)
/// and the other kinds' constructors, and by [`ReadWriteLock`](super::ReadWriteLock)'s sides.
#[derive(Clone, Debug)]
#[must_use]
pub struct Lock {
    shared: Arc<Shared>,
    lock: AsyncLock,
}

impl Lock {
    pub(super) fn new(shared: Arc<Shared>, lock: AsyncLock) -> Self {
        Lock { shared, lock }
    }

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

    /// See [`crate::Lock::synced_replicas`].
    pub fn synced_replicas(self, replicas: u32, within: Duration) -> Self {
        self.map(|l| l.synced_replicas(replicas, within))
    }

    /// See [`crate::Lock::label`].
    pub fn label(self, template: impl Into<String>) -> Self {
        let template = template.into();
        self.map(|l| l.label(template))
    }

    /// The lock's name.
    pub fn name(&self) -> &str {
        self.lock.name()
    }

    /// Takes the lock, waiting up to the handle's `wait` (see [`crate::Lock::acquire`]).
    /// Re-enters a hold of this lock that a guard alive on this thread owns.
    pub fn acquire(&self) -> Result<LockGuard, LockError> {
        let lock = self.lock.clone();
        let guard = acquire_here(
            &self.shared,
            self.name(),
            async move { lock.acquire().await },
        )?;
        Ok(LockGuard::on_this_thread(guard))
    }

    /// One attempt: `Ok(None)` when someone else holds the lock (see
    /// [`crate::Lock::try_acquire`]).
    pub fn try_acquire(&self) -> Result<Option<LockGuard>, LockError> {
        let lock = self.lock.clone();
        let got = acquire_here(&self.shared, self.name(), async move {
            lock.try_acquire().await
        })?;
        Ok(got.map(LockGuard::on_this_thread))
    }

    /// Whether anybody holds the lock right now.
    pub fn is_locked(&self) -> Result<bool, LockError> {
        let lock = self.lock.clone();
        run(
            &self.shared,
            self.name(),
            async move { lock.is_locked().await },
        )?
    }

    /// How long the current lease has left; `None` when the lock is free (see
    /// [`crate::Lock::remaining_ttl`]).
    pub fn remaining_ttl(&self) -> Result<Option<Duration>, LockError> {
        let lock = self.lock.clone();
        run(&self.shared, self.name(), async move {
            lock.remaining_ttl().await
        })?
    }

    /// Deletes the lock whoever holds it (see [`crate::Lock::force_unlock`]).
    pub fn force_unlock(&self) -> Result<bool, LockError> {
        let lock = self.lock.clone();
        run(&self.shared, self.name(), async move {
            lock.force_unlock().await
        })?
    }

    fn map(self, f: impl FnOnce(AsyncLock) -> AsyncLock) -> Self {
        Lock {
            shared: self.shared,
            lock: f(self.lock),
        }
    }
}

/// A [`crate::LockGuard`] owned by the thread that took it (hence not `Send`); dropping it
/// releases in the background, [`LockGuard::release`] waits for the store's answer.
#[must_use = "dropping the guard releases the lock at once"]
pub struct LockGuard {
    /// `None` once released.
    guard: Option<AsyncGuard>,
    /// Not `Send` or `Sync`: this thread's scope lists its hold.
    _thread: PhantomData<*const ()>,
}

impl LockGuard {
    pub(super) fn on_this_thread(guard: AsyncGuard) -> Self {
        enter(&guard);
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

    /// See [`crate::LockGuard::cancellation_token`]: a token cancelled when the hold is lost,
    /// for threads or tasks working under the lock.
    pub fn cancellation_token(&self) -> tokio_util::sync::CancellationToken {
        self.async_guard().cancellation_token()
    }

    /// Releases this hold and waits for the store to confirm (see
    /// [`crate::LockGuard::release`]).
    pub fn release(mut self) -> Result<(), LockError> {
        let guard = self.take_guard();
        let shared = guard.shared().clone();
        let name = guard.name().to_owned();
        run(&shared, &name, guard.release())?
    }

    /// Releases this hold and returns once the release is written to the lock's connection
    /// (see [`crate::LockGuard::release_written`]); a failure is logged at `warn`. Used by
    /// `#[distributed_lock]` on a plain `fn`.
    pub fn release_written(mut self) {
        let guard = self.take_guard();
        let shared = guard.shared().clone();
        let name = guard.name().to_owned();
        if let Err(e) = run(&shared, &name, guard.release_written()) {
            // The guard went with the call: dropped on the client's thread, or never run.
            tracing::warn!(lock = %name, error = %e, "dlock: release failed; the lease expires on its own");
        }
    }

    /// Takes the async guard out and removes its hold from this thread's scope.
    fn take_guard(&mut self) -> AsyncGuard {
        let guard = self
            .guard
            .take()
            .unwrap_or_else(|| unreachable!("a guard is released once"));
        leave(&guard);
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
