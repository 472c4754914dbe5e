//! Reading the locks of a store that answers queries (PostgreSQL, ZooKeeper), through a client
//! of it.

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
/// - **PostgreSQL**: every lock of the client's schema, in one read-only statement. Who
///   *waits* is known for the fair lock alone (its queue table): any other waiter LISTENs on
///   its own session, and no session can see another's LISTEN channels.
/// - **ZooKeeper**: every lock node under the client's root (the URL's chroot), each read from
///   its live children in line order: the holders are those the recipe says hold now, the
///   rest of the line is [`StoredLock::queue`] (every kind's waiters are visible there, each
///   child being a place), a semaphore's count is its node's data. A hold's `ttl_ms` is -1:
///   its lease is its session, whose time left no other client can see. Children written by
///   Curator clients (data that is no owner id) are listed by their node names. Not one
///   snapshot: nodes are read one after another, each request bounded by the client's
///   response timeout.
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
                "dlock::inspect::stored_locks reads stores that answer queries (PostgreSQL, \
                 ZooKeeper); \
                 this client's store is Redis ({}): scan its keys and read them by kind \
                 (dlock::inspect::Layout, parse_key), as the `dlock` inspector does",
                shared.url
            ),
        )
    })
}
