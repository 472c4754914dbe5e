//! `Lock`: a handle on one named lock, and the acquire path.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tracing::Instrument;

use crate::error::LockError;
use crate::handles::guard::LockGuard;
use crate::machinery::acquire::Acquire;
use crate::machinery::shared::Shared;
use crate::machinery::telemetry;
use crate::settings::ReplicaSync;
use crate::store::error::StoreError;
use crate::store::redis::backend::names::LockKeys;
use crate::store::redis::kinds::{LockKind, Plain};

/// A handle on the lock called `name`; made by [`LockClient::lock`](crate::LockClient::lock). Cheap to clone; holds no
/// lock by itself.
///
/// ```no_run
/// # extern crate dlock_runtime as dlock;
/// # async fn demo(client: dlock::LockClient) -> Result<(), dlock::LockError> {
/// use std::time::Duration;
/// let lock = client.lock("order:42").ttl(Duration::from_secs(10)).wait(Duration::from_secs(2));
/// let guard = lock.acquire().await?;       // waits up to 2 s, then LockError::Timeout
/// // ... work; the watchdog keeps the 10 s lease alive meanwhile ...
/// guard.release().await?;                 // or drop it: released in the background
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
#[must_use]
pub struct Lock {
    shared: Arc<Shared>,
    name: String,
    /// What this handle sends to Redis: the plain lock, one side of a read-write lock, ...
    kind: Arc<dyn LockKind>,
    keys: LockKeys,
    ttl: Option<Duration>,
    lease: Option<Duration>,
    wait: Option<Duration>,
    /// Replica-synced writes for this handle (`None`: the client's default).
    sync: Option<Option<ReplicaSync>>,
    /// The template its metrics are labelled with (`None`: `other`).
    label: Option<Arc<str>>,
}

impl Lock {
    pub(crate) fn new(shared: Arc<Shared>, name: String) -> Self {
        Self::of_kind(shared, name, Arc::new(Plain))
    }

    /// A handle on the lock `name` of another kind (its keys end in the kind's suffix).
    pub(crate) fn of_kind(shared: Arc<Shared>, name: String, kind: Arc<dyn LockKind>) -> Self {
        let keys = kind.keys(&shared.prefix, &name);
        Lock {
            shared,
            name,
            kind,
            keys,
            ttl: None,
            lease: None,
            wait: None,
            sync: None,
            label: None,
        }
    }

    /// The lease the watchdog keeps alive while the lock is held (default: the client's
    /// `default_ttl`, 30 s). If this process dies, the lock frees itself this long after the
    /// last renewal. Must be at least 1 ms.
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = Some(ttl);
        self
    }

    /// A hard lease instead of a watchdog: the lock expires this long after it was taken,
    /// whatever the holder is doing. `guard.is_lost()` turns true when it has run out. Exclusive
    /// with [`Lock::ttl`].
    pub fn lease(mut self, lease: Duration) -> Self {
        self.lease = Some(lease);
        self
    }

    /// How long [`Lock::acquire`] waits for a held lock (default: the client's `default_wait`,
    /// 10 s). `Duration::ZERO` tries once.
    pub fn wait(mut self, wait: Duration) -> Self {
        self.wait = Some(wait);
        self
    }

    /// Replica-synced acquires and renewals for this handle, overriding the client's
    /// [`synced_replicas`](crate::LockClientBuilder::synced_replicas) (which documents what it
    /// does and does not promise); `replicas` 0 turns it off for this handle. A re-entry (an
    /// acquire inside [`LockGuard::scope`](crate::LockGuard::scope) of a hold of the same lock)
    /// goes with the enclosing hold's setting.
    pub fn synced_replicas(mut self, replicas: u32, within: Duration) -> Self {
        self.sync = Some(ReplicaSync::new(replicas, within));
        self
    }

    /// What this handle's metrics (feature `metrics`) are labelled with: the lock's
    /// *template*, such as `order:{id}`, never the rendered name, so the number of series
    /// stays bounded. `#[distributed_lock]` gives its `key` template; a handle without a
    /// label counts as `other`.
    pub fn label(mut self, template: impl Into<String>) -> Self {
        self.label = Some(Arc::from(template.into()));
        self
    }

    /// The lock's name, as given.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The Redis key of the lock hash (`<prefix>{<escaped name>}`; for the Redisson kinds, the
    /// name itself).
    pub fn key(&self) -> &str {
        &self.keys.key
    }

    /// The pub/sub channel releases of this lock are published on.
    pub fn channel(&self) -> &str {
        &self.keys.channel
    }

    /// Takes the lock, waiting up to the handle's `wait` for the current holder to release it.
    ///
    /// Inside a [`LockGuard::scope`] of a hold of the same lock this re-enters that hold (hold
    /// count + 1) at once. Cancel-safe: if the future is dropped after the request was sent, a
    /// hold the server may have granted is released right away, not left to its TTL.
    pub async fn acquire(&self) -> Result<LockGuard, LockError> {
        let wait = self.wait.unwrap_or(self.shared.default_wait);
        self.acquire_within(wait).await
    }

    /// One attempt: `Ok(None)` when another owner holds the lock (or another task of this
    /// process is already queued for it; a fair lock asks Redis all the same).
    pub async fn try_acquire(&self) -> Result<Option<LockGuard>, LockError> {
        match self.acquire_within(Duration::ZERO).await {
            Ok(guard) => Ok(Some(guard)),
            Err(LockError::Timeout { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Whether anybody holds the lock right now.
    pub async fn is_locked(&self) -> Result<bool, LockError> {
        // A release this client wrote is answered first (it may be re-sent behind a read on
        // its connection, see `machinery/written.rs`).
        self.shared.written_settled(&self.keys.key).await;
        let mut link = self.shared.link_for(&self.keys.key);
        (link.exists(&*self.kind, &self.keys.key).await)
            .map_err(|e| self.store_error("is_locked", e))
    }

    /// How long the current lease has left; `None` when the lock is free.
    pub async fn remaining_ttl(&self) -> Result<Option<Duration>, LockError> {
        self.shared.written_settled(&self.keys.key).await;
        let mut link = self.shared.link_for(&self.keys.key);
        let pttl = (link.pttl(&*self.kind, &self.keys.key).await)
            .map_err(|e| self.store_error("remaining_ttl", e))?;
        Ok(match pttl {
            -2 => None,
            // A key without expiry was not written by dlock; it never frees itself.
            -1 => Some(Duration::MAX),
            ms => Some(Duration::from_millis(ms.max(0) as u64)),
        })
    }

    /// Deletes the lock whoever holds it and wakes its waiters; `true` if it was held. The
    /// former holder's guard notices at its next renewal (`is_lost()`), and its release then
    /// returns [`LockError::NotHeld`] without touching a new holder's lock.
    pub async fn force_unlock(&self) -> Result<bool, LockError> {
        self.validate()?;
        let mut link = self.shared.link();
        let deleted = (link.force_unlock(&*self.kind, &self.keys).await)
            .map_err(|e| self.store_error("force_unlock", e))?;
        Ok(deleted == 1)
    }

    fn store_error(&self, op: &'static str, e: StoreError) -> LockError {
        self.shared.store_error(&self.name, &self.keys.key, op, e)
    }

    fn validate(&self) -> Result<Duration, LockError> {
        let bad = |reason: &str| Err(LockError::invalid(&self.name, reason));
        if self.name.is_empty() {
            return bad("the lock name is empty; an empty name would not be a cluster hash tag");
        }
        if self.ttl.is_some() && self.lease.is_some() {
            return bad("set either ttl (watchdog-renewed) or lease (hard expiry), not both");
        }
        let lease = (self.lease.or(self.ttl))
            .or(self.kind.default_lease())
            .unwrap_or(self.shared.default_ttl);
        if lease.as_millis() == 0 {
            return bad("ttl/lease must be at least 1 ms (Redis leases are whole milliseconds)");
        }
        if lease > crate::settings::MAX_LEASE {
            return bad("ttl/lease longer than 100 years; use a finite lease");
        }
        if let Some(problem) = self
            .sync()
            .and_then(|s| s.problem(self.shared.response_timeout))
        {
            return bad(&problem);
        }
        Ok(lease)
    }

    /// The replica sync this handle's holds ask for.
    fn sync(&self) -> Option<ReplicaSync> {
        self.sync.unwrap_or(self.shared.sync)
    }

    pub(crate) async fn acquire_within(&self, wait: Duration) -> Result<LockGuard, LockError> {
        let span = tracing::info_span!(
            "dlock.acquire",
            lock = %self.name,
            kind = self.kind.id(),
            outcome = tracing::field::Empty,
            token = tracing::field::Empty,
        );
        let started = Instant::now();
        let _under_way = self.shared.acquiring.start();
        let result = self.acquire_traced(wait).instrument(span.clone()).await;
        let outcome = match &result {
            Ok(guard) => {
                span.record("token", guard.fencing_token());
                "acquired"
            }
            Err(LockError::Timeout { .. }) if wait.is_zero() => "busy",
            Err(LockError::Timeout { .. }) => "timeout",
            Err(_) => "error",
        };
        span.record("outcome", outcome);
        telemetry::acquire_ended(
            self.metrics_label(),
            self.kind.id(),
            outcome,
            started.elapsed(),
        );
        result
    }

    /// The label its metrics carry.
    fn metrics_label(&self) -> &str {
        self.label.as_deref().unwrap_or(telemetry::OTHER)
    }

    /// Validates this handle's settings, then runs the acquire loop (`machinery/acquire.rs`).
    async fn acquire_traced(&self, wait: Duration) -> Result<LockGuard, LockError> {
        let lease = self.validate()?;
        let acquire = Acquire {
            shared: &self.shared,
            name: &self.name,
            kind: &self.kind,
            keys: &self.keys,
            lease,
            hard: self.lease.is_some(),
            sync: self.sync(),
            label: self.label.as_ref(),
        };
        let hold = acquire.run(wait).await?;
        Ok(LockGuard::new(self.shared.clone(), hold))
    }
}
