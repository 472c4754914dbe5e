//! A PostgreSQL store, read through the runtime: a `LockClient` of the store (its connection
//! code, TLS and schema name, not a second copy of them here) and
//! `dlock_runtime::inspect::stored_locks`, one read-only statement per read. Its keys are the
//! Redis keys' strings, so `parse_key` names each lock and kind.
//!
//! Waiters are not counted: a PostgreSQL waiter LISTENs on its own session, and no session can
//! see another's channels (`waiting_clients` stays `None`, shown `-`).

use dlock_runtime::inspect::{self, parse_key, Kind, Layout, Part, StoredLock};
use dlock_runtime::LockClient;

use crate::args::Target;
use crate::snapshot::{Holder, LockView, Permits};

pub struct Store {
    client: LockClient,
    prefix: String,
    shown: String,
}

impl Store {
    pub async fn open(target: &Target, prefix: &str) -> Result<Store, String> {
        let url = target.single_url();
        let shown = inspect::redact_url(&url);
        let client = LockClient::builder(url)
            .key_prefix(prefix)
            .postgres_schema(&target.postgres_schema)
            // One connection for requests is all a read needs.
            .connections(1)
            .response_timeout(target.timeout)
            .connect_timeout(target.timeout)
            .build()
            .await
            .map_err(|e| e.to_string())?;
        Ok(Store {
            client,
            prefix: prefix.to_owned(),
            shown: format!("{shown} (schema {})", target.postgres_schema),
        })
    }

    pub fn shown(&self) -> &str {
        &self.shown
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
            .filter_map(|lock| view(&self.prefix, lock))
            .filter(|(layout, _)| name.is_none_or(|n| layout.name == n))
            .collect();
        views.sort_by(|(a, _), (b, _)| (&a.name, a.kind).cmp(&(&b.name, b.kind)));
        Ok(views)
    }
}

/// A stored lock as the inspector shows it; `None` for a key of another prefix (clients with
/// other prefixes may share the schema: their locks are not listed, as on Redis).
fn view(prefix: &str, lock: &StoredLock) -> Option<(Layout, LockView)> {
    let key = lock.whole_key.as_deref().unwrap_or(&lock.key);
    let info = parse_key(prefix, key).filter(|info| info.part == Part::Holders)?;
    let layout = Layout::new(prefix, info.kind, &info.name);
    let mut view = LockView::empty(&layout);
    let mut holders: Vec<Holder> = lock
        .holders
        .iter()
        .map(|h| {
            let (side, owner) = match (info.kind, h.owner.split_once(':')) {
                (Kind::ReadWrite, Some(("r", owner))) => (Some("read"), owner),
                (Kind::ReadWrite, Some(("w", owner))) => (Some("write"), owner),
                _ => (None, h.owner.as_str()),
            };
            // Each permit and each reader has a lease of its own (as on Redis).
            let ttl_ms = matches!(info.kind, Kind::Semaphore | Kind::ReadWrite).then_some(h.ttl_ms);
            Holder::new(owner.to_owned(), h.count, side, ttl_ms)
        })
        .collect();
    holders.sort();
    view.pttl_ms = lock.holders.iter().map(|h| h.ttl_ms).max();
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
    if info.kind == Kind::Fair {
        view.queue = Some(lock.queue.clone());
    }
    view.writer_waiting = lock.writer_waiting.as_ref().map(|w| w.owner.clone());
    view.held = !holders.is_empty();
    view.holders = holders;
    Some((layout, view))
}
