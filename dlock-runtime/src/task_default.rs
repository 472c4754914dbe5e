//! A default client for one future (a test, a request, a tenant's job) instead of the process.
//!
//! `install()` is process-wide: parallel tests in one binary that each install their own
//! client replace each other's, and a call then locks on the wrong server. A task-local
//! default, consulted first by [`LockClient::global`], lets each of them have its own.

use std::future::Future;

use crate::client::LockClient;

tokio::task_local! {
    static TASK_DEFAULT: LockClient;
}

impl LockClient {
    /// Runs `fut` with this client as its default: inside it (at any depth of calls and
    /// `.await`s), [`LockClient::global`] and `#[distributed_lock]` without `client = ...` use
    /// this client, before any client installed with [`LockClient::install`]. Nested calls
    /// override it for their own future. Tasks spawned from `fut` do not inherit it (task
    /// locals are per task): pass the client, or wrap the spawned future too.
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), dlock_runtime::LockError> {
    /// use dlock_runtime::LockClient;
    ///
    /// // Two tests of one binary, run in parallel, each on its own server: no cross-talk.
    /// let client = LockClient::connect("redis://127.0.0.1:6390").await?;
    /// client
    ///     .clone()
    ///     .with_default(async {
    ///         let same = LockClient::global()?; // this test's client, whatever is installed
    ///         assert_eq!(same.client_id(), client.client_id());
    ///         Ok::<_, dlock_runtime::LockError>(())
    ///     })
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub fn with_default<F: Future>(self, fut: F) -> impl Future<Output = F::Output> {
        TASK_DEFAULT.scope(self, fut)
    }
}

/// The default client of the running future, if it was given one.
pub(crate) fn task_default() -> Option<LockClient> {
    TASK_DEFAULT.try_with(LockClient::clone).ok()
}
