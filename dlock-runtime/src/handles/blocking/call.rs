//! How a blocking call runs: on the client's own thread, with this thread's holds as its
//! re-entry scope. Below the handles of this folder, which all call through here.

use std::cell::RefCell;
use std::future::Future;
use std::sync::Arc;

use tokio::runtime::{Handle, RuntimeFlavor};

use crate::error::LockError;
use crate::handles::guard::LockGuard as AsyncGuard;
use crate::machinery::hold::Hold;
use crate::machinery::scope;
use crate::machinery::shared::Shared;

thread_local! {
    /// The holds that blocking guards alive on this thread own, outermost first, with their
    /// client's URL: the thread's call chain, for re-entry.
    static HELD_HERE: RefCell<Vec<(Arc<str>, Arc<Hold>)>> = const { RefCell::new(Vec::new()) };
}

/// The holds of the guards alive on this thread, outermost first.
pub(super) fn held_here() -> Vec<(Arc<str>, Arc<Hold>)> {
    HELD_HERE.with(|held| held.borrow().clone())
}

/// The hold of the innermost blocking guard alive on this thread (of any client), for
/// `current_lock()` in synchronous code.
pub(crate) fn innermost_here() -> Option<Arc<Hold>> {
    HELD_HERE
        .try_with(|held| held.borrow().last().map(|(_, hold)| hold.clone()))
        .ok()
        .flatten()
}

/// Runs an acquire on the client's thread inside this thread's scope of holds, so it
/// re-enters what guards alive on this thread hold.
pub(super) fn acquire_here<T: Send + 'static, E: Send + 'static + From<LockError>>(
    shared: &Shared,
    name: &str,
    acquire: impl Future<Output = Result<T, E>> + Send + 'static,
) -> Result<T, E> {
    let acquire = scope::with_holds(&held_here(), acquire);
    run(shared, name, acquire)?
}

/// Lists `guard`'s hold among this thread's, for re-entry (see [`leave`]).
pub(super) fn enter(guard: &AsyncGuard) {
    let entry = (Arc::from(guard.client_url()), guard.hold().clone());
    HELD_HERE.with(|held| held.borrow_mut().push(entry));
}

/// Takes `guard`'s hold off this thread's list: its innermost entry, as a re-entry shares its
/// hold with the outer one.
pub(super) fn leave(guard: &AsyncGuard) {
    let hold = guard.hold();
    // `try_with`: a guard dropped by another thread-local's destructor, after this one is
    // gone, has no scope left to leave.
    let _ = HELD_HERE.try_with(|held| {
        let mut held = held.borrow_mut();
        if let Some(at) = held.iter().rposition(|(_, h)| Arc::ptr_eq(h, hold)) {
            held.remove(at);
        }
    });
}

/// Runs `fut` on the client's own thread and blocks this one until it ends.
///
/// [`LockError::BlockingCall`] at once when this thread is the client's own (it would wait for
/// itself); [`LockError::Closed`] (naming `name`) if that thread stopped first: the client was
/// torn down, or the operation panicked there.
pub(super) fn run<T: Send + 'static>(
    shared: &Shared,
    name: &str,
    fut: impl Future<Output = T> + Send + 'static,
) -> Result<T, LockError> {
    let here = Handle::try_current().ok();
    // The client's thread runs a runtime of its own, which nothing else enters: being inside
    // it means being on that thread (or in a call it is running), whose tasks could not run
    // while it waits.
    if here.as_ref().map(Handle::id) == Some(shared.bg.handle().id()) {
        return Err(LockError::BlockingCall {
            name: name.to_owned(),
            cause: "this thread is the client's own thread, which runs the call: it would wait \
                    for itself",
        });
    }
    let (tx, rx) = std::sync::mpsc::sync_channel(1);
    shared.bg.spawn(async move {
        let _ = tx.send(fut.await);
    });
    let wait = || rx.recv();
    let got = match here {
        // A worker of a multi-thread runtime may be the one that drives the client's
        // connections (a client built on this runtime uses it while it lives), and with one
        // worker the call would wait for the thread it blocks: hand the worker's other tasks to
        // another thread first. On a thread of `spawn_blocking` or the runtime's `block_on`
        // this just calls `wait`.
        Some(h) if h.runtime_flavor() == RuntimeFlavor::MultiThread => {
            tokio::task::block_in_place(wait)
        }
        _ => wait(),
    };
    got.map_err(|_| LockError::Closed {
        name: name.to_owned(),
    })
}
