//! The lock-kind seam: everything one kind of lock sends to Redis, in one place.
//!
//! A kind says which script calls take, give back, renew and undo a hold, with which keys and
//! arguments, and how to read their replies. The acquire loop, guards, orphan clean-up and the
//! watchdog call these builders and never build KEYS/ARGV by position themselves, so a new kind
//! (read-write, semaphore, fair) is a new implementation here, not a `match` in four files.
//! Waiting, renewal scheduling, orphan clean-up and the lost signal stay shared.

mod plain;

use std::sync::Arc;
use std::time::Duration;

use crate::hold::Hold;
use crate::names::LockKeys;
use crate::scripts::Call;

pub(crate) use plain::PLAIN;

/// What one acquire attempt found.
pub(crate) enum Attempt {
    /// Held by this owner now, with this many holds; the token of a free -> held transition
    /// (0 for a re-entry: the holder knows its token).
    Acquired { count: i64, token: i64 },
    /// Held by someone else, whose lease has this many ms left (-1: no expiry).
    Held { pttl: i64 },
}

/// The Redis side of one kind of lock.
pub(crate) trait LockKind: Send + Sync {
    /// Takes the lock for `hold.owner`, or re-enters it when `reentry` (a marker key that lets
    /// a cancelled re-entry be undone once) is given.
    fn acquire(&self, hold: &Hold, reentry: Option<&str>, latch_ttl: Duration) -> Call<'static>;

    /// Reads the reply of [`LockKind::acquire`].
    fn decode_acquire(&self, reply: (i64, i64)) -> Attempt;

    /// Gives back one hold, at most once per `latch` key (a release request id). The reply is
    /// the holds left, or -1 when `hold.owner` holds nothing.
    fn release(&self, hold: &Hold, latch: &str, latch_ttl: Duration) -> Call<'static>;

    /// Undoes a re-entry whose caller never saw the reply, if its marker says it ran.
    fn undo_reentry(&self, hold: &Hold, marker: &str) -> Call<'static>;

    /// Renews many holds of this kind in one call; all their keys must be served by one node,
    /// and, unless `cross_slot` (a cluster node, Redis 7+), lie in one slot. The reply has one
    /// entry per hold: 1 renewed, 0 no longer ours.
    fn renew(&self, holds: &[Arc<Hold>], cross_slot: bool) -> Call<'static>;

    /// Deletes the lock whoever holds it and wakes its waiters; the reply is 1 if it was held.
    fn force_unlock(&self, keys: &LockKeys) -> Call<'static>;
}
