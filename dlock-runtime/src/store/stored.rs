//! What a store that answers queries keeps of a lock, as plain data: read by
//! `dlock::inspect::stored_locks` for tools (the `dlock` inspector). Redis answers no such
//! query (its keys are scanned and read by kind instead); the PostgreSQL store (its tables)
//! and the ZooKeeper store (its lock nodes' children) fill these in.

/// One lock as the store has it now: its live holds and what waits beside them.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct StoredLock {
    /// The key the store keeps the lock under: the same string as the lock's Redis key,
    /// `<prefix>{<name>}<kind suffix>` (PostgreSQL writes a NUL of the name as `%00`), which
    /// [`parse_key`](crate::inspect::parse_key) reads back as a name and kind; for a key too
    /// long to index, its hash (`sha256:<hex>`), and the whole text is in `whole_key`. On
    /// ZooKeeper, the key its node's path stands for (the path unescaped, see the store's page).
    /// A ZooKeeper node whose name is no escaped key is shown by that name.
    pub key: String,
    /// The whole key when the store keeps a shortened one in `key`; `None` when `key` is it.
    pub whole_key: Option<String>,
    /// The live holds, sorted by owner; a read-write lock's owners are `r:<owner>` (readers)
    /// and `w:<owner>` (the writer), as its rows are. On ZooKeeper, the children the recipe
    /// says hold now: a mutex's first, a read-write lock's readers ahead of the first writer
    /// (or that writer when first), a semaphore's first `permits` leases; a child that is not a
    /// dlock client's (a Curator client's: its data is no owner id) has its own node name as
    /// its owner.
    pub holders: Vec<StoredHold>,
    /// A semaphore's permit count while it has holders (ZooKeeper: the count its node keeps;
    /// `None` for a semaphore only Curator clients use, which keep none: every lease is then
    /// shown as a holder).
    pub permits: Option<u32>,
    /// A read-write lock's waiting writer, which new readers queue behind until it is in or
    /// its claim (its `ttl_ms`) runs out. On ZooKeeper, the first writer in line (readers
    /// behind it wait for it, as Curator's do).
    pub writer_waiting: Option<StoredHold>,
    /// Who waits in line, first in line first. PostgreSQL: a fair lock's queue (its other
    /// kinds' waiters LISTEN on their own sessions, which no other session sees). ZooKeeper:
    /// every kind's, as its children stand (a waiter's child is its place): a mutex's children
    /// after the first; a read-write lock's after its holders, `r:` / `w:` as in `holders`; a
    /// semaphore's leases past the count, then the children of its `locks` mutex.
    pub queue: Vec<String>,
}

/// One owner's hold of a stored lock.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
#[non_exhaustive]
pub struct StoredHold {
    /// The owner id: `<client id>:<sequence>`.
    pub owner: String,
    /// Hold count (re-entries); 1 for a permit or a waiting writer. 1 on ZooKeeper: a child
    /// is one hold, and re-entries are counted in the holder's own client.
    pub count: i64,
    /// Lease left in ms, judged by the store's clock. -1 on ZooKeeper: the lease is the
    /// holder's session, which lives while its client keeps it alive, and how long another
    /// client's session has left is visible to no other client; -1 reads "as long as its
    /// session lives" (a holder that dies frees it within its session timeout).
    pub ttl_ms: i64,
}

// Built by the stores that answer queries: none without the `postgres` or `zookeeper` feature.
#[cfg_attr(
    not(any(feature = "postgres", feature = "zookeeper")),
    allow(dead_code)
)]
impl StoredLock {
    /// A lock with nothing read yet.
    pub(crate) fn new(key: String) -> StoredLock {
        StoredLock {
            key,
            whole_key: None,
            holders: Vec::new(),
            permits: None,
            writer_waiting: None,
            queue: Vec::new(),
        }
    }
}

#[cfg_attr(
    not(any(feature = "postgres", feature = "zookeeper")),
    allow(dead_code)
)]
impl StoredHold {
    pub(crate) fn new(owner: String, count: i64, ttl_ms: i64) -> StoredHold {
        StoredHold {
            owner,
            count,
            ttl_ms,
        }
    }
}
