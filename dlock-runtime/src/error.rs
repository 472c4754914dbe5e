//! The one error type of dlock.

use std::time::Duration;

/// Everything that can go wrong taking, keeping or giving back a lock.
///
/// Every variant names the lock (or the Redis URL) it is about, so a log line is enough to act on.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LockError {
    /// The lock was held by another owner for the whole wait.
    #[error("timed out after {waited:?} waiting for lock `{name}` (held by another owner)")]
    Timeout {
        /// The lock's name.
        name: String,
        /// How long this caller waited.
        waited: Duration,
    },

    /// Release or renew found that this owner no longer holds the lock: its lease ran out
    /// (process paused, Redis unreachable, key deleted) and someone else may hold it now.
    #[error(
        "lock `{name}` is not held by this owner (its lease expired or it was force-unlocked)"
    )]
    NotHeld {
        /// The lock's name.
        name: String,
    },

    /// Redis could not be reached or answered with an error.
    #[error("redis at {url} failed during {op} of lock `{name}`: {source}")]
    Redis {
        /// The lock's name (empty for client-level operations).
        name: String,
        /// What dlock was doing: "acquire", "release", "renew", ...
        op: &'static str,
        /// The Redis URL the client was built with (password removed).
        url: String,
        /// The error from redis-rs.
        #[source]
        source: redis::RedisError,
    },

    /// Could not connect to Redis at all when building the client.
    #[error("cannot connect to redis at {url}: {source}")]
    Connect {
        /// The Redis URL (password removed).
        url: String,
        /// The error from redis-rs.
        #[source]
        source: redis::RedisError,
    },

    /// A key dlock uses holds a value of another type (a string where the lock hash belongs, a
    /// list where the fencing counter belongs, ...). Something else writes to this key: pick
    /// another name or key prefix.
    #[error("redis key `{key}` ({role}) of `{name}` holds a value of another type (WRONGTYPE); something else writes there: choose another name or key prefix")]
    WrongType {
        /// The lock's (or stock's) name.
        name: String,
        /// The Redis key that holds the wrong type.
        key: String,
        /// What dlock keeps at that key: "lock hash", "fencing counter", "release latch",
        /// "stock segment", "stock order records".
        role: String,
    },

    /// A bad argument: zero TTL, empty name, a prefix with braces, ...
    #[error("invalid argument for lock `{name}`: {reason}")]
    InvalidArgument {
        /// The lock's name (empty for client-level settings).
        name: String,
        /// What is wrong and how to fix it.
        reason: String,
    },

    /// `LockClient::global()` was called (directly or by `#[distributed_lock]`) before any
    /// client was installed.
    #[error("no dlock client is installed: call `LockClient::install()` at start-up or pass `client = ...` to #[distributed_lock]")]
    NotConfigured,
}

impl LockError {
    /// The name of the lock this error is about, when it is about one.
    pub fn lock_name(&self) -> Option<&str> {
        match self {
            LockError::Timeout { name, .. }
            | LockError::NotHeld { name }
            | LockError::Redis { name, .. }
            | LockError::WrongType { name, .. }
            | LockError::InvalidArgument { name, .. } => Some(name),
            LockError::Connect { .. } | LockError::NotConfigured => None,
        }
    }

    pub(crate) fn invalid(name: &str, reason: impl Into<String>) -> Self {
        LockError::InvalidArgument {
            name: name.to_owned(),
            reason: reason.into(),
        }
    }
}
