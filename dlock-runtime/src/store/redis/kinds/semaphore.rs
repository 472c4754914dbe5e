//! The semaphore with expiring permits: a sorted set owner id -> deadline (Redis server ms),
//! and the permit count beside it.
//!
//! Every permit is its own owner id and its own entry, so every acquire is a new permit
//! (never a re-entry) and every permit has its own deadline: renewing one never stretches
//! another, and a crashed holder's entry stops counting at its deadline. The scripts judge
//! deadlines by the server's `TIME`, never by a client clock, and prune expired entries
//! whenever they write.

use std::sync::LazyLock;
use std::time::Duration;

use super::seam::{millis, Attempt, Claim, LockKind, Nested};
use crate::store::redis::backend::library;
use crate::store::redis::backend::names::LockKeys;
use crate::store::redis::backend::script::{Call, Script};

static ACQUIRE: LazyLock<Script> = LazyLock::new(|| Script::of(&library::SEMAPHORE_ACQUIRE));
static RELEASE: LazyLock<Script> = LazyLock::new(|| Script::of(&library::SEMAPHORE_RELEASE));
static RENEW: LazyLock<Script> = LazyLock::new(|| Script::of(&library::SEMAPHORE_RENEW));
static AVAILABLE: LazyLock<Script> = LazyLock::new(|| Script::of(&library::SEMAPHORE_AVAILABLE));
static FORCE_UNLOCK: LazyLock<Script> =
    LazyLock::new(|| Script::of(&library::SEMAPHORE_FORCE_UNLOCK));

/// The prefix of the server error the acquire and available scripts answer when the
/// semaphore is in use with another permit count: `ERR DLOCK_PERMITS <stored count>`.
/// `ERR` makes it an ordinary server error for redis-rs, so the acquire path treats it as a
/// script that changed nothing.
const MISMATCH: &str = "DLOCK_PERMITS ";

/// A semaphore of `permits` permits; its keys are in each hold.
#[derive(Debug)]
pub(crate) struct Semaphore {
    pub(crate) permits: u32,
}

impl Semaphore {
    /// The count of permits free now (read only): holders past their deadline count as free.
    pub(crate) fn available(&self, keys: &LockKeys) -> Call<'static> {
        let mut call = AVAILABLE.key(&keys.key);
        call.key(permits_key(keys)).arg(self.permits);
        call
    }
}

/// The count Redis keeps for the semaphore, when `e` is the scripts' "in use with another
/// permit count" answer.
pub(crate) fn stored_permits(e: &redis::RedisError) -> Option<u32> {
    if e.code() != Some("ERR") {
        return None;
    }
    e.detail()?.strip_prefix(MISMATCH)?.trim().parse().ok()
}

/// The latch of a permit's owner once it is done (its release ran, or its undo found no
/// permit): the release keeps its answer there, and an acquire of that owner that reaches
/// Redis late (it waited in a frozen connection while the client undid it over another) is
/// refused. Owner ids are fresh for every permit, so an owner is never legitimately granted
/// again once done. The plain lock names its done latch by the owner id's unique part only
/// (`kinds/plain.rs`: every acquire reads it there); here the whole owner id.
fn done_latch(hold: &Claim) -> String {
    format!("{}done:{}", hold.keys.latch_prefix, hold.owner)
}

/// The key of the permit count: beside the holders, in the same hash tag.
fn permits_key(keys: &LockKeys) -> String {
    format!("{}:permits", keys.key)
}

impl LockKind for Semaphore {
    fn id(&self) -> &'static str {
        "semaphore"
    }

    fn main_type(&self) -> &'static str {
        "zset"
    }

    fn busy(&self) -> String {
        match self.permits {
            1 => "its one permit is in use".to_owned(),
            n => format!("all {n} permits in use"),
        }
    }

    fn key_suffix(&self) -> &'static str {
        ":sem"
    }

    /// A permit holder must not keep the other local tasks from asking Redis for the other
    /// permits.
    fn keeps_gate(&self) -> bool {
        false
    }

    /// Unreachable today: a [`crate::Permit`] has no scope, so `scope::enclosing` never finds
    /// a semaphore's key. Refused rather than re-entered should a scope ever carry one:
    /// permits are counted, a re-entry would hand out a permit that is not there.
    fn nested(&self, _parent: &dyn LockKind) -> Nested {
        Nested::Refuse("a semaphore permit is not re-entrant; this call chain already holds one")
    }

    #[cfg(any(feature = "postgres", feature = "zookeeper"))]
    fn permits(&self) -> Option<u32> {
        Some(self.permits)
    }

    fn acquire(&self, hold: &Claim, _reentry: Option<&str>, _latch_ttl: Duration) -> Call<'static> {
        let mut call = ACQUIRE.key(&hold.keys.key);
        call.key(permits_key(&hold.keys))
            .key(done_latch(hold))
            .arg(millis(hold.lease))
            .arg(&hold.owner)
            .arg(self.permits);
        call
    }

    fn decode_acquire(&self, (granted, x): (i64, i64)) -> Attempt {
        if granted == 1 {
            // No fencing token: with several holders at once, "the newest token wins" would
            // refuse the other legitimate holders' writes.
            Attempt::Acquired { count: 1, token: 0 }
        } else {
            Attempt::Held { pttl: x }
        }
    }

    /// Latched per owner rather than per request (`_latch` is unused): a permit is its own
    /// owner id and is given back once, and the owner's latch also refuses an acquire of that
    /// owner that reaches Redis after it (see [`done_latch`]).
    fn release(&self, hold: &Claim, _latch: &str, latch_ttl: Duration) -> Call<'static> {
        let mut call = RELEASE.key(&hold.keys.key);
        call.key(permits_key(&hold.keys))
            .key(&hold.keys.channel)
            .key(done_latch(hold))
            .arg(&hold.owner)
            .arg(millis(latch_ttl));
        call
    }

    /// Never called: [`Semaphore::nested`] never re-enters. Should it be, giving the permit
    /// back (latched by its owner) is the safe undo.
    fn undo_reentry(&self, hold: &Claim, marker: &str) -> Call<'static> {
        self.release(hold, marker, hold.lease)
    }

    fn renew(&self, holds: &[&Claim], _cross_slot: bool) -> Call<'static> {
        let mut call = RENEW.prepare_invoke();
        for h in holds {
            call.key(&h.keys.key)
                .key(permits_key(&h.keys))
                .arg(&h.owner)
                .arg(millis(h.lease));
        }
        call
    }

    fn force_unlock(&self, keys: &LockKeys) -> Call<'static> {
        let mut call = FORCE_UNLOCK.key(&keys.key);
        call.key(permits_key(keys)).key(&keys.channel);
        call
    }
}
