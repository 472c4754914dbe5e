//! The fair lock: the plain lock's hash plus a queue in Redis. A release hands the lock to the
//! head of the queue and tells that waiter on its own channel, so the waiter holds without
//! another round trip. Every task stands in Redis's queue itself (no local queue first), so the
//! order is the order of asking across clients. Queue places are kept alive by their waiting process and judged
//! stale by the server's clock only (see `lua/fair/`).

use std::sync::LazyLock;
use std::time::Duration;

use super::plain::Plain;
use super::seam::{fence_lifetime, flag, millis, Attempt, Claim, LockKind};
use crate::store::redis::backend::library;
use crate::store::redis::backend::names::LockKeys;
use crate::store::redis::backend::script::{Call, Script};

static ACQUIRE: LazyLock<Script> = LazyLock::new(|| Script::of(&library::FAIR_ACQUIRE));
static RELEASE: LazyLock<Script> = LazyLock::new(|| Script::of(&library::FAIR_RELEASE));
static UNDO_REENTRY: LazyLock<Script> = LazyLock::new(|| Script::of(&library::FAIR_UNDO_REENTRY));

/// How long a queued waiter keeps its place without coming back (it comes back every third
/// of this), and how long a grant lasts before its new owner renews it to its own lease. So a
/// waiter whose process died is skipped within this, and a grant to it is freed within this.
pub(crate) const KEEP_PLACE: Duration = Duration::from_secs(2);

#[derive(Debug)]
pub(crate) struct Fair;

impl LockKind for Fair {
    fn id(&self) -> &'static str {
        "fair"
    }

    fn key_suffix(&self) -> &'static str {
        ":fair"
    }

    /// A place in the queue: an acquire that ends without the lock leaves it.
    fn refusal_leaves_a_trace(&self) -> bool {
        true
    }

    fn renews_per_node(&self) -> bool {
        true
    }

    /// Grants come on the waiting owner's own channel of the lock, not on the release channel,
    /// so a grant wakes exactly its owner, also among several waiting tasks of one client.
    fn wait_channel(&self, hold: &Claim) -> String {
        format!("{}:grant:{}", hold.keys.key, hold.owner)
    }

    /// The order of asking is the order in Redis's queue, whichever client asked: a task of a
    /// client whose other task holds or waits stands in line there itself.
    fn queues_locally(&self) -> bool {
        false
    }

    /// A grant message is `<owner> <token>`.
    fn granted(&self, hold: &Claim, message: &str) -> Option<u64> {
        let (owner, token) = message.split_once(' ')?;
        (owner == hold.owner).then(|| token.parse().ok())?
    }

    fn grant_lifetime(&self) -> Option<Duration> {
        Some(KEEP_PLACE)
    }

    fn acquire(&self, hold: &Claim, reentry: Option<&str>, latch_ttl: Duration) -> Call<'static> {
        let marker = reentry.map_or_else(
            || format!("{}reentry", hold.keys.latch_prefix),
            str::to_owned,
        );
        let mut call = ACQUIRE.key(&hold.keys.key);
        call.key(queue(&hold.keys))
            .key(keep_alive(&hold.keys))
            .key(&hold.keys.counter)
            .key(marker)
            .key(done_latch(hold))
            .arg(millis(hold.lease))
            .arg(&hold.owner)
            .arg(millis(latch_ttl))
            .arg(flag(reentry.is_some()))
            .arg(millis(fence_lifetime(hold.lease)))
            .arg(flag(hold.hard))
            .arg(millis(KEEP_PLACE));
        call
    }

    fn decode_acquire(&self, reply: (i64, i64)) -> Attempt {
        Plain.decode_acquire(reply)
    }

    fn release(&self, hold: &Claim, latch: &str, latch_ttl: Duration) -> Call<'static> {
        let mut call = RELEASE.key(&hold.keys.key);
        call.key(queue(&hold.keys))
            .key(keep_alive(&hold.keys))
            .key(&hold.keys.counter)
            .key(&hold.keys.channel)
            .key(latch)
            .key(done_latch(hold))
            .arg(&hold.owner)
            .arg(if hold.hard { 0 } else { millis(hold.lease) })
            .arg(millis(latch_ttl))
            .arg(millis(KEEP_PLACE))
            .arg(millis(fence_lifetime(hold.lease)))
            // The grant's message is what the next holder waits for.
            .reply_last();
        call
    }

    fn undo_reentry(&self, hold: &Claim, marker: &str) -> Call<'static> {
        let mut call = UNDO_REENTRY.key(&hold.keys.key);
        call.key(queue(&hold.keys))
            .key(keep_alive(&hold.keys))
            .key(&hold.keys.counter)
            .key(&hold.keys.channel)
            .key(marker)
            .arg(&hold.owner)
            .arg(millis(KEEP_PLACE))
            .arg(millis(fence_lifetime(hold.lease)));
        call
    }

    /// The hash is the plain lock's: so is its renewal.
    fn renew(&self, holds: &[&Claim], cross_slot: bool) -> Call<'static> {
        Plain.renew(holds, cross_slot)
    }

    /// Deletes the hash and wakes listeners; the queue's head takes the free lock at its next
    /// keep-alive (within a third of [`KEEP_PLACE`]).
    fn force_unlock(&self, keys: &LockKeys) -> Call<'static> {
        Plain.force_unlock(keys)
    }
}

/// The latch of an owner that is done (its last release ran, or its release found it holding
/// nothing: an acquire that ended without the lock took its place in the queue back): the
/// release keeps its answer there, and an acquire of that owner that reaches Redis late (it
/// waited in a frozen connection while the client undid it over another) is neither granted
/// nor queued. Owner ids are fresh for every hold (an acquire keeps one owner across its
/// attempts, and releases it only when it ends), so an owner is never legitimately granted
/// again once done. The plain lock names its done latch by the owner id's unique part only
/// (`kinds/plain.rs`: every acquire reads it there); here the whole owner id.
fn done_latch(hold: &Claim) -> String {
    format!("{}done:{}", hold.keys.latch_prefix, hold.owner)
}

fn queue(keys: &LockKeys) -> String {
    format!("{}:queue", keys.key)
}

fn keep_alive(keys: &LockKeys) -> String {
    format!("{}:alive", keys.key)
}
