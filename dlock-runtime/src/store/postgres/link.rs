//! `PgLink`: one connection of the store, and the ops the machinery sends through it. Each op
//! is one call of one of dlock's SQL functions in autocommit (so it works through a
//! transaction-mode pooler), with replies shaped like the Lua scripts' so the decoders in
//! `store/redis/kinds/` read them unchanged. Every call is bounded by the response timeout.

use std::borrow::Cow;
use std::sync::Arc;
use std::time::Duration;

use tokio_postgres::error::SqlState;
use tokio_postgres::types::{FromSql, ToSql, Type};
use tokio_postgres::{Client, Row};

use super::channel::pg_channel;
use super::connections::Inner;
use super::errors::PgError;
use super::names::{stored, stored_and_whole};
use crate::store::redis::backend::names::LockKeys;
use crate::store::redis::kinds::{Claim, LockKind, WRITER_INTENT};

/// The kinds this store offers, by `LockKind::id`.
enum Offered {
    Plain,
    Semaphore,
    /// A side of a read-write lock: 'r' or 'w'.
    Rw(&'static str),
    Fair,
}

fn offered(kind: &dyn LockKind) -> Result<Offered, PgError> {
    match kind.id() {
        "plain" => Ok(Offered::Plain),
        "semaphore" => Ok(Offered::Semaphore),
        "read" => Ok(Offered::Rw("r")),
        "write" => Ok(Offered::Rw("w")),
        "fair" => Ok(Offered::Fair),
        // The Redisson kinds speak Redisson's protocol on Redis: not here.
        other => Err(PgError::not_offered(other)),
    }
}

/// What a server connection that is not the one the statements were prepared on answers (a
/// pooler in transaction mode handed the call to another): no statement of that name (26000),
/// one of that name already there (42P05), or another client's statement of that name, with
/// other parameters (08P01) or of other types (22P03).
fn lost_statement(e: &tokio_postgres::Error) -> bool {
    [
        SqlState::INVALID_SQL_STATEMENT_NAME,
        SqlState::DUPLICATE_PSTATEMENT,
        SqlState::PROTOCOL_VIOLATION,
        SqlState::INVALID_BINARY_REPRESENTATION,
    ]
    .iter()
    .any(|c| e.code() == Some(c))
}

/// "cached plan must not change result type": prepared before what it reads changed (0A000
/// is any feature not supported: the routine that raises this one tells it apart, in every
/// server language).
fn stale_statement(e: &tokio_postgres::Error) -> bool {
    e.code() == Some(&SqlState::FEATURE_NOT_SUPPORTED)
        && e.as_db_error().and_then(|d| d.routine()) == Some("RevalidateCachedQuery")
}

/// Column `i` of a reply; a reply of another shape (a schema migrated by another version) is
/// an error, not a panic.
fn column<'a, T: FromSql<'a>>(row: &'a Row, i: usize) -> Result<T, PgError> {
    row.try_get(i)
        .map_err(|e| PgError::postgres("reading the reply of dlock's SQL function", e))
}

/// A duration as the whole ms the SQL functions take.
fn ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// The lease a partial release refreshes: none for a hard lease, whose end never moves.
fn refresh(claim: &Claim) -> i64 {
    if claim.hard {
        0
    } else {
        ms(claim.lease)
    }
}

/// How long a fair lock's waiter keeps its place without coming back, and how long a grant
/// lasts before its owner renews it: the kind's grant lifetime, as on Redis.
fn keep_place(kind: &dyn LockKind) -> Result<i64, PgError> {
    kind.grant_lifetime()
        .map(ms)
        .ok_or_else(|| PgError::refused("using a fair lock", "its grant lifetime is unknown"))
}

fn permits(kind: &dyn LockKind) -> Result<i32, PgError> {
    kind.permits()
        .and_then(|p| i32::try_from(p).ok())
        .ok_or_else(|| PgError::refused("using a semaphore", "its permit count is unknown"))
}

/// The names PostgreSQL keeps for a claim's lock and one request id (a latch or a marker),
/// made once per op: NUL escaped, a long one hashed (`names.rs`). Hashing is not idempotent,
/// so an op passes on the originals to a helper that makes its own.
struct Stored<'a> {
    key: Cow<'a, str>,
    fence: Cow<'a, str>,
    id: Cow<'a, str>,
}

impl<'a> Stored<'a> {
    fn of(claim: &'a Claim, id: &'a str) -> Self {
        Stored {
            key: stored(&claim.keys.key),
            fence: stored(&claim.keys.fence),
            id: stored(id),
        }
    }

    fn key(&self) -> &str {
        &self.key
    }

    fn fence(&self) -> &str {
        &self.fence
    }

    fn id(&self) -> &str {
        &self.id
    }
}

/// One connection of a [`super::store::PgStore`].
#[derive(Clone)]
pub(crate) struct PgLink {
    inner: Arc<Inner>,
    slot: usize,
}

impl PgLink {
    pub(super) fn new(inner: Arc<Inner>, slot: usize) -> PgLink {
        PgLink { inner, slot }
    }

    /// The store's connection this link sends on.
    pub(crate) fn slot(&self) -> usize {
        self.slot
    }

    /// The schema dlock's tables are in.
    pub(super) fn schema(&self) -> &super::schema::Schema {
        &self.inner.schema
    }

    /// Runs `sql` and returns its one row; a timeout or a closed connection is a link error,
    /// and the connection is reopened by the next call.
    async fn call(
        &self,
        what: impl Fn() -> String,
        sql: &str,
        params: &[(&(dyn ToSql + Sync), Type)],
    ) -> Result<Row, PgError> {
        let rows = self.query(&what, sql, params).await?;
        rows.into_iter()
            .next()
            .ok_or_else(|| PgError::refused(what(), "dlock's SQL function returned no row"))
    }

    /// Runs `sql` and returns every row it gave, bounded and classified as [`PgLink::call`].
    pub(super) async fn query(
        &self,
        what: impl Fn() -> String,
        sql: &str,
        params: &[(&(dyn ToSql + Sync), Type)],
    ) -> Result<Vec<Row>, PgError> {
        let timeout = self.inner.response_timeout;
        let deadline = tokio::time::Instant::now() + timeout;
        // A connection the server closed while it sat idle (pg_terminate_backend, an idle
        // timeout, a restart) may not be seen as closed until a request meets it: that request
        // is sent once more on a fresh connection. Every op is safe to run twice (an acquire
        // of the same owner is answered as the first run was, a release has its latch, an
        // undo its marker), so a request that did reach the server costs nothing more.
        let mut resent = false;
        loop {
            let client = self.inner.client(self.slot).await?;
            match tokio::time::timeout_at(deadline, self.run(&client, sql, params)).await {
                Err(_) => {
                    self.inner.discard(self.slot, &client);
                    return Err(PgError::timeout(what(), timeout));
                }
                Ok(Err(e)) if self.inner.prepared() && lost_statement(&e) => {
                    self.inner.forget_statements(self.slot, &client);
                    return Err(PgError::explained(
                        what(),
                        "the server connection does not have dlock's prepared statements: a \
                         pooler in transaction mode that does not keep prepared statements per \
                         client (PgBouncer before 1.21, or max_prepared_statements = 0) is in \
                         between; turn postgres_prepared_statements off, or connect past the \
                         pooler",
                        e,
                    ));
                }
                Ok(Err(e)) if self.inner.prepared() && stale_statement(&e) && !resent => {
                    // A migration replaced a function since the statement was prepared: the
                    // server refused it before running it.
                    self.inner.forget_statements(self.slot, &client);
                    resent = true;
                }
                Ok(Err(e)) => {
                    // Closed, or the server's goodbye on it (`pg_terminate_backend`, a shutdown:
                    // SQLSTATE 57P01/57P02 read as the reply of the next request sent there).
                    let closed = e.is_closed()
                        || e.code()
                            .is_some_and(|c| super::errors::LINK_GONE.contains(&c.code()));
                    let e = PgError::postgres(what(), e);
                    if e.is_link_error() {
                        self.inner.discard(self.slot, &client);
                    }
                    if !closed || resent {
                        return Err(e);
                    }
                    resent = true;
                }
                Ok(Ok(rows)) => return Ok(rows),
            }
        }
    }

    /// The slot's connection, for a test to act on the session itself.
    #[cfg(test)]
    pub(super) async fn session(&self) -> Arc<Client> {
        self.inner
            .client(self.slot)
            .await
            .expect("the link's connection")
    }

    /// One call of `sql` on `client`: its text with its parameters' types, or the statement
    /// prepared for it on that connection (prepared now, the first time).
    async fn run(
        &self,
        client: &Arc<Client>,
        sql: &str,
        params: &[(&(dyn ToSql + Sync), Type)],
    ) -> Result<Vec<Row>, tokio_postgres::Error> {
        if !self.inner.prepared() {
            return client.query_typed(sql, params).await;
        }
        let statement = match self.inner.statement(self.slot, client, sql) {
            Some(statement) => statement,
            None => {
                let types: Vec<Type> = params.iter().map(|(_, t)| t.clone()).collect();
                let statement = client.prepare_typed(sql, &types).await?;
                self.inner
                    .keep_statement(self.slot, client, sql, statement.clone());
                statement
            }
        };
        let values: Vec<&(dyn ToSql + Sync)> = params.iter().map(|(v, _)| *v).collect();
        client.query(&statement, &values).await
    }

    /// Takes `claim`'s lock, or re-enters it when `reentry` (the marker that lets a cancelled
    /// re-entry be undone once, living `marker_ttl`) is given. The reply is the Lua script's:
    /// `(holds, token)` held, `(0, pttl)` not.
    pub(crate) async fn acquire(
        &self,
        kind: &dyn LockKind,
        claim: &Claim,
        reentry: Option<&str>,
        marker_ttl: Duration,
    ) -> Result<(i64, i64), PgError> {
        let what = || format!("acquiring `{}`", claim.name);
        let lease = ms(claim.lease);
        let offered = offered(kind)?;
        // The text stored for the name (`names.rs`): as it is for nearly every name; a long
        // one's whole text is kept first, so whoever sees its hash in a table can read it. Not
        // again for a re-entry (or a writer's read): the enclosing hold's row keeps it.
        let (key, whole) = stored_and_whole(&claim.keys.key);
        if let (Some(whole), None) = (&whole, reentry) {
            let sql = &self.inner.calls.remember_name;
            let (key, whole): (&str, &str) = (&key, whole);
            self.call(what, sql, &[(&key, Type::TEXT), (&whole, Type::TEXT)])
                .await?;
        }
        let key: &str = &key;
        let fence = stored(&claim.keys.fence);
        let fence: &str = &fence;
        let reentry = reentry.map(stored);
        let reentry: Option<&str> = reentry.as_deref();
        let row = match offered {
            Offered::Plain => {
                let sql = &self.inner.calls.plain_acquire;
                self.call(
                    what,
                    sql,
                    &[
                        (&key, Type::TEXT),
                        (&fence, Type::TEXT),
                        (&reentry, Type::TEXT),
                        (&lease, Type::INT8),
                        (&claim.owner, Type::TEXT),
                        (&ms(marker_ttl), Type::INT8),
                        (&claim.hard, Type::BOOL),
                    ],
                )
                .await?
            }
            Offered::Semaphore => {
                let sql = &self.inner.calls.sem_acquire;
                self.call(
                    what,
                    sql,
                    &[
                        (&key, Type::TEXT),
                        (&lease, Type::INT8),
                        (&claim.owner, Type::TEXT),
                        (&permits(kind)?, Type::INT4),
                    ],
                )
                .await?
            }
            Offered::Rw(side) => {
                let sql = &self.inner.calls.rw_acquire;
                self.call(
                    what,
                    sql,
                    &[
                        (&key, Type::TEXT),
                        (&fence, Type::TEXT),
                        (&reentry, Type::TEXT),
                        (&side, Type::TEXT),
                        (&claim.owner, Type::TEXT),
                        (&lease, Type::INT8),
                        (&ms(marker_ttl), Type::INT8),
                        (&claim.hard, Type::BOOL),
                        (&ms(WRITER_INTENT), Type::INT8),
                    ],
                )
                .await?
            }
            Offered::Fair => {
                let sql = &self.inner.calls.fair_acquire;
                // Where a release tells this owner it was granted: the channel it listens on.
                let grant = pg_channel(&kind.wait_channel(claim));
                self.call(
                    what,
                    sql,
                    &[
                        (&key, Type::TEXT),
                        (&fence, Type::TEXT),
                        (&reentry, Type::TEXT),
                        (&lease, Type::INT8),
                        (&claim.owner, Type::TEXT),
                        (&ms(marker_ttl), Type::INT8),
                        (&claim.hard, Type::BOOL),
                        (&keep_place(kind)?, Type::INT8),
                        (&grant, Type::TEXT),
                    ],
                )
                .await?
            }
        };
        Ok((column(&row, 0)?, column(&row, 1)?))
    }

    /// Gives back one hold, at most once per `latch` (a release request id, remembered for
    /// `latch_ttl`). The reply is the holds left, or -1 when `claim.owner` holds nothing; with
    /// `Some(-2)` when this release freed a plain lock: -2 listeners means unknown, because
    /// PostgreSQL cannot count who LISTENs (the machinery takes it as "someone may").
    pub(crate) async fn release(
        &self,
        kind: &dyn LockKind,
        claim: &Claim,
        latch: &str,
        latch_ttl: Duration,
    ) -> Result<(i64, Option<i64>), PgError> {
        let what = || format!("releasing `{}`", claim.name);
        let channel = pg_channel(&claim.keys.channel);
        let names = Stored::of(claim, latch);
        match offered(kind)? {
            Offered::Plain => {
                let sql = &self.inner.calls.plain_release;
                let (key, latch) = (names.key(), names.id());
                let row = self
                    .call(
                        what,
                        sql,
                        &[
                            (&key, Type::TEXT),
                            (&channel, Type::TEXT),
                            (&latch, Type::TEXT),
                            (&claim.owner, Type::TEXT),
                            (&refresh(claim), Type::INT8),
                            (&ms(latch_ttl), Type::INT8),
                        ],
                    )
                    .await?;
                Ok((column(&row, 0)?, column(&row, 1)?))
            }
            Offered::Semaphore => {
                let left = self
                    .sem_release(what, claim, &channel, latch, latch_ttl)
                    .await?;
                Ok((left, None))
            }
            Offered::Rw(side) => {
                let left = self
                    .rw_release(what, claim, &channel, side, latch, latch_ttl, "latch")
                    .await?;
                Ok((left, None))
            }
            // As on Redis, the bare count: a freed fair lock is granted to the next waiter
            // rather than announced to listeners.
            Offered::Fair => {
                let sql = &self.inner.calls.fair_release;
                let (key, fence, latch) = (names.key(), names.fence(), names.id());
                let row = self
                    .call(
                        what,
                        sql,
                        &[
                            (&key, Type::TEXT),
                            (&fence, Type::TEXT),
                            (&channel, Type::TEXT),
                            (&latch, Type::TEXT),
                            (&claim.owner, Type::TEXT),
                            (&refresh(claim), Type::INT8),
                            (&ms(latch_ttl), Type::INT8),
                            (&keep_place(kind)?, Type::INT8),
                        ],
                    )
                    .await?;
                Ok((column(&row, 0)?, None))
            }
        }
    }

    async fn sem_release(
        &self,
        what: impl Fn() -> String,
        claim: &Claim,
        channel: &str,
        latch: &str,
        latch_ttl: Duration,
    ) -> Result<i64, PgError> {
        let sql = &self.inner.calls.sem_release;
        let (key, latch) = (stored(&claim.keys.key), stored(latch));
        let (key, latch): (&str, &str) = (&key, &latch);
        let row = self
            .call(
                what,
                sql,
                &[
                    (&key, Type::TEXT),
                    (&channel, Type::TEXT),
                    (&latch, Type::TEXT),
                    (&claim.owner, Type::TEXT),
                    (&ms(latch_ttl), Type::INT8),
                ],
            )
            .await?;
        column(&row, 0)
    }

    /// `mode`: "latch" (a release, once per request id `guard`) or "marker" (an undo, only if
    /// the re-entry marker `guard` says the re-entry ran).
    #[allow(clippy::too_many_arguments)]
    async fn rw_release(
        &self,
        what: impl Fn() -> String,
        claim: &Claim,
        channel: &str,
        side: &str,
        guard: &str,
        latch_ttl: Duration,
        mode: &str,
    ) -> Result<i64, PgError> {
        let sql = &self.inner.calls.rw_release;
        let (key, guard) = (stored(&claim.keys.key), stored(guard));
        let (key, guard): (&str, &str) = (&key, &guard);
        let row = self
            .call(
                what,
                sql,
                &[
                    (&key, Type::TEXT),
                    (&channel, Type::TEXT),
                    (&guard, Type::TEXT),
                    (&side, Type::TEXT),
                    (&claim.owner, Type::TEXT),
                    (&refresh(claim), Type::INT8),
                    (&ms(latch_ttl).max(1), Type::INT8),
                    (&mode, Type::TEXT),
                ],
            )
            .await?;
        column(&row, 0)
    }

    /// Undoes a re-entry whose caller never saw the reply, if its marker says it ran. The
    /// reply is the kind's, as on Redis: 1 undone / 0 not (plain, fair), the holds left or -1
    /// (read-write, semaphore).
    pub(crate) async fn undo_reentry(
        &self,
        kind: &dyn LockKind,
        claim: &Claim,
        marker: &str,
    ) -> Result<i64, PgError> {
        let what = || format!("undoing a cancelled re-entry of `{}`", claim.name);
        let channel = pg_channel(&claim.keys.channel);
        let names = Stored::of(claim, marker);
        match offered(kind)? {
            Offered::Plain => {
                let sql = &self.inner.calls.plain_undo_reentry;
                let (key, marker) = (names.key(), names.id());
                let row = self
                    .call(
                        what,
                        sql,
                        &[
                            (&key, Type::TEXT),
                            (&marker, Type::TEXT),
                            (&channel, Type::TEXT),
                            (&claim.owner, Type::TEXT),
                        ],
                    )
                    .await?;
                Ok(column(&row, 0)?)
            }
            // As `store/redis/kinds/semaphore.rs` does: the permit given back, latched by the marker.
            Offered::Semaphore => {
                self.sem_release(what, claim, &channel, marker, claim.lease)
                    .await
            }
            Offered::Rw(side) => {
                self.rw_release(
                    what,
                    claim,
                    &channel,
                    side,
                    marker,
                    Duration::ZERO,
                    "marker",
                )
                .await
            }
            Offered::Fair => {
                let sql = &self.inner.calls.fair_undo_reentry;
                let (key, fence, marker) = (names.key(), names.fence(), names.id());
                let row = self
                    .call(
                        what,
                        sql,
                        &[
                            (&key, Type::TEXT),
                            (&fence, Type::TEXT),
                            (&marker, Type::TEXT),
                            (&channel, Type::TEXT),
                            (&claim.owner, Type::TEXT),
                            (&keep_place(kind)?, Type::INT8),
                        ],
                    )
                    .await?;
                column(&row, 0)
            }
        }
    }

    /// Renews many holds of one kind in one statement: one entry per claim, 1 renewed, 0 no
    /// longer ours.
    pub(crate) async fn renew(
        &self,
        kind: &dyn LockKind,
        claims: &[&Claim],
    ) -> Result<Vec<i64>, PgError> {
        let offered = offered(kind)?;
        if claims.is_empty() {
            return Ok(Vec::new());
        }
        let keys: Vec<_> = claims.iter().map(|c| stored(&c.keys.key)).collect();
        let keys: Vec<&str> = keys.iter().map(|k| &**k).collect();
        let owners: Vec<String> = claims
            .iter()
            .map(|c| match offered {
                Offered::Rw(side) => format!("{side}:{}", c.owner),
                _ => c.owner.clone(),
            })
            .collect();
        let leases: Vec<i64> = claims.iter().map(|c| ms(c.lease)).collect();
        // A read-write row may serve several holds of its owner: its deadline only moves out.
        let grow = matches!(offered, Offered::Rw(_));
        let what = || format!("renewing {} {} lock(s)", claims.len(), kind.id());
        let sql = &self.inner.calls.renew;
        let row = self
            .call(
                what,
                sql,
                &[
                    (&keys, Type::TEXT_ARRAY),
                    (&owners, Type::TEXT_ARRAY),
                    (&leases, Type::INT8_ARRAY),
                    (&grow, Type::BOOL),
                ],
            )
            .await?;
        column(&row, 0)
    }

    /// Deletes the lock whoever holds it and wakes its waiters: 1 if it was held, else 0.
    pub(crate) async fn force_unlock(
        &self,
        kind: &dyn LockKind,
        keys: &LockKeys,
    ) -> Result<i64, PgError> {
        offered(kind)?;
        let channel = pg_channel(&keys.channel);
        let what = || format!("force-unlocking `{}`", keys.key);
        let sql = &self.inner.calls.force_unlock;
        let key = stored(&keys.key);
        let key: &str = &key;
        let row = self
            .call(what, sql, &[(&key, Type::TEXT), (&channel, Type::TEXT)])
            .await?;
        column(&row, 0)
    }

    /// Whether anyone holds the lock stored at `key`.
    pub(crate) async fn exists(&self, kind: &dyn LockKind, key: &str) -> Result<bool, PgError> {
        Ok(self.pttl(kind, key).await? != -2)
    }

    /// Ms until the last live hold of the lock at `key` ends; -2 when it is free (Redis's
    /// PTTL).
    pub(crate) async fn pttl(&self, kind: &dyn LockKind, key: &str) -> Result<i64, PgError> {
        offered(kind)?;
        let what = || format!("reading the lease of `{key}`");
        let sql = &self.inner.calls.pttl;
        let at = stored(key);
        let at: &str = &at;
        let row = self.call(what, sql, &[(&at, Type::TEXT)]).await?;
        column(&row, 0)
    }

    /// The permits of the semaphore at `key` free now, for a semaphore of `permits` permits;
    /// the error's `stored_permits()` says when it is in use with another count.
    pub(crate) async fn available(&self, permits: u32, key: &str) -> Result<i64, PgError> {
        let permits = i32::try_from(permits)
            .map_err(|_| PgError::refused("counting permits", "too many permits"))?;
        let what = || format!("counting the free permits of `{key}`");
        let sql = &self.inner.calls.sem_available;
        let at = stored(key);
        let at: &str = &at;
        let row = self
            .call(what, sql, &[(&at, Type::TEXT), (&permits, Type::INT4)])
            .await?;
        column(&row, 0)
    }

    /// The server's clock in µs (the clock term of the fencing tokens); the tests compare
    /// tokens with it.
    #[cfg(test)]
    pub(crate) async fn server_micros(&self) -> Result<i64, PgError> {
        let what = || "reading the server's clock".to_owned();
        let row = self.call(what, &self.inner.calls.micros, &[]).await?;
        column(&row, 0)
    }
}
