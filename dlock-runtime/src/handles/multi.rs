//! `MultiLock`: several plain locks taken as one, all or none, in one canonical order.
//!
//! A multi-lock is no new Redis structure: it is the plain locks of its names, taken one after
//! the other through [`Lock`]'s own acquire path (waiting, orphan clean-up, watchdog and lost
//! signal included). What it adds is the order (sorted by Redis key, so two callers listing
//! the same names in different orders cannot each hold what the other waits for), one wait
//! budget for the whole acquire, and giving back what it took when the rest cannot be had.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::time::Instant;

use crate::error::LockError;
use crate::handles::guard::LockGuard;
use crate::handles::lock::Lock;
use crate::machinery::shared::Shared;

/// Several plain locks taken together; made by
/// [`LockClient::multi_lock`](crate::LockClient::multi_lock). Cheap to clone; holds no lock by
/// itself.
///
/// * **All or none**: [`MultiLock::acquire`] returns a [`MultiGuard`] holding every lock, or an
///   error after giving back (and awaiting the release of) the locks it had already taken. A
///   [`LockError::Timeout`] names the lock that could not be had.
/// * **No deadlock, whatever order callers list the names in**: the locks are always taken in
///   one canonical order, sorted by Redis key (`<prefix>{<escaped name>}`; byte order of the
///   key, which is not always the order of the names: `"ab"` comes before `"a"`). Every
///   multi-lock of every process using the same key prefix takes shared locks in the same order,
///   so `transfer(a, b)` racing `transfer(b, a)` both complete.
/// * **Duplicates** are taken once: `["b", "a", "a"]` holds `a` and `b`, each with one hold,
///   and [`MultiGuard::names`] lists them once.
/// * **One wait for the whole acquire**: `wait` bounds the acquire from its start to the last
///   lock, not each lock. Once it is spent, the locks not yet taken are tried once each.
///   `Duration::ZERO` ([`MultiLock::try_acquire`]) tries every lock once.
/// * **The same locks as [`LockClient::lock`](crate::LockClient::lock)**: a multi-lock over
///   `["a", "b"]` and `client.lock("a")` exclude each other. Each lock has its own lease
///   (`ttl` renewed by the watchdog, or a hard `lease`), its own fencing token, its own
///   release; a crashed holder frees each lock when its lease ends. A multi-lock of one name
///   is exactly `client.lock(name)` (same key, same re-entry), wrapped in a [`MultiGuard`].
/// * **Released on every way out**: the acquire future dropped half-way drops the guards it
///   had (each releases in the background) and cleans up a request in flight like
///   [`Lock::acquire`]; a dropped [`MultiGuard`] (panic, `?`, cancellation) releases every lock
///   in the background.
/// * **Reentrancy** follows the call chain lock by lock: inside [`MultiGuard::scope`] (or a
///   [`LockGuard::scope`] of one of the locks), acquiring a held lock again, alone or as part
///   of a multi-lock, re-enters its hold instead of waiting. Mind that a call chain already
///   holding one lock and asking a multi-lock for more waits for the others while it holds
///   that one, outside the canonical order: such a wait is bounded by `wait` like any other,
///   but only multi-locks taken from scratch are deadlock-free by construction.
///
/// On a Redis Cluster the locks may live on different nodes; each is taken with one script on
/// its own node, one after the other. (Different names never share a hash tag, so one script
/// cannot take them all on a cluster. On a single server one script could take every free
/// lock in one round trip; that is a possible optimisation, not done: contended locks would
/// still need the per-lock waiting path.)
///
/// ```no_run
/// # extern crate dlock_runtime as dlock;
/// # async fn demo(client: dlock::LockClient) -> Result<(), dlock::LockError> {
/// use std::time::Duration;
/// // Whatever the direction of the transfer, both accounts are taken in the same order.
/// let both = client
///     .multi_lock(["account:17", "account:4"])
///     .wait(Duration::from_secs(2))
///     .acquire()
///     .await?;
/// let token = both.fencing_token("account:4"); // each lock has its own token
/// // ... move the money ...
/// both.release().await?; // or drop it: every lock is released in the background
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
#[must_use]
pub struct MultiLock {
    /// One plain lock per distinct name, sorted by key.
    locks: Vec<Lock>,
    /// Why the names as given cannot be locked (an empty list, an empty name), reported by
    /// every acquire before anything is taken.
    invalid: Option<String>,
    wait: Option<Duration>,
    default_wait: Duration,
}

impl MultiLock {
    pub(crate) fn new(shared: Arc<Shared>, names: Vec<String>) -> Self {
        let invalid = if names.is_empty() {
            Some("multi_lock needs at least one lock name; the list is empty".to_owned())
        } else {
            names.iter().position(String::is_empty).map(|i| {
                format!(
                    "name #{} of the {} given to multi_lock is empty ({names:?}); an empty name \
                     would not be a cluster hash tag",
                    i + 1,
                    names.len(),
                )
            })
        };
        let default_wait = shared.default_wait;
        let mut locks: Vec<Lock> = names
            .into_iter()
            .map(|name| Lock::new(shared.clone(), name))
            .collect();
        // The canonical order. Keys are equal exactly when names are (escaping is injective).
        locks.sort_by(|a, b| a.key().cmp(b.key()));
        locks.dedup_by(|a, b| a.key() == b.key());
        MultiLock {
            locks,
            invalid,
            wait: None,
            default_wait,
        }
    }

    /// The lease the watchdog keeps alive on every lock while held (default: the client's
    /// `default_ttl`), as [`Lock::ttl`].
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.locks = self.locks.into_iter().map(|l| l.ttl(ttl)).collect();
        self
    }

    /// A hard lease on every lock instead of a watchdog, as [`Lock::lease`]. Each lock's lease
    /// starts when that lock was taken.
    pub fn lease(mut self, lease: Duration) -> Self {
        self.locks = self.locks.into_iter().map(|l| l.lease(lease)).collect();
        self
    }

    /// How long [`MultiLock::acquire`] may take in all, for every lock together (default: the
    /// client's `default_wait`). `Duration::ZERO` tries each lock once.
    pub fn wait(mut self, wait: Duration) -> Self {
        self.wait = Some(wait);
        self
    }

    /// What the metrics of its locks are labelled with: one *template* (see [`Lock::label`])
    /// for all of them; `#[distributed_lock(keys = [...])]` gives its templates joined by `,`.
    pub fn label(mut self, template: impl Into<String>) -> Self {
        let template = template.into();
        self.locks = self
            .locks
            .into_iter()
            .map(|l| l.label(template.clone()))
            .collect();
        self
    }

    /// The distinct names, in the order the locks are taken (sorted by key).
    pub fn names(&self) -> impl ExactSizeIterator<Item = &str> + '_ {
        self.locks.iter().map(Lock::name)
    }

    /// The plain lock handles, in the order they are taken (for their keys, `is_locked`, ...).
    pub fn locks(&self) -> &[Lock] {
        &self.locks
    }

    /// Takes every lock, waiting up to the handle's `wait` in all; on any error the locks
    /// already taken are released before it returns. Cancel-safe like [`Lock::acquire`].
    pub async fn acquire(&self) -> Result<MultiGuard, LockError> {
        self.acquire_within(self.wait.unwrap_or(self.default_wait))
            .await
    }

    /// One attempt at each lock: `Ok(None)` (and nothing held) when any of them is held by
    /// another owner, or another task of this process is queued for it.
    pub async fn try_acquire(&self) -> Result<Option<MultiGuard>, LockError> {
        match self.acquire_within(Duration::ZERO).await {
            Ok(guard) => Ok(Some(guard)),
            Err(LockError::Timeout { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    async fn acquire_within(&self, wait: Duration) -> Result<MultiGuard, LockError> {
        if let Some(reason) = &self.invalid {
            return Err(LockError::invalid("", reason.clone()));
        }
        let started = Instant::now();
        // `None`: a wait too long to represent ("as long as it takes").
        let deadline = started.checked_add(wait);
        // If this future is dropped half-way, these guards are dropped with it and release.
        let mut guards = Vec::with_capacity(self.locks.len());
        for lock in &self.locks {
            let left = deadline.map_or(Duration::MAX, |d| {
                d.saturating_duration_since(Instant::now())
            });
            match lock.acquire_within(left).await {
                Ok(guard) => guards.push(guard),
                Err(e) => {
                    // All or none: the caller must find the locks it did get free again.
                    let _ = release_all(guards, true).await;
                    return Err(match e {
                        LockError::Timeout { name, busy, .. } => {
                            LockError::timeout(&name, started.elapsed(), busy)
                        }
                        e => e,
                    });
                }
            }
        }
        tracing::debug!(locks = guards.len(), waited = ?started.elapsed(), "dlock: multi-lock acquired");
        Ok(MultiGuard { guards })
    }
}

/// Every lock of a [`MultiLock`], held. Release it with [`MultiGuard::release`] to see errors
/// and to know every lock is free when the call returns; dropping it (panic, `?`, a cancelled
/// future) releases every lock in the background, like dropping each [`LockGuard`].
#[must_use = "dropping the guard releases every lock at once"]
pub struct MultiGuard {
    /// One guard per lock, in canonical order; never empty.
    guards: Vec<LockGuard>,
}

impl MultiGuard {
    /// The distinct names held, in canonical order (sorted by key).
    pub fn names(&self) -> impl ExactSizeIterator<Item = &str> + '_ {
        self.guards.iter().map(LockGuard::name)
    }

    /// The guard of each lock, in canonical order: per-lock fencing tokens, hold counts, lost
    /// signals and scopes.
    pub fn guards(&self) -> &[LockGuard] {
        &self.guards
    }

    /// The fencing token of the lock called `name` (see [`LockGuard::fencing_token`]); `None`
    /// if this guard does not hold it.
    pub fn fencing_token(&self, name: &str) -> Option<u64> {
        self.guards
            .iter()
            .find(|g| g.name() == name)
            .map(LockGuard::fencing_token)
    }

    /// True once any of the locks is known to be no longer held (see
    /// [`LockGuard::is_lost`]): from then on the locks no longer exclude others together.
    pub fn is_lost(&self) -> bool {
        self.guards.iter().any(LockGuard::is_lost)
    }

    /// Completes when the first of the locks is lost; `select!` it against your work. Which
    /// one: `guards().iter().find(|g| g.is_lost())`.
    pub fn lost(&self) -> impl Future<Output = ()> + Send + 'static {
        let each: Vec<_> = self.guards.iter().map(|g| Box::pin(g.lost())).collect();
        async move {
            futures_util::future::select_all(each).await;
        }
    }

    /// Runs `fut` so that acquires of any of these locks inside it (alone, or in a multi-lock)
    /// re-enter the held locks instead of waiting for them, as [`LockGuard::scope`] does for
    /// each (the scopes of all the guards, nested in canonical order; `current_lock()` inside
    /// sees the last one).
    pub fn scope<'g, F: Future + 'g>(&'g self, fut: F) -> impl Future<Output = F::Output> + 'g {
        Scoped {
            guards: &self.guards,
            fut: Box::pin(fut),
        }
    }

    /// Releases every lock (concurrently) and waits for Redis to confirm each; every release
    /// is attempted even if one fails, and the first error in canonical order is returned
    /// ([`LockError::NotHeld`] for a lock lost meanwhile). Cancel-safe like
    /// [`LockGuard::release`]: dropped half-way, the rest finishes in the background.
    pub async fn release(self) -> Result<(), LockError> {
        release_all(self.guards, false).await
    }

    /// [`MultiGuard::release`], logging each failure at warn instead of returning it.
    pub async fn release_logged(self) {
        let _ = release_all(self.guards, true).await;
    }
}

/// Releases `guards` together; returns the first failure, after logging each if `log`.
async fn release_all(guards: Vec<LockGuard>, log: bool) -> Result<(), LockError> {
    let names: Vec<String> = guards.iter().map(|g| g.name().to_owned()).collect();
    let results = futures_util::future::join_all(guards.into_iter().map(LockGuard::release)).await;
    let mut first = None;
    for (name, result) in names.iter().zip(results) {
        if let Err(e) = result {
            if log {
                tracing::warn!(lock = %name, error = %e, "dlock: release failed; the lease expires on its own");
            }
            first.get_or_insert(e);
        }
    }
    first.map_or(Ok(()), Err)
}

impl std::fmt::Debug for MultiGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MultiGuard")
            .field("guards", &self.guards)
            .finish()
    }
}

/// `fut` run inside the scopes of all `guards`. The scope of one guard is a task-local set
/// while its future is polled, so each poll enters the scopes anew, nested (an allocation
/// per guard and poll), rather than nesting N scope futures whose type depends on N.
struct Scoped<'g, F> {
    guards: &'g [LockGuard],
    fut: Pin<Box<F>>,
}

impl<F: Future> Future for Scoped<'_, F> {
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = &mut *self;
        poll_in_scopes(this.guards, this.fut.as_mut(), cx)
    }
}

fn poll_in_scopes<F: Future>(
    guards: &[LockGuard],
    mut fut: Pin<&mut F>,
    cx: &mut Context<'_>,
) -> Poll<F::Output> {
    let Some((outer, inner)) = guards.split_first() else {
        return fut.as_mut().poll(cx);
    };
    let once = outer.scope(std::future::poll_fn(|cx| {
        poll_in_scopes(inner, fut.as_mut(), cx)
    }));
    std::pin::pin!(once).poll(cx)
}
