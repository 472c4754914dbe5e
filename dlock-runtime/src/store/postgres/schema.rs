//! dlock's schema in PostgreSQL: the name the user chose, the migration that creates the
//! tables and functions (`sql/*.sql`), and the check made at connect time.

use std::time::Duration;

use tokio_postgres::Client;

use super::errors::PgError;

/// The version `migrate` brings a schema to. Raise it whenever `sql/` changes: clients whose
/// schema is older migrate at connect.
pub(crate) const VERSION: i32 = 7;

/// Every `CREATE` of the migration, in order; `@schema@` is the quoted schema name, `$body$`
/// the functions' dollar quote.
const SOURCES: [&str; 8] = [
    include_str!("sql/schema.sql"),
    include_str!("sql/names.sql"),
    include_str!("sql/common.sql"),
    include_str!("sql/plain.sql"),
    include_str!("sql/semaphore.sql"),
    include_str!("sql/rw.sql"),
    include_str!("sql/fair.sql"),
    include_str!("sql/grants.sql"),
];

/// The key of the transaction-scoped advisory lock the migration takes first, so concurrent
/// first uses run it one after another (`CREATE ... IF NOT EXISTS` alone races: two creators
/// both see "absent"). One key for every schema: migrations are rare.
const MIGRATION_LOCK: i64 = 0x646c_6f63_6b5f_6d69; // "dlock_mi"

/// How long a migration may take: it may wait for another client's migration first.
pub(crate) fn migration_timeout(response_timeout: Duration) -> Duration {
    response_timeout.max(Duration::from_secs(30))
}

/// A schema name, checked and quoted once.
#[derive(Debug, Clone)]
pub(crate) struct Schema {
    name: String,
    quoted: String,
}

impl Schema {
    /// Checks `name`: PostgreSQL keeps identifiers of 1 to 63 bytes (it would silently cut a
    /// longer one), and none may contain NUL. Anything else goes, always quoted.
    pub(crate) fn new(name: &str) -> Result<Schema, PgError> {
        let what = format!("using the schema name {name:?}");
        if name.is_empty() || name.len() > 63 {
            return Err(PgError::refused(
                what,
                "a PostgreSQL schema name has 1 to 63 bytes",
            ));
        }
        if name.contains('\0') {
            return Err(PgError::refused(what, "a schema name cannot contain NUL"));
        }
        Ok(Schema {
            name: name.to_owned(),
            quoted: quote_ident(name),
        })
    }

    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    /// The name as an SQL identifier (`"dlock"`).
    pub(crate) fn quoted(&self) -> &str {
        &self.quoted
    }

    /// The whole migration as one multi-statement simple query: PostgreSQL runs it as one
    /// implicit transaction (all or nothing), and its advisory lock is held to the end.
    /// `create_schema`: the schema is missing and must be created first.
    pub(crate) fn migration(&self, create_schema: bool) -> String {
        let tag = self.body_tag();
        let mut sql = format!("SELECT pg_catalog.pg_advisory_xact_lock({MIGRATION_LOCK});\n");
        // The version again, under the lock: `migrate` read it before, and a newer dlock may
        // have migrated in between; running this one's functions over its tables would undo
        // it (two layouts of one lock, two owners). The raise ends the whole transaction.
        let meta = quote_literal(&format!("{}.meta", self.quoted));
        sql += &format!(
            "DO {tag} DECLARE v integer; BEGIN \
               IF pg_catalog.to_regclass({meta}) IS NOT NULL THEN \
                 EXECUTE 'SELECT max(version) FROM ' || {meta} INTO v; \
                 IF v > {VERSION} THEN \
                   RAISE EXCEPTION 'the schema is at version %, newer than this dlock''s {VERSION}: \
                     it was migrated by a newer dlock, which this one must not undo', v; \
                 END IF; \
               END IF; \
             END {tag};\n"
        );
        if create_schema {
            sql += &format!("CREATE SCHEMA IF NOT EXISTS {};\n", self.quoted);
        }
        for source in SOURCES {
            sql += &source
                .replace("$body$", &tag)
                .replace("@schema@", &self.quoted);
            sql.push('\n');
        }
        sql += &format!(
            "UPDATE {}.meta SET version = greatest(version, {VERSION});\n",
            self.quoted
        );
        sql
    }

    /// A dollar quote that does not occur in the quoted name, so a name cannot end a function
    /// body early (names may contain `$`). Bounded: a name of 63 bytes contains at most a few
    /// of the candidates.
    fn body_tag(&self) -> String {
        (0..64)
            .map(|i| format!("$dlock{i}$"))
            .find(|tag| !self.quoted.contains(tag.as_str()))
            .expect("a 63-byte name cannot contain 64 different tags")
    }
}

/// `text` as an SQL string literal (standard_conforming_strings: only quotes are doubled).
fn quote_literal(text: &str) -> String {
    format!("'{}'", text.replace('\'', "''"))
}

/// `name` as a quoted SQL identifier, the way `quote_ident` writes it: in double quotes, inner
/// double quotes doubled.
pub(crate) fn quote_ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// The schema version stored in `schema`, `None` when dlock's tables are not there.
pub(crate) async fn stored_version(
    client: &Client,
    schema: &Schema,
) -> Result<Option<i32>, tokio_postgres::Error> {
    let sql = format!("SELECT max(version) FROM {}.meta", schema.quoted());
    match client.query_opt(&sql, &[]).await {
        Ok(row) => Ok(row.and_then(|r| r.get::<_, Option<i32>>(0))),
        // 3F000 invalid_schema_name, 42P01 undefined_table: never migrated.
        Err(e) if matches!(e.code().map(|c| c.code()), Some("3F000" | "42P01")) => Ok(None),
        Err(e) => Err(e),
    }
}

/// Creates or updates everything in `schema`, idempotent, safe to run from many clients at
/// once. A role without the privileges gets an error naming the statement to run as an owner.
pub(crate) async fn migrate(
    client: &Client,
    schema: &Schema,
    timeout: Duration,
) -> Result<(), PgError> {
    let what = format!("migrating dlock's schema {}", schema.quoted());
    let bounded = async {
        if let Some(version) = stored_version(client, schema).await? {
            if version > VERSION {
                return Ok(Err(PgError::refused(
                    what.clone(),
                    format!(
                        "the schema is at version {version}, newer than this dlock's {VERSION}: \
                         it was migrated by a newer dlock, which this one must not undo"
                    ),
                )));
            }
        }
        let exists = client
            .query_opt(
                "SELECT 1 FROM pg_catalog.pg_namespace WHERE nspname = $1",
                &[&schema.name()],
            )
            .await?
            .is_some();
        // `CREATE SCHEMA IF NOT EXISTS` checks the database's CREATE privilege even when the
        // schema exists, so it is only sent when the schema is missing: the owner of an
        // existing schema migrates without any database privilege.
        match client.batch_execute(&schema.migration(!exists)).await {
            Ok(()) => Ok(Ok(())),
            Err(e) if e.code().map(|c| c.code()) == Some("42501") => {
                Ok(Err(no_privilege(client, schema, exists, e).await))
            }
            Err(e) => Err(e),
        }
    };
    match tokio::time::timeout(timeout, bounded).await {
        Err(_) => Err(PgError::timeout(what, timeout)),
        Ok(Err(e)) => Err(PgError::postgres(what, e)),
        Ok(Ok(done)) => done,
    }
}

/// The error for a role that may not create dlock's schema or its objects, naming what to run.
async fn no_privilege(
    client: &Client,
    schema: &Schema,
    schema_exists: bool,
    error: tokio_postgres::Error,
) -> PgError {
    let role = current_role(client).await;
    let detail = error
        .as_db_error()
        .map_or_else(String::new, |db| format!(" ({})", db.message()));
    let q = schema.quoted();
    let message = if schema_exists {
        format!(
            "role {role} may not create dlock's tables and functions in schema {q}{detail} \
             (SQLSTATE 42501); run dlock's migrate() once as the schema's owner, or as an \
             owner run `GRANT CREATE, USAGE ON SCHEMA {q} TO {role};`"
        )
    } else {
        format!(
            "role {role} may not create the schema {q}{detail} (SQLSTATE 42501); as a \
             database owner run `CREATE SCHEMA {q} AUTHORIZATION {role};` then connect again, \
             or run dlock's migrate() once as a role that may create schemas"
        )
    };
    PgError::explained(format!("migrating dlock's schema {q}"), message, error)
}

/// The error for a role that may not read a schema of that name which someone else created
/// (no USAGE on it, or no privilege on dlock's tables in it), naming what an owner must run.
pub(crate) async fn no_access(
    client: &Client,
    schema: &Schema,
    error: tokio_postgres::Error,
) -> PgError {
    let role = current_role(client).await;
    // The catalogs are readable without any privilege on the schema.
    let migrated = client
        .query_opt(
            "SELECT 1 FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n \
             ON n.oid = c.relnamespace WHERE n.nspname = $1 AND c.relname = 'meta'",
            &[&schema.name()],
        )
        .await
        .is_ok_and(|row| row.is_some());
    let detail = error
        .as_db_error()
        .map_or_else(String::new, |db| format!(" ({})", db.message()));
    let q = schema.quoted();
    let message = if migrated {
        // Every function runs with the caller's rights (SECURITY INVOKER) and PUBLIC may
        // execute functions, so the tables are what a user of the locks needs.
        format!(
            "role {role} may not use dlock's schema {q}{detail} (SQLSTATE 42501); as its \
             owner run `GRANT USAGE ON SCHEMA {q} TO {role}; GRANT SELECT, INSERT, UPDATE, \
             DELETE ON ALL TABLES IN SCHEMA {q} TO {role};`"
        )
    } else {
        format!(
            "role {role} may not use the schema {q}{detail} (SQLSTATE 42501), where dlock's \
             tables are not created yet; as its owner run `GRANT USAGE, CREATE ON SCHEMA {q} TO \
             {role};` then connect again, or run dlock's migrate() once as the schema's owner"
        )
    };
    PgError::explained(format!("reading dlock's schema {q}"), message, error)
}

/// The session's role as an SQL identifier, for a statement an error names.
async fn current_role(client: &Client) -> String {
    let row = client.query_one("SELECT current_user::text", &[]).await;
    match row.as_ref().map(|row| row.try_get::<_, &str>(0)) {
        Ok(Ok(role)) => quote_ident(role),
        _ => "<this role>".to_owned(),
    }
}
