//! The two sides of a read-write lock: one hash says who is inside (`mode`, `w:<owner>`,
//! `r:<owner>` hold counts), a zset keeps each reader's own lease, and a marker keeps new
//! readers out while a writer waits (see `lua/rw/acquire.lua`).

use std::sync::LazyLock;
use std::time::Duration;

use super::seam::{fence_lifetime, flag, millis, Attempt, Claim, LockKind, Nested};
use crate::store::redis::backend::library;
use crate::store::redis::backend::names::LockKeys;
use crate::store::redis::backend::script::{Call, Script};

static ACQUIRE: LazyLock<Script> = LazyLock::new(|| Script::of(&library::RW_ACQUIRE));
static RELEASE: LazyLock<Script> = LazyLock::new(|| Script::of(&library::RW_RELEASE));
static RENEW: LazyLock<Script> = LazyLock::new(|| Script::of(&library::RW_RENEW));
static FORCE_UNLOCK: LazyLock<Script> = LazyLock::new(|| Script::of(&library::RW_FORCE_UNLOCK));

/// How long a refused writer keeps new readers out without coming back. A waiting writer
/// retries at least twice as often, so it keeps them out for as long as it waits; one that
/// died or gave up without a word stops blocking readers this long after its last try.
pub(crate) const WRITER_INTENT: Duration = Duration::from_secs(2);

/// The shared side.
#[derive(Debug)]
pub(crate) struct Read;

/// The exclusive side.
#[derive(Debug)]
pub(crate) struct Write;

impl LockKind for Read {
    fn id(&self) -> &'static str {
        "read"
    }

    fn key_suffix(&self) -> &'static str {
        SUFFIX
    }

    /// Readers hold side by side: a holder must not keep the other local readers from Redis.
    fn keeps_gate(&self) -> bool {
        false
    }

    fn nested(&self, parent: &dyn LockKind) -> Nested {
        match parent.id() {
            "read" => Nested::Reenter,
            // A downgrade: the writer also reads, as itself.
            _ => Nested::SameOwner,
        }
    }

    fn acquire(&self, hold: &Claim, reentry: Option<&str>, latch_ttl: Duration) -> Call<'static> {
        acquire("r", hold, reentry, latch_ttl)
    }

    fn decode_acquire(&self, reply: (i64, i64)) -> Attempt {
        decode(reply)
    }

    fn release(&self, hold: &Claim, latch: &str, latch_ttl: Duration) -> Call<'static> {
        release("r", hold, latch, "latch", latch_ttl)
    }

    fn undo_reentry(&self, hold: &Claim, marker: &str) -> Call<'static> {
        release("r", hold, marker, "marker", Duration::ZERO)
    }

    fn renew(&self, holds: &[&Claim], _cross_slot: bool) -> Call<'static> {
        renew("r", holds)
    }

    fn force_unlock(&self, keys: &LockKeys) -> Call<'static> {
        force_unlock(keys)
    }
}

impl LockKind for Write {
    fn id(&self) -> &'static str {
        "write"
    }

    fn key_suffix(&self) -> &'static str {
        SUFFIX
    }

    /// Its claim to go next (which keeps new readers out) must go when it gives up.
    fn refusal_leaves_a_trace(&self) -> bool {
        true
    }

    fn nested(&self, parent: &dyn LockKind) -> Nested {
        match parent.id() {
            "write" => Nested::Reenter,
            _ => Nested::Refuse(
                "asking for the write side inside this call chain's own read hold (an upgrade) \
                 would wait for that read hold to end; release the read guard first",
            ),
        }
    }

    fn acquire(&self, hold: &Claim, reentry: Option<&str>, latch_ttl: Duration) -> Call<'static> {
        acquire("w", hold, reentry, latch_ttl)
    }

    fn decode_acquire(&self, reply: (i64, i64)) -> Attempt {
        decode(reply)
    }

    fn release(&self, hold: &Claim, latch: &str, latch_ttl: Duration) -> Call<'static> {
        release("w", hold, latch, "latch", latch_ttl)
    }

    fn undo_reentry(&self, hold: &Claim, marker: &str) -> Call<'static> {
        release("w", hold, marker, "marker", Duration::ZERO)
    }

    fn renew(&self, holds: &[&Claim], _cross_slot: bool) -> Call<'static> {
        renew("w", holds)
    }

    fn force_unlock(&self, keys: &LockKeys) -> Call<'static> {
        force_unlock(keys)
    }
}

/// Both sides share these keys: `<prefix>{<name>}:rw`, apart from a plain lock of the name.
const SUFFIX: &str = ":rw";

fn readers(keys: &LockKeys) -> String {
    format!("{}:readers", keys.key)
}

fn writer_waiting(keys: &LockKeys) -> String {
    format!("{}:wwait", keys.key)
}

fn acquire(side: &str, hold: &Claim, reentry: Option<&str>, latch_ttl: Duration) -> Call<'static> {
    let marker = reentry.map_or_else(
        || format!("{}reentry", hold.keys.latch_prefix),
        str::to_owned,
    );
    let mut call = ACQUIRE.key(&hold.keys.key);
    call.key(readers(&hold.keys))
        .key(writer_waiting(&hold.keys))
        .key(&hold.keys.counter)
        .key(marker)
        .key(done_latch(side, hold))
        .arg(side)
        .arg(&hold.owner)
        .arg(millis(hold.lease))
        .arg(flag(reentry.is_some()))
        .arg(millis(latch_ttl))
        .arg(millis(fence_lifetime(hold.lease)))
        .arg(flag(hold.hard))
        .arg(millis(WRITER_INTENT));
    call
}

/// The latch of an owner that is done with one side (a release left it no hold of that side,
/// or found none): the release writes it beside its own latch, and a top-level acquire of that
/// owner and side that reaches Redis late (it waited in a frozen connection while the client
/// undid it over another) is refused. A top-level hold's owner id is fresh, so it is never
/// legitimately granted again once done; the reads a writer takes inside its scope share its
/// owner id and may end and start again, but they are nested requests, which the latch does
/// not refuse. Per side: a writer's own reads ending says nothing about its write hold.
fn done_latch(side: &str, hold: &Claim) -> String {
    format!("{}done:{side}:{}", hold.keys.latch_prefix, hold.owner)
}

fn decode((count, x): (i64, i64)) -> Attempt {
    if count > 0 {
        Attempt::Acquired { count, token: x }
    } else {
        Attempt::Held { pttl: x }
    }
}

fn release(
    side: &str,
    hold: &Claim,
    guard: &str,
    mode: &str,
    latch_ttl: Duration,
) -> Call<'static> {
    let mut call = RELEASE.key(&hold.keys.key);
    call.key(readers(&hold.keys))
        .key(writer_waiting(&hold.keys))
        .key(&hold.keys.channel)
        .key(guard)
        .key(done_latch(side, hold))
        .arg(side)
        .arg(&hold.owner)
        // A hard lease ends when it ends: a partial release must not stretch it.
        .arg(if hold.hard { 0 } else { millis(hold.lease) })
        .arg(millis(latch_ttl).max(1))
        .arg(mode);
    call
}

fn renew(side: &str, holds: &[&Claim]) -> Call<'static> {
    let mut call = RENEW.prepare_invoke();
    for h in holds {
        call.key(&h.keys.key)
            .key(readers(&h.keys))
            .arg(side)
            .arg(&h.owner)
            .arg(millis(h.lease));
    }
    call
}

fn force_unlock(keys: &LockKeys) -> Call<'static> {
    let mut call = FORCE_UNLOCK.key(&keys.key);
    call.key(readers(keys))
        .key(writer_waiting(keys))
        .key(&keys.channel);
    call
}
