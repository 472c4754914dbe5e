//! What a store that answers queries keeps of a lock, as plain data: read by
//! `dlock::inspect::stored_locks` for tools (the `dlock` inspector). Redis answers no such
//! query (its keys are scanned and read by kind instead), so only the PostgreSQL store fills
//! these in today.

/// One lock as the store has it now: its live holds and what waits beside them.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct StoredLock {
    /// The key the store keeps the lock under: the same string as the lock's Redis key,
    /// `<prefix>{<name>}<kind suffix>` (PostgreSQL writes a NUL of the name as `%00`), which
    /// [`parse_key`](crate::inspect::parse_key) reads back as a name and kind; for a key too
    /// long to index, its hash (`sha256:<hex>`), and the whole text is in `whole_key`.
    pub key: String,
    /// The whole key when the store keeps a shortened one in `key`; `None` when `key` is it.
    pub whole_key: Option<String>,
    /// The live holds, sorted by owner; a read-write lock's owners are `r:<owner>` (readers)
    /// and `w:<owner>` (the writer), as its rows are.
    pub holders: Vec<StoredHold>,
    /// A semaphore's permit count while it has holders.
    pub permits: Option<u32>,
    /// A read-write lock's waiting writer, which new readers queue behind until it is in or
    /// its claim (its `ttl_ms`) runs out.
    pub writer_waiting: Option<StoredHold>,
    /// A fair lock's queue, first in line first (empty where the store has no fair lock).
    pub queue: Vec<String>,
}

/// One owner's hold of a stored lock.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
#[non_exhaustive]
pub struct StoredHold {
    /// The owner id: `<client id>:<sequence>`.
    pub owner: String,
    /// Hold count (re-entries); 1 for a permit or a waiting writer.
    pub count: i64,
    /// Lease left in ms, judged by the store's clock.
    pub ttl_ms: i64,
}

// Built by the stores that answer queries: none without the `postgres` feature.
#[cfg_attr(not(feature = "postgres"), allow(dead_code))]
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

#[cfg_attr(not(feature = "postgres"), allow(dead_code))]
impl StoredHold {
    pub(crate) fn new(owner: String, count: i64, ttl_ms: i64) -> StoredHold {
        StoredHold {
            owner,
            count,
            ttl_ms,
        }
    }
}
