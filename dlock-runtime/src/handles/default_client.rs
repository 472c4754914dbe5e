//! The default client: installed for the process, or given to one future (a test, a request,
//! a tenant's job).
//!
//! `install()` is process-wide: parallel tests in one binary that each install their own
//! client replace each other's, and a call then locks on the wrong server. A task-local
//! default, consulted first by [`LockClient::global`], lets each of them have its own.

use std::future::Future;
use std::sync::RwLock;

use crate::error::LockError;
use crate::handles::client::{LockClient, LAST_DROP_BOUND};

tokio::task_local! {
    static TASK_DEFAULT: LockClient;
}

static GLOBAL: RwLock<Option<LockClient>> = RwLock::new(None);

thread_local! {
    /// Set up by `install()` on the thread that calls it (the thread running `main` in a
    /// `#[tokio::main]` program). The installed client lives in a `static`, which is never
    /// dropped, so a guard dropped just before `main` returns would leave its release queued
    /// on the client's thread while the process exits, and the lock held for its lease. A
    /// thread-local's destructor runs when its thread ends, and for the thread that returns
    /// from `main` or calls `std::process::exit` that is inside `exit` (glibc runs the exiting
    /// thread's destructors there), after the runtime and every task on it were dropped.
    static FLUSH_AT_EXIT: FlushAtExit = const { FlushAtExit };
}

/// See [`FLUSH_AT_EXIT`].
struct FlushAtExit;

impl Drop for FlushAtExit {
    fn drop(&mut self) {
        // `try_read`: never wait on the slot at exit (a thread that died holding it).
        let installed = GLOBAL.try_read().ok().and_then(|slot| slot.clone());
        if let Some(client) = installed {
            let bound = client.shared.response_timeout.min(LAST_DROP_BOUND);
            if !client.shared.bg.flushed_blocking(bound) {
                // Not through `tracing`: at exit a subscriber's own thread-locals may be gone
                // already, and a panic inside a thread-local's destructor aborts the process.
                use std::io::Write as _;
                let _ = writeln!(
                    std::io::stderr(),
                    "dlock: the process exited with releases Redis had not answered (at {}); \
                     those locks end with their leases",
                    client.shared.url
                );
            }
        }
    }
}

/// Shuts down the installed client (see [`LockClient::shutdown`]) and uninstalls it; does
/// nothing when none is installed. Call it before `main` returns: it also gives back the locks
/// still held (a guard kept in a task that is still running), and waits for Redis's answers.
/// Without it, the releases already queued when the process exits are still sent: the
/// thread that installed the client waits for them as it ends (at most the response timeout
/// or 2 s), where the platform runs that thread's destructors at exit (Linux with glibc, the
/// platform CI checks).
pub async fn shutdown() {
    let installed = GLOBAL.write().unwrap_or_else(|e| e.into_inner()).take();
    if let Some(client) = installed {
        client.shutdown().await;
    }
}

impl LockClient {
    /// Makes this client the process default, returned by [`LockClient::global`] and used by
    /// `#[distributed_lock]` without `client = ...`. Returns the client it replaces, if any.
    ///
    /// Call it on the thread that runs `main` (in a `#[tokio::main]` function's body, as
    /// usual): that thread waits at exit for the releases still queued (see [`shutdown`]).
    /// Installed from another thread, the wait happens when that thread ends instead.
    pub fn install(self) -> Option<LockClient> {
        // Registers the exit-time flush on this thread (once per thread).
        FLUSH_AT_EXIT.with(|_| {});
        let mut slot = GLOBAL.write().unwrap_or_else(|e| e.into_inner());
        slot.replace(self)
    }

    /// The default client: the one given to the running future with
    /// [`LockClient::with_default`], else the one installed with [`LockClient::install`], else
    /// [`LockError::NotConfigured`].
    pub fn global() -> Result<LockClient, LockError> {
        if let Some(client) = task_default() {
            return Ok(client);
        }
        let slot = GLOBAL.read().unwrap_or_else(|e| e.into_inner());
        slot.clone().ok_or(LockError::NotConfigured)
    }

    /// Runs `fut` with this client as its default: inside it (at any depth of calls and
    /// `.await`s), [`LockClient::global`] and `#[distributed_lock]` without `client = ...` use
    /// this client, before any client installed with [`LockClient::install`]. Nested calls
    /// override it for their own future. Tasks spawned from `fut` do not inherit it (task
    /// locals are per task): pass the client, or wrap the spawned future too.
    ///
    /// ```no_run
    /// # extern crate dlock_runtime as dlock;
    /// # async fn demo() -> Result<(), dlock::LockError> {
    /// use dlock::LockClient;
    ///
    /// // Two tests of one binary, run in parallel, each on its own server: no cross-talk.
    /// let client = LockClient::connect("redis://127.0.0.1:6390").await?;
    /// client
    ///     .clone()
    ///     .with_default(async {
    ///         let same = LockClient::global()?; // this test's client, whatever is installed
    ///         assert_eq!(same.client_id(), client.client_id());
    ///         Ok::<_, dlock::LockError>(())
    ///     })
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub fn with_default<F: Future>(self, fut: F) -> impl Future<Output = F::Output> {
        TASK_DEFAULT.scope(self, fut)
    }
}

/// The default client of the running future, if it was given one.
fn task_default() -> Option<LockClient> {
    TASK_DEFAULT.try_with(LockClient::clone).ok()
}
