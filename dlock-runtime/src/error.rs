//! The one error type of dlock.

use std::time::Duration;

/// Everything that can go wrong taking, keeping or giving back a lock.
///
/// Every variant names the lock (or the Redis URL) it is about, so a log line is enough to act on.
///
/// Mapping it to HTTP status codes in a service: one question, [`LockError::is_transient`],
/// says whether trying again later can succeed, whatever the store; "busy" is told apart
/// from "the store is down" by [`LockError::Timeout`].
///
/// ```
/// # extern crate dlock_runtime as dlock;
/// use dlock::LockError;
///
/// fn status(e: &LockError) -> u16 {
///     match e {
///         // Someone else holds it: the caller may try again later.
///         LockError::Timeout { .. } => 409,
///         // Our hold ran out mid-request: the work may be half done, report a conflict.
///         LockError::NotHeld { .. } => 409,
///         // Redis or PostgreSQL unreachable, loading, failing over: try again later.
///         e if e.is_transient() => 503,
///         // Refused, wrong type, bad settings, no client installed: trying again will not help.
///         _ => 500,
///     }
/// }
///
/// assert_eq!(status(&LockError::NotConfigured), 500);
/// assert_eq!(status(&LockError::NotHeld { name: "cart:5".into() }), 409);
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LockError {
    /// The lock was held by another owner (every permit of a semaphore was in use) for the
    /// whole wait.
    #[error("timed out after {} waiting for lock `{name}` ({busy})", Shown(*.waited))]
    #[non_exhaustive]
    Timeout {
        /// The lock's name.
        name: String,
        /// How long this caller waited.
        waited: Duration,
        /// What kept it out: "held by another owner", "all 2 permits in use".
        busy: String,
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

    /// The client was shut down ([`LockClient::shutdown`](crate::LockClient::shutdown) or
    /// [`shutdown`](crate::shutdown)): it takes no more locks.
    #[error("lock `{name}`: the client was shut down")]
    Closed {
        /// The lock's name.
        name: String,
    },

    /// Redis granted the lock, but fewer replicas than asked for (see
    /// [`LockClientBuilder::synced_replicas`](crate::LockClientBuilder::synced_replicas))
    /// confirmed the write within the bound. The grant was given back: nobody holds the lock
    /// through this attempt. Usually a replica is down, paused or lagging.
    #[error(
        "lock `{name}` at {url}: {acked} of {wanted} replica(s) confirmed the acquire within {}; \
         it was released again",
        Shown(*.within)
    )]
    NotSynced {
        /// The lock's name.
        name: String,
        /// The Redis URL the client was built with (password removed).
        url: String,
        /// Replicas asked for.
        wanted: u32,
        /// Replicas that confirmed in time (WAIT's answer).
        acked: u32,
        /// The bound WAIT was given.
        within: Duration,
    },

    /// Redis could not be reached or answered with an error.
    #[error("redis at {url} failed during {op}{}: {source}", of_subject(.name, .op))]
    Redis {
        /// The lock's name, or the stock item's or fenced key's for their operations (empty for
        /// client-level operations).
        name: String,
        /// What dlock was doing: "acquire", "release", "renew", ...
        op: &'static str,
        /// The Redis URL the client was built with (password removed).
        url: String,
        /// The error from redis-rs.
        #[source]
        source: redis::RedisError,
    },

    /// A store other than Redis (PostgreSQL) could not be reached, was not ready, or refused
    /// a request. `fault` says which: a caller may retry the first two.
    #[error("{store} at {url} failed during {op}{}: {source}", of_subject(.name, .op))]
    Store {
        /// The lock's name (empty for client-level operations).
        name: String,
        /// What dlock was doing: "acquire", "release", "renew", ...
        op: &'static str,
        /// Which store: "postgres".
        store: &'static str,
        /// The store's URL (password removed).
        url: String,
        /// Which kind of failure this was.
        fault: StoreFault,
        /// The cause: its message says what failed and why (for a refusal, the server's
        /// message and SQLSTATE); its own source, when there is one, is the store client's error.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
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
    #[error("invalid argument{}: {reason}", for_subject(.name))]
    InvalidArgument {
        /// The lock's (semaphore's, stock item's) name; empty for client-level settings.
        name: String,
        /// What is wrong and how to fix it.
        reason: String,
    },

    /// The call chain already holds this lock through another `LockClient` on the same Redis
    /// (an outer call with `client = state.locks`, an inner one on the installed client):
    /// re-entry follows one client's holds, so waiting would wait for the caller itself.
    /// Returned at once instead of after the whole wait.
    #[error("lock `{name}` is already held by this call chain through another client ({holder}) on the same redis; waiting would deadlock on itself: use the same `LockClient` for the nested call (e.g. `client = ...` on both, or neither)")]
    SelfDeadlock {
        /// The lock's name.
        name: String,
        /// The client id (see `LockClient::client_id`) that holds it.
        holder: String,
    },

    /// The call chain holds a lock that makes this acquire wait for itself, known at once:
    /// asking for the write side of a read-write lock inside one's own read scope (an upgrade:
    /// two readers upgrading would wait for each other forever). Release the read hold first.
    #[error("lock `{name}`: {reason}; waiting would deadlock on itself")]
    WouldDeadlock {
        /// The lock's name.
        name: String,
        /// What the call chain holds and why this acquire cannot be granted.
        reason: String,
    },

    /// A call of [`dlock::blocking`](crate::blocking) was made on a thread it would have to
    /// wait for: the client's own thread, which runs the call. Returned at once instead of
    /// hanging; the same call from another thread (`tokio::task::spawn_blocking`, a thread of
    /// your own) or through the async API works.
    #[error("blocking call{}: {cause}; call it inside `tokio::task::spawn_blocking` (or on a thread of your own), or use the async API", on_subject(.name))]
    BlockingCall {
        /// The lock's (semaphore's, multi-lock's) name; empty for client-level calls.
        name: String,
        /// Why this thread cannot wait for the call.
        cause: &'static str,
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
            | LockError::Store { name, .. }
            | LockError::NotSynced { name, .. }
            | LockError::Closed { name, .. }
            | LockError::WrongType { name, .. }
            | LockError::InvalidArgument { name, .. }
            | LockError::SelfDeadlock { name, .. }
            | LockError::WouldDeadlock { name, .. }
            | LockError::BlockingCall { name, .. } => Some(name.as_str()).filter(|n| !n.is_empty()),
            LockError::Connect { .. } | LockError::NotConfigured => None,
        }
    }

    /// Whether trying the same thing again later can succeed, on every store: `true` for a
    /// lock held by someone else for the whole wait ([`LockError::Timeout`]), a store that
    /// could not be reached, did not answer in time, or said "not now" (loading its data, in
    /// recovery, a cluster or Sentinel failing over), and an acquire that too few replicas
    /// confirmed; `false` for what gives the same answer every time (a refusal, missing
    /// rights, a wrong password, a key of another type, bad settings, a self-deadlock, a
    /// blocking call on the thread that drives its own client, no client installed, a closed
    /// client) and for [`LockError::NotHeld`], which says a lease
    /// already ran out: the work done under it must be judged, not repeated blindly.
    ///
    /// ```
    /// # extern crate dlock_runtime as dlock;
    /// use dlock::LockError;
    /// let down = LockError::Redis {
    ///     name: "cart:5".into(),
    ///     op: "acquire",
    ///     url: "redis://127.0.0.1:6379".into(),
    ///     source: dlock::redis::RedisError::from(std::io::Error::from(
    ///         std::io::ErrorKind::ConnectionRefused,
    ///     )),
    /// };
    /// assert!(down.is_transient());
    /// assert!(!LockError::NotHeld { name: "cart:5".into() }.is_transient());
    /// ```
    pub fn is_transient(&self) -> bool {
        match self {
            LockError::Timeout { .. } | LockError::NotSynced { .. } => true,
            LockError::Redis { source, .. } | LockError::Connect { source, .. } => {
                redis_is_link_error(source) || redis_is_not_now(source)
            }
            LockError::Store { fault, .. } => {
                matches!(fault, StoreFault::Unreachable | StoreFault::NotNow)
            }
            LockError::NotHeld { .. }
            | LockError::Closed { .. }
            | LockError::WrongType { .. }
            | LockError::InvalidArgument { .. }
            | LockError::SelfDeadlock { .. }
            | LockError::WouldDeadlock { .. }
            // The same call from the same thread meets the same thread: move the call.
            | LockError::BlockingCall { .. }
            | LockError::NotConfigured => false,
        }
    }

    pub(crate) fn timeout(name: &str, waited: Duration, busy: String) -> Self {
        LockError::Timeout {
            name: name.to_owned(),
            waited,
            busy,
        }
    }

    pub(crate) fn invalid(name: &str, reason: impl Into<String>) -> Self {
        LockError::InvalidArgument {
            name: name.to_owned(),
            reason: reason.into(),
        }
    }

    /// A store's failure (`source`) as the caller sees it, its fault read off the two
    /// questions every store's error answers: did the link break, did the server say "not now".
    #[cfg(any(feature = "postgres", feature = "zookeeper"))]
    pub(crate) fn store_failure(
        (name, op): (&str, &'static str),
        (store, url): (&'static str, &str),
        (link, not_now): (bool, bool),
        source: Box<dyn std::error::Error + Send + Sync>,
    ) -> Self {
        let fault = if link {
            StoreFault::Unreachable
        } else if not_now {
            StoreFault::NotNow
        } else {
            StoreFault::Refused
        };
        LockError::Store {
            name: name.to_owned(),
            op,
            store,
            url: url.to_owned(),
            fault,
            source,
        }
    }
}

/// True when the link to Redis failed rather than Redis answering: the request may have run.
/// Here, below every layer, so that `LockError` and the retries read failures alike.
pub(crate) fn redis_is_link_error(e: &redis::RedisError) -> bool {
    e.is_io_error() || e.is_connection_dropped() || e.is_connection_refusal() || e.is_timeout()
}

/// True for a server's "not now": `LOADING` (a restart reading its RDB or AOF, for seconds on
/// a large dataset), `TRYAGAIN` (a multi-key request during a slot migration), `CLUSTERDOWN`,
/// `MASTERDOWN`. Redis refused before running anything; the same request may succeed later.
pub(crate) fn redis_is_not_now(e: &redis::RedisError) -> bool {
    use redis::{ErrorKind, ServerErrorKind};
    matches!(
        e.kind(),
        ErrorKind::Server(
            ServerErrorKind::BusyLoading
                | ServerErrorKind::TryAgain
                | ServerErrorKind::ClusterDown
                | ServerErrorKind::MasterDown
        )
    )
}

/// " of lock `name`" (" of item `name`" for a stock operation, " of key `name`" for a fenced
/// write), or nothing for a client-level error (no lock, empty name): a message must not read
/// "of lock ``", and a stock item is not a lock.
fn of_subject(name: &str, op: &str) -> String {
    if name.is_empty() {
        String::new()
    } else {
        format!(" of {} `{name}`", noun(op))
    }
}

/// What an operation works on, by the operation's name: stock operations are named
/// "stock ...", fenced writes and reads "fence ...".
fn noun(op: &str) -> &'static str {
    if op.starts_with("stock") {
        "item"
    } else if op.starts_with("fence") {
        "key"
    } else {
        "lock"
    }
}

/// " for `name`", or nothing for a client-level setting. No noun: the name may be a lock's, a
/// semaphore's or a stock item's, and the reason says which setting of which it is about.
fn for_subject(name: &str) -> String {
    if name.is_empty() {
        String::new()
    } else {
        format!(" for `{name}`")
    }
}

/// " on `name`", or nothing for a client-level call (no noun: a lock, a semaphore or a
/// multi-lock's names).
fn on_subject(name: &str) -> String {
    if name.is_empty() {
        String::new()
    } else {
        format!(" on `{name}`")
    }
}

/// A duration for people: at most three significant digits, in ms, s, min or h
/// (`5.00123s` reads "5.00 s", not "5.001234567s").
struct Shown(Duration);

impl std::fmt::Display for Shown {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let ms = self.0.as_secs_f64() * 1_000.0;
        let (value, unit) = if ms < 999.5 {
            (ms, "ms")
        } else if ms < 999_500.0 {
            (ms / 1_000.0, "s")
        } else if ms < 7_200_000.0 {
            (ms / 60_000.0, "min")
        } else {
            (ms / 3_600_000.0, "h")
        };
        // Three significant digits, no more decimals than that leaves room for.
        let decimals = if unit == "ms" || value >= 99.95 {
            0
        } else if value >= 9.995 {
            1
        } else {
            2
        };
        write!(f, "{value:.decimals$} {unit}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_well() {
        let shown = |ms: u64| Shown(Duration::from_millis(ms)).to_string();
        assert_eq!(shown(0), "0 ms");
        assert_eq!(shown(250), "250 ms");
        assert_eq!(shown(999), "999 ms");
        assert_eq!(shown(1_000), "1.00 s");
        assert_eq!(shown(5_001), "5.00 s");
        assert_eq!(shown(12_345), "12.3 s");
        assert_eq!(shown(123_456), "123 s");
        assert_eq!(shown(5_400_000), "90.0 min");
        assert_eq!(shown(10_800_000), "3.00 h");
        assert_eq!(shown(600_000), "600 s");
        assert_eq!(shown(1_200_000), "20.0 min");
        assert_eq!(
            Shown(Duration::from_micros(5_001_234)).to_string(),
            "5.00 s"
        );
    }

    #[test]
    fn redis_errors_name_what_the_operation_works_on() {
        let source = || redis::RedisError::from((redis::ErrorKind::Io, "refused"));
        let shown = |op| {
            LockError::Redis {
                name: "sku:1".into(),
                op,
                url: "redis://127.0.0.1:1".into(),
                source: source(),
            }
            .to_string()
        };
        assert!(shown("stock take").contains("during stock take of item `sku:1`:"));
        assert!(shown("fence write").contains("during fence write of key `sku:1`:"));
        assert!(shown("acquire").contains("during acquire of lock `sku:1`:"));
    }

    #[test]
    fn client_level_errors_name_no_lock() {
        let e = LockError::invalid("", "connections must be at least 1");
        assert_eq!(
            e.to_string(),
            "invalid argument: connections must be at least 1"
        );
        assert_eq!(e.lock_name(), None);
        let e = LockError::invalid("a", "empty");
        assert_eq!(e.to_string(), "invalid argument for `a`: empty");
        let e = LockError::Timeout {
            name: "job".into(),
            waited: Duration::from_micros(5_001_234),
            busy: "held by another owner".into(),
        };
        assert_eq!(
            e.to_string(),
            "timed out after 5.00 s waiting for lock `job` (held by another owner)"
        );
    }
}

/// What kind of failure a [`LockError::Store`] was.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum StoreFault {
    /// The connection broke, was refused or did not answer in time: the request may or may
    /// not have run.
    Unreachable,
    /// The server answered "not now" (starting up, in recovery, a standby not yet promoted,
    /// a serialization conflict): nothing ran, and the same request can be sent again.
    NotNow,
    /// The server refused the request (missing rights, a missing schema, bad input): sending it
    /// again gives the same answer.
    Refused,
}
