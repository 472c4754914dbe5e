//! `ZkError`: a ZooKeeper request's failure, and what it means to the machinery's retries.

use std::fmt;

use zookeeper_client::Error;

/// Why a request to ZooKeeper failed: the request and the client's error, or a refusal of
/// dlock's own (a kind the store does not offer).
#[derive(Debug)]
pub(crate) struct ZkError {
    /// What was being done ("creating the lock's child node", ...).
    doing: String,
    cause: Cause,
}

#[derive(Debug)]
enum Cause {
    Client(Error),
    /// The request did not come back within dlock's own bound.
    Timeout,
    Refused(String),
    /// A semaphore in use with another permit count, which its node keeps.
    Permits(u32),
}

impl ZkError {
    pub(crate) fn client(doing: impl Into<String>, e: Error) -> Self {
        ZkError {
            doing: doing.into(),
            cause: Cause::Client(e),
        }
    }

    pub(crate) fn timeout(doing: impl Into<String>) -> Self {
        ZkError {
            doing: doing.into(),
            cause: Cause::Timeout,
        }
    }

    pub(crate) fn refused(doing: impl Into<String>, why: impl Into<String>) -> Self {
        ZkError {
            doing: doing.into(),
            cause: Cause::Refused(why.into()),
        }
    }

    /// A semaphore whose node `base` keeps another permit count, `stored`.
    pub(crate) fn permits(base: &str, stored: u32) -> Self {
        ZkError {
            doing: format!("using the semaphore {base}"),
            cause: Cause::Permits(stored),
        }
    }

    /// The count a semaphore's node keeps, when this is a permit-count mismatch.
    pub(crate) fn stored_permits(&self) -> Option<u32> {
        match self.cause {
            Cause::Permits(n) => Some(n),
            _ => None,
        }
    }

    /// A kind this store does not offer, named with the store.
    pub(crate) fn not_offered(kind_id: &str) -> Self {
        ZkError::refused(
            format!("using a {kind_id} lock"),
            format!("the ZooKeeper store does not offer the {kind_id} lock kind"),
        )
    }

    /// The connection broke, did not answer, or the session ended: the request may or may not
    /// have run (a create may have made its node: it is found again by its protected name).
    pub(crate) fn is_link_error(&self) -> bool {
        match &self.cause {
            Cause::Timeout => true,
            Cause::Refused(_) | Cause::Permits(_) => false,
            // `Custom` is the client's "no response from connection in ..." when a server went
            // silent; `SessionExpired` and `ClientClosed` end a session this store replaces.
            Cause::Client(e) => matches!(
                e,
                Error::ConnectionLoss
                    | Error::Timeout
                    | Error::Custom(_)
                    | Error::SessionExpired
                    | Error::ClientClosed
                    | Error::NoHosts
                    | Error::SessionMoved
            ),
        }
    }

    /// The connection broke under the request while the session may live: the client fails
    /// requests in flight with the error that ended their connection (`ConnectionLoss` for a
    /// closed one, `Custom` for a reset or a server that stopped answering) and connects again
    /// by itself, to this server or another. The request may or may not have run. dlock's own
    /// response timeout is not one of these: that request may still be in flight on a live
    /// connection.
    pub(crate) fn is_connection_drop(&self) -> bool {
        matches!(
            &self.cause,
            Cause::Client(Error::ConnectionLoss | Error::Custom(_))
        )
    }

    /// The server said "not now": nothing ran.
    pub(crate) fn is_not_now(&self) -> bool {
        matches!(
            &self.cause,
            Cause::Client(Error::Throttled | Error::NotReadOnly)
        )
    }

    /// As a `LockError` naming the lock, the operation and the ensemble.
    pub(crate) fn into_lock_error(
        self,
        name: &str,
        op: &'static str,
        url: &str,
    ) -> crate::error::LockError {
        let classes = (self.is_link_error(), self.is_not_now());
        crate::error::LockError::store_failure(
            (name, op),
            ("zookeeper", url),
            classes,
            Box::new(self),
        )
    }
}

impl fmt::Display for ZkError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.cause {
            Cause::Client(Error::NoAuth) => write!(
                f,
                "{}: not authorized (the node's ACL does not let this client's digest user in: put user:password@ in the zk:// URL)",
                self.doing
            ),
            Cause::Client(e) => write!(f, "{}: {e}", self.doing),
            Cause::Timeout => write!(f, "{}: no reply within the response timeout", self.doing),
            Cause::Refused(why) => write!(f, "{}: {why}", self.doing),
            Cause::Permits(n) => write!(f, "{}: in use with {n} permits", self.doing),
        }
    }
}

impl std::error::Error for ZkError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match &self.cause {
            Cause::Client(e) => Some(e),
            _ => None,
        }
    }
}
