//! `Semaphore` and `Permit`: N holders at once, each permit expiring on its own.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use crate::error::LockError;
use crate::handles::guard::LockGuard;
use crate::handles::lock::Lock;
use crate::machinery::shared::Shared;
use crate::store::redis::backend::names::LockKeys;
use crate::store::redis::kinds::{self as kind, LockKind};

/// A semaphore of `permits` permits called `name`; made by
/// [`LockClient::semaphore`](crate::LockClient::semaphore). Cheap to clone; holds no permit by
/// itself.
///
/// ```no_run
/// # extern crate dlock_runtime as dlock;
/// # async fn demo(client: dlock::LockClient) -> Result<(), dlock::LockError> {
/// use std::time::Duration;
/// // At most 3 exports run at once across the fleet.
/// let exports = client.semaphore("exports", 3).ttl(Duration::from_secs(30));
/// let permit = exports.wait(Duration::from_secs(5)).acquire().await?;
/// // ... work; the watchdog renews the permit meanwhile ...
/// permit.release().await?; // or drop it: given back in the background
/// # Ok(()) }
/// ```
///
/// # Guarantees
///
/// * **At most `permits` holders**, whatever the number of tasks, clients and processes.
///   Every acquire is a new permit: permits are not re-entrant, two acquires in one call
///   chain take two permits.
/// * **Each permit expires on its own.** A permit has its own deadline in Redis (server time,
///   from `TIME`, never a client clock), renewed by the watchdog at a third of its `ttl`, or
///   fixed by a hard [`Semaphore::lease`]. Renewing one permit never stretches another. A
///   crashed holder's permit counts as taken until its deadline and free from then on: the
///   permit comes back one lease after the holder's last renewal, not before. The holder's
///   own view ([`Permit::is_lost`], [`Permit::lost`]) turns before that deadline, like a
///   lock's.
/// * **Given back on every way out**, like a [`LockGuard`]: [`Permit::release`] awaits it,
///   dropping the permit gives it back in the background, a cancelled acquire gives back what
///   Redis may have granted, and a release retried after a lost reply is applied once.
/// * **One permit count per name.** Acquires and [`Semaphore::available`] made with a count
///   other than the one Redis keeps fail with [`LockError::InvalidArgument`] naming the
///   semaphore and both counts. Redis keeps the count as long as any permit is held (not yet
///   given back nor past its deadline) and drops it with the last one, so an idle semaphore
///   leaves no key behind and the count can change once every permit is back.
///
/// # Keys
///
/// `<prefix>{<name>}:sem`, a sorted set of holders (owner id -> deadline in server ms), and
/// `<prefix>{<name>}:sem:permits`, the count; releases publish on `<prefix>{<name>}:sem:chan`.
/// One hash tag (one cluster slot), and different keys from a lock of the same name. Every
/// script that writes prunes the holders past their deadline first; both keys expire at the
/// latest deadline.
///
/// # What wakes whom
///
/// A release that frees a permit publishes one message. Tasks of one process queue locally per
/// semaphore and only the head of that queue waits in Redis, so the message wakes one task per
/// *process* that has waiters: each of them tries once, Redis grants the freed permit to
/// exactly one, and the others go back to waiting after that one failed attempt. So a release
/// lets exactly as many waiters in as permits it freed, at the cost of at most one extra
/// attempt per waiting process (never per waiting task). Within a process, a task that got a
/// permit lets the next local task try at once, so permits freed together are taken up
/// together. A release that frees nothing (the permit had expired) publishes nothing. Waiters
/// also retry when the earliest holder's deadline passes, so a crashed holder's permit is
/// taken up without any message.
///
/// Exact cross-process waking (one message to one waiter) would need a queue of waiters in
/// Redis kept alive by the waiting processes, which is the fair lock's machinery; this
/// semaphore does not queue across processes and is not fair across them.
///
/// [`Semaphore::try_acquire`] returns `None` when all permits are taken, and also, like
/// [`Lock::try_acquire`], when another task of this process is asking Redis for a permit of
/// this semaphore at that moment (the local queue), without asking Redis.
#[derive(Clone, Debug)]
#[must_use]
pub struct Semaphore {
    shared: Arc<Shared>,
    /// The generic acquire path, run with the semaphore kind.
    lock: Lock,
    kind: Arc<kind::Semaphore>,
    keys: LockKeys,
}

impl Semaphore {
    pub(crate) fn new(shared: Arc<Shared>, name: String, permits: u32) -> Self {
        let kind = Arc::new(kind::Semaphore { permits });
        let keys = LockKeys::new(&shared.prefix, &name, kind.key_suffix());
        Semaphore {
            lock: Lock::of_kind(shared.clone(), name, kind.clone()),
            shared,
            kind,
            keys,
        }
    }

    /// The lease the watchdog keeps alive while a permit is held (default: the client's
    /// `default_ttl`, 30 s). If the holder's process dies, its permit comes back this long
    /// after the last renewal. Must be at least 1 ms.
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.lock = self.lock.ttl(ttl);
        self
    }

    /// A hard lease instead of a watchdog: a permit expires this long after it was taken,
    /// whatever its holder is doing; [`Permit::is_lost`] turns true when it has run out.
    /// Exclusive with [`Semaphore::ttl`].
    pub fn lease(mut self, lease: Duration) -> Self {
        self.lock = self.lock.lease(lease);
        self
    }

    /// How long [`Semaphore::acquire`] waits for a free permit (default: the client's
    /// `default_wait`, 10 s). `Duration::ZERO` tries once.
    pub fn wait(mut self, wait: Duration) -> Self {
        self.lock = self.lock.wait(wait);
        self
    }

    /// What this semaphore's metrics are labelled with: its *template* (see
    /// [`Lock::label`]); `#[distributed_semaphore]` gives its key template.
    pub fn label(mut self, template: impl Into<String>) -> Self {
        self.lock = self.lock.label(template);
        self
    }

    /// The semaphore's name, as given.
    pub fn name(&self) -> &str {
        self.lock.name()
    }

    /// The number of permits this handle was made with.
    pub fn permits(&self) -> u32 {
        self.kind.permits
    }

    /// Takes a permit, waiting up to the handle's `wait` for one to be given back (or to
    /// expire); [`LockError::Timeout`] if none was. Cancel-safe: if the future is dropped after
    /// the request was sent, a permit the server may have granted is given back right away.
    pub async fn acquire(&self) -> Result<Permit, LockError> {
        self.validate()?;
        match self.lock.acquire().await {
            Ok(guard) => Ok(Permit { guard }),
            Err(e) => Err(self.mismatch(e)),
        }
    }

    /// One attempt: `Ok(None)` when every permit is taken (or another task of this process is
    /// asking for one of this semaphore at the moment).
    pub async fn try_acquire(&self) -> Result<Option<Permit>, LockError> {
        self.validate()?;
        match self.lock.try_acquire().await {
            Ok(guard) => Ok(guard.map(|guard| Permit { guard })),
            Err(e) => Err(self.mismatch(e)),
        }
    }

    /// How many permits are free right now (permits past their deadline count as free). Only a
    /// snapshot: another client may take one the next moment.
    pub async fn available(&self) -> Result<u32, LockError> {
        self.validate()?;
        let mut link = self.shared.link_for(&self.keys.key);
        match link.available(&self.kind, &self.keys).await {
            Ok(free) => Ok(u32::try_from(free.max(0)).unwrap_or(u32::MAX)),
            Err(e) => Err(self.mismatch(self.shared.store_error(
                self.name(),
                &self.keys.key,
                "available",
                e,
            ))),
        }
    }

    fn validate(&self) -> Result<(), LockError> {
        let bad = |reason: &str| Err(LockError::invalid(self.name(), reason));
        if self.name().is_empty() {
            return bad(
                "the semaphore name is empty; an empty name would not be a cluster hash tag",
            );
        }
        if self.kind.permits == 0 {
            return bad("a semaphore needs at least 1 permit");
        }
        Ok(())
    }

    /// The scripts' "in use with another permit count" answer, as the error a person can act
    /// on; any other error unchanged.
    fn mismatch(&self, e: LockError) -> LockError {
        let stored = match &e {
            LockError::Redis { source, .. } => kind::stored_permits(source),
            #[cfg(feature = "postgres")]
            LockError::Store {
                store: "postgres",
                source,
                ..
            } => source
                .downcast_ref::<crate::store::postgres::errors::PgError>()
                .and_then(|e| e.stored_permits()),
            #[cfg(feature = "zookeeper")]
            LockError::Store {
                store: "zookeeper",
                source,
                ..
            } => source
                .downcast_ref::<crate::store::zookeeper::errors::ZkError>()
                .and_then(|e| e.stored_permits()),
            _ => None,
        };
        let Some(stored) = stored else {
            return e;
        };
        let name = self.name();
        LockError::invalid(
            name,
            format!(
                "semaphore `{name}` is in use with {stored} permits, this handle was made with {}; \
                 every client must use the same count (the store keeps it while any permit is held, \
                 so it can change once all permits are given back or expired)",
                self.kind.permits
            ),
        )
    }
}

/// One permit of a [`Semaphore`]. Give it back with [`Permit::release`] to see errors and to
/// know it is free when the call returns; dropping it (panic, `?`, a cancelled future), on any
/// thread, stops its renewals at once and gives it back in the background.
#[must_use = "dropping the permit gives it back at once"]
pub struct Permit {
    guard: LockGuard,
}

impl Permit {
    /// The semaphore's name.
    pub fn name(&self) -> &str {
        self.guard.name()
    }

    /// True once the permit is known to be no longer ours: its deadline could have passed in
    /// Redis (the watchdog could not renew it in time, or a hard lease ran out), or a renewal
    /// found it gone. From then on another holder may have it.
    pub fn is_lost(&self) -> bool {
        self.guard.is_lost()
    }

    /// Completes when [`Permit::is_lost`] turns true; `select!` it against your work.
    pub fn lost(&self) -> impl Future<Output = ()> + Send + 'static {
        self.guard.lost()
    }

    /// Gives the permit back and waits for Redis to confirm; one waiter is let in.
    /// [`LockError::NotHeld`] if the permit was lost meanwhile (nothing of another holder's is
    /// touched). Cancel-safe: if this future is dropped half-way, the release is finished in
    /// the background, applied exactly once.
    pub async fn release(self) -> Result<(), LockError> {
        self.guard.release().await
    }

    /// [`Permit::release`], logging a failure at warn instead of returning it. Used by
    /// `#[distributed_semaphore]`, where the body's result matters more: its effects happened.
    pub async fn release_logged(self) {
        self.guard.release_logged().await;
    }
}

impl std::fmt::Debug for Permit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Permit")
            .field("name", &self.name())
            .field("lost", &self.is_lost())
            .finish()
    }
}
