//! The acquire loop: from a validated request to a granted hold. Re-entry along the call
//! chain, this client's turn at the key (`gate.rs`), then attempts in the store until it grants
//! the lock, the wait ends or the caller gives up; what refused or lost attempts left behind is
//! taken back (`orphan.rs`, [`GiveUp`]). The public `Lock` handle validates its settings and
//! wraps the hold this returns in a guard.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::error::LockError;
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
use crate::store::error as store_error;
use crate::store::link::Link;
use crate::store::redis::backend::names::LockKeys;
use crate::store::redis::backend::retry::{self, Backoff};
use crate::store::redis::backend::sync_conn::Purpose;
use crate::store::redis::kinds::{Attempt, Claim, LockKind, Nested};

/// One acquire of one lock, its settings validated by the handle.
pub(crate) struct Acquire<'a> {
    pub(crate) shared: &'a Arc<Shared>,
    pub(crate) name: &'a str,
    /// What is asked of the store: the plain lock, one side of a read-write lock, ...
    pub(crate) kind: &'a Arc<dyn LockKind>,
    pub(crate) keys: &'a LockKeys,
    /// The lease each hold is given (validated: at least 1 ms, finite).
    pub(crate) lease: Duration,
    /// A hard lease (no watchdog) rather than a renewed one.
    pub(crate) hard: bool,
    pub(crate) sync: Option<ReplicaSync>,
    /// The template its metrics are labelled with (`None`: `other`).
    pub(crate) label: Option<&'a Arc<str>>,
}

impl Acquire<'_> {
    /// [`LockError::Closed`] once the client was shut down.
    fn check_open(&self) -> Result<(), LockError> {
        if self.shared.closed.load(Ordering::Acquire) {
            return Err(LockError::Closed {
                name: self.name.to_owned(),
            });
        }
        Ok(())
    }

    fn redis_error(&self, op: &'static str, e: redis::RedisError) -> LockError {
        self.shared.redis_error(self.name, &self.keys.key, op, e)
    }

    /// A new hold of this lock for a new owner, with this handle's settings (not yet sent).
    fn fresh_hold(&self, lease: Duration) -> Hold {
        let label = self
            .label
            .cloned()
            .unwrap_or_else(|| Arc::from(telemetry::OTHER));
        self.shared
            .new_hold(
                (self.name.to_owned(), self.label.map(|l| &**l)),
                self.keys.clone(),
                lease,
                self.hard,
                self.kind.clone(),
                self.sync,
            )
            .labelled(label)
    }

    /// Runs the acquire: re-entry, the local turn, then contending in the store.
    pub(crate) async fn run(&self, wait: Duration) -> Result<Arc<Hold>, LockError> {
        let lease = self.lease;
        let inner = &self.shared;
        self.check_open()?;
        if let Some(parent) = scope::enclosing(&inner.client_id, &self.keys.key) {
            return match self.kind.nested(&*parent.kind) {
                Nested::Reenter => Box::pin(self.reenter(parent)).await,
                Nested::SameOwner => Box::pin(self.acquire_as(&parent, lease)).await,
                Nested::Refuse(reason) => Err(LockError::WouldDeadlock {
                    name: self.name.to_owned(),
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
                name: self.name.to_owned(),
                holder: held.client_id.clone(),
            });
        }
        let started = Instant::now();
        let deadline = far_instant(started, wait);
        let timeout = || LockError::timeout(self.name, started.elapsed(), self.kind.busy());
        // A watchdog-renewed hold of a kind that allows it can be handed over by the previous
        // local holder instead of taken in Redis.
        // Not to a synced acquire: the hold it would get may never have been confirmed by
        // replicas (a synced hold may still go to an unsynced task).
        let takes_hold =
            (self.kind.hands_over_locally() && !self.hard && self.sync.is_none()).then_some(lease);
        let pass = if self.kind.queues_locally() {
            let entered = inner.gates.enter(&self.keys.key, takes_hold);
            match tokio::time::timeout_at(deadline, entered).await {
                Err(_) => return Err(timeout()),
                Ok(Turn::Contend(pass)) => Some(pass),
                Ok(Turn::Hold(handed)) => match Baton::open(handed).take() {
                    Ok(hold) => {
                        hold.begin_holding(hold.token.load(Ordering::Acquire));
                        tracing::debug!(lock = %self.name, waited = ?started.elapsed(), "dlock: acquired by local handoff");
                        return Ok(hold);
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
        let mut give_up = GiveUp::new(
            self.shared,
            self.kind.refusal_leaves_a_trace() || self.shared.refusal_leaves_a_trace(),
        );
        let result = self
            .contend(pass, lease, wait, started, deadline, &mut give_up)
            .await;
        if result.is_err() {
            Box::pin(give_up.send()).await;
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
    ) -> Result<Arc<Hold>, LockError> {
        let inner = &self.shared;
        let timeout = || LockError::timeout(self.name, started.elapsed(), self.kind.busy());
        let hard = self.hard;
        let new_hold = || {
            let hold = Arc::new(self.fresh_hold(lease));
            // Registered before the first request goes out; removed again on any failure or
            // cancellation by the registration's Drop.
            let registration = Registration::new(self.shared, hold.clone(), !hard);
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
            // Boxed, like the other calls this loop makes: an attempt is the largest state of
            // the loop (about 3 KB), which a waiting task would otherwise carry while it sleeps
            // (examples/scale: 5.6 KB per waiting task before, 4.0 KB after; one allocation
            // per attempt, about 1 % of a cycle's client instructions).
            let attempt = Box::pin(self.attempt(&hold, None, keep_owner));
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
                        Box::pin(crate::machinery::release::release_quietly(inner, &hold)).await;
                        return Err(LockError::Closed {
                            name: self.name.to_owned(),
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
                        // The hold's own lease: the store's, where it is not the TTL asked
                        // (ZooKeeper's session).
                        let first = FirstRenewal::at(granted_from + hold.lease / 3);
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
                    let sub = Box::pin(inner.waiters.subscribe_sharded(&channel));
                    tokio::time::timeout_at(deadline, sub).await.ok()
                } else {
                    let sub = Box::pin(inner.waiters.subscribe(&channel));
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
    ) -> Arc<Hold> {
        let token = self.token_from_redis(token);
        hold.token.store(token, Ordering::Release);
        hold.local_holds.store(1, Ordering::Release);
        hold.begin_holding(token);
        if self.kind.keeps_gate() {
            *hold.gate.lock().unwrap_or_else(|e| e.into_inner()) = pass;
        }
        registration.activate(first);
        tracing::debug!(lock = %self.name, token, waited = ?started.elapsed(), "dlock: acquired");
        hold
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

    /// The error for an attempt the store did not answer within its bound.
    fn no_reply(&self, started: Instant) -> LockError {
        let waited = started.elapsed();
        let io = std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            format!("no reply to acquire within the wait ({waited:?}); a grant that arrives later is released"),
        );
        self.shared.unanswered(self.name, "acquire", io)
    }

    /// Takes this kind's side of the lock for the owner of `parent`, an enclosing hold of the
    /// sibling kind (a writer taking the read side): one attempt, no queueing at the local gate
    /// (the enclosing hold has this client's turn). Refused by the store only if the enclosing
    /// hold is gone, which is why a refusal marks it lost: every store lets a writer's read (a
    /// nested request) past the done mark an earlier read of the same owner left, which stops
    /// only late top-level requests (issue 36: PostgreSQL did not, and a writer reading twice
    /// was refused and read lost while its row was there).
    async fn acquire_as(
        &self,
        parent: &Arc<Hold>,
        lease: Duration,
    ) -> Result<Arc<Hold>, LockError> {
        if parent.is_lost() {
            return Err(LockError::NotHeld {
                name: self.name.to_owned(),
            });
        }
        let hard = self.hard;
        let hold = Arc::new(self.fresh_hold(lease).for_owner(&parent.owner));
        let registration = Registration::new(self.shared, hold.clone(), !hard);
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
                name: self.name.to_owned(),
            });
        };
        if self.shared.closed.load(Ordering::Acquire) {
            // Granted after the client's shutdown began: give it back now.
            crate::machinery::release::release_quietly(self.shared, &hold).await;
            return Err(LockError::Closed {
                name: self.name.to_owned(),
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
        registration.activate(FirstRenewal::at(sent_at + hold.lease / 3));
        Ok(hold)
    }

    /// Re-enters a hold an enclosing scope owns: one more count on the same owner.
    async fn reenter(&self, parent: Arc<Hold>) -> Result<Arc<Hold>, LockError> {
        let not_held = || LockError::NotHeld {
            name: self.name.to_owned(),
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
                Ok(parent)
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

    /// [`Acquire::attempt`] with the script's arguments read from `request` rather than `hold`'s
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
        let mut link = self.shared.link_for(&hold.keys.key);
        let orphan = Orphan::new(self.shared, link.clone(), hold, reentry.map(str::to_owned));
        let reply = (link.acquire(&*hold.kind, request, reentry, self.shared.latch_ttl)).await;
        match reply {
            Ok(attempt) => {
                orphan.disarm();
                Ok(attempt)
            }
            Err(e) => {
                // A server error means the script did not change anything (scripts check
                // before they write). A timeout or a dropped connection is ambiguous: the
                // Orphan (still armed) cleans up, unless the caller keeps the owner.
                if keep_owner || e.ran_nothing() {
                    orphan.disarm();
                }
                Err(self
                    .shared
                    .store_error(self.name, &self.keys.key, "acquire", e))
            }
        }
    }

    /// [`Acquire::attempt_as`] on the synced connection, followed by WAIT. A grant that too few
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
        self.shared.written_settled(&self.keys.key).await;
        let mut conn = (self.shared.sync_conn()?.get(sync, Purpose::Acquire).await)
            .map_err(|e| self.redis_error("acquire", e))?;
        let orphan = Orphan::new(
            self.shared,
            Link::Redis(conn.clone()),
            hold,
            reentry.map(str::to_owned),
        );
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
                            name: self.name.to_owned(),
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

/// Whether an acquire failed because the link to the store did (refused, dropped, timed out,
/// or a reply from a primary that was replaced), rather than because the store answered with
/// an error.
fn is_link_error(e: &LockError) -> bool {
    store_error::is_link_error(e)
}

/// Whether an attempt's failure is waited out within the wait: a server's "not now" (Redis's
/// `LOADING`, `TRYAGAIN`, `CLUSTERDOWN`, `MASTERDOWN`, PostgreSQL's recovery or a standby:
/// nothing ran) always; a broken link once the store has refused this acquire (before that, a
/// store that cannot be reached is the caller's answer at once).
fn passes(e: &LockError, refused: bool) -> bool {
    store_error::is_not_now(e) || (refused && store_error::is_link_error(e))
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
