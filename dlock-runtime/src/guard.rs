//! `LockGuard`: proof of a hold, released on every way out.

use std::future::Future;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use crate::error::LockError;
use crate::hold::Hold;
use crate::scope;
use crate::shared::Shared;

/// One hold of a lock. Release it with [`LockGuard::release`] to see errors and to know the
/// lock is free when the call returns; dropping it (panic, `?`, a cancelled future), on any
/// thread, stops the watchdog at once and releases in the background on the client's thread.
///
/// `Send + Sync`, so it can live across `.await` in a `Send` future (axum handlers).
///
/// ```no_run
/// # use dlock_runtime::{LockClient, LockError};
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

    /// The fencing token of this hold: it grows with every free -> held transition of the lock,
    /// so a later holder always has a larger one. Pass it to the resource you protect and make
    /// it reject writes carrying a smaller token than it has seen; that, not the lease, is what
    /// keeps a paused or partitioned former holder from doing damage. Re-entries report the
    /// enclosing hold's token. Tokens count up from the Redis server's time in µs at the moment
    /// the counter was made; the counter key expires (a day, or twice the lease, after it was
    /// made) and the next one starts from the clock again, so tokens never go backwards unless
    /// the Redis server's clock jumps back by more than that lifetime.
    /// A token is the Redis counter times 1024; a hold handed over locally by the previous
    /// holder of this client (see [`LockGuard::release`]) has that holder's token plus one, and
    /// at most 1023 handoffs follow one Redis acquire, so the next acquire in Redis is always
    /// above them. Tokens fit an SQL `BIGINT` until the year 2255.
    /// Tokens are only as durable as Redis's data: a failover to a replica that missed the last
    /// write can repeat one.
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
    pub async fn release(mut self) -> Result<(), LockError> {
        self.released = true;
        let Some(last) = begin_release(&self.shared, &self.hold) else {
            return Ok(());
        };
        let pending = Pending {
            shared: self.shared.clone(),
            hold: self.hold.clone(),
            last,
            latch: self.shared.unique_id(),
            done: false,
        };
        pending.run().await
    }

    /// [`LockGuard::release`], logging a failure at warn instead of returning it. Used by
    /// `#[distributed_lock]`, where the body's result matters more: its effects happened.
    pub async fn release_logged(self) {
        let name = self.hold.name.clone();
        if let Err(e) = self.release().await {
            tracing::warn!(lock = %name, error = %e, "dlock: release failed; the lease expires on its own");
        }
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        if self.released {
            return;
        }
        // Drop cannot await: stop renewing now, release on the runtime.
        let Some(last) = begin_release(&self.shared, &self.hold) else {
            return;
        };
        Pending {
            shared: self.shared.clone(),
            hold: self.hold.clone(),
            last,
            latch: self.shared.unique_id(),
            done: false,
        }
        .spawn();
    }
}

/// A release whose watchdog entry is already gone: it must reach Redis, so if the future
/// running it is dropped, Drop hands it to the runtime (same latch id: applied at most once).
struct Pending {
    shared: Arc<Shared>,
    hold: Arc<Hold>,
    last: bool,
    latch: String,
    done: bool,
}

impl Pending {
    async fn run(mut self) -> Result<(), LockError> {
        let result = finish_release(&self.shared, &self.hold, self.last, &self.latch).await;
        self.done = true;
        result
    }

    fn spawn(mut self) {
        self.done = true;
        let Pending {
            shared,
            hold,
            last,
            latch,
            ..
        } = &self;
        let (shared, hold, last, latch) = (shared.clone(), hold.clone(), *last, latch.clone());
        // On the client's own thread: works from any thread, with or without a runtime, and
        // is not cancelled when the caller's runtime shuts down.
        shared.bg.spawn({
            let shared = shared.clone();
            async move {
                if let Err(e) = finish_release(&shared, &hold, last, &latch).await {
                    tracing::warn!(lock = %hold.name, error = %e, "dlock: background release failed");
                }
            }
        });
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        if !self.done {
            Pending {
                shared: self.shared.clone(),
                hold: self.hold.clone(),
                last: self.last,
                latch: std::mem::take(&mut self.latch),
                done: false,
            }
            .spawn();
        }
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

/// Synchronous first half: drops one local hold; the last one leaves the watchdog here, before
/// any request goes out, so no renewal can follow the release. `None` when the last one went
/// to the next local task instead (nothing to send), else whether it was the last.
fn begin_release(shared: &Arc<Shared>, hold: &Arc<Hold>) -> Option<bool> {
    let last = hold.local_holds.fetch_sub(1, Ordering::AcqRel) == 1;
    if last {
        let due = shared.watchdog.remove(hold.id);
        if crate::handoff::hand_over(shared, hold, due) {
            return None;
        }
    }
    Some(last)
}

async fn finish_release(
    shared: &Arc<Shared>,
    hold: &Hold,
    last: bool,
    latch: &str,
) -> Result<(), LockError> {
    let sent_at = tokio::time::Instant::now();
    let result = release_script(shared, hold, latch).await;
    if last {
        // Only now may the next task of this process try: the lock is free (or expiring). It
        // owes a waiter of another process a head start only if one may have heard the release.
        let others_may_wait = !matches!(&result, Ok(r) if r.nobody_listened(shared));
        hold.release_gate(others_may_wait.then(|| sent_at.elapsed()));
    }
    match result.map(|r| r.left) {
        Ok(-1) => {
            hold.mark_lost("release found the lock no longer ours");
            Err(LockError::NotHeld {
                name: hold.name.clone(),
            })
        }
        Ok(left) => {
            tracing::debug!(lock = %hold.name, holds_left = left, "dlock: released");
            Ok(())
        }
        Err(e) => Err(e),
    }
}

/// Releases a hold without a guard (used when a re-entry finds its enclosing hold gone).
pub(crate) fn spawn_release(shared: Arc<Shared>, hold: Arc<Hold>) {
    let bg = shared.bg.handle().clone();
    bg.spawn(async move {
        let latch = shared.unique_id();
        let _ = release_script(&shared, &hold, &latch).await;
    });
}

/// Releases a hold without a guard and waits for it; a failure is only logged (what it would
/// have released expires with its lease).
pub(crate) async fn release_quietly(shared: &Arc<Shared>, hold: &Hold) {
    let latch = shared.unique_id();
    if let Err(e) = release_script(shared, hold, &latch).await {
        tracing::debug!(lock = %hold.name, error = %e, "dlock: clean-up release failed");
    }
}

/// What a release script answered.
struct Released {
    /// Holds the owner has left (0: freed), -1 if it held none.
    left: i64,
    /// When this release freed the lock: how many subscribers its message reached. `None` when
    /// the script does not say (other kinds, a retry answered from the latch).
    listeners: Option<i64>,
}

impl Released {
    /// The script's reply: the bare count, or `{0, listeners}` when the plain lock was freed.
    fn decode(reply: redis::Value) -> redis::RedisResult<Self> {
        let (left, listeners) = match reply {
            redis::Value::Array(pair) => {
                let (left, listeners): (i64, i64) =
                    redis::FromRedisValue::from_redis_value(redis::Value::Array(pair))?;
                (left, Some(listeners))
            }
            other => (redis::FromRedisValue::from_redis_value(other)?, None),
        };
        Ok(Released { left, listeners })
    }

    /// True when the release freed the lock and no subscriber was there to hear it, so no
    /// other process was waiting for it. Only where PUBLISH counts every subscriber.
    fn nobody_listened(&self, shared: &Shared) -> bool {
        self.listeners == Some(0) && shared.publish_counts_all
    }
}

/// Runs release.lua, retrying lost replies with the same request id: the latch in Redis
/// answers a retry of a release that already ran instead of releasing twice.
async fn release_script(
    shared: &Arc<Shared>,
    hold: &Hold,
    latch_id: &str,
) -> Result<Released, LockError> {
    let inner = &shared;
    let latch = format!("{}{latch_id}", hold.keys.latch_prefix);
    let mut attempt = 0;
    let first_send = tokio::time::Instant::now();
    loop {
        let mut conn = inner.conn();
        let reply: redis::RedisResult<Released> = hold
            .kind
            .release(hold, &latch, inner.latch_ttl)
            .invoke_async(&mut conn)
            .await
            .and_then(Released::decode);
        match reply {
            Ok(released) => return Ok(released),
            // Retry only while the latch surely still remembers a release that did run.
            Err(e)
                if attempt < 3
                    && !matches!(e.kind(), redis::ErrorKind::Server(_))
                    && first_send.elapsed() < inner.latch_ttl / 2 =>
            {
                attempt += 1;
                tracing::debug!(lock = %hold.name, error = %e, attempt, "dlock: retrying release");
                tokio::time::sleep(Duration::from_millis(50 * attempt)).await;
            }
            Err(e) => return Err(inner.redis_error(&hold.name, &hold.keys.key, "release", e)),
        }
    }
}
