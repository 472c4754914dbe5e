//! A store's failures, classified the way every retry in the machinery reads them.

use crate::error::{LockError, StoreFault};
use crate::store::redis::backend::retry;

/// Why a store request failed.
#[derive(Debug)]
pub(crate) enum StoreError {
    Redis(redis::RedisError),
    #[cfg(feature = "postgres")]
    Postgres(crate::store::postgres::errors::PgError),
    #[cfg(feature = "zookeeper")]
    Zookeeper(crate::store::zookeeper::errors::ZkError),
}

impl StoreError {
    /// The link broke or did not answer: the request may or may not have run.
    pub(crate) fn is_link_error(&self) -> bool {
        match self {
            StoreError::Redis(e) => retry::is_link_error(e),
            #[cfg(feature = "postgres")]
            StoreError::Postgres(e) => e.is_link_error(),
            #[cfg(feature = "zookeeper")]
            StoreError::Zookeeper(e) => e.is_link_error(),
        }
    }

    /// The server said "not now" (loading, recovering, a standby): nothing ran.
    pub(crate) fn is_not_now(&self) -> bool {
        match self {
            StoreError::Redis(e) => retry::is_not_now(e),
            #[cfg(feature = "postgres")]
            StoreError::Postgres(e) => e.is_not_now(),
            #[cfg(feature = "zookeeper")]
            StoreError::Zookeeper(e) => e.is_not_now(),
        }
    }

    /// Waited out by retries: a broken link or a "not now".
    pub(crate) fn is_transient(&self) -> bool {
        self.is_link_error() || self.is_not_now()
    }

    /// The server answered with an error: its scripts and functions check before they write,
    /// so nothing changed.
    pub(crate) fn ran_nothing(&self) -> bool {
        match self {
            StoreError::Redis(e) => matches!(e.kind(), redis::ErrorKind::Server(_)),
            #[cfg(feature = "postgres")]
            StoreError::Postgres(e) => !e.is_link_error(),
            #[cfg(feature = "zookeeper")]
            StoreError::Zookeeper(e) => !e.is_link_error(),
        }
    }
}

impl std::fmt::Display for StoreError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StoreError::Redis(e) => e.fmt(f),
            #[cfg(feature = "postgres")]
            StoreError::Postgres(e) => e.fmt(f),
            #[cfg(feature = "zookeeper")]
            StoreError::Zookeeper(e) => e.fmt(f),
        }
    }
}

/// Whether a `LockError` reports a passing fault of the store (see [`StoreError::is_transient`]).
pub(crate) fn is_transient(e: &LockError) -> bool {
    match e {
        LockError::Redis { source, .. } => retry::is_transient(source),
        LockError::Store { fault, .. } => {
            matches!(fault, StoreFault::Unreachable | StoreFault::NotNow)
        }
        _ => false,
    }
}

/// Whether a `LockError` reports a broken link to the store.
pub(crate) fn is_link_error(e: &LockError) -> bool {
    match e {
        LockError::Redis { source, .. } => retry::is_link_error(source),
        LockError::Store { fault, .. } => *fault == StoreFault::Unreachable,
        _ => false,
    }
}

/// Whether a `LockError` reports a server's "not now".
pub(crate) fn is_not_now(e: &LockError) -> bool {
    match e {
        LockError::Redis { source, .. } => retry::is_not_now(source),
        LockError::Store { fault, .. } => *fault == StoreFault::NotNow,
        _ => false,
    }
}
