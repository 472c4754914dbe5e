//! The plain reentrant lock: a hash owner -> hold count, its PTTL the lease.

use std::sync::LazyLock;
use std::time::Duration;

use super::seam::{fence_lifetime, flag, millis, Attempt, Claim, LockKind};
use crate::store::redis::backend::library;
use crate::store::redis::backend::names::LockKeys;
use crate::store::redis::backend::script::{Call, Script};

static ACQUIRE: LazyLock<Script> = LazyLock::new(|| Script::of(&library::LOCK_ACQUIRE));
/// Re-entries have a script of their own: the marker and the hard-lease flag they need would
/// be two more keys and arguments on every top-level acquire, where each costs server time.
static REENTER: LazyLock<Script> = LazyLock::new(|| Script::of(&library::LOCK_REENTER));
static RELEASE: LazyLock<Script> = LazyLock::new(|| Script::of(&library::LOCK_RELEASE));
static UNDO_REENTRY: LazyLock<Script> = LazyLock::new(|| Script::of(&library::LOCK_UNDO_REENTRY));
static RENEW: LazyLock<Script> = LazyLock::new(|| Script::of(&library::LOCK_RENEW));
/// The renew script for one cluster node: Redis 7's `allow-cross-slot-keys` flag lets one call
/// reach keys of many slots as long as this node serves them all (undeclared: see the script),
/// so a tick costs one call per node instead of one per slot. Servers before 7.0 reject the
/// flag; the watchdog then falls back to one call per slot.
static RENEW_NODE: LazyLock<Script> = LazyLock::new(|| Script::of(&library::LOCK_RENEW_NODE));
static FORCE_UNLOCK: LazyLock<Script> = LazyLock::new(|| Script::of(&library::LOCK_FORCE_UNLOCK));

/// The plain reentrant lock; it carries no state, its keys are in the hold.
#[derive(Debug)]
pub(crate) struct Plain;

impl LockKind for Plain {
    fn id(&self) -> &'static str {
        "plain"
    }

    fn renews_per_node(&self) -> bool {
        true
    }

    fn hands_over_locally(&self) -> bool {
        true
    }

    fn acquire(&self, hold: &Claim, reentry: Option<&str>, latch_ttl: Duration) -> Call<'static> {
        let fence_life = millis(fence_lifetime(hold.lease));
        if let Some(marker) = reentry {
            let mut call = REENTER.key(&hold.keys.key);
            call.key(&hold.keys.counter)
                .key(marker)
                .key(done_latch(hold))
                .arg(millis(hold.lease))
                .arg(&hold.owner)
                .arg(millis(latch_ttl))
                .arg(fence_life)
                // A hard lease ends where the first acquire set it: re-entry leaves it alone.
                .arg(flag(hold.hard));
            return call;
        }
        let mut call = ACQUIRE.key(&hold.keys.key);
        call.key(&hold.keys.counter)
            .key(done_latch(hold))
            .arg(millis(hold.lease))
            .arg(&hold.owner);
        // The script's default is the usual lifetime: the argument is sent only for a lease
        // long enough to need another.
        if fence_life != USUAL_FENCE_LIFE_MS {
            call.arg(fence_life);
        }
        call
    }

    fn decode_acquire(&self, (count, x): (i64, i64)) -> Attempt {
        if count > 0 {
            Attempt::Acquired { count, token: x }
        } else {
            Attempt::Held { pttl: x }
        }
    }

    fn release(&self, hold: &Claim, latch: &str, latch_ttl: Duration) -> Call<'static> {
        let mut call = RELEASE.key(&hold.keys.key);
        call.key(&hold.keys.channel)
            .key(latch)
            .key(done_latch(hold))
            .arg(&hold.owner)
            // A hard lease ends when it ends: a partial release must not stretch it.
            .arg(if hold.hard { 0 } else { millis(hold.lease) })
            .arg(millis(latch_ttl));
        call
    }

    fn undo_reentry(&self, hold: &Claim, marker: &str) -> Call<'static> {
        let mut call = UNDO_REENTRY.key(&hold.keys.key);
        call.key(marker).key(&hold.keys.channel).arg(&hold.owner);
        call
    }

    fn renew(&self, holds: &[&Claim], cross_slot: bool) -> Call<'static> {
        if cross_slot {
            // One declared key routes the call; the others travel as arguments.
            let mut call = RENEW_NODE.key(&holds[0].keys.key);
            for h in holds {
                call.arg(&h.keys.key).arg(&h.owner).arg(millis(h.lease));
            }
            return call;
        }
        let mut call = RENEW.prepare_invoke();
        for h in holds {
            call.key(&h.keys.key).arg(&h.owner).arg(millis(h.lease));
        }
        call
    }

    fn force_unlock(&self, keys: &LockKeys) -> Call<'static> {
        let mut call = FORCE_UNLOCK.key(&keys.key);
        call.key(&keys.channel);
        call
    }
}

/// The fencing counter lifetime `acquire.lua` assumes when none is sent (see `fence_lifetime`).
const USUAL_FENCE_LIFE_MS: u64 = 24 * 3600 * 1000;

/// The latch of an owner that is done (its last release ran, or its undo found nothing): the
/// release keeps its answer there, and an acquire of that owner that reaches Redis late (it
/// waited in a frozen connection while the client undid it over another) is refused. Owner ids
/// are fresh for every hold, so an owner is never legitimately granted again once done.
/// Named by the owner id's unique part (client id and sequence) without the holder labels:
/// the key is read by every acquire and written by every last release, and a shorter name
/// costs less to parse, hash and store.
fn done_latch(hold: &Claim) -> String {
    format!(
        "{}done:{}",
        hold.keys.latch_prefix,
        crate::settings::holder::unique_part(&hold.owner)
    )
}
