//! `current_lock()`: the lock the call chain holds, reachable from inside the locked code.
//!
//! An annotated function's body has no guard variable of its own (the macro keeps it), yet a
//! body under a hard `lease` needs the fencing token and the lost signal as much as code using
//! the runtime API does. The scope that makes re-entry work already carries the holds of the
//! call chain, so the innermost one is read from there rather than passed around.

use std::future::Future;
use std::sync::Arc;

use crate::handles::blocking::call;
use crate::machinery::hold::Hold;
use crate::machinery::scope;

/// The innermost lock held by the current call chain: inside a `#[distributed_lock]` body or a
/// [`LockGuard::scope`](crate::LockGuard::scope), at any depth of calls and `.await`s; `None`
/// outside (and in tasks spawned from there: `tokio::spawn` starts a new chain).
///
/// In synchronous code the call chain is the thread: inside a `#[distributed_lock]` plain
/// `fn`'s body, or wherever a [`blocking`](crate::blocking) guard is alive on this thread, it
/// is the lock of the guard taken last. Those come first: synchronous code called from an
/// async scope runs inside it.
///
/// Stop the work when the lock is lost (the lease ran out, a hard `lease` expired, Redis lost
/// the key), and fence every write with the token, so a holder that was paused past its lease
/// cannot overwrite the next holder's work:
///
/// ```no_run
/// # extern crate dlock_runtime as dlock;
/// # use dlock::{current_lock, LockClient, LockError};
/// # async fn write_if_newer(_token: u64, _value: &str) {}
/// # async fn compute() -> String { String::new() }
/// # async fn demo(client: LockClient) -> Result<(), LockError> {
/// let guard = client.lock("report").acquire().await?;
/// guard
///     .scope(async {
///         let lock = current_lock().expect("inside the scope");
///         tokio::select! {
///             // Lost: mutual exclusion is no longer promised; stop instead of racing.
///             _ = lock.lost() => eprintln!("lost `{}`, giving up", lock.name()),
///             value = compute() => {
///                 // The store keeps the highest token it has seen and refuses lower ones.
///                 write_if_newer(lock.fencing_token(), &value).await;
///             }
///         }
///     })
///     .await;
/// guard.release().await?;
/// # Ok(()) }
/// ```
pub fn current_lock() -> Option<CurrentLock> {
    call::innermost_here()
        .or_else(scope::innermost)
        .map(|hold| CurrentLock { hold })
}

/// A view of a lock held by the current call chain, from [`current_lock`]. It does not own the
/// hold: the guard that does (the macro's, or yours) releases it; after that `is_lost()` may
/// stay false while nobody holds the lock any more, so keep it inside the locked code.
#[derive(Clone)]
pub struct CurrentLock {
    hold: Arc<Hold>,
}

impl CurrentLock {
    /// The lock's name (the rendered key of `#[distributed_lock]`).
    pub fn name(&self) -> &str {
        &self.hold.name
    }

    /// The hold's fencing token, as [`LockGuard::fencing_token`](crate::LockGuard::fencing_token).
    pub fn fencing_token(&self) -> u64 {
        self.hold.token.load(std::sync::atomic::Ordering::Acquire)
    }

    /// True once the lock is known to be no longer held, as
    /// [`LockGuard::is_lost`](crate::LockGuard::is_lost).
    pub fn is_lost(&self) -> bool {
        self.hold.is_lost()
    }

    /// A token cancelled when the hold is lost, as
    /// [`LockGuard::cancellation_token`](crate::LockGuard::cancellation_token): hand it to the
    /// tasks the locked body spawns, so they stop when the lock can no longer be trusted.
    pub fn cancellation_token(&self) -> tokio_util::sync::CancellationToken {
        self.hold.cancellation_token()
    }

    /// Completes when the lock is lost, as [`LockGuard::lost`](crate::LockGuard::lost).
    pub fn lost(&self) -> impl Future<Output = ()> + Send + 'static {
        let hold = self.hold.clone();
        async move { hold.lost().await }
    }
}

impl std::fmt::Debug for CurrentLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CurrentLock")
            .field("name", &self.hold.name)
            .field("fencing_token", &self.fencing_token())
            .field("lost", &self.is_lost())
            .finish()
    }
}
