//! What each kind of lock keeps in Redis, for tools that read it (the `dlock` inspector of
//! the `dlock-redis-cli` package): which keys belong to a lock, how a key found by `SCAN`
//! reads back as a lock name and kind, and a force-unlock by kind. A store that answers
//! queries (PostgreSQL, ZooKeeper) is read with [`stored_locks`] instead; its keys are the
//! same strings.
//!
//! ```
//! # extern crate dlock_runtime as dlock;
//! use dlock::inspect::{parse_key, Kind, Layout, Part};
//!
//! let layout = Layout::new("dlock:", Kind::Fair, "order:{42}");
//! assert_eq!(layout.key, "dlock:{order:%7B42%7D}:fair");
//! let found = parse_key("dlock:", layout.queue.as_deref().unwrap()).unwrap();
//! assert_eq!((found.name.as_str(), found.kind, found.part), ("order:{42}", Kind::Fair, Part::Queue));
//! ```
//!
//! # Keys per kind
//!
//! `<prefix>{<name, %-escaped>}` followed by the kind's suffix is the lock's main key; the
//! others add one more suffix to it. All share one hash tag, so one cluster slot.
//!
//! | kind | main key | type | beside it |
//! |---|---|---|---|
//! | plain | `…{n}` | hash owner -> hold count, PTTL = lease | `:latch:*`, channel `:chan` |
//! | read-write | `…{n}:rw` | hash `mode`, `w:<owner>`, `r:<owner>` -> count | `:readers` (zset owner -> deadline, server ms), `:wwait` (a waiting writer), `:latch:*`, `:chan` |
//! | fair | `…{n}:fair` | hash owner -> hold count | `:queue` (zset owner -> arrival, server µs), `:alive` (zset owner -> keep-place deadline), `:latch:*`; waiters listen on `:grant:<owner>` |
//! | semaphore | `…{n}:sem` | zset owner -> deadline (server ms) | `:permits` (the count), `:latch:*`, `:chan` |
//!
//! The fencing counters are not a lock's: one string per cluster slot, `<prefix>fence:{<t>}`
//! (`t` the smallest number whose tag hashes to that slot; [`Layout::fence`] names it), holds
//! the last token any plain, read-write or fair lock of that slot was granted.
//!
//! The main key exists exactly while somebody holds the lock (or, for a fair lock, while a
//! grant waits for its new owner); a fair queue can outlive it for a moment.
//!
//! # Redisson's kinds
//!
//! [`LockClient::redisson_lock`], [`LockClient::redisson_fenced_lock`] and
//! [`LockClient::redisson_read_write_lock`] write Redisson's layout, not the table above: one
//! hash named as the lock itself (no prefix), fields `<uuid>:<thread id>` -> hold count, and for
//! a read-write lock a `mode` field (`read` or `write`) and `<uuid>:<thread id>:write` for the
//! writer. Having no prefix, they are not found by [`parse_key`]: [`redisson_kind`] tells such
//! a hash apart by the shape of its fields. A fenced lock is the same hash plus its token
//! counter `redisson_lock_token:{<name>}` ([`Layout::fence`]), which outlives the lock.

mod layout;
mod redisson;
mod stored;

use crate::error::LockError;
use crate::handles::client::LockClient;
use crate::handles::lock::Lock;

pub use crate::settings::holder::Holder;
pub use crate::store::stored::{StoredHold, StoredLock};
pub use layout::{fence_counter, parse_key, KeyInfo, Kind, Layout, Part};
pub use redisson::{redisson_kind, redisson_uuid};
pub use stored::stored_locks;

/// The PostgreSQL schema a client keeps its tables in unless its builder names another
/// (`LockClientBuilder::postgres_schema`).
pub const DEFAULT_POSTGRES_SCHEMA: &str = crate::settings::DEFAULT_POSTGRES_SCHEMA;

/// Deletes the lock `name` of `kind`, whoever holds it, and wakes its waiters, exactly as the
/// kind's own handle does ([`Lock::force_unlock`]): `true` if it was held. A semaphore loses
/// every permit at once; a Redisson read-write lock both sides (its writer's force unlock,
/// then its readers').
pub async fn force_unlock(client: &LockClient, kind: Kind, name: &str) -> Result<bool, LockError> {
    let mut deleted = false;
    for seam in kind.seams(client.shared.sharded_pubsub) {
        deleted |= Lock::of_kind(client.shared.clone(), name.to_owned(), seam)
            .force_unlock()
            .await?;
    }
    Ok(deleted)
}

/// Whether a client of `url` keeps its locks in PostgreSQL (`postgres://` or
/// `postgresql://`; only with the `postgres` feature does a client open one), as the client
/// decides it.
///
/// ```
/// # extern crate dlock_runtime as dlock;
/// assert!(dlock::inspect::is_postgres_url("postgresql://u@h/db"));
/// assert!(!dlock::inspect::is_postgres_url("redis://h:6379"));
/// ```
pub fn is_postgres_url(url: &str) -> bool {
    crate::settings::is_postgres_url(url)
}

/// Whether a client of `url` keeps its locks in a ZooKeeper ensemble (`zk://`; only with the
/// `zookeeper` feature does a client open one), as the client decides it.
///
/// ```
/// # extern crate dlock_runtime as dlock;
/// assert!(dlock::inspect::is_zookeeper_url("zk://h1:2181,h2:2181/app"));
/// assert!(!dlock::inspect::is_zookeeper_url("postgres://u@h/db"));
/// ```
pub fn is_zookeeper_url(url: &str) -> bool {
    crate::settings::is_zookeeper_url(url)
}

/// `url` with its password (and a password in its query) replaced by `***`, as the client
/// shows URLs in errors and logs.
///
/// ```
/// # extern crate dlock_runtime as dlock;
/// assert_eq!(dlock::inspect::redact_url("redis://u:pw@h:1"), "redis://u:***@h:1");
/// ```
pub fn redact_url(url: &str) -> String {
    crate::settings::redact(url)
}
