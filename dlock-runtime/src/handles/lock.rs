//! `Lock`: a handle on one named lock, and the acquire path.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tracing::Instrument;

use crate::backend::names::LockKeys;
use crate::backend::retry::{self, Backoff};
use crate::backend::sync_conn::Purpose;
use crate::error::LockError;
use crate::handles::guard::LockGuard;
use crate::kinds::{Attempt, Claim, LockKind, Nested, Plain};
use crate::machinery::gate::{GatePass, Turn};
use crate::machinery::hold::Hold;
use crate::machinery::orphan::{Orphan, Registration};
use crate::machinery::release::Baton;
use crate::machinery::scope;
use crate::machinery::shared::Shared;
use crate::machinery::telemetry;
use crate::machinery::waiters::Subscription;
use crate::machinery::watchdog::FirstRenewal;
use crate::settings::ReplicaSync;

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
        self.written_settled().await;
        let mut conn = self.shared.conn_for(&self.keys.key);
        redis::cmd("EXISTS")
            .arg(&self.keys.key)
            .query_async(&mut conn)
            .await
            .map_err(|e| self.redis_error("is_locked", e))
    }

    /// How long the current lease has left; `None` when the lock is free.
    pub async fn remaining_ttl(&self) -> Result<Option<Duration>, LockError> {
        self.written_settled().await;
        let mut conn = self.shared.conn_for(&self.keys.key);
        let pttl: i64 = redis::cmd("PTTL")
            .arg(&self.keys.key)
            .query_async(&mut conn)
            .await
            .map_err(|e| self.redis_error("remaining_ttl", e))?;
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
        let mut conn = self.shared.conn();
        let deleted: i64 = self
            .kind
            .force_unlock(&self.keys)
            .invoke_async(&mut conn)
            .await
            .map_err(|e| self.redis_error("force_unlock", e))?;
        Ok(deleted == 1)
    }

    /// Waits for this client's written releases of the key to be answered (see
    /// `machinery/written.rs`), at most the response timeout: a release that Redis does not
    /// answer (it is down) goes on in the background, and what follows finds out for itself.
    async fn written_settled(&self) {
        let settled = self.shared.written.settled(&self.keys.key);
        let _ = tokio::time::timeout(self.shared.response_timeout, settled).await;
    }

    fn redis_error(&self, op: &'static str, e: redis::RedisError) -> LockError {
        self.shared.redis_error(&self.name, &self.keys.key, op, e)
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

    /// [`LockError::Closed`] once the client was shut down.
    fn check_open(&self) -> Result<(), LockError> {
        if self.shared.closed.load(Ordering::Acquire) {
            return Err(LockError::Closed {
                name: self.name.clone(),
            });
        }
        Ok(())
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

    /// A new hold of this lock for a new owner, with this handle's settings (not yet sent).
    fn fresh_hold(&self, lease: Duration) -> Hold {
        let label = self
            .label
            .clone()
            .unwrap_or_else(|| Arc::from(telemetry::OTHER));
        self.shared
            .new_hold(
                self.name.clone(),
                self.keys.clone(),
                lease,
                self.lease.is_some(),
                self.kind.clone(),
                self.sync(),
            )
            .labelled(label)
    }

    /// [`Lock::acquire_within`] inside its span.
    async fn acquire_traced(&self, wait: Duration) -> Result<LockGuard, LockError> {
        let lease = self.validate()?;
        let inner = &self.shared;
        self.check_open()?;
        if let Some(parent) = scope::enclosing(&inner.client_id, &self.keys.key) {
            return match self.kind.nested(&*parent.kind) {
                Nested::Reenter => self.reenter(parent).await,
                Nested::SameOwner => self.acquire_as(&parent, lease).await,
                Nested::Refuse(reason) => Err(LockError::WouldDeadlock {
                    name: self.name.clone(),
                    reason: reason.to_owned(),
                }),
            };
        }
        if let Some(held) =
            scope::held_through_another_client(&inner.client_id, &inner.url, &self.keys.key)
        {
            // The caller holds it through another client: waiting would wait for itself for
            // the whole `wait`, then blame "another owner".
            return Err(LockError::SelfDeadlock {
                name: self.name.clone(),
                holder: held.client_id.clone(),
            });
        }
        let started = Instant::now();
        let deadline = far_instant(started, wait);
        let timeout = || LockError::Timeout {
            name: self.name.clone(),
            waited: started.elapsed(),
        };
        // A watchdog-renewed hold of a kind that allows it can be handed over by the previous
        // local holder instead of taken in Redis.
        // Not to a synced acquire: the hold it would get may never have been confirmed by
        // replicas (a synced hold may still go to an unsynced task).
        let takes_hold =
            (self.kind.hands_over_locally() && self.lease.is_none() && self.sync().is_none())
                .then_some(lease);
        let pass = if self.kind.queues_locally() {
            let entered = inner.gates.enter(&self.keys.key, takes_hold);
            match tokio::time::timeout_at(deadline, entered).await {
                Err(_) => return Err(timeout()),
                Ok(Turn::Contend(pass)) => Some(pass),
                Ok(Turn::Hold(handed)) => match Baton::open(handed).take() {
                    Ok(hold) => {
                        hold.begin_holding(hold.token.load(Ordering::Acquire));
                        tracing::debug!(lock = %self.name, waited = ?started.elapsed(), "dlock: acquired by local handoff");
                        return Ok(LockGuard::new(self.shared.clone(), hold));
                    }
                    // Lost on its way: ask Redis like anyone else.
                    Err(pass) => Some(pass),
                },
            }
        } else {
            None
        };
        if let Some(courtesy) = pass.as_ref().and_then(|p| p.courtesy) {
            // The last holder ended a run of local handoffs: a waiter of another process,
            // woken by its release, gets to ask Redis first.
            tracing::debug!(lock = %self.name, ?courtesy, "dlock: letting another process go first");
            tokio::time::sleep_until(deadline.min(Instant::now() + courtesy)).await;
        }
        // Takes back what refused attempts left in Redis if this acquire ends without the lock:
        // awaited here on an error, sent from Drop if this future is dropped.
        let mut give_up = GiveUp::new(&self.shared, self.kind.refusal_leaves_a_trace());
        let result = self
            .contend(pass, lease, wait, started, deadline, &mut give_up)
            .await;
        if result.is_err() {
            give_up.send().await;
        }
        result
    }

    /// The acquire loop, once this caller has the client's turn at the key (`pass`; `None` for
    /// kinds that do not queue locally).
    async fn contend(
        &self,
        pass: Option<GatePass>,
        lease: Duration,
        wait: Duration,
        started: Instant,
        deadline: Instant,
        give_up: &mut GiveUp,
    ) -> Result<LockGuard, LockError> {
        let inner = &self.shared;
        let timeout = || LockError::Timeout {
            name: self.name.clone(),
            waited: started.elapsed(),
        };
        let hard = self.lease.is_some();
        let new_hold = || {
            let hold = Arc::new(self.fresh_hold(lease));
            // Registered before the first request goes out; removed again on any failure or
            // cancellation by the registration's Drop.
            let registration = Registration::new(&self.shared, hold.clone(), !hard);
            (hold, registration)
        };
        let (mut hold, mut registration) = new_hold();
        let mut subscription = None;
        // Set once Redis refused this acquire: from then on it is waiting, and a broken link
        // (a failover, a restart) is something to wait out, not the caller's answer.
        let mut refused = false;
        let mut backoff = Backoff::new();
        // When the first attempt of this owner that may have been granted unseen was sent (its
        // link broke before the reply): a grant found later may date from then.
        let mut unseen_since: Option<Instant> = None;
        loop {
            self.check_open()?;
            let sent_at = Instant::now();
            let bound = self.attempt_bound(sent_at, deadline, wait, &hold);
            // Once refused, a broken link is waited out under the same owner: the failed
            // attempt is not undone, and the next one finds a grant it may have made.
            let keep_owner = refused;
            // Whether this client's written release of the key may still be behind it.
            let behind_release = !refused && inner.written.in_flight(&self.keys.key);
            let attempt = self.attempt(&hold, None, keep_owner);
            let attempt = match tokio::time::timeout_at(bound, attempt).await {
                Ok(Ok(attempt)) => attempt,
                Ok(Err(e)) if passes(&e, refused) && Instant::now() < deadline => {
                    tracing::debug!(lock = %self.name, error = %e, "dlock: an attempt failed on a passing fault; trying again within the wait");
                    if keep_owner && is_link_error(&e) {
                        // Redis may have granted it, and nobody undoes that now: the next
                        // attempt of the same owner adopts it, and if this acquire ends without
                        // the lock, its give-up releases it (whatever the kind).
                        unseen_since.get_or_insert(sent_at);
                        give_up.arm_always(&hold);
                    }
                    // The last pause ends with the wait, and its attempt is the last one:
                    // a fault still there then is the caller's answer, at the wait's end.
                    let pause = backoff.next_pause();
                    tokio::time::sleep_until(deadline.min(Instant::now() + pause)).await;
                    continue;
                }
                Ok(Err(e)) => {
                    if keep_owner && is_link_error(&e) {
                        // Not undone by the attempt (see above): the give-up releases it.
                        give_up.arm_always(&hold);
                    }
                    return Err(e);
                }
                // Dropping the attempt armed its orphan clean-up: whatever Redis may still
                // grant is released as soon as it arrives.
                Err(_) => return Err(self.no_reply(started)),
            };
            let pttl = match attempt {
                Attempt::Acquired { token, .. } => {
                    let token = token.max(0) as u64;
                    if inner.closed.load(Ordering::Acquire) {
                        // Granted after the client's shutdown began: give it back now.
                        crate::machinery::release::release_quietly(inner, &hold).await;
                        return Err(LockError::Closed {
                            name: self.name.clone(),
                        });
                    }
                    // A grant adopted from an attempt whose reply was lost counts from that
                    // attempt's send: Redis may not have set the lease again since.
                    let granted_from = unseen_since.map_or(sent_at, |t| t.min(sent_at));
                    hold.confirm(granted_from);
                    if hold.is_lost() {
                        // The reply came after the lease it granted could be trusted (a paused
                        // process, a slow link): give it back if still ours, and go on waiting.
                        // A new owner id for the next attempt, so it cannot re-enter the hold
                        // being given back.
                        tracing::warn!(lock = %self.name, late_by = ?sent_at.elapsed(), "dlock: acquire reply arrived after its lease; releasing it");
                        crate::machinery::release::spawn_release(self.shared.clone(), hold.clone());
                        (hold, registration) = new_hold();
                        unseen_since = None;
                        // A kind that tells each owner on its own channel (the fair lock) must
                        // listen on the new owner's.
                        subscription = None;
                        give_up.forget();
                        0
                    } else {
                        give_up.forget();
                        let first = FirstRenewal::at(granted_from + lease / 3);
                        return Ok(self.holding(hold, registration, pass, token, first, started));
                    }
                }
                Attempt::Held { pttl } => {
                    give_up.arm(&hold);
                    // Refused: no grant of this owner lives now (the script would have found
                    // it), so a later grant dates from a later attempt.
                    unseen_since = None;
                    let first_refusal = !refused;
                    refused = true;
                    backoff.reset();
                    if first_refusal && behind_release {
                        // Refused, maybe by this client's own release, written just before
                        // and re-sent behind this attempt (see `machinery/written.rs`): ask
                        // again once it is answered (it may be already), within the
                        // attempt's own bound.
                        let answered = inner.written.settled(&self.keys.key);
                        if tokio::time::timeout_at(bound, answered).await.is_ok() {
                            continue;
                        }
                    }
                    pttl
                }
            };
            let now = Instant::now();
            if now >= deadline {
                return Err(timeout());
            }
            let Some(sub) = &subscription else {
                // Subscribe first, then retry: a release published in between is then either
                // seen by the retry or delivered to the subscription. Bounded by the ack
                // timeout; if the wait ends first, the retry is the last attempt.
                let channel = self.kind.wait_channel(&hold);
                // A shard channel (Redisson's on a cluster) goes to the node serving its slot.
                subscription = if self.kind.sharded_wait() {
                    let sub = inner.waiters.subscribe_sharded(&channel);
                    tokio::time::timeout_at(deadline, sub).await.ok()
                } else {
                    let sub = inner.waiters.subscribe(&channel);
                    tokio::time::timeout_at(deadline, sub).await.ok()
                };
                continue;
            };
            // A crashed holder never publishes (nor does a release we cannot hear while the
            // subscription is unconfirmed): sleep at most until its lease ends. A lease of
            // unknown length (no TTL) is re-checked every `lease`.
            // PTTL 0 is a key in its last millisecond (retry right away), -1 one without expiry.
            let pttl = if pttl >= 0 {
                Duration::from_millis(pttl.max(1) as u64)
            } else {
                lease
            };
            tracing::debug!(lock = %self.name, ?pttl, confirmed = sub.confirmed(), "dlock: waiting for release");
            let _ = tokio::time::timeout_at(deadline.min(now + pttl), sub.released()).await;
            if let Some((token, first)) = self.grant_heard(sub, &hold, sent_at) {
                give_up.forget();
                return Ok(self.holding(hold, registration, pass, token, first, started));
            }
        }
    }

    /// The token of a grant to `hold`'s owner heard on its subscription (kinds whose releases
    /// hand the lock to a chosen waiter), if it is still valid, and when to renew it. Redis made
    /// the grant after the owner's last attempt (sent at `last_sent`) ran, or that attempt
    /// would have found it, so the grant's lifetime counts from then, safely early. A hard
    /// lease is never taken from a message: its next attempt sets its expiry.
    ///
    /// The grant lasts only its lifetime, not the owner's lease, until the first renewal
    /// extends it: at a third of that lifetime, as any lease, and by half of it at the latest
    /// (not at once, which would wake the watchdog's thread on every handoff; see
    /// [`FirstRenewal`]).
    fn grant_heard(
        &self,
        sub: &Subscription,
        hold: &Hold,
        last_sent: Instant,
    ) -> Option<(u64, FirstRenewal)> {
        let lifetime = self.kind.grant_lifetime()?;
        // A synced hold is not taken from a message either: its next attempt finds the grant
        // and has replicas confirm it.
        if hold.hard || hold.sync.is_some() {
            return None;
        }
        let token = sub.take_message(|m| self.kind.granted(hold, m))?;
        let lifetime = lifetime.min(hold.lease);
        hold.confirm_for(last_sent, lifetime);
        let first = FirstRenewal {
            due: last_sent + lifetime / 3,
            latest: last_sent + lifetime / 2,
        };
        // Too late to trust: the next attempt finds the grant (and refreshes it) or not.
        (!hold.is_lost()).then_some((token, first))
    }

    /// Turns a granted hold into a guard: its token, its local turn (exclusive kinds), its
    /// first renewal as `first` says.
    fn holding(
        &self,
        hold: Arc<Hold>,
        registration: Registration,
        pass: Option<GatePass>,
        token: u64,
        first: FirstRenewal,
        started: Instant,
    ) -> LockGuard {
        let token = self.token_from_redis(token);
        hold.token.store(token, Ordering::Release);
        hold.local_holds.store(1, Ordering::Release);
        hold.begin_holding(token);
        if self.kind.keeps_gate() {
            *hold.gate.lock().unwrap_or_else(|e| e.into_inner()) = pass;
        }
        registration.activate(first);
        tracing::debug!(lock = %self.name, token, waited = ?started.elapsed(), "dlock: acquired");
        LockGuard::new(self.shared.clone(), hold)
    }

    /// The fencing token of a hold Redis granted with counter value `redis`.
    fn token_from_redis(&self, redis: u64) -> u64 {
        if self.kind.scales_tokens() {
            crate::machinery::release::token_from_redis(redis)
        } else {
            redis
        }
    }

    /// How long one attempt may wait for Redis's reply: the rest of the wait, but at least
    /// [`ATTEMPT_GRACE`] (so the last attempt, made when the wait is up, can be answered); a
    /// try-once (`wait` zero) gets the response timeout.
    /// A synced attempt also gets its WAIT's bound.
    fn attempt_bound(
        &self,
        now: Instant,
        deadline: Instant,
        wait: Duration,
        hold: &Hold,
    ) -> Instant {
        let response_timeout = self.shared.response_timeout;
        let synced = hold.sync.map_or(Duration::ZERO, |s| s.within);
        if wait.is_zero() {
            return now + response_timeout + synced;
        }
        deadline.max(now + ATTEMPT_GRACE.min(response_timeout) + synced)
    }

    /// The error for an attempt Redis did not answer within its bound.
    fn no_reply(&self, started: Instant) -> LockError {
        let waited = started.elapsed();
        let io = std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            format!("no reply to acquire within the wait ({waited:?}); a grant that arrives later is released"),
        );
        // Built directly: a wait that ran out is not a broken connection, so it must not make
        // the watchdog renew every hold (`Shared::redis_error` would).
        LockError::Redis {
            name: self.name.clone(),
            op: "acquire",
            url: self.shared.url.clone(),
            source: redis::RedisError::from(io),
        }
    }

    /// Takes this kind's side of the lock for the owner of `parent`, an enclosing hold of the
    /// sibling kind (a writer taking the read side): one attempt, no queueing at the local gate
    /// (the enclosing hold has this client's turn). Refused by Redis only if the enclosing hold
    /// is gone.
    async fn acquire_as(
        &self,
        parent: &Arc<Hold>,
        lease: Duration,
    ) -> Result<LockGuard, LockError> {
        if parent.is_lost() {
            return Err(LockError::NotHeld {
                name: self.name.clone(),
            });
        }
        let hard = self.lease.is_some();
        let hold = Arc::new(self.fresh_hold(lease).for_owner(&parent.owner));
        let registration = Registration::new(&self.shared, hold.clone(), !hard);
        // Sent like a re-entry, with a marker: if the owner already holds this side (a second
        // read taken in one write scope), the script adds a hold rather than answering "held
        // already" (its reply to a re-sent first acquire), and an undo after a cancel finds the
        // marker whichever way the hold was granted.
        let marker = format!(
            "{}reentry:{}",
            self.keys.latch_prefix,
            self.shared.unique_id()
        );
        let sent_at = Instant::now();
        let bound =
            sent_at + self.shared.response_timeout + hold.sync.map_or(Duration::ZERO, |s| s.within);
        // Its own hold, not a re-entry of one: even with a hard lease, the owner's entry in
        // Redis must last as long as this hold counts on (a hard lease leaves the entry's
        // leases alone only when it re-enters the same hold).
        let request = Claim {
            hard: false,
            ..hold.claim.clone()
        };
        let attempt = self.attempt_as(&hold, &request, Some(&marker), false);
        let attempt = match tokio::time::timeout_at(bound, attempt).await {
            Ok(attempt) => attempt?,
            Err(_) => return Err(self.no_reply(sent_at)),
        };
        let Attempt::Acquired { token, .. } = attempt else {
            parent.mark_lost("the enclosing hold was gone when its owner asked for the other side");
            return Err(LockError::NotHeld {
                name: self.name.clone(),
            });
        };
        if self.shared.closed.load(Ordering::Acquire) {
            // Granted after the client's shutdown began: give it back now.
            crate::machinery::release::release_quietly(&self.shared, &hold).await;
            return Err(LockError::Closed {
                name: self.name.clone(),
            });
        }
        hold.confirm(sent_at);
        // The enclosing hold's token when this side was not a free -> held transition.
        let token = if token > 0 {
            self.token_from_redis(token as u64)
        } else {
            parent.token.load(Ordering::Acquire)
        };
        hold.token.store(token, Ordering::Release);
        hold.local_holds.store(1, Ordering::Release);
        hold.begin_holding(token);
        registration.activate(FirstRenewal::at(sent_at + lease / 3));
        Ok(LockGuard::new(self.shared.clone(), hold))
    }

    /// Re-enters a hold an enclosing scope owns: one more count on the same owner.
    async fn reenter(&self, parent: Arc<Hold>) -> Result<LockGuard, LockError> {
        let not_held = || LockError::NotHeld {
            name: self.name.clone(),
        };
        if parent.is_lost() {
            return Err(not_held());
        }
        let marker = format!(
            "{}reentry:{}",
            self.keys.latch_prefix,
            self.shared.unique_id()
        );
        // Count only a live hold: a guard released while its scope future lives on has no hold
        // left to re-enter.
        if parent
            .local_holds
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n > 0).then_some(n + 1)
            })
            .is_err()
        {
            return Err(not_held());
        }
        // If this future is dropped mid-request, the local count goes back down with it (the
        // Orphan undoes the Redis side), so the enclosing release still knows it is the last.
        let local = LocalHold(&parent, true);
        let sent_at = Instant::now();
        let result = self.attempt(&parent, Some(&marker), false).await;
        match result {
            Ok(Attempt::Acquired { count, .. }) if count > 1 => {
                local.keep();
                // A re-entry refreshes a watchdog lease (the script set it again); a hard lease
                // ends where the first acquire set it (the script left its expiry alone).
                if !parent.hard {
                    parent.confirm(sent_at);
                }
                Ok(LockGuard::new(self.shared.clone(), parent))
            }
            other => {
                drop(local);
                match other {
                    Err(e) => Err(e),
                    Ok(attempt) => {
                        // Count 1: the enclosing hold had expired and this call re-created it
                        // (give that back); "held": someone else has it now. Either way the
                        // enclosing hold is lost.
                        if matches!(attempt, Attempt::Acquired { .. }) {
                            crate::machinery::release::spawn_release(
                                self.shared.clone(),
                                parent.clone(),
                            );
                        }
                        parent.mark_lost("re-entry found the enclosing hold gone");
                        Err(not_held())
                    }
                }
            }
        }
    }

    /// Sends one acquire script. If this future is dropped after the send, or the reply is
    /// lost, the `Orphan` undoes what the server may have done, on the same connection so it
    /// runs after the acquire.
    /// `keep_owner`: the caller tries again under the same owner after a broken link (and
    /// releases it if it gives up), so such a failure is not undone here.
    async fn attempt(
        &self,
        hold: &Hold,
        reentry: Option<&str>,
        keep_owner: bool,
    ) -> Result<Attempt, LockError> {
        self.attempt_as(hold, &hold.claim, reentry, keep_owner)
            .await
    }

    /// [`Lock::attempt`] with the script's arguments read from `request` rather than `hold`'s
    /// own claim (same owner and keys).
    async fn attempt_as(
        &self,
        hold: &Hold,
        request: &Claim,
        reentry: Option<&str>,
        keep_owner: bool,
    ) -> Result<Attempt, LockError> {
        if let Some(sync) = hold.sync {
            return self
                .attempt_synced(hold, request, reentry, sync, keep_owner)
                .await;
        }
        // The key's own connection: a release of it returned once written is ahead on it.
        let mut conn = self.shared.conn_for(&hold.keys.key);
        let orphan = Orphan::new(&self.shared, conn.clone(), hold, reentry.map(str::to_owned));
        let reply: redis::RedisResult<(i64, i64)> = hold
            .kind
            .acquire(request, reentry, self.shared.latch_ttl)
            .invoke_async(&mut conn)
            .await;
        match reply {
            Ok(reply) => {
                orphan.disarm();
                Ok(hold.kind.decode_acquire(reply))
            }
            Err(e) => {
                // A server error means the script did not change anything (scripts check
                // before they write). A timeout or a dropped connection is ambiguous: the
                // Orphan (still armed) cleans up, unless the caller keeps the owner.
                if keep_owner || matches!(e.kind(), redis::ErrorKind::Server(_)) {
                    orphan.disarm();
                }
                Err(self.redis_error("acquire", e))
            }
        }
    }

    /// [`Lock::attempt_as`] on the synced connection, followed by WAIT. A grant that too few
    /// replicas confirmed is given back by the `Orphan` (on that connection, so after the
    /// grant) and reported as [`LockError::NotSynced`].
    async fn attempt_synced(
        &self,
        hold: &Hold,
        request: &Claim,
        reentry: Option<&str>,
        sync: ReplicaSync,
        keep_owner: bool,
    ) -> Result<Attempt, LockError> {
        // A release of this key this client wrote is answered first: on its own connection,
        // this request could overtake it (see `machinery/written.rs`).
        self.written_settled().await;
        let mut conn = (self.shared.sync_conn.get(sync, Purpose::Acquire).await)
            .map_err(|e| self.redis_error("acquire", e))?;
        let orphan = Orphan::new(&self.shared, conn.clone(), hold, reentry.map(str::to_owned));
        let reply = hold
            .kind
            .acquire(request, reentry, self.shared.latch_ttl)
            .invoke_then_wait::<(i64, i64)>(&mut conn, sync.replicas, sync.within)
            .await;
        match reply {
            Ok((reply, acked)) => {
                let attempt = hold.kind.decode_acquire(reply);
                if !matches!(attempt, Attempt::Acquired { .. }) {
                    orphan.disarm();
                    return Ok(attempt);
                }
                // Granted: kept only if enough replicas confirmed. Otherwise the `Orphan`,
                // dropped armed, gives the grant back.
                match acked {
                    Ok(acked) if acked >= sync.replicas => {
                        orphan.disarm();
                        Ok(attempt)
                    }
                    Ok(acked) => {
                        tracing::warn!(lock = %self.name, acked, wanted = sync.replicas, within = ?sync.within,
                            "dlock: too few replicas confirmed the acquire; releasing it");
                        Err(LockError::NotSynced {
                            name: self.name.clone(),
                            url: self.shared.url.clone(),
                            wanted: sync.replicas,
                            acked,
                            within: sync.within,
                        })
                    }
                    Err(e) => {
                        if keep_owner && retry::is_link_error(&e) {
                            // The caller tries again under this owner (its retry finds the
                            // grant and WAITs again) or releases it: an undo racing that retry
                            // could delete a grant the retry adopted.
                            orphan.disarm();
                        } else {
                            tracing::warn!(lock = %self.name, error = %e,
                                "dlock: WAIT failed after a granted acquire; releasing it");
                        }
                        Err(self.redis_error("acquire (WAIT for replicas)", e))
                    }
                }
            }
            Err(e) => {
                if keep_owner || matches!(e.kind(), redis::ErrorKind::Server(_)) {
                    orphan.disarm();
                }
                Err(self.redis_error("acquire", e))
            }
        }
    }
}

/// The least time an attempt may wait for Redis's reply, even at the end of the wait: a
/// healthy Redis answers in well under a millisecond, a busy one (a slow script, a fork) may
/// take tens of milliseconds, and giving up sooner would only turn a free lock into a timeout.
const ATTEMPT_GRACE: Duration = Duration::from_millis(250);

/// Whether an acquire failed because the link to Redis did (refused, dropped, timed out, or
/// a reply from a primary that was replaced), rather than because Redis answered with an
/// error.
fn is_link_error(e: &LockError) -> bool {
    matches!(e, LockError::Redis { source, .. } if retry::is_link_error(source))
}

/// Whether an attempt's failure is waited out within the wait: a server's "not now"
/// (`LOADING`, `TRYAGAIN`, `CLUSTERDOWN`, `MASTERDOWN`: nothing ran) always; a broken link
/// once Redis has refused this acquire (before that, a Redis that cannot be reached is the
/// caller's answer at once).
fn passes(e: &LockError, refused: bool) -> bool {
    match e {
        LockError::Redis { source, .. } => {
            retry::is_not_now(source) || (refused && retry::is_link_error(source))
        }
        _ => false,
    }
}

/// `start + wait`, where a wait too long to represent (`Duration::MAX`: "as long as it takes")
/// means a century rather than an overflow panic.
fn far_instant(start: Instant, wait: Duration) -> Instant {
    start
        .checked_add(wait)
        .unwrap_or_else(|| start + Duration::from_secs(100 * 365 * 24 * 3600))
}

/// How long an acquire that ends without the lock waits for its give-up release: a healthy
/// Redis answers in well under a millisecond; a slower answer goes on in the background.
const GIVE_UP_BOUND: Duration = Duration::from_secs(1);

/// The release an acquire sends when it ends without the lock after a refusal left a trace of
/// its owner in Redis (see `LockKind::refusal_leaves_a_trace`). Sent from Drop, on the client's
/// thread, so a timeout, an error and a cancelled future all send it.
struct GiveUp {
    shared: Arc<Shared>,
    enabled: bool,
    hold: Option<Arc<Hold>>,
}

impl GiveUp {
    fn new(shared: &Arc<Shared>, enabled: bool) -> Self {
        GiveUp {
            shared: shared.clone(),
            enabled,
            hold: None,
        }
    }

    /// Records that `hold`'s owner was refused (and so may have left a trace).
    fn arm(&mut self, hold: &Arc<Hold>) {
        if self.enabled {
            self.hold = Some(hold.clone());
        }
    }

    /// Records that `hold`'s owner may hold the lock unseen (a reply lost on a broken link),
    /// whatever the kind: an acquire that ends without the lock must release it.
    fn arm_always(&mut self, hold: &Arc<Hold>) {
        self.hold = Some(hold.clone());
    }

    /// Nothing to take back: the owner holds the lock, or its hold is being released anyway.
    fn forget(&mut self) {
        self.hold = None;
    }

    /// Takes the trace back now, so the caller's next step (a reader joining after a writer
    /// gave up) does not race it; errors are logged, the trace expires on its own.
    /// Waited for at most [`GIVE_UP_BOUND`] (an acquire that ends must not outlast its wait by
    /// a Redis that is down or still loading); past that, Drop sends it in the background. The
    /// hold is forgotten only once the release ran, so a caller's timeout that drops this
    /// future mid-way also leaves it to Drop.
    async fn send(&mut self) {
        if let Some(hold) = self.hold.clone() {
            let bound = GIVE_UP_BOUND.min(self.shared.response_timeout);
            let release = crate::machinery::release::release_quietly(&self.shared, &hold);
            if tokio::time::timeout(bound, release).await.is_ok() {
                self.hold = None;
            }
        }
    }
}

impl Drop for GiveUp {
    fn drop(&mut self) {
        if let Some(hold) = self.hold.take() {
            crate::machinery::release::spawn_release(self.shared.clone(), hold);
        }
    }
}

/// One local hold count taken for a re-entry in flight; given back on drop unless kept.
struct LocalHold<'a>(&'a Hold, bool);

impl LocalHold<'_> {
    fn keep(mut self) {
        self.1 = false;
    }
}

impl Drop for LocalHold<'_> {
    fn drop(&mut self) {
        if self.1 {
            self.0.local_holds.fetch_sub(1, Ordering::AcqRel);
        }
    }
}
