//! `PgError`: what went wrong talking to PostgreSQL, sorted the way the machinery must react to
//! it: a broken link (the op may or may not have run: retry under the same owner and latch), a
//! server that cannot answer now (nothing ran: retry later), or a refusal (give up).

use std::error::Error as _;
use std::fmt;
use std::time::Duration;

/// SQLSTATEs after which nothing ran and a later try may work: the server is starting up or in
/// recovery (57P03), shutting down (57P01, 57P02), a standby not yet promoted (25006), a
/// transaction lost to serialization, a deadlock or a lock timeout (40001, 40P01, 55P03), or
/// out of connection slots (53300).
const NOT_NOW: [&str; 8] = [
    "57P03", "57P01", "57P02", "25006", "40001", "40P01", "55P03", "53300",
];

/// SQLSTATEs that also end the connection (the server closes it after sending them).
pub(super) const LINK_GONE: [&str; 2] = ["57P01", "57P02"];

/// The SQLSTATE dlock's semaphore functions raise when the semaphore is in use with another
/// permit count (the message is `DLOCK_PERMITS <stored count>`, as the Redis scripts say it).
const PERMITS_MISMATCH: &str = "DLK01";

/// An error of the PostgreSQL store. Its `Display` says what was being done and why it failed;
/// `source()` is the `tokio_postgres::Error`, when there is one.
#[derive(Debug)]
pub(crate) struct PgError {
    /// What dlock was doing ("acquiring `name`", "connecting to ...").
    what: String,
    cause: Cause,
}

#[derive(Debug)]
enum Cause {
    /// The client or the server said no.
    Postgres {
        error: tokio_postgres::Error,
        /// Opening a connection: failing without a SQLSTATE there means no link.
        connecting: bool,
    },
    /// No answer within this long (our own bound on every call and connect).
    Timeout(Duration),
    /// A complete message of dlock's own (an unsupported kind, an invalid schema name, what
    /// to run when the role lacks a privilege), with the server's error kept when there is one.
    Plain {
        message: String,
        source: Option<tokio_postgres::Error>,
    },
}

impl PgError {
    /// `error` while doing `what` on an open connection.
    pub(crate) fn postgres(what: impl Into<String>, error: tokio_postgres::Error) -> Self {
        PgError {
            what: what.into(),
            cause: Cause::Postgres {
                error,
                connecting: false,
            },
        }
    }

    /// `error` while opening a connection for `what`.
    pub(crate) fn connecting(what: impl Into<String>, error: tokio_postgres::Error) -> Self {
        PgError {
            what: what.into(),
            cause: Cause::Postgres {
                error,
                connecting: true,
            },
        }
    }

    /// No answer to `what` within `after`.
    pub(crate) fn timeout(what: impl Into<String>, after: Duration) -> Self {
        PgError {
            what: what.into(),
            cause: Cause::Timeout(after),
        }
    }

    /// A refusal of dlock's own, with its full message.
    pub(crate) fn refused(what: impl Into<String>, message: impl Into<String>) -> Self {
        PgError {
            what: what.into(),
            cause: Cause::Plain {
                message: message.into(),
                source: None,
            },
        }
    }

    /// A refusal of dlock's own that explains the server's `error` (a missing privilege).
    pub(crate) fn explained(
        what: impl Into<String>,
        message: impl Into<String>,
        error: tokio_postgres::Error,
    ) -> Self {
        PgError {
            what: what.into(),
            cause: Cause::Plain {
                message: message.into(),
                source: Some(error),
            },
        }
    }

    /// A lock kind this store does not offer (the lead turns it into a user error).
    pub(crate) fn not_offered(kind_id: &str) -> Self {
        PgError::refused(
            format!("using a {kind_id} lock"),
            format!("the PostgreSQL store does not offer the {kind_id} lock kind"),
        )
    }

    fn server_error(&self) -> Option<&tokio_postgres::Error> {
        match &self.cause {
            Cause::Postgres { error, .. } => Some(error),
            Cause::Plain { source, .. } => source.as_ref(),
            Cause::Timeout(_) => None,
        }
    }

    /// The connection is gone or never came (closed, an IO error, our own timeout): the op may
    /// or may not have run.
    pub(crate) fn is_link_error(&self) -> bool {
        match &self.cause {
            Cause::Timeout(_) => true,
            Cause::Plain { .. } => false,
            Cause::Postgres { error, connecting } => {
                let code = error.code().map(|c| c.code());
                error.is_closed()
                    || has_io_source(error)
                    || code.is_some_and(|c| LINK_GONE.contains(&c))
                    // Opening failed short of the server's answer (refused, TLS, timeout).
                    || (*connecting && code.is_none())
            }
        }
    }

    /// The server cannot do it now and did nothing: retry later.
    pub(crate) fn is_not_now(&self) -> bool {
        self.sqlstate().is_some_and(|c| NOT_NOW.contains(&c))
    }

    /// The server's SQLSTATE, when it answered with an error.
    pub(crate) fn sqlstate(&self) -> Option<&str> {
        self.server_error()?.code().map(|c| c.code())
    }

    /// The permit count PostgreSQL keeps for a semaphore, when this is the "in use with
    /// another permit count" refusal.
    pub(crate) fn stored_permits(&self) -> Option<u32> {
        if self.sqlstate() != Some(PERMITS_MISMATCH) {
            return None;
        }
        let db = self.server_error()?.as_db_error()?;
        db.message()
            .strip_prefix("DLOCK_PERMITS ")?
            .trim()
            .parse()
            .ok()
    }
}

fn has_io_source(error: &tokio_postgres::Error) -> bool {
    let mut next = error.source();
    // Bounded: error chains are short, and a cycle would be a bug elsewhere.
    for _ in 0..16 {
        match next {
            Some(e) if e.is::<std::io::Error>() => return true,
            Some(e) => next = e.source(),
            None => return false,
        }
    }
    false
}

impl fmt::Display for PgError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.cause {
            Cause::Timeout(after) => write!(f, "{}: no answer within {after:?}", self.what),
            Cause::Plain { message, .. } => write!(f, "{}: {message}", self.what),
            Cause::Postgres { error, .. } => match error.as_db_error() {
                // The server's own words and code, which is what an operator searches for.
                Some(db) => write!(
                    f,
                    "{}: {}: {} (SQLSTATE {})",
                    self.what,
                    db.severity(),
                    db.message(),
                    db.code().code()
                ),
                None => match error.source() {
                    Some(inner) => write!(f, "{}: {error}: {inner}", self.what),
                    None => write!(f, "{}: {error}", self.what),
                },
            },
        }
    }
}

impl std::error::Error for PgError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.server_error()
            .map(|e| e as &(dyn std::error::Error + 'static))
    }
}

impl PgError {
    /// The `LockError` a caller sees: which lock, what dlock was doing, which kind of fault.
    pub(crate) fn into_lock_error(
        self,
        name: &str,
        op: &'static str,
        url: &str,
    ) -> crate::error::LockError {
        let classes = (self.is_link_error(), self.is_not_now());
        crate::error::LockError::store_failure(
            (name, op),
            ("postgres", url),
            classes,
            Box::new(self),
        )
    }
}
