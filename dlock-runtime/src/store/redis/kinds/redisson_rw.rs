//! Redisson's `RReadWriteLock` on the wire (`RedissonReadLock`, `RedissonWriteLock`, Redisson
//! 3.24+ and 4.x): one hash named as the lock with a `mode` field, readers as
//! `<uuid>:<thread id>` -> holds, each read hold with its own lease in
//! `{<name>}:<uuid>:<thread id>:rwlock_timeout:<n>`, the writer as `<uuid>:<thread id>:write`;
//! releases publish on `redisson_rwlock:{<name>}`, `0` from a reader, `1` from a writer (which
//! wakes every waiter).
//!
//! Redisson's semantics, not dlock's read-write lock: no writer preference (a stream of
//! readers can keep a writer waiting), a writer's re-entry adds the lease to the time left, and
//! a writer leaving while it still reads turns the lock to `read` without a message.
//!
//! Like Redisson's, it writes no token counter: a grant's token is the server's clock in µs.

use std::sync::LazyLock;
use std::time::Duration;

use super::redisson::{field, keys, publish, suffix_name, REDISSON_LEASE};
use super::seam::{flag, millis, Attempt, Claim, LockKind, Nested};
use crate::store::redis::backend::library;
use crate::store::redis::backend::names::LockKeys;
use crate::store::redis::backend::script::{Call, Script};

static READ_ACQUIRE: LazyLock<Script> =
    LazyLock::new(|| Script::of(&library::REDISSON_READ_ACQUIRE));
static READ_RELEASE: LazyLock<Script> =
    LazyLock::new(|| Script::of(&library::REDISSON_READ_RELEASE));
static READ_RENEW: LazyLock<Script> = LazyLock::new(|| Script::of(&library::REDISSON_READ_RENEW));
static WRITE_ACQUIRE: LazyLock<Script> =
    LazyLock::new(|| Script::of(&library::REDISSON_WRITE_ACQUIRE));
static WRITE_RELEASE: LazyLock<Script> =
    LazyLock::new(|| Script::of(&library::REDISSON_WRITE_RELEASE));
static FORCE_UNLOCK: LazyLock<Script> =
    LazyLock::new(|| Script::of(&library::REDISSON_RW_FORCE_UNLOCK));
/// A writer is renewed like Redisson's plain lock (renewal/LockTask), with its writer field.
static WRITE_RENEW: LazyLock<Script> = LazyLock::new(|| Script::of(&library::LOCK_RENEW));

/// Both sides' names: the hash is the name, the channel `redisson_rwlock:{<name>}`.
fn rw_keys(name: &str) -> LockKeys {
    keys(name, "redisson_rwlock")
}

/// `{<name>}`: where Redisson's read-hold timeouts of the lock start.
fn key_prefix(hold_key: &str) -> String {
    suffix_name(hold_key, "").trim_end_matches(':').to_owned()
}

/// `{<name>}:<uuid>:<tid>:rwlock_timeout`: the prefix of one reader's hold timeouts.
fn timeout_prefix(hold: &Claim) -> String {
    suffix_name(&hold.keys.key, &field(hold)) + ":rwlock_timeout"
}

/// `<uuid>:<tid>:write`.
fn writer(hold: &Claim) -> String {
    format!("{}:write", field(hold))
}

fn decode((count, x): (i64, i64)) -> Attempt {
    if count > 0 {
        Attempt::Acquired { count, token: x }
    } else {
        Attempt::Held { pttl: x }
    }
}

/// The read side of Redisson's `RReadWriteLock`.
#[derive(Debug)]
pub(crate) struct RedissonRead {
    pub(crate) sharded: bool,
}

/// The write side of Redisson's `RReadWriteLock`.
#[derive(Debug)]
pub(crate) struct RedissonWrite {
    pub(crate) sharded: bool,
}

impl RedissonRead {
    fn release_call(
        &self,
        hold: &Claim,
        guard: &str,
        mode: &str,
        latch_ttl: Duration,
    ) -> Call<'static> {
        let mut call = READ_RELEASE.key(&hold.keys.key);
        call.key(&hold.keys.channel)
            .key(timeout_prefix(hold))
            .key(key_prefix(&hold.keys.key))
            .key(guard)
            .arg(field(hold))
            .arg(millis(latch_ttl).max(1))
            .arg(publish(self.sharded))
            .arg(mode);
        call
    }
}

impl LockKind for RedissonRead {
    /// Java reads these fields: they stay Redisson's `<uuid>:<thread id>`, with no label.
    fn labels_owner(&self) -> bool {
        false
    }

    fn id(&self) -> &'static str {
        "redisson_read"
    }

    fn keys(&self, _prefix: &str, name: &str) -> LockKeys {
        rw_keys(name)
    }

    fn default_lease(&self) -> Option<Duration> {
        Some(REDISSON_LEASE)
    }

    fn scales_tokens(&self) -> bool {
        false
    }

    fn sharded_wait(&self) -> bool {
        self.sharded
    }

    /// Readers hold side by side: a holder must not keep the other local readers from Redis.
    fn keeps_gate(&self) -> bool {
        false
    }

    fn nested(&self, parent: &dyn LockKind) -> Nested {
        match parent.id() {
            "redisson_read" => Nested::Reenter,
            // A downgrade: Redisson lets a thread holding the write side read.
            "redisson_write" => Nested::SameOwner,
            _ => Nested::Refuse("a lock of another kind with the same key is already held"),
        }
    }

    fn acquire(&self, hold: &Claim, reentry: Option<&str>, latch_ttl: Duration) -> Call<'static> {
        let marker = reentry.map_or_else(
            || format!("{}reentry", hold.keys.latch_prefix),
            str::to_owned,
        );
        let mut call = READ_ACQUIRE.key(&hold.keys.key);
        call.key(timeout_prefix(hold))
            .key(marker)
            .arg(millis(hold.lease))
            .arg(field(hold))
            .arg(writer(hold))
            .arg(millis(latch_ttl))
            .arg(flag(reentry.is_some()));
        call
    }

    fn decode_acquire(&self, reply: (i64, i64)) -> Attempt {
        decode(reply)
    }

    fn release(&self, hold: &Claim, latch: &str, latch_ttl: Duration) -> Call<'static> {
        self.release_call(hold, latch, "latch", latch_ttl)
    }

    fn undo_reentry(&self, hold: &Claim, marker: &str) -> Call<'static> {
        self.release_call(hold, marker, "marker", Duration::ZERO)
    }

    fn renew(&self, holds: &[&Claim], _cross_slot: bool) -> Call<'static> {
        let mut call = READ_RENEW.prepare_invoke();
        for h in holds {
            call.key(&h.keys.key)
                .key(key_prefix(&h.keys.key))
                .arg(field(h))
                .arg(millis(h.lease));
        }
        call
    }

    fn force_unlock(&self, keys: &LockKeys) -> Call<'static> {
        let mut call = FORCE_UNLOCK.key(&keys.key);
        call.key(&keys.channel)
            .arg("read")
            .arg("0")
            .arg(publish(self.sharded));
        call
    }
}

impl RedissonWrite {
    fn release_call(
        &self,
        hold: &Claim,
        guard: &str,
        mode: &str,
        latch_ttl: Duration,
    ) -> Call<'static> {
        let mut call = WRITE_RELEASE.key(&hold.keys.key);
        call.key(&hold.keys.channel)
            .key(guard)
            .arg(writer(hold))
            .arg(if hold.hard { 0 } else { millis(hold.lease) })
            .arg(millis(latch_ttl).max(1))
            .arg(publish(self.sharded))
            .arg(mode);
        call
    }
}

impl LockKind for RedissonWrite {
    /// Java reads these fields: they stay Redisson's `<uuid>:<thread id>`, with no label.
    fn labels_owner(&self) -> bool {
        false
    }

    fn id(&self) -> &'static str {
        "redisson_write"
    }

    fn keys(&self, _prefix: &str, name: &str) -> LockKeys {
        rw_keys(name)
    }

    fn default_lease(&self) -> Option<Duration> {
        Some(REDISSON_LEASE)
    }

    fn scales_tokens(&self) -> bool {
        false
    }

    fn sharded_wait(&self) -> bool {
        self.sharded
    }

    fn nested(&self, parent: &dyn LockKind) -> Nested {
        match parent.id() {
            "redisson_write" => Nested::Reenter,
            _ => Nested::Refuse(
                "asking for the write side inside this call chain's own read hold (an upgrade) \
                 would wait for that read hold to end; release the read guard first",
            ),
        }
    }

    fn acquire(&self, hold: &Claim, reentry: Option<&str>, latch_ttl: Duration) -> Call<'static> {
        let marker = reentry.map_or_else(
            || format!("{}reentry", hold.keys.latch_prefix),
            str::to_owned,
        );
        let mut call = WRITE_ACQUIRE.key(&hold.keys.key);
        call.key(marker)
            .arg(millis(hold.lease))
            .arg(writer(hold))
            .arg(millis(latch_ttl))
            .arg(flag(reentry.is_some()))
            .arg(flag(hold.hard));
        call
    }

    fn decode_acquire(&self, reply: (i64, i64)) -> Attempt {
        decode(reply)
    }

    fn release(&self, hold: &Claim, latch: &str, latch_ttl: Duration) -> Call<'static> {
        self.release_call(hold, latch, "latch", latch_ttl)
    }

    fn undo_reentry(&self, hold: &Claim, marker: &str) -> Call<'static> {
        self.release_call(hold, marker, "marker", Duration::ZERO)
    }

    fn renew(&self, holds: &[&Claim], _cross_slot: bool) -> Call<'static> {
        let mut call = WRITE_RENEW.prepare_invoke();
        for h in holds {
            call.key(&h.keys.key).arg(writer(h)).arg(millis(h.lease));
        }
        call
    }

    fn force_unlock(&self, keys: &LockKeys) -> Call<'static> {
        let mut call = FORCE_UNLOCK.key(&keys.key);
        call.key(&keys.channel)
            .arg("write")
            .arg("1")
            .arg(publish(self.sharded));
        call
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn read_hold_timeouts_are_named_as_redisson_names_them() {
        assert_eq!(key_prefix("prices"), "{prices}");
        assert_eq!(key_prefix("a{b}"), "a{b}");
    }
}
