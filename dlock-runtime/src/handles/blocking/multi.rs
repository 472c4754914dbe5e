//! The blocking multi-lock: several plain locks taken together, held by the thread that took
//! them.

use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;

use crate::error::LockError;
use crate::handles::blocking::call::{acquire_here, enter, leave, run};
use crate::handles::multi::{MultiGuard as AsyncMultiGuard, MultiLock as AsyncMultiLock};
use crate::machinery::shared::Shared;

/// A [`crate::MultiLock`] for blocking code; made by
/// [`LockClient::multi_lock`](super::LockClient::multi_lock). All or none, in one canonical
/// order, one `wait` for the whole acquire, as the async multi-lock.
///
/// Re-entry follows the thread lock by lock: while a [`MultiGuard`] is alive on a thread, an
/// acquire there of any of its locks (alone or in another multi-lock) re-enters it.
///
/// ```no_run
/// # extern crate dlock_runtime as dlock;
/// # fn demo(locks: dlock::blocking::LockClient) -> Result<(), dlock::LockError> {
/// let both = locks.multi_lock(["account:17", "account:4"]).acquire()?;
/// let token = both.fencing_token("account:4"); // each lock has its own token
/// both.release()?;
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
#[must_use]
pub struct MultiLock {
    shared: Arc<Shared>,
    multi: AsyncMultiLock,
}

impl MultiLock {
    pub(super) fn new(shared: Arc<Shared>, multi: AsyncMultiLock) -> Self {
        MultiLock { shared, multi }
    }

    /// See [`crate::MultiLock::ttl`].
    pub fn ttl(self, ttl: Duration) -> Self {
        self.map(|m| m.ttl(ttl))
    }

    /// See [`crate::MultiLock::lease`].
    pub fn lease(self, lease: Duration) -> Self {
        self.map(|m| m.lease(lease))
    }

    /// See [`crate::MultiLock::wait`].
    pub fn wait(self, wait: Duration) -> Self {
        self.map(|m| m.wait(wait))
    }

    /// See [`crate::MultiLock::label`].
    pub fn label(self, template: impl Into<String>) -> Self {
        let template = template.into();
        self.map(|m| m.label(template))
    }

    /// The distinct names, in the order the locks are taken (sorted by key).
    pub fn names(&self) -> impl ExactSizeIterator<Item = &str> + '_ {
        self.multi.names()
    }

    /// Takes every lock, waiting up to the handle's `wait` in all (see
    /// [`crate::MultiLock::acquire`]); re-enters the locks guards alive on this thread hold.
    pub fn acquire(&self) -> Result<MultiGuard, LockError> {
        let multi = self.multi.clone();
        let guard = acquire_here(&self.shared, &self.subject(), async move {
            multi.acquire().await
        })?;
        Ok(MultiGuard::on_this_thread(&self.shared, guard))
    }

    /// One attempt at each lock: `Ok(None)` (and nothing held) when any of them is held by
    /// another owner (see [`crate::MultiLock::try_acquire`]).
    pub fn try_acquire(&self) -> Result<Option<MultiGuard>, LockError> {
        let multi = self.multi.clone();
        let got = acquire_here(&self.shared, &self.subject(), async move {
            multi.try_acquire().await
        })?;
        Ok(got.map(|guard| MultiGuard::on_this_thread(&self.shared, guard)))
    }

    /// What an error of the whole multi-lock names: its names, joined.
    fn subject(&self) -> String {
        self.names().collect::<Vec<_>>().join(",")
    }

    fn map(self, f: impl FnOnce(AsyncMultiLock) -> AsyncMultiLock) -> Self {
        MultiLock {
            shared: self.shared,
            multi: f(self.multi),
        }
    }
}

/// Every lock of a blocking [`MultiLock`], held by the thread that took them (hence not
/// `Send`). [`MultiGuard::release`] releases every lock and waits for the answers; dropping it
/// (also during a panic) releases every lock in the background.
#[must_use = "dropping the guard releases every lock at once"]
pub struct MultiGuard {
    shared: Arc<Shared>,
    /// `None` once released.
    guard: Option<AsyncMultiGuard>,
    /// Not `Send` or `Sync`: this thread's scope lists its holds.
    _thread: PhantomData<*const ()>,
}

impl MultiGuard {
    fn on_this_thread(shared: &Arc<Shared>, guard: AsyncMultiGuard) -> Self {
        guard.guards().iter().for_each(enter);
        MultiGuard {
            shared: shared.clone(),
            guard: Some(guard),
            _thread: PhantomData,
        }
    }

    fn async_guard(&self) -> &AsyncMultiGuard {
        self.guard
            .as_ref()
            .unwrap_or_else(|| unreachable!("a released guard is consumed"))
    }

    /// The distinct names held, in canonical order (sorted by key).
    pub fn names(&self) -> impl ExactSizeIterator<Item = &str> + '_ {
        self.async_guard().names()
    }

    /// The fencing token of the lock called `name`; `None` if this guard does not hold it.
    pub fn fencing_token(&self, name: &str) -> Option<u64> {
        self.async_guard().fencing_token(name)
    }

    /// The hold count of the lock called `name` (2 when this thread re-entered a lock it held
    /// already); `None` if this guard does not hold it.
    pub fn hold_count(&self, name: &str) -> Option<u32> {
        let guards = self.async_guard().guards();
        guards
            .iter()
            .find(|g| g.name() == name)
            .map(|g| g.hold_count())
    }

    /// True once any of the locks is known to be no longer held (see
    /// [`crate::MultiGuard::is_lost`]).
    pub fn is_lost(&self) -> bool {
        self.async_guard().is_lost()
    }

    /// Releases every lock and waits for the store to confirm each (see
    /// [`crate::MultiGuard::release`]).
    pub fn release(mut self) -> Result<(), LockError> {
        let guard = self.take_guard();
        run(&self.shared, &subject(&guard), guard.release())?
    }

    /// [`MultiGuard::release`], logging each failure at warn instead of returning it. Used by
    /// `#[distributed_lock(keys = [...])]` on a plain `fn`.
    pub fn release_logged(mut self) {
        let guard = self.take_guard();
        let names = subject(&guard);
        if let Err(e) = run(&self.shared, &names, guard.release_logged()) {
            // The guard went with the call, and its drop releases in the background.
            tracing::warn!(locks = %names, error = %e, "dlock: release failed; the leases expire on their own");
        }
    }

    /// Takes the async guard out and removes its holds from this thread's scope.
    fn take_guard(&mut self) -> AsyncMultiGuard {
        let guard = self
            .guard
            .take()
            .unwrap_or_else(|| unreachable!("a guard is released once"));
        guard.guards().iter().for_each(leave);
        guard
    }
}

/// The names of a multi-guard's locks, joined: what its errors name.
fn subject(guard: &AsyncMultiGuard) -> String {
    guard.names().collect::<Vec<_>>().join(",")
}

impl Drop for MultiGuard {
    fn drop(&mut self) {
        if self.guard.is_some() {
            // The async guard's drop releases every lock in the background.
            drop(self.take_guard());
        }
    }
}

impl std::fmt::Debug for MultiGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.guard {
            Some(guard) => guard.fmt(f),
            None => f.write_str("MultiGuard(released)"),
        }
    }
}
