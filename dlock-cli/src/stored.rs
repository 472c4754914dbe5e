//! A store that answers queries (PostgreSQL, ZooKeeper), read through the runtime: a
//! `LockClient` of the store (its connection code, TLS, schema name or chroot, not a second
//! copy of them here) and `dlock_runtime::inspect::stored_locks`. Its keys are the Redis keys'
//! strings, so `parse_key` names each lock and kind.
//!
//! What each shows of waiters:
//! - PostgreSQL: a fair lock's queue alone. A waiter of another kind LISTENs on its own
//!   session, and no session can see another's channels (`waiting_clients` stays `None`,
//!   shown `-`).
//! - ZooKeeper: every kind's line (a waiter's child is its place), so the queue of every lock
//!   and its waiting clients (the distinct clients of that queue). A hold's lease is its
//!   session, whose time left no other client sees: no TTL is shown (`-`).

use std::collections::BTreeSet;

use dlock_runtime::inspect::{self, parse_key, Holder as OwnerId, Kind, Layout, Part, StoredLock};
use dlock_runtime::LockClient;

use crate::args::Target;
use crate::snapshot::{Holder, LockView, Permits};

/// Which store a [`Store`] reads.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Which {
    #[cfg(feature = "postgres")]
    Postgres,
    #[cfg(feature = "zookeeper")]
    Zookeeper,
}

impl Which {
    /// "PostgreSQL" or "ZooKeeper", for messages.
    pub fn name(self) -> &'static str {
        match self {
            #[cfg(feature = "postgres")]
            Which::Postgres => "PostgreSQL",
            #[cfg(feature = "zookeeper")]
            Which::Zookeeper => "ZooKeeper",
        }
    }
}

pub struct Store {
    client: LockClient,
    prefix: String,
    shown: String,
    which: Which,
}

impl Store {
    pub async fn open(target: &Target, prefix: &str, which: Which) -> Result<Store, String> {
        let url = target.single_url();
        let shown = inspect::redact_url(&url);
        let builder = LockClient::builder(url)
            .key_prefix(prefix)
            .response_timeout(target.timeout)
            .connect_timeout(target.timeout);
        let (builder, shown) = match which {
            #[cfg(feature = "postgres")]
            Which::Postgres => (
                builder
                    .postgres_schema(&target.postgres_schema)
                    // One connection for requests is all a read needs.
                    .connections(1),
                format!("{shown} (schema {})", target.postgres_schema),
            ),
            // Nothing to add: the URL's chroot is the root read, and the inspector's session
            // holds nothing, so its timeout matters to no lock.
            #[cfg(feature = "zookeeper")]
            Which::Zookeeper => (builder, shown),
        };
        let client = builder.build().await.map_err(|e| e.to_string())?;
        Ok(Store {
            client,
            prefix: prefix.to_owned(),
            shown,
            which,
        })
    }

    pub fn shown(&self) -> &str {
        &self.shown
    }

    pub fn which(&self) -> Which {
        self.which
    }

    pub fn client(&self) -> &LockClient {
        &self.client
    }

    /// The locks in use under the prefix (of `name`, or all), sorted by name and kind.
    pub async fn views(&self, name: Option<&str>) -> Result<Vec<(Layout, LockView)>, String> {
        let stored = inspect::stored_locks(&self.client, name)
            .await
            .map_err(|e| e.to_string())?;
        let mut views: Vec<(Layout, LockView)> = stored
            .iter()
            .filter_map(|lock| view(&self.prefix, lock, self.which))
            .filter(|(layout, _)| name.is_none_or(|n| layout.name == n))
            .collect();
        views.sort_by(|(a, _), (b, _)| (&a.name, a.kind).cmp(&(&b.name, b.kind)));
        Ok(views)
    }
}

/// A stored lock as the inspector shows it; `None` for a key of another prefix (clients with
/// other prefixes may share the schema or chroot: their locks are not listed, as on Redis).
fn view(prefix: &str, lock: &StoredLock, which: Which) -> Option<(Layout, LockView)> {
    let key = lock.whole_key.as_deref().unwrap_or(&lock.key);
    let info = parse_key(prefix, key).filter(|info| info.part == Part::Holders)?;
    let layout = Layout::new(prefix, info.kind, &info.name);
    let mut view = LockView::empty(&layout);
    #[cfg(feature = "zookeeper")]
    let session_lease = which == Which::Zookeeper;
    #[cfg(not(feature = "zookeeper"))]
    let session_lease = {
        let _ = which;
        false
    };
    let mut holders: Vec<Holder> = lock
        .holders
        .iter()
        .map(|h| {
            let (side, owner) = side(info.kind, &h.owner);
            // Each permit and each reader has a lease of its own (as on Redis); a ZooKeeper
            // hold's is its session, whose time left nobody else can see.
            let ttl_ms = (matches!(info.kind, Kind::Semaphore | Kind::ReadWrite) && !session_lease)
                .then_some(h.ttl_ms);
            Holder::new(owner.to_owned(), h.count, side, ttl_ms)
        })
        .collect();
    holders.sort();
    if !session_lease {
        view.pttl_ms = lock.holders.iter().map(|h| h.ttl_ms).max();
    }
    if info.kind == Kind::ReadWrite && !holders.is_empty() {
        let writing = holders.iter().any(|h| h.side == Some("write"));
        view.mode = Some(if writing { "write" } else { "read" }.to_owned());
    }
    if info.kind == Kind::Semaphore {
        view.permits = Some(Permits {
            used: holders.len() as u64,
            total: lock.permits.map(u64::from),
        });
    }
    if info.kind == Kind::Fair || session_lease {
        view.queue = Some(lock.queue.clone());
    }
    if session_lease {
        // Every waiter stands in line there: its distinct clients are the waiting clients.
        let clients: BTreeSet<String> = lock
            .queue
            .iter()
            .map(|o| {
                let id = OwnerId::parse(side(info.kind, o).1).owner_id;
                id.split_once(':').map_or(id.clone(), |(c, _)| c.to_owned())
            })
            .collect();
        view.waiting_clients = Some(clients.len() as u64);
    }
    view.writer_waiting = lock.writer_waiting.as_ref().map(|w| w.owner.clone());
    view.held = !holders.is_empty();
    view.holders = holders;
    Some((layout, view))
}

/// A read-write lock's owner split into its side and owner id (`r:<owner>`, `w:<owner>`).
fn side(kind: Kind, owner: &str) -> (Option<&'static str>, &str) {
    match (kind, owner.split_once(':')) {
        (Kind::ReadWrite, Some(("r", owner))) => (Some("read"), owner),
        (Kind::ReadWrite, Some(("w", owner))) => (Some("write"), owner),
        _ => (None, owner),
    }
}
