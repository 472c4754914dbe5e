//! [`Link`]: one ordered connection to the store, and the operations the machinery sends on it.

use std::time::Duration;

use crate::store::error::StoreError;
use crate::store::redis::backend::conn::Conn;
use crate::store::redis::backend::names::LockKeys;
use crate::store::redis::kinds::{Attempt, Claim, LockKind, Semaphore};
use crate::store::stored::StoredLock;

/// One connection to the store. Requests sent on one link run in the order they were sent
/// (an undo after the acquire it undoes; an acquire after this client's release of the key).
/// Clones share the connection.
#[derive(Clone)]
pub(crate) enum Link {
    Redis(Conn),
    #[cfg(feature = "postgres")]
    Postgres(crate::store::postgres::link::PgLink),
    #[cfg(feature = "zookeeper")]
    Zookeeper(crate::store::zookeeper::link::ZkLink),
}

/// What a release answered.
#[derive(Debug)]
pub(crate) struct Released {
    /// Holds the owner has left (0: freed), -1 if it held none.
    pub(crate) left: i64,
    /// When this release freed the lock: how many subscribers its message reached (-1: Redis
    /// refused the message, -2: the store cannot tell). `None` when the store does not say
    /// (other kinds, a retry answered from the latch).
    pub(crate) listeners: Option<i64>,
}

impl Released {
    /// A Redis release script's reply: the bare count, or `{0, listeners}` when the plain lock
    /// was freed.
    fn decode(reply: redis::Value) -> redis::RedisResult<Self> {
        let (left, listeners) = match reply {
            redis::Value::Array(pair) => {
                let (left, listeners): (i64, i64) =
                    redis::FromRedisValue::from_redis_value(redis::Value::Array(pair))?;
                (left, Some(listeners))
            }
            other => (redis::FromRedisValue::from_redis_value(other)?, None),
        };
        Ok(Released { left, listeners })
    }
}

impl Link {
    /// Which of the store's connections this link sends on. Calls on one connection are
    /// answered in turn, so the watchdog judges a queued renewal by its connection's answers.
    #[cfg(any(feature = "postgres", feature = "zookeeper"))]
    pub(crate) fn lane(&self) -> usize {
        match self {
            Link::Redis(_) => 0,
            #[cfg(feature = "postgres")]
            Link::Postgres(link) => link.slot(),
            #[cfg(feature = "zookeeper")]
            Link::Zookeeper(_) => 0,
        }
    }

    /// Takes the lock of `kind` for `claim.owner`, or re-enters it when `reentry` (a marker
    /// that lets a cancelled re-entry be undone once) is given.
    pub(crate) async fn acquire(
        &mut self,
        kind: &dyn LockKind,
        claim: &Claim,
        reentry: Option<&str>,
        latch_ttl: Duration,
    ) -> Result<Attempt, StoreError> {
        let reply = match self {
            Link::Redis(conn) => (kind.acquire(claim, reentry, latch_ttl))
                .invoke_async::<(i64, i64)>(conn)
                .await
                .map_err(StoreError::Redis)?,
            #[cfg(feature = "postgres")]
            Link::Postgres(link) => (link.acquire(kind, claim, reentry, latch_ttl).await)
                .map_err(StoreError::Postgres)?,
            #[cfg(feature = "zookeeper")]
            Link::Zookeeper(link) => {
                (link.acquire(kind, claim, reentry).await).map_err(StoreError::Zookeeper)?
            }
        };
        Ok(kind.decode_acquire(reply))
    }

    /// Gives back one hold of `claim.owner`, at most once per `latch` (a release request id).
    pub(crate) async fn release(
        &mut self,
        kind: &dyn LockKind,
        claim: &Claim,
        latch: &str,
        latch_ttl: Duration,
    ) -> Result<Released, StoreError> {
        match self {
            Link::Redis(conn) => (kind.release(claim, latch, latch_ttl))
                .invoke_async::<redis::Value>(conn)
                .await
                .and_then(Released::decode)
                .map_err(StoreError::Redis),
            #[cfg(feature = "postgres")]
            Link::Postgres(link) => {
                let (left, listeners) = (link.release(kind, claim, latch, latch_ttl).await)
                    .map_err(StoreError::Postgres)?;
                Ok(Released { left, listeners })
            }
            #[cfg(feature = "zookeeper")]
            Link::Zookeeper(link) => {
                let (left, listeners) =
                    (link.release(kind, claim).await).map_err(StoreError::Zookeeper)?;
                Ok(Released { left, listeners })
            }
        }
    }

    /// Undoes a re-entry whose caller never saw the reply, if its marker says it ran.
    pub(crate) async fn undo_reentry(
        &mut self,
        kind: &dyn LockKind,
        claim: &Claim,
        marker: &str,
    ) -> Result<(), StoreError> {
        match self {
            Link::Redis(conn) => (kind.undo_reentry(claim, marker))
                .invoke_async::<redis::Value>(conn)
                .await
                .map(drop)
                .map_err(StoreError::Redis),
            #[cfg(feature = "postgres")]
            Link::Postgres(link) => (link.undo_reentry(kind, claim, marker).await)
                .map(drop)
                .map_err(StoreError::Postgres),
            #[cfg(feature = "zookeeper")]
            Link::Zookeeper(link) => {
                link.undo_reentry(kind, claim, marker);
                Ok(())
            }
        }
    }

    /// Deletes the lock whoever holds it and wakes its waiters: 1 if it was held.
    pub(crate) async fn force_unlock(
        &mut self,
        kind: &dyn LockKind,
        keys: &LockKeys,
    ) -> Result<i64, StoreError> {
        match self {
            Link::Redis(conn) => (kind.force_unlock(keys))
                .invoke_async(conn)
                .await
                .map_err(StoreError::Redis),
            #[cfg(feature = "postgres")]
            Link::Postgres(link) => {
                (link.force_unlock(kind, keys).await).map_err(StoreError::Postgres)
            }
            #[cfg(feature = "zookeeper")]
            Link::Zookeeper(link) => {
                (link.force_unlock(kind, keys).await).map_err(StoreError::Zookeeper)
            }
        }
    }

    /// Renews many holds of one kind: one entry per hold, 1 renewed, 0 no longer ours. The
    /// watchdog's path for stores that renew by request (PostgreSQL: one statement;
    /// ZooKeeper: one check per hold); on Redis it renews per node through its own
    /// connections (`machinery/watchdog.rs`), and this is the one-slot call.
    #[cfg(any(feature = "postgres", feature = "zookeeper"))]
    pub(crate) async fn renew(
        &mut self,
        kind: &dyn LockKind,
        claims: &[&Claim],
    ) -> Result<Vec<i64>, StoreError> {
        match self {
            Link::Redis(conn) => (kind.renew(claims, false))
                .invoke_async(conn)
                .await
                .map_err(StoreError::Redis),
            #[cfg(feature = "postgres")]
            Link::Postgres(link) => (link.renew(kind, claims).await).map_err(StoreError::Postgres),
            #[cfg(feature = "zookeeper")]
            Link::Zookeeper(link) => {
                (link.renew(kind, claims).await).map_err(StoreError::Zookeeper)
            }
        }
    }

    /// Whether anybody holds the lock `key` of `kind`.
    pub(crate) async fn exists(
        &mut self,
        kind: &dyn LockKind,
        key: &str,
    ) -> Result<bool, StoreError> {
        let _ = kind;
        match self {
            // TYPE rather than EXISTS, one command all the same: a key of another type is
            // not "locked", it is someone else's value, and is said to be, as acquire does.
            Link::Redis(conn) => {
                let found: String = (redis::cmd("TYPE").arg(key).query_async(conn).await)
                    .map_err(StoreError::Redis)?;
                match found.as_str() {
                    "none" => Ok(false),
                    t if t == kind.main_type() => Ok(true),
                    other => Err(StoreError::Redis(redis::make_extension_error(
                        "WRONGTYPE".into(),
                        Some(format!("lock {} `{key}` holds a {other}", kind.main_type())),
                    ))),
                }
            }
            #[cfg(feature = "postgres")]
            Link::Postgres(link) => (link.exists(kind, key).await).map_err(StoreError::Postgres),
            #[cfg(feature = "zookeeper")]
            Link::Zookeeper(link) => (link.exists(kind, key).await).map_err(StoreError::Zookeeper),
        }
    }

    /// How many permits of the semaphore `keys` are free now (holders past their lease count
    /// as free).
    pub(crate) async fn available(
        &mut self,
        semaphore: &Semaphore,
        keys: &LockKeys,
    ) -> Result<i64, StoreError> {
        match self {
            Link::Redis(conn) => (semaphore.available(keys))
                .invoke_async(conn)
                .await
                .map_err(StoreError::Redis),
            #[cfg(feature = "postgres")]
            Link::Postgres(link) => {
                (link.available(semaphore.permits, &keys.key).await).map_err(StoreError::Postgres)
            }
            #[cfg(feature = "zookeeper")]
            Link::Zookeeper(link) => {
                (link.available(semaphore.permits, &keys.key).await).map_err(StoreError::Zookeeper)
            }
        }
    }

    /// The lease left on the lock `key` of `kind` in ms: -2 when free, -1 without expiry.
    pub(crate) async fn pttl(&mut self, kind: &dyn LockKind, key: &str) -> Result<i64, StoreError> {
        let _ = kind;
        match self {
            Link::Redis(conn) => (redis::cmd("PTTL").arg(key))
                .query_async(conn)
                .await
                .map_err(StoreError::Redis),
            #[cfg(feature = "postgres")]
            Link::Postgres(link) => (link.pttl(kind, key).await).map_err(StoreError::Postgres),
            #[cfg(feature = "zookeeper")]
            Link::Zookeeper(link) => (link.pttl(kind, key).await).map_err(StoreError::Zookeeper),
        }
    }

    /// Every lock the store keeps (those at `keys`, or all) with a live hold or a waiting
    /// writer, for tools; `None` from a store that answers no such query (Redis: its keys
    /// are scanned and read by kind instead).
    pub(crate) async fn stored_locks(
        &mut self,
        keys: Option<&[String]>,
    ) -> Result<Option<Vec<StoredLock>>, StoreError> {
        let _ = keys;
        match self {
            Link::Redis(_) => Ok(None),
            #[cfg(feature = "postgres")]
            Link::Postgres(link) => crate::store::postgres::inspect::stored_locks(link, keys)
                .await
                .map(Some)
                .map_err(StoreError::Postgres),
            #[cfg(feature = "zookeeper")]
            Link::Zookeeper(link) => crate::store::zookeeper::inspect::stored_locks(link, keys)
                .await
                .map(Some)
                .map_err(StoreError::Zookeeper),
        }
    }
}
