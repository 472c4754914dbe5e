//! `LockGuard`: proof of a hold, released on every way out.

use std::future::Future;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use crate::error::LockError;
use crate::machinery::hold::Hold;
use crate::machinery::shared::Shared;
use crate::machinery::{release, scope};

/// One hold of a lock. Release it with [`LockGuard::release`] to see errors and to know the
/// lock is free when the call returns; dropping it (panic, `?`, a cancelled future), on any
/// thread, stops the watchdog at once and releases in the background on the client's thread.
///
/// `Send + Sync`, so it can live across `.await` in a `Send` future (axum handlers).
///
/// ```no_run
/// # extern crate dlock_runtime as dlock;
/// # use dlock::{LockClient, LockError};
/// # async fn rebuild_index() {}
/// # async fn save(_fencing_token: u64) {}
/// # async fn demo(client: LockClient) -> Result<(), LockError> {
/// let guard = client.lock("search-index").acquire().await?;
/// tokio::select! {
///     // Stop as soon as mutual exclusion is no longer promised.
///     _ = guard.lost() => return Err(LockError::NotHeld { name: guard.name().to_owned() }),
///     _ = rebuild_index() => {}
/// }
/// // The store refuses tokens lower than the highest it has seen: a paused former holder's
/// // late write cannot overwrite this one.
/// save(guard.fencing_token()).await;
/// guard.release().await // errors if the lock was lost meanwhile
/// # }
/// ```
#[must_use = "dropping the guard releases the lock at once"]
pub struct LockGuard {
    shared: Arc<Shared>,
    hold: Arc<Hold>,
    released: bool,
}

impl LockGuard {
    pub(crate) fn new(shared: Arc<Shared>, hold: Arc<Hold>) -> Self {
        LockGuard {
            shared,
            hold,
            released: false,
        }
    }

    /// The lock's name.
    pub fn name(&self) -> &str {
        &self.hold.name
    }

    /// The hold this guard is one count of.
    pub(crate) fn hold(&self) -> &Arc<Hold> {
        &self.hold
    }

    /// The client's state.
    pub(crate) fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }

    /// The URL of the client that took it (password removed), as re-entry scopes record it.
    pub(crate) fn client_url(&self) -> &str {
        &self.shared.url
    }

    /// The fencing token of this hold: it grows with every free -> held transition of the lock,
    /// so a later holder always has a larger one. Pass it to the resource you protect and make
    /// it reject writes carrying a smaller token than it has seen; that, not the lease, is what
    /// keeps a paused or partitioned former holder from doing damage. Re-entries report the
    /// enclosing hold's token. Tokens count up from the Redis server's time in µs: each grant
    /// takes the larger of the clock and the last token plus one, from a counter shared by the
    /// locks of one cluster slot (a token rises per lock name; it may skip values other locks
    /// took). The counter expires a day (or twice the lease) after the last grant in its slot
    /// and the next one starts from the clock again, so tokens never go backwards unless the
    /// Redis server's clock jumps back by more than that lifetime.
    /// A token is the Redis counter times 1024; a hold handed over locally by the previous
    /// holder of this client (see [`LockGuard::release`]) has that holder's token plus one, and
    /// at most 1023 handoffs follow one Redis acquire, so the next acquire in Redis is always
    /// above them. Tokens fit an SQL `BIGINT` until the year 2255.
    /// Tokens are only as durable as Redis's data: a failover to a replica that missed the last
    /// write can repeat one.
    /// The Redisson kinds' tokens are unscaled and differ: `RFencedLock`'s bare counter
    /// ([`LockClient::redisson_fenced_lock`](crate::LockClient::redisson_fenced_lock)), or, for
    /// the kinds that store no counter (as Java's `RLock` and `RReadWriteLock` store none), the
    /// server's clock in µs at the grant (see the `dlock::redisson` page).
    pub fn fencing_token(&self) -> u64 {
        self.hold.token.load(Ordering::Acquire)
    }

    /// How many holds this owner has on the lock (2 inside one re-entry).
    pub fn hold_count(&self) -> u32 {
        self.hold.local_holds.load(Ordering::Acquire)
    }

    /// True once the lock is known to be no longer ours: the watchdog found it gone or taken,
    /// could not reach Redis before the lease ran out, or a hard lease expired.
    pub fn is_lost(&self) -> bool {
        self.hold.is_lost()
    }

    /// Completes when [`LockGuard::is_lost`] turns true; `select!` it against your work to
    /// stop as soon as mutual exclusion can no longer be promised.
    pub fn lost(&self) -> impl Future<Output = ()> + Send + 'static {
        let hold = self.hold.clone();
        async move { hold.lost().await }
    }

    /// A [`CancellationToken`](tokio_util::sync::CancellationToken) cancelled when
    /// [`LockGuard::is_lost`] turns true: the ecosystem's way to stop work, which the body
    /// can hand to the tasks it spawns (`token.run_until_cancelled(work)`, or
    /// `select!` on `token.cancelled()`). Each call returns a child of the hold's token:
    /// cancelling it yourself stops only what listens to it. The last release of the hold
    /// cancels it too: work started with it must not outlive the hold.
    ///
    /// ```no_run
    /// # extern crate dlock_runtime as dlock;
    /// # async fn demo(client: dlock::LockClient) -> Result<(), dlock::LockError> {
    /// let guard = client.lock("report:7").acquire().await?;
    /// let token = guard.cancellation_token();
    /// let worker = tokio::spawn(async move {
    ///     token
    ///         .run_until_cancelled(async { /* long work under the lock */ })
    ///         .await // None: the lock was lost, the work stopped
    /// });
    /// let finished = worker.await.ok().flatten().is_some();
    /// guard.release().await?;
    /// # Ok(()) }
    /// ```
    pub fn cancellation_token(&self) -> tokio_util::sync::CancellationToken {
        self.hold.cancellation_token()
    }

    /// Runs `fut` so that acquires of this same lock inside it (at any depth of calls, in
    /// this task) re-enter this hold instead of waiting for it. Code outside the returned
    /// future, spawned tasks, and other futures joined beside it are other owners.
    ///
    /// Futures run concurrently *inside* the scope (a `join!` of two nested acquires) share
    /// this hold when they re-enter it: re-entry means "my caller already holds it".
    pub fn scope<F: Future>(&self, fut: F) -> impl Future<Output = F::Output> {
        scope::with_hold(&self.shared.url, self.hold.clone(), fut)
    }

    /// Releases this hold and waits for Redis to confirm. With holds left (re-entry) the lock
    /// stays held and its lease is refreshed; on the last one the lock is deleted and one
    /// waiter is woken. [`LockError::NotHeld`] if the lock was lost meanwhile: nothing of a new
    /// holder's is touched.
    ///
    /// When another task of this client is queued for the lock, the last hold is instead
    /// handed to it without a round trip (local handoff; bounded by the client's
    /// [`local_handoffs`](crate::LockClientBuilder::local_handoffs) settings): this returns at
    /// once and the lock stays held in Redis, now by that task.
    ///
    /// Cancel-safe: if this future is dropped half-way (a caller's timeout), the release is
    /// finished in the background with the same request id, so it is applied exactly once.
    ///
    /// Passing faults are retried with a backoff (50 ms doubling to 1 s): a server that
    /// answers "not now" (still `LOADING` its data after a restart, a slot being migrated:
    /// `TRYAGAIN`, `CLUSTERDOWN`, `MASTERDOWN`) until it takes the release or the lease has
    /// ended; a broken link (Redis down or restarting) for up to the client's response
    /// timeout, after which this returns that error and the release goes on in the
    /// background, with the same request id, until Redis answers or the lease has ended. A
    /// dropped guard's and a written release's background release do the same.
    pub async fn release(mut self) -> Result<(), LockError> {
        self.released = true;
        release::release(&self.shared, &self.hold).await
    }

    /// [`LockGuard::release`], logging a failure at warn instead of returning it: for callers
    /// whose own result matters more (its effects happened) but who want the lock seen free
    /// everywhere when this returns. `#[distributed_lock]` uses
    /// [`LockGuard::release_written`], one round trip cheaper.
    pub async fn release_logged(self) {
        let name = self.hold.name.clone();
        if let Err(e) = self.release().await {
            tracing::warn!(lock = %name, error = %e, "dlock: release failed; the lease expires on its own");
        }
    }

    /// Releases this hold and returns as soon as the release request is written to the
    /// lock's connection, without waiting for Redis's reply: one round trip less than
    /// [`LockGuard::release`]. Used by `#[distributed_lock]`, which only logs a failed
    /// release (the body's effects happened either way).
    ///
    /// What callers can rely on:
    /// * **This client** sees the lock free: its next acquire of the same lock goes over the
    ///   same connection, behind the release, so Redis runs the release first (pipelining
    ///   keeps the order) and [`Lock::try_acquire`](crate::Lock::try_acquire) right after
    ///   succeeds. Only a connection replaced in between (a reconnect, or the switch to the
    ///   client's own connections when the caller's runtime ended) loses that order: the
    ///   acquire then finds the lock still held and waits for the release's message. A
    ///   replica-synced acquire (which has a connection of its own) waits for this client's
    ///   written releases of the lock to be answered before it is sent.
    /// * **Other processes** may still see the lock held for up to one round trip after this
    ///   returned (the release is on its way); waiters among them are woken by its message
    ///   as with any release.
    /// * **A lost or failed reply** is handled in the background, as for a dropped guard: the
    ///   release is retried with the same request id (applied at most once) through passing
    ///   faults until Redis answers or the lease has ended, and a failure is logged at `warn`.
    ///
    /// Await [`LockGuard::release`] instead to learn the outcome
    /// ([`LockError::NotHeld`] when the lock was lost) or to know every process can see the
    /// lock free.
    pub async fn release_written(mut self) {
        self.released = true;
        release::release_written(&self.shared, &self.hold).await;
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        if self.released {
            return;
        }
        // Drop cannot await: stop renewing now, release on the client's thread.
        release::drop_hold(&self.shared, &self.hold);
    }
}

impl std::fmt::Debug for LockGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LockGuard")
            .field("name", &self.hold.name)
            .field("fencing_token", &self.fencing_token())
            .field("hold_count", &self.hold_count())
            .field("lost", &self.is_lost())
            .finish()
    }
}
