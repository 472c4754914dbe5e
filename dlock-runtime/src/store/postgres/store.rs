//! `PgStore`: a fixed set of connections to PostgreSQL, each one a pipelined
//! `tokio_postgres::Client` that carries any number of concurrent calls in order, reopened
//! lazily when it closed. Locks are spread over them by key, so the calls of one lock keep
//! their order (a release, then the next acquire) and the connection count never grows with
//! the number of waiting tasks.

use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::calls::Calls;
use super::connections::{Inner, Slot};
use super::errors::PgError;
use super::link::PgLink;
use super::schema::{self, Schema};
use super::tls::PgConnect;
use tokio::runtime::Handle;

/// The PostgreSQL store of one client.
pub(crate) struct PgStore {
    inner: Arc<Inner>,
}

impl PgStore {
    /// Opens `connections` connections (at least one) to the server `connect` names (with its
    /// TLS), and makes sure dlock's schema `schema` is there at this version (migrating it if
    /// not).
    pub(crate) async fn connect(
        connect: impl Into<PgConnect>,
        schema: &str,
        connections: usize,
        connect_timeout: Duration,
        response_timeout: Duration,
        rt: &Handle,
    ) -> Result<Arc<PgStore>, PgError> {
        let schema = Schema::new(schema)?;
        let slots = (0..connections.max(1))
            .map(|_| Slot {
                client: Mutex::new(None),
                reopening: tokio::sync::Mutex::new(()),
                statements: Mutex::new(Default::default()),
            })
            .collect();
        let store = Arc::new(PgStore {
            inner: Arc::new(Inner {
                calls: Calls::new(&schema),
                connect: connect.into(),
                schema,
                slots,
                next: AtomicUsize::new(0),
                connect_timeout,
                response_timeout,
                prepared: false.into(),
                rt: rt.clone(),
            }),
        });
        // Open every connection now, so a wrong URL or password fails here, not at the first
        // lock; the schema check runs on the first.
        for slot in 0..store.inner.slots.len() {
            store.inner.client(slot).await?;
        }
        store.ensure_schema().await?;
        Ok(store)
    }

    /// Sends every call as a named statement, prepared once per connection (`on`), or as its
    /// text with its parameters' types (the default: no statement a pooler could lose).
    pub(crate) fn prepare_statements(&self, on: bool) {
        self.inner
            .prepared
            .store(on, std::sync::atomic::Ordering::Relaxed);
    }

    /// Creates or updates dlock's tables and functions (idempotent; safe from many clients at
    /// once). Needs CREATE on the schema (and on the database, if the schema is missing).
    pub(crate) async fn migrate(&self) -> Result<(), PgError> {
        let client = self.inner.client(0).await?;
        schema::migrate(
            &client,
            &self.inner.schema,
            schema::migration_timeout(self.inner.response_timeout),
        )
        .await
    }

    /// Migrates unless the schema is already at this version or newer: the common case costs
    /// one read, and a role without CREATE works with a schema an owner migrated.
    async fn ensure_schema(&self) -> Result<(), PgError> {
        let client = self.inner.client(0).await?;
        let what = format!("reading dlock's schema {}", self.inner.schema.quoted());
        let read = async {
            match schema::stored_version(&client, &self.inner.schema).await {
                // No access to a schema or tables someone else created: say what to grant.
                Err(e) if e.code().map(|c| c.code()) == Some("42501") => {
                    Err(schema::no_access(&client, &self.inner.schema, e).await)
                }
                other => other.map_err(|e| PgError::postgres(what.clone(), e)),
            }
        };
        let version = tokio::time::timeout(self.inner.response_timeout, read)
            .await
            .map_err(|_| PgError::timeout(what.clone(), self.inner.response_timeout))??;
        if version.is_some_and(|v| v >= schema::VERSION) {
            return Ok(());
        }
        self.migrate().await
    }

    /// The link that carries every call about `key`: always the same connection for the same
    /// key, so calls about one lock arrive in the order they were made.
    pub(crate) fn link_for(&self, key: &str) -> PgLink {
        let mut hasher = DefaultHasher::new();
        key.hash(&mut hasher);
        let slot = (hasher.finish() % self.inner.slots.len() as u64) as usize;
        PgLink::new(self.inner.clone(), slot)
    }

    /// A link for calls tied to no key (the server's clock), taken in turn.
    pub(crate) fn any_link(&self) -> PgLink {
        let slot = self.inner.next.fetch_add(1, Ordering::Relaxed) % self.inner.slots.len();
        PgLink::new(self.inner.clone(), slot)
    }
}
