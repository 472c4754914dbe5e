//! The `LockKind` trait and the plain data its implementations share: the claim a script
//! call is built from, what an attempt found, what a nested acquire does.

use std::time::Duration;

use crate::settings::ReplicaSync;
use crate::store::redis::backend::names::LockKeys;
use crate::store::redis::backend::script::Call;

/// What Redis knows of one hold: whose it is, of which lock, for how long. Every script call a
/// kind builds reads its keys and arguments from here; the client's own bookkeeping of a hold
/// (validity deadline, token, local hold count, lost signal) wraps it, one layer up.
#[derive(Clone, Debug)]
pub(crate) struct Claim {
    /// The lock's name, as the user gave it (for logs and errors).
    pub(crate) name: String,
    pub(crate) keys: LockKeys,
    /// The owner id written into the lock: `<client id>:<sequence>@<client name>/<label>`
    /// (see `settings/holder.rs`), or `<client id>:<sequence>` for a kind whose fields are
    /// another library's.
    pub(crate) owner: String,
    /// The random id of the client that took it.
    pub(crate) client_id: String,
    /// The lease set on every acquire, renewal and partial release.
    pub(crate) lease: Duration,
    /// A hard lease (no watchdog): its validity is never extended, by re-entry or anything.
    pub(crate) hard: bool,
    /// Replicas that must confirm each acquire and renewal (`None`: asynchronous replication).
    pub(crate) sync: Option<ReplicaSync>,
}

/// What one acquire attempt found.
pub(crate) enum Attempt {
    /// Held by this owner now, with this many holds; the token of a free -> held transition
    /// (0 for a re-entry: the holder knows its token).
    Acquired { count: i64, token: i64 },
    /// Held by someone else, whose lease has this many ms left (-1: no expiry).
    Held { pttl: i64 },
}

/// What an acquire of one kind does inside a scope that already holds a lock with the same
/// key (for one kind, or its sibling: the read and write sides of one read-write lock).
pub(crate) enum Nested {
    /// One more hold on the enclosing owner's hold (the same kind re-entered).
    Reenter,
    /// A new hold of this kind for the enclosing hold's owner, taken at once without queueing
    /// (a writer taking the read side: the script grants it because the writer is that owner);
    /// one more hold if that owner already holds this kind (a second read in one write scope).
    SameOwner,
    /// Fails at once with [`crate::LockError::WouldDeadlock`] and this reason (a reader asking
    /// for the write side would wait for itself).
    Refuse(&'static str),
}

/// The Redis side of one kind of lock.
pub(crate) trait LockKind: Send + Sync + std::fmt::Debug {
    /// A short stable name ("plain", "read", ...): renewals are batched per kind, logs show it.
    fn id(&self) -> &'static str;

    /// The Redis type of this kind's main key (`TYPE`'s answer while it is held).
    fn main_type(&self) -> &'static str {
        "hash"
    }

    /// What keeps a waiter out, for the timeout's message.
    fn busy(&self) -> String {
        "held by another owner".to_owned()
    }

    /// Whether owner ids of this kind carry the holder's labels (see `settings/holder.rs`):
    /// not for a kind whose owner ids are another library's, read by it byte for byte.
    fn labels_owner(&self) -> bool {
        true
    }

    /// What follows the hash tag in this kind's keys; kinds differ, so a plain lock and a
    /// semaphore of one name are different Redis keys and never read each other's data.
    fn key_suffix(&self) -> &'static str {
        ""
    }

    /// The Redis names of the lock `name` of this kind: `<prefix>{<name>}` plus
    /// [`LockKind::key_suffix`], or another deployment's layout (the Redisson kinds).
    fn keys(&self, prefix: &str, name: &str) -> LockKeys {
        LockKeys::new(prefix, name, self.key_suffix())
    }

    /// The lease of a handle that sets none, if this kind has its own default (Redisson's
    /// watchdog timeout) rather than the client's `default_ttl`.
    fn default_lease(&self) -> Option<Duration> {
        None
    }

    /// Whether the tokens this kind's acquire returns are dlock's own counter, scaled so local
    /// handoffs fit between them, or reported exactly as Redis returned them (the Redisson
    /// kinds, which never hand over locally: `RFencedLock`'s counter, shared with Java, or the
    /// server's clock in µs).
    fn scales_tokens(&self) -> bool {
        true
    }

    /// Whether [`LockKind::wait_channel`] is a shard channel (SSUBSCRIBE on a cluster node)
    /// rather than a classic one.
    fn sharded_wait(&self) -> bool {
        false
    }

    /// Whether a holder keeps this client's local turn at the key until its last release
    /// (exclusive kinds), or gives it up as soon as it holds (shared kinds: other local tasks
    /// may hold beside it, so they must be free to ask Redis).
    fn keeps_gate(&self) -> bool {
        true
    }

    /// What an acquire of this kind does inside a scope holding `parent` of the same key.
    fn nested(&self, parent: &dyn LockKind) -> Nested {
        if parent.id() == self.id() {
            Nested::Reenter
        } else {
            Nested::Refuse("a lock of another kind with the same key is already held")
        }
    }

    /// Whether tasks of one client queue locally for the key first (FIFO), so only the head of
    /// that queue talks to Redis. A kind whose order is kept in Redis (the fair lock) says no:
    /// each task stands in Redis's line itself, or a task of a busy client would be overtaken
    /// by other clients that asked later.
    fn queues_locally(&self) -> bool {
        true
    }

    /// Whether a released hold may go to the next task of this client queued for the key
    /// without a release and an acquire in Redis (see `machinery/release.rs`): kinds where the next
    /// holder would hold exactly what the last one did, under the same owner entry.
    fn hands_over_locally(&self) -> bool {
        false
    }

    /// Whether a refused attempt leaves something of its owner in Redis (a waiting writer's
    /// claim, a place in a queue) that [`LockKind::release`] takes back: then an acquire that
    /// ends without the lock (timed out, cancelled while waiting, failed) sends that release.
    fn refusal_leaves_a_trace(&self) -> bool {
        false
    }

    /// The channel a waiter of this kind listens on: the lock's release channel, or one of its
    /// own (a kind whose releases grant the lock to a chosen waiter).
    fn wait_channel(&self, hold: &Claim) -> String {
        hold.keys.channel.clone()
    }

    /// The fencing token, if `message` (heard on [`LockKind::wait_channel`]) granted the lock
    /// to `hold`'s owner: it holds without asking again.
    fn granted(&self, _hold: &Claim, _message: &str) -> Option<u64> {
        None
    }

    /// How long a grant by message lasts before its owner renews it (see
    /// [`LockKind::granted`]); `None` for kinds that never grant by message.
    fn grant_lifetime(&self) -> Option<Duration> {
        None
    }

    /// The permit count of a counted kind (the semaphore), for stores that pass it as a value
    /// rather than build it into a call (PostgreSQL); `None` for every other kind.
    #[cfg(any(feature = "postgres", feature = "zookeeper"))]
    fn permits(&self) -> Option<u32> {
        None
    }

    /// Whether [`LockKind::renew`] supports `cross_slot` (one call per cluster node). Kinds
    /// without it are renewed one call per slot.
    fn renews_per_node(&self) -> bool {
        false
    }

    /// Takes the lock for `hold.owner`, or re-enters it when `reentry` (a marker key that lets
    /// a cancelled re-entry be undone once) is given.
    fn acquire(&self, hold: &Claim, reentry: Option<&str>, latch_ttl: Duration) -> Call<'static>;

    /// Reads the reply of [`LockKind::acquire`].
    fn decode_acquire(&self, reply: (i64, i64)) -> Attempt;

    /// Gives back one hold, at most once per `latch` key (a release request id). The reply is
    /// the holds left, or -1 when `hold.owner` holds nothing.
    fn release(&self, hold: &Claim, latch: &str, latch_ttl: Duration) -> Call<'static>;

    /// Undoes a re-entry whose caller never saw the reply, if its marker says it ran.
    fn undo_reentry(&self, hold: &Claim, marker: &str) -> Call<'static>;

    /// Renews many holds of this kind in one call; all their keys must be served by one node,
    /// and, unless `cross_slot` (a cluster node, Redis 7+), lie in one slot. The reply has one
    /// entry per hold: 1 renewed, 0 no longer ours.
    fn renew(&self, holds: &[&Claim], cross_slot: bool) -> Call<'static>;

    /// Deletes the lock whoever holds it and wakes its waiters; the reply is 1 if it was held.
    fn force_unlock(&self, keys: &LockKeys) -> Call<'static>;
}

/// A duration as the whole milliseconds Redis takes (leases are validated to fit).
pub(crate) fn millis(d: Duration) -> u64 {
    d.as_millis() as u64
}

/// A boolean script argument.
pub(crate) fn flag(on: bool) -> &'static str {
    if on {
        "1"
    } else {
        "0"
    }
}

/// How long a fencing counter lives after the last grant in its slot. Tokens stay monotonic
/// after it expires (the acquire scripts never hand out less than the server's clock in µs);
/// the expiry only lets an unused key prefix's counters go.
pub(crate) fn fence_lifetime(lease: Duration) -> Duration {
    (lease * 2).max(Duration::from_secs(24 * 3600))
}
