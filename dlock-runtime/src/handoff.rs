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

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::gate::GatePass;
use crate::guard::LockGuard;
use crate::hold::Hold;
use crate::shared::Shared;

/// Tokens a Redis free -> held transition leaves room for: the token of such a transition is
/// the Redis counter times this, its local successors add one each. The handoff limit stays
/// below it, so the sub-sequence never reaches the next Redis token.
pub(crate) const LOCAL_TOKENS: u64 = 1024;

/// The largest `local_handoffs` setting (see [`LOCAL_TOKENS`]).
pub(crate) const MAX_HANDOFFS: u32 = (LOCAL_TOKENS - 1) as u32;

/// The fencing token of a hold Redis granted with counter value `redis`.
pub(crate) fn token_from_redis(redis: u64) -> u64 {
    redis.saturating_mul(LOCAL_TOKENS)
}

/// The client's bounds on keeping a lock in the process.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Bounds {
    /// Consecutive local handoffs before a release goes to Redis; 0 turns handoff off.
    pub(crate) limit: u32,
    /// How long after its Redis acquire a lock may still be handed on locally.
    pub(crate) window: Duration,
}

/// How long the next local contender waits before asking Redis, after a release that ended a
/// run of handoffs took `release_rtt`: long enough for a waiter of another process (woken by
/// the release's message) to get its acquire in first, which takes about one round trip plus
/// a wake-up; short enough that it costs once per run, not per op. Tokio's timer rounds it up
/// to its 1 ms tick, which is why it is skipped when nobody else was listening.
pub(crate) fn courtesy(release_rtt: Duration) -> Duration {
    (release_rtt * 2).clamp(Duration::from_micros(200), Duration::from_millis(20))
}

/// Passes `hold` (whose last local hold was just given back; `due`: its next renewal, `None`
/// when the watchdog does not renew it) to the next local waiter, if one can take it and the
/// bounds allow. True when handed over: nothing is to be sent to Redis.
pub(crate) fn hand_over(shared: &Arc<Shared>, hold: &Arc<Hold>, due: Option<Instant>) -> bool {
    let Some(due) = due else { return false };
    let bounds = shared.handoff;
    if bounds.limit == 0 || !hold.kind.hands_over_locally() || hold.hard || hold.is_lost() {
        return false;
    }
    let mut gate = hold.gate.lock().unwrap_or_else(|e| e.into_inner());
    let Some(pass) = gate.take() else {
        return false;
    };
    if pass.next_takes_hold().is_none() {
        *gate = Some(pass);
        return false;
    }
    if hold.handoffs >= bounds.limit || hold.kept_since.elapsed() >= bounds.window {
        // Released in Redis; the next local contender will let other processes go first.
        hold.yield_next();
        *gate = Some(pass);
        return false;
    }
    let handed = pass.hand_over(|pass, lease| {
        let next = Arc::new(Hold::handed_from(hold, shared, lease));
        shared.watchdog.adopt(next.clone(), due);
        Baton {
            shared: shared.clone(),
            hold: Some(next),
            pass: Some(pass),
        }
    });
    match handed {
        Ok(()) => {
            tracing::debug!(lock = %hold.name, handoffs = hold.handoffs + 1, "dlock: handed over locally");
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
    /// The receiver's guard; or, if the hold was lost on its way (the lease ran out, the
    /// watchdog found it gone), the turn at Redis: the receiver must not believe it holds.
    pub(crate) fn take(mut self) -> Result<LockGuard, GatePass> {
        let (hold, pass) = self.parts();
        if hold.is_lost() {
            self.shared.watchdog.remove(hold.id);
            hold.local_holds
                .store(0, std::sync::atomic::Ordering::Release);
            // Whatever Redis still has of it goes; the receiver asks Redis like anyone else.
            crate::guard::spawn_release(self.shared.clone(), hold);
            return Err(pass);
        }
        *hold.gate.lock().unwrap_or_else(|e| e.into_inner()) = Some(pass);
        Ok(LockGuard::new(self.shared.clone(), hold))
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
            // A guard nobody saw: its drop hands the hold on or releases it in Redis.
            drop(LockGuard::new(self.shared.clone(), hold));
        }
    }
}
