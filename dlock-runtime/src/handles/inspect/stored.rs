//! Reading the locks of a store that answers queries (PostgreSQL), through a client of it.

use super::layout::{Kind, Layout};
use crate::error::LockError;
use crate::handles::client::LockClient;
use crate::store::stored::StoredLock;

/// The locks `client`'s store keeps now with a live hold or a waiting writer: every one, or
/// with `name`, the locks of that name (one per kind in use). Each comes with its holders
/// (owner, hold count, lease left by the store's clock), a semaphore's permit count and a
/// read-write lock's waiting writer; [`parse_key`](super::parse_key) reads its key back as a
/// name and kind.
///
/// Who *waits* is not part of it: a PostgreSQL waiter LISTENs on its own session, and no
/// session can see another's LISTEN channels.
///
/// A store that answers no such query is refused: on Redis, scan the keys and read them by
/// kind ([`Layout`], [`parse_key`](super::parse_key)), as the `dlock` inspector does.
pub async fn stored_locks(
    client: &LockClient,
    name: Option<&str>,
) -> Result<Vec<StoredLock>, LockError> {
    let shared = &client.shared;
    let keys: Option<Vec<String>> = name.map(|name| {
        Kind::ALL
            .iter()
            .map(|k| Layout::new(&shared.prefix, *k, name).key)
            .collect()
    });
    // Bounded by the store: the connect and response timeouts of the client's builder.
    let locks = (shared.link().stored_locks(keys.as_deref()).await)
        .map_err(|e| shared.store_error(name.unwrap_or_default(), "", "stored_locks", e))?;
    locks.ok_or_else(|| {
        LockError::invalid(
            "",
            format!(
                "dlock::inspect::stored_locks reads stores that answer queries (PostgreSQL); \
                 this client's store is Redis ({}): scan its keys and read them by kind \
                 (dlock::inspect::Layout, parse_key), as the `dlock` inspector does",
                shared.url
            ),
        )
    })
}
