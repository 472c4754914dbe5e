//! Reading the locks under this client's root (the URL's chroot) for tools
//! (`dlock::inspect::stored_locks`): every lock node's live children, in line order, read
//! with plain `getChildren` and `getData` requests, which take nothing and watch nothing, so a
//! read never delays a lock operation.
//!
//! Who holds is what the recipes say holds (`link.rs`), not what a client believes: a mutex's
//! first child; a read-write lock's readers ahead of the first writer, or that writer when it
//! is first (with its own reads, which carry its sequence); a semaphore's first `permits`
//! leases (its node's data is the count). Every other child stands in line: `queue`, first
//! first; for a semaphore, leases past the count and then the children of its `locks` mutex.
//!
//! A child's data is its owner id when a dlock client made it; a Curator client writes its
//! host's address there instead, and such a child is shown by its own name (`_c_…-lock-…`),
//! which says where to find it and is never a dlock owner id.
//!
//! ZooKeeper has no snapshot read across nodes: a child that goes between its listing and the
//! read of its data is left out, and the line is judged without it.

use futures_util::stream::{self, StreamExt};
use zookeeper_client::{Client, Error};

use super::errors::ZkError;
use super::link::{Recipe, ZkLink, LEASE, MUTEX, READ, SEM_LOCKS};
use super::names::{key_of, lock_path};
use crate::settings::holder::is_owner_id;
use crate::store::stored::{StoredHold, StoredLock};

/// How many requests of one read are in flight at once. They are pipelined on the one session,
/// so a root of many locks costs a few round trips per batch rather than one per node, without
/// queueing thousands of requests ahead of the lock operations of the same client.
const AT_ONCE: usize = 32;

/// The `ttl_ms` of every ZooKeeper hold: the session is the lease, and how long another
/// client's session has left is visible to no other client (the server keeps it), so there is
/// no number of milliseconds to give; -1 reads "as long as its session lives".
pub(crate) const SESSION_LEASE: i64 = -1;

/// One live child of a lock, as it stands in line.
struct Child {
    seq: i64,
    writer: bool,
    /// Its owner id, or its own name for a child that is not dlock's (a Curator client's).
    owner: String,
}

/// The locks under the root with a holder or somebody in line, sorted by key: those at `keys`,
/// or every node under the root. Each request is bounded by the client's response timeout.
pub(crate) async fn stored_locks(
    link: &ZkLink,
    keys: Option<&[String]>,
) -> Result<Vec<StoredLock>, ZkError> {
    let client = link.store.live_client().await;
    let nodes: Vec<String> = match keys {
        Some(keys) => keys.iter().map(|k| lock_path(k)).collect(),
        // Without a chroot this lists `/zookeeper` too: its children are no lock's, so it is
        // left out as any node without a line is.
        None => (list(link, &client, "/").await?)
            .unwrap_or_default()
            .into_iter()
            .map(|c| format!("/{c}"))
            .collect(),
    };
    let read: Vec<Result<Option<StoredLock>, ZkError>> = stream::iter(&nodes)
        .map(|node| read_lock(link, &client, node))
        .buffered(AT_ONCE)
        .collect()
        .await;
    let mut locks = Vec::with_capacity(read.len());
    for lock in read {
        locks.extend(lock?);
    }
    locks.sort_by(|a, b| a.key.cmp(&b.key));
    Ok(locks)
}

/// The lock at `node`, or `None` when nobody holds it or waits for it (a container node
/// left empty, which the server deletes soon, or a node that is no lock).
async fn read_lock(
    link: &ZkLink,
    client: &Client,
    node: &str,
) -> Result<Option<StoredLock>, ZkError> {
    let Some(children) = list(link, client, node).await? else {
        return Ok(None);
    };
    // A node whose name is no escaped key is shown by its name: still somebody's lock.
    let key = key_of(node).unwrap_or_else(|| node.trim_start_matches('/').to_owned());
    let mut lock = StoredLock::new(key);
    let folder = |r: Recipe| r.dir.trim_start_matches('/').to_owned();
    let semaphore = children
        .iter()
        .any(|c| *c == folder(LEASE) || *c == folder(SEM_LOCKS));
    if semaphore {
        let leases_at = format!("{node}{}", LEASE.dir);
        let locks_at = format!("{node}{}", SEM_LOCKS.dir);
        let (permits, leases, waiting) = futures_util::join!(
            permit_count(link, client, node),
            listed_line(link, client, &leases_at, LEASE),
            listed_line(link, client, &locks_at, SEM_LOCKS),
        );
        let (permits, leases, waiting) = (permits?, leases?, waiting?);
        // Without a count (a semaphore only Curator clients use: they keep none) every lease
        // is shown as held, as each of those clients was told when it took it.
        let held = permits.map_or(leases.len(), |p| leases.len().min(p as usize));
        lock.permits = permits;
        lock.holders = holds(&leases[..held]);
        lock.queue = leases[held..].iter().map(|c| c.owner.clone()).collect();
        // The head waiter of the mutex may have its lease already (past the count): once.
        for c in waiting {
            if !lock.queue.contains(&c.owner) && !lock.holders.iter().any(|h| h.owner == c.owner) {
                lock.queue.push(c.owner);
            }
        }
    } else if children.iter().any(|c| READ.place(c).is_some()) {
        let line = live_line(link, client, node, children, READ).await?;
        let first_writer = line.iter().position(|c| c.writer);
        let held = match first_writer {
            None => line.len(),
            Some(0) => 1,
            // A holding writer's own reads carry its sequence and sort just before it.
            Some(f) if line[..f].iter().all(|c| c.seq == line[f].seq) => f + 1,
            // Readers ahead of the first writer hold; it waits for them.
            Some(f) => f,
        };
        let side = |c: &Child| if c.writer { "w:" } else { "r:" };
        lock.holders = line[..held]
            .iter()
            .map(|c| hold(format!("{}{}", side(c), c.owner)))
            .collect();
        lock.holders.sort();
        // The first writer in line keeps every reader behind it out, as a waiting writer's
        // intent does on the other stores.
        lock.writer_waiting = line[held..]
            .iter()
            .find(|c| c.writer)
            .map(|c| hold(c.owner.clone()));
        lock.queue = line[held..]
            .iter()
            .map(|c| format!("{}{}", side(c), c.owner))
            .collect();
    } else {
        let line = live_line(link, client, node, children, MUTEX).await?;
        lock.holders = holds(&line[..line.len().min(1)]);
        lock.queue = line.iter().skip(1).map(|c| c.owner.clone()).collect();
    }
    Ok((!lock.holders.is_empty() || !lock.queue.is_empty()).then_some(lock))
}

fn hold(owner: String) -> StoredHold {
    // One child is one hold: re-entries are counted by the holder's client alone.
    StoredHold::new(owner, 1, SESSION_LEASE)
}

/// The holds of `children`, sorted by owner as `StoredLock::holders` is.
fn holds(children: &[Child]) -> Vec<StoredHold> {
    let mut holds: Vec<StoredHold> = children.iter().map(|c| hold(c.owner.clone())).collect();
    holds.sort();
    holds
}

/// The children of `path`, `None` when it does not exist.
async fn list(link: &ZkLink, client: &Client, path: &str) -> Result<Option<Vec<String>>, ZkError> {
    let listed = link
        .bounded(
            || format!("listing the children of {path}"),
            client.list_children(path),
        )
        .await?;
    match listed {
        Ok(children) => Ok(Some(children)),
        Err(Error::NoNode) => Ok(None),
        Err(e) => Err(ZkError::client(
            format!("listing the children of {path}"),
            e,
        )),
    }
}

/// The line of `path` (listed first), in order; empty when it does not exist.
async fn listed_line(
    link: &ZkLink,
    client: &Client,
    path: &str,
    recipe: Recipe,
) -> Result<Vec<Child>, ZkError> {
    let children = (list(link, client, path).await?).unwrap_or_default();
    live_line(link, client, path, children, recipe).await
}

/// `children` of `path` that stand in `recipe`'s line, in its order (by sequence, a writer
/// after a read of the same sequence, then by name, as `link.rs` ranks them), each with its
/// owner; those gone before their data was read are left out.
async fn live_line(
    link: &ZkLink,
    client: &Client,
    path: &str,
    children: Vec<String>,
    recipe: Recipe,
) -> Result<Vec<Child>, ZkError> {
    let mut line: Vec<(i64, bool, String)> = children
        .into_iter()
        .filter_map(|c| recipe.place(&c).map(|(seq, writer)| (seq, writer, c)))
        .collect();
    line.sort();
    let read: Vec<Result<Option<Child>, ZkError>> = stream::iter(line)
        .map(|(seq, writer, name)| async move {
            let child = format!("{path}/{name}");
            let data = link
                .bounded(|| format!("reading {child}"), client.get_data(&child))
                .await?;
            let data = match data {
                Ok((data, _)) => data,
                Err(Error::NoNode) => return Ok(None),
                Err(e) => return Err(ZkError::client(format!("reading {child}"), e)),
            };
            let owner = match String::from_utf8(data) {
                Ok(owner) if is_owner_id(&owner) => owner,
                _ => name,
            };
            Ok(Some(Child { seq, writer, owner }))
        })
        .buffered(AT_ONCE)
        .collect()
        .await;
    let mut live = Vec::with_capacity(read.len());
    for child in read {
        live.extend(child?);
    }
    Ok(live)
}

/// A semaphore's permit count, its node's data; `None` where it keeps none (made by Curator).
async fn permit_count(link: &ZkLink, client: &Client, node: &str) -> Result<Option<u32>, ZkError> {
    let read = link
        .bounded(|| format!("reading {node}"), client.get_data(node))
        .await?;
    match read {
        Ok((data, _)) => Ok(std::str::from_utf8(&data).ok().and_then(|t| t.parse().ok())),
        Err(Error::NoNode) => Ok(None),
        Err(e) => Err(ZkError::client(format!("reading {node}"), e)),
    }
}
