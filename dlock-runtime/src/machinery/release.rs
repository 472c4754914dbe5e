//! How a hold is given back: handed to the next task of this client queued for the key, or
//! released in Redis, on every way out (an awaited release, a dropped guard, a hold nobody
//! took).
//!
//! Local handoff (lock cohorting): a hold released while another task of this client waits at
//! the gate for the same key goes to that task without a release and an acquire in Redis.
//!
//! The Redis side stays as it is: the lock hash keeps the first holder's owner id, its expiry
//! and its watchdog schedule. The receiver gets a new local hold, a different owner for
//! re-entry (the giver's scope cannot re-enter it), with the giver's validity deadline, so it
//! never believes in more lease than Redis granted, and a fencing token one above the giver's
//! (tokens from Redis are scaled by `LOCAL_TOKENS`, so a later free -> held transition in
//! Redis always hands out more than any local successor of an earlier one).
//!
//! Bounded, so other processes get their turn (Dice, Marathe and Shavit, "Lock Cohorting",
//! 2012): after `local_handoffs` consecutive handoffs, or once the process has kept the lock for
//! `local_handoff_window`, the release goes to Redis, and the next local contender lets a
//! waiter of another process go first (see `courtesy`). It does so only if the release's
//! message reached a subscriber: when nobody else was listening (one server or Sentinel,
//! where PUBLISH counts the subscribers of the primary every client subscribes to) the pause
//! would only idle the lock. A waiter that
//! is between a failed try and its subscription is not counted; it still gets its turn at the
//! next bound, since the run is then in Redis's hands like any other holder's.
//!
//! Only the plain lock hands over so far (`LockKind::hands_over_locally`). How
//! the others would:
//! * the write side of a read-write lock is an owner entry like the plain lock's: writer to
//!   writer works the same way, on the same bounds. Readers need nothing (shared kinds leave
//!   the gate as soon as they hold), and a writer handing to a local reader would change the
//!   mode in Redis, which takes a script: that stays a release and an acquire;
//! * the fair lock must not let a local task overtake earlier waiters of other processes. Its
//!   release already grants the lock to the head of the Redis queue; the extension is for the
//!   release's reply to name the grantee, so that when the head is a task of this client it is
//!   handed the hold at once instead of hearing the grant over pub/sub (one round trip per
//!   handoff, not zero, and never out of queue order).

use std::future::Future;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use tokio::runtime::RuntimeFlavor;
use tokio::time::Instant;

use crate::error::LockError;
use crate::machinery::gate::{GatePass, Handed};
use crate::machinery::hold::Hold;
use crate::machinery::shared::Shared;
use crate::machinery::telemetry;
use crate::machinery::written::InFlight;
use crate::settings::LOCAL_TOKENS;
use crate::store::error::{self as store_error, StoreError};
use crate::store::link::Released;
use crate::store::redis::backend::retry::Backoff;
use crate::store::redis::backend::thread::Running;

/// The fencing token of a hold Redis granted with counter value `redis`.
pub(crate) fn token_from_redis(redis: u64) -> u64 {
    redis.saturating_mul(LOCAL_TOKENS)
}

/// Releases one hold and waits for Redis to confirm (see `LockGuard::release`). Cancel-safe:
/// if this future is dropped half-way, the release is finished in the background with the same
/// request id, so it is applied exactly once.
pub(crate) async fn release(shared: &Arc<Shared>, hold: &Arc<Hold>) -> Result<(), LockError> {
    let Some(last) = begin_release(shared, hold) else {
        return Ok(());
    };
    // A dropped guard's release of this key, on the client's thread, goes first: else this one
    // could overtake it, and the caller's last release would leave the count it gave back.
    if shared.written.in_flight(&hold.keys.key) {
        shared.written_settled(&hold.keys.key).await;
    }
    Pending::new(shared, hold, last).run().await
}

/// Releases one hold and returns as soon as the release request is on the key's connection
/// (see `LockGuard::release_written`). The reply is awaited by a task of its own, on the
/// caller's runtime (on the client's thread without one); a failed or lost reply is retried
/// there with the same request id, and a failure only logged, as for a dropped guard.
pub(crate) async fn release_written(shared: &Arc<Shared>, hold: &Arc<Hold>) {
    let Some(last) = begin_release(shared, hold) else {
        return;
    };
    // As in `release`: a dropped guard's release of this key goes first.
    if shared.written.in_flight(&hold.keys.key) {
        shared.written_settled(&hold.keys.key).await;
    }
    Pending::new(shared, hold, last).send_written().await;
}

/// Releases one hold of a guard dropped without `release()` (panic, `?`, cancellation): Drop
/// cannot await, so renewals stop now and the release goes to the client's thread.
pub(crate) fn drop_hold(shared: &Arc<Shared>, hold: &Arc<Hold>) {
    if let Some(last) = begin_release(shared, hold) {
        let mut pending = Pending::new(shared, hold, last);
        // Counted until answered, so a release the caller awaits next (the enclosing guard's,
        // after a re-entry's guard was dropped) waits for it instead of overtaking it.
        pending.in_flight = Some(shared.written.begin(&hold.keys.key));
        pending.spawn();
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
    /// A written release, counted until answered (see `machinery/written.rs`).
    in_flight: Option<InFlight>,
    /// Since when this release is tried, and whether a try may have run: carried over when
    /// the background takes over, so the latch's memory is counted from the first try.
    progress: Arc<Progress>,
}

impl Pending {
    fn new(shared: &Arc<Shared>, hold: &Arc<Hold>, last: bool) -> Self {
        Pending {
            shared: shared.clone(),
            hold: hold.clone(),
            last,
            latch: shared.unique_id(),
            done: false,
            in_flight: None,
            progress: Progress::starting(),
        }
    }

    async fn run(mut self) -> Result<(), LockError> {
        let tries = Tries {
            background: false,
            last: self.last,
            patience: Patience::Caller,
        };
        let result = finish_release(
            &self.shared,
            &self.hold,
            &self.latch,
            tries,
            None,
            &self.progress,
        )
        .await;
        // A passing fault that outlasted the caller's patience (Redis restarting, loading its
        // data): the caller hears of it, and the release goes on in the background, with the
        // same request id, until Redis answers or the lease has ended (Drop sends it).
        self.done = !matches!(&result, Err(e) if store_error::is_transient(e));
        result
    }

    /// Sends the release and returns once the request is written: its first poll put it on
    /// the key's connection (a multiplexed connection queues it for the socket on that poll,
    /// and requests queued later on it reach Redis after it). The reply is then awaited by a
    /// task, which retries with the same latch id if it is lost; dropped unfinished (its
    /// runtime shut down), this `Pending` goes to the client's thread like a dropped guard's.
    async fn send_written(mut self) {
        let shared = self.shared.clone();
        let mut link = shared.link_for(&self.hold.keys.key);
        let (hold, latch, latch_ttl) = (self.hold.clone(), self.latch_key(), shared.latch_ttl);
        let sent_at = Instant::now();
        let mut first: Request =
            Box::pin(async move { link.release(&*hold.kind, &hold, &latch, latch_ttl).await });
        let polled = std::future::poll_fn(|cx| Poll::Ready(first.as_mut().poll(cx))).await;
        let written = polled.is_pending();
        // Answered already (the thread was preempted between sending and looking, for longer
        // than the round trip): settled here, so the gate is free and the lock seen free when
        // this returns, as a written release promises. An error goes the background's way.
        let answered = matches!(polled, Poll::Ready(Ok(_)));
        let first: Request = match polled {
            Poll::Ready(reply) => Box::pin(std::future::ready(reply)),
            Poll::Pending => first,
        };
        if written {
            // A replica-synced acquire of this client, on another connection, waits for it.
            self.in_flight = Some(shared.written.begin(&self.hold.keys.key));
        }
        if written && self.last && !self.hold.yields_next() {
            // This client's next acquire of the key may go now: it is sent on the same
            // connection, behind the release. Only a courtesy owed to other processes (the end
            // of a run of local handoffs) needs the reply: its length sets the courtesy.
            self.hold.release_gate(None);
        }
        let awaiting = AwaitReply {
            pending: self,
            _tracked: shared.bg.track(),
        };
        let task = awaiting.run(first, sent_at);
        if answered {
            return task.await;
        }
        match tokio::runtime::Handle::try_current() {
            // Where the caller's connections live, so the reply wakes no other thread.
            Ok(here) if here.runtime_flavor() == RuntimeFlavor::MultiThread => {
                drop(here.spawn(task))
            }
            // Not on a current-thread runtime: the thread that runs it may be the one that
            // drops the client's last handle next, which blocks it until this task ends, and
            // then it never would.
            _ => shared.bg.spawn(task),
        }
    }

    /// The latch key of this release's request id.
    fn latch_key(&self) -> String {
        format!("{}{}", self.hold.keys.latch_prefix, self.latch)
    }

    fn spawn(mut self) {
        self.done = true;
        let in_flight = self.in_flight.take();
        let progress = self.progress.clone();
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
        shared.bg.spawn_cleanup({
            let shared = shared.clone();
            async move {
                let _in_flight = in_flight;
                if let Err(e) =
                    finish_release(&shared, &hold, &latch, Tries { last, ..Tries::background_last() }, None, &progress).await
                {
                    tracing::warn!(lock = %hold.name, error = %e, "dlock: background release failed");
                }
            }
        });
    }
}

/// A release request already sent, whose reply is still to come (see
/// [`Pending::send_written`]).
type Request = std::pin::Pin<Box<dyn Future<Output = Result<Released, StoreError>> + Send>>;

/// A written release waiting for its reply. Fields drop in order: an unfinished `Pending` hands
/// itself to the client's thread (a tracked clean-up) before this one stops being tracked, so a
/// shutdown waiting for clean-ups never sees a gap.
struct AwaitReply {
    pending: Pending,
    _tracked: Running,
}

impl AwaitReply {
    async fn run(mut self, first: Request, sent_at: Instant) {
        let p = &self.pending;
        let tries = Tries {
            background: false,
            last: p.last,
            patience: Patience::Lease,
        };
        let first = Some((first, sent_at));
        let result = finish_release(&p.shared, &p.hold, &p.latch, tries, first, &p.progress).await;
        self.pending.done = true;
        self.pending.in_flight = None;
        if let Err(e) = result {
            tracing::warn!(lock = %self.pending.hold.name, error = %e, "dlock: release failed; the lease expires on its own");
        }
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
                in_flight: self.in_flight.take(),
                progress: self.progress.clone(),
            }
            .spawn();
        }
    }
}

/// Synchronous first half: drops one local hold; the last one leaves the watchdog here, before
/// any request goes out, so no renewal can follow the release. `None` when the last one went
/// to the next local task instead (nothing to send), else whether it was the last.
fn begin_release(shared: &Arc<Shared>, hold: &Arc<Hold>) -> Option<bool> {
    let last = hold.local_holds.fetch_sub(1, Ordering::AcqRel) == 1;
    if last {
        hold.end_holding();
    }
    if hold.released_by_shutdown.load(Ordering::Acquire) {
        // The shutdown gave this hold back already.
        if last {
            hold.release_gate(None);
        }
        return None;
    }
    if last {
        let due = shared.watchdog.remove(hold.id);
        if hand_over(shared, hold, due) {
            return None;
        }
    }
    Some(last)
}

/// Sends the release as `tries` says and settles the hold with its answer (the gate, the
/// lost signal). `first`: the release request, already sent at that instant.
async fn finish_release(
    shared: &Arc<Shared>,
    hold: &Hold,
    latch: &str,
    tries: Tries,
    first: Option<(Request, Instant)>,
    progress: &Progress,
) -> Result<(), LockError> {
    let last = tries.last;
    let (first, sent_at) = match first {
        Some((request, at)) => (Some(request), at),
        None => (None, Instant::now()),
    };
    let result = release_script(shared, hold, latch, tries, first, progress).await;
    if last {
        // Only now may the next task of this process try: the lock is free (or expiring). It
        // owes a waiter of another process a head start only if one may have heard the release.
        let others_may_wait = !matches!(&result, Ok(r) if nobody_listened(r, shared));
        hold.release_gate(others_may_wait.then(|| sent_at.elapsed()));
    }
    if matches!(&result, Ok(r) if publish_refused(r)) {
        tracing::warn!(lock = %hold.name, "dlock: released, but Redis refused the release's PUBLISH (does the ACL user lack rights on dlock's channels?); waiters of other clients wake at the lease's end");
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
    let bg = &shared.clone().bg;
    bg.spawn_cleanup(async move {
        let latch = shared.unique_id();
        let tries = Tries::background_last();
        let progress = Progress::starting();
        if let Err(e) = release_script(&shared, &hold, &latch, tries, None, &progress).await {
            tracing::warn!(lock = %hold.name, error = %e, "dlock: background release failed; the lock ends with its lease");
        }
    });
}

/// Gives back every Redis-side count of `hold`'s owner (shutdown: its guards may still be
/// alive, but will send nothing); a failure is only logged.
pub(crate) async fn release_all_counts(shared: &Arc<Shared>, hold: &Hold) {
    // One release per count the owner holds in Redis, until the script says none is left
    // (re-entries may come and go meanwhile: a count is not read once and trusted).
    for _ in 0..MAX_SHUTDOWN_RELEASES {
        let latch = shared.unique_id();
        // One count of several: repeated after its latch expired, it would take a second one.
        let tries = Tries {
            last: false,
            ..Tries::background_last()
        };
        match release_script(shared, hold, &latch, tries, None, &Progress::starting()).await {
            Ok(r) if r.left > 0 => {}
            Ok(_) => return,
            Err(e) => {
                tracing::warn!(lock = %hold.name, error = %e, "dlock: release at shutdown failed; the lock ends with its lease");
                return;
            }
        }
    }
}

/// Releases of one hold at shutdown, at most: far above any real re-entry depth.
const MAX_SHUTDOWN_RELEASES: usize = 1024;

/// Releases a hold without a guard (an acquire giving back what it may hold) and waits for it
/// at most the response timeout; a release Redis has not answered by then goes on in the
/// background until Redis answers or the lease has ended. A failure is only logged.
pub(crate) async fn release_quietly(shared: &Arc<Shared>, hold: &Arc<Hold>) {
    let latch = shared.unique_id();
    let tries = Tries {
        background: false,
        patience: Patience::Caller,
        ..Tries::background_last()
    };
    match release_script(shared, hold, &latch, tries, None, &Progress::starting()).await {
        Err(e) if store_error::is_transient(&e) => {
            // Its one count: repeating it under another latch id changes nothing twice.
            spawn_release(shared.clone(), hold.clone());
        }
        Err(e) => {
            tracing::debug!(lock = %hold.name, error = %e, "dlock: clean-up release failed");
        }
        Ok(_) => {}
    }
}

/// True when the release freed the lock but Redis refused its message (an ACL user without
/// rights on the channel): the lock is free all the same.
fn publish_refused(released: &Released) -> bool {
    released.listeners == Some(-1)
}

/// True when the release freed the lock and no subscriber was there to hear it, so no other
/// process was waiting for it. Only where PUBLISH counts every subscriber.
fn nobody_listened(released: &Released, shared: &Shared) -> bool {
    released.listeners == Some(0) && shared.publish_counts_all
}

/// How long a release keeps trying through passing faults (see `store/redis/backend/retry.rs`).
#[derive(Clone, Copy, Debug)]
enum Patience {
    /// Until the lease has surely ended in Redis: nothing is left to release after that.
    Lease,
    /// A caller awaits it: a server that does not answer, the response timeout at most (the
    /// rest goes on in the background).
    Caller,
}

/// How one release is sent and repeated.
#[derive(Clone, Copy, Debug)]
struct Tries {
    /// Sent from the client's own thread, on its own connection (see [`release_script`]).
    background: bool,
    /// It gives back the owner's last count: repeating it after its latch expired finds the
    /// owner gone and changes nothing, so it may go on as long as the lease may live.
    last: bool,
    patience: Patience,
}

impl Tries {
    /// A background release of a hold's only count (an undo, a give-up, a lost hold).
    fn background_last() -> Self {
        Tries {
            background: true,
            last: true,
            patience: Patience::Lease,
        }
    }
}

/// How one release's tries went so far (see [`release_script`]).
#[derive(Debug)]
struct Progress {
    /// The first try.
    since: Instant,
    /// A try whose link broke, so it may have run: a repeat then relies on the latch.
    maybe_ran: std::sync::atomic::AtomicBool,
}

impl Progress {
    fn starting() -> Arc<Self> {
        Arc::new(Progress {
            since: Instant::now(),
            maybe_ran: std::sync::atomic::AtomicBool::new(false),
        })
    }
}

/// Past the lease, a little more: Redis's expiry may lag the holder's clock (drift).
const LEASE_SLACK: Duration = Duration::from_secs(2);

/// Runs release.lua, retrying passing faults (a broken link, a server still loading, a slot
/// being migrated) with a backoff, with the same request id: the latch in Redis answers a
/// retry of a release that already ran instead of releasing twice. A `background` release goes
/// over a connection the client's own thread drives, never one of the caller's runtime: that
/// runtime may be shutting down (a process returning from `main`), or blocked waiting for this
/// very release (the drop of a client's last handle). `first`: the first attempt, already sent.
async fn release_script(
    shared: &Arc<Shared>,
    hold: &Hold,
    latch_id: &str,
    tries: Tries,
    mut first: Option<Request>,
    progress: &Progress,
) -> Result<Released, LockError> {
    let inner = &shared;
    let latch = format!("{}{latch_id}", hold.keys.latch_prefix);
    // Both counted from the release's first try (`progress.since`). A server that answers
    // "not now" (still loading, a slot in migration) is waited out for as long as the lease
    // may live, also by a caller: it answers soon, and `release()` returning means the lock is
    // free. A server that does not answer at all gets the caller's patience, then the
    // background's.
    let lease_horizon = hold.lease.saturating_add(LEASE_SLACK);
    let link_horizon = match tries.patience {
        Patience::Lease => lease_horizon,
        // The caller waits this long from now.
        Patience::Caller => progress.since.elapsed() + inner.response_timeout.min(lease_horizon),
    };
    let mut backoff = Backoff::new();
    loop {
        let reply = match first.take() {
            Some(sent) => sent.await,
            None => {
                let mut link = if tries.background {
                    inner.background_link()
                } else {
                    inner.link_for(&hold.keys.key)
                };
                (link.release(&*hold.kind, hold, &latch, inner.latch_ttl)).await
            }
        };
        let e = match reply {
            Ok(released) => return Ok(released),
            Err(e) => e,
        };
        if e.is_link_error() {
            progress.maybe_ran.store(true, Ordering::Release);
        }
        let maybe_ran = progress.maybe_ran.load(Ordering::Acquire);
        let elapsed = progress.since.elapsed();
        let latch_remembers = tries.last || !maybe_ran || elapsed < inner.latch_ttl / 2;
        let horizon = if e.is_not_now() {
            lease_horizon
        } else {
            link_horizon
        };
        if e.is_transient() && latch_remembers {
            if elapsed + backoff.peek() < horizon {
                tracing::debug!(lock = %hold.name, error = %e, "dlock: retrying release");
                tokio::time::sleep(backoff.next_pause()).await;
                continue;
            }
            if horizon == lease_horizon {
                // Redis kept the lock's expiry (absolute, also across a restart from its
                // data); once the lease is surely over, nothing of this hold is left to
                // release: the hold ended with its lease, as a lost one does.
                tokio::time::sleep_until(progress.since + lease_horizon).await;
                inner.store_gave_up(&hold.owner, hold.kind.id());
                hold.mark_lost("the lease ran out before Redis could take the release");
                tracing::debug!(lock = %hold.name, error = %e, "dlock: release gave up at the lease's end");
                return Err(LockError::NotHeld {
                    name: hold.name.clone(),
                });
            }
        }
        if e.is_transient() {
            inner.store_gave_up(&hold.owner, hold.kind.id());
        }
        return Err(inner.store_error(&hold.name, &hold.keys.key, "release", e));
    }
}

/// Passes `hold` (whose last local hold was just given back; `due`: its next renewal, `None`
/// when the watchdog does not renew it) to the next local waiter, if one can take it and the
/// bounds allow. True when handed over: nothing is to be sent to Redis.
fn hand_over(shared: &Arc<Shared>, hold: &Arc<Hold>, due: Option<Instant>) -> bool {
    let Some(due) = due else { return false };
    // A shut-down client's watchdog renews nothing: release in Redis instead.
    if shared.closed.load(Ordering::Acquire) {
        return false;
    }
    let bounds = shared.handoff;
    if bounds.limit == 0 || !hold.kind.hands_over_locally() || hold.hard || hold.is_lost() {
        return false;
    }
    let mut gate = hold.gate.lock().unwrap_or_else(|e| e.into_inner());
    let Some(pass) = gate.take() else {
        return false;
    };
    if !pass.next_takes(hold.lease) {
        if pass.has_waiter() {
            // The next local task asked with another lease and takes the lock in Redis; as at
            // the end of a run of handoffs, a waiting process gets to ask first.
            hold.yield_next();
        }
        *gate = Some(pass);
        return false;
    }
    if hold.handoffs >= bounds.limit || hold.kept_since.elapsed() >= bounds.window {
        // Released in Redis; the next local contender will let other processes go first.
        hold.yield_next();
        *gate = Some(pass);
        return false;
    }
    let handed = pass.hand_over(
        hold.lease,
        |pass| {
            let next = Arc::new(Hold::handed_from(hold, shared.next_seq()));
            shared.watchdog.adopt(next.clone(), due);
            Box::new(Baton {
                shared: shared.clone(),
                hold: Some(next),
                pass: Some(pass),
            })
        },
        |handed| Baton::open(handed).retract(),
    );
    match handed {
        Ok(()) => {
            tracing::debug!(lock = %hold.name, handoffs = hold.handoffs + 1, "dlock: handed over locally");
            telemetry::local_handoff(&hold.label, hold.kind.id());
            true
        }
        Err(pass) => {
            *gate = Some(pass);
            false
        }
    }
}

/// A hold on its way to the next local task, with that task's turn at the gate. Already
/// renewed by the watchdog. Dropped untaken (its receiver was cancelled), it is released like
/// a dropped guard: handed on again or released in Redis.
pub(crate) struct Baton {
    shared: Arc<Shared>,
    hold: Option<Arc<Hold>>,
    pass: Option<GatePass>,
}

impl Baton {
    /// Opens what the gate delivered (`hand_over` put a baton in every box it sends).
    pub(crate) fn open(handed: Handed) -> Baton {
        *handed
            .downcast::<Baton>()
            .unwrap_or_else(|_| unreachable!("the gate carries only batons"))
    }

    /// The receiver's hold (it holds one local hold); or, if the hold was lost on its way (the
    /// lease ran out, the watchdog found it gone), the turn at Redis: the receiver must not
    /// believe it holds.
    pub(crate) fn take(mut self) -> Result<Arc<Hold>, GatePass> {
        let (hold, pass) = self.parts();
        if hold.is_lost() {
            self.shared.watchdog.remove(hold.id);
            hold.local_holds.store(0, Ordering::Release);
            // Whatever Redis still has of it goes; the receiver asks Redis like anyone else.
            spawn_release(self.shared.clone(), hold);
            return Err(pass);
        }
        *hold.gate.lock().unwrap_or_else(|e| e.into_inner()) = Some(pass);
        Ok(hold)
    }

    /// Takes back a baton its receiver never got (it left the queue as it was sent).
    pub(crate) fn retract(mut self) {
        let (hold, pass) = self.parts();
        self.shared.watchdog.remove(hold.id);
        pass.disarm();
    }

    fn parts(&mut self) -> (Arc<Hold>, GatePass) {
        match (self.hold.take(), self.pass.take()) {
            (Some(hold), Some(pass)) => (hold, pass),
            _ => unreachable!("a baton is taken apart once"),
        }
    }
}

impl Drop for Baton {
    fn drop(&mut self) {
        if let (Some(hold), Some(pass)) = (self.hold.take(), self.pass.take()) {
            *hold.gate.lock().unwrap_or_else(|e| e.into_inner()) = Some(pass);
            // A guard nobody saw: it is handed on or released in Redis.
            drop_hold(&self.shared, &hold);
        }
    }
}
