//! The store's fixed set of connections: each opened on the client's own runtime, reopened by
//! one caller when it closed, forgotten after a call timed out on it.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use tokio::runtime::Handle;
use tokio_postgres::{Client, Statement};

use super::calls::Calls;
use super::errors::PgError;
use super::schema::Schema;
use super::tls::PgConnect;

/// What every link of the store shares.
pub(super) struct Inner {
    /// The server, its settings and its TLS.
    pub(super) connect: PgConnect,
    pub(super) schema: Schema,
    /// The SQL text of every call, built once for the schema.
    pub(super) calls: Calls,
    pub(super) slots: Vec<Slot>,
    /// The next slot `any_link` hands out.
    pub(super) next: AtomicUsize,
    pub(super) connect_timeout: Duration,
    pub(super) response_timeout: Duration,
    /// Calls go as named statements, prepared once per connection (the builder's
    /// `postgres_prepared_statements`).
    pub(super) prepared: AtomicBool,
    /// The client's own runtime: connections are opened and driven there, so they outlive
    /// whichever runtime the caller happens to run on.
    pub(super) rt: Handle,
}

/// One connection of the store.
pub(super) struct Slot {
    /// The open client, if any. A std mutex: held only to clone or swap the `Arc`.
    pub(super) client: Mutex<Option<Arc<Client>>>,
    /// Taken while reopening, so one caller reconnects and the others then use its client.
    pub(super) reopening: tokio::sync::Mutex<()>,
    /// The statements prepared on the slot's connection, by SQL text.
    pub(super) statements: Mutex<Prepared>,
}

/// Statements prepared on one connection: they exist only there, so a new connection starts
/// with none.
#[derive(Default)]
pub(super) struct Prepared {
    on: Weak<Client>,
    by_sql: HashMap<String, Statement>,
}

impl Inner {
    pub(super) fn prepared(&self) -> bool {
        self.prepared.load(Ordering::Relaxed)
    }

    /// The statement for `sql` prepared on `client` (the slot's connection), if any.
    pub(super) fn statement(
        &self,
        slot: usize,
        client: &Arc<Client>,
        sql: &str,
    ) -> Option<Statement> {
        let prepared = self.slots[slot]
            .statements
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if !Weak::ptr_eq(&prepared.on, &Arc::downgrade(client)) {
            return None;
        }
        prepared.by_sql.get(sql).cloned()
    }

    /// Keeps `statement`, prepared for `sql` on `client`; the slot's new connection's first
    /// one forgets the old connection's (a caller still on a connection the slot has replaced
    /// keeps nothing).
    pub(super) fn keep_statement(
        &self,
        slot: usize,
        client: &Arc<Client>,
        sql: &str,
        statement: Statement,
    ) {
        let mut prepared = self.slots[slot]
            .statements
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if !Weak::ptr_eq(&prepared.on, &Arc::downgrade(client)) {
            let current = open_client(&self.slots[slot]);
            if !current.is_some_and(|c| Arc::ptr_eq(&c, client)) {
                return;
            }
            *prepared = Prepared {
                on: Arc::downgrade(client),
                by_sql: HashMap::new(),
            };
        }
        prepared.by_sql.insert(sql.to_owned(), statement);
    }

    /// Forgets the statements of `slot` prepared on `client` (the server said one is gone or
    /// stale there).
    pub(super) fn forget_statements(&self, slot: usize, client: &Arc<Client>) {
        let mut prepared = self.slots[slot]
            .statements
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if Weak::ptr_eq(&prepared.on, &Arc::downgrade(client)) {
            *prepared = Prepared::default();
        }
    }

    /// The open client of `slot`, reopened first if it closed.
    pub(super) async fn client(&self, slot: usize) -> Result<Arc<Client>, PgError> {
        let slot = &self.slots[slot];
        if let Some(client) = open_client(slot) {
            return Ok(client);
        }
        let what = "connecting to PostgreSQL";
        // Bounded: the caller ahead reopens within connect_timeout, or gives up.
        let _turn = tokio::time::timeout(self.connect_timeout, slot.reopening.lock())
            .await
            .map_err(|_| PgError::timeout(what, self.connect_timeout))?;
        if let Some(client) = open_client(slot) {
            return Ok(client);
        }
        let connect = self.connect.clone();
        let opening = self.rt.spawn(async move {
            let (client, connection) = connect.connect().await?;
            // Ends when the server or the last `Client` closes it; its error, if any, is
            // seen by the calls in flight, which fail as link errors.
            tokio::spawn(connection);
            Ok::<_, tokio_postgres::Error>(client)
        });
        let client = match tokio::time::timeout(self.connect_timeout, opening).await {
            Err(_) => return Err(PgError::timeout(what, self.connect_timeout)),
            // The client's runtime is shutting down: no more connections.
            Ok(Err(_)) => {
                return Err(PgError::refused(what, "the client's runtime has shut down"));
            }
            Ok(Ok(Err(e))) => return Err(self.connect.failed(what, e)),
            Ok(Ok(Ok(client))) => Arc::new(client),
        };
        *slot.client.lock().unwrap_or_else(|p| p.into_inner()) = Some(client.clone());
        Ok(client)
    }

    /// Forgets `client` if `slot` still uses it (after a timeout: the connection may hang,
    /// and every later call would queue behind the stuck one), so the next call reopens.
    pub(super) fn discard(&self, slot: usize, client: &Arc<Client>) {
        let mut current = self.slots[slot]
            .client
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if current.as_ref().is_some_and(|c| Arc::ptr_eq(c, client)) {
            *current = None;
        }
    }
}

fn open_client(slot: &Slot) -> Option<Arc<Client>> {
    let current = slot.client.lock().unwrap_or_else(|p| p.into_inner());
    current.as_ref().filter(|c| !c.is_closed()).cloned()
}
