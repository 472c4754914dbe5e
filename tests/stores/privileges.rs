//! A role that may not create dlock's schema or objects, connecting through `LockClient`, gets
//! an error naming the statement an owner must run; once it is run, the same role connects and
//! locks.

use dlock::testing::{postgres_available, PgServer};
use dlock::LockClient;

/// The first statement in backquotes in `message`, which the error asks an owner to run.
fn named_statement(message: &str) -> &str {
    let start = message
        .find('`')
        .unwrap_or_else(|| panic!("no statement in backquotes in: {message}"));
    let rest = &message[start + 1..];
    let end = rest.find('`').expect("closing backquote");
    &rest[..end]
}

/// Connects as `role` with `schema`: the error expected, then the statement it names, run as
/// the superuser, then a lock taken as `role`.
async fn refused_then_granted(server: &PgServer, role: &str, schema: &str, expect: &str) {
    let url = format!("postgres://{role}@127.0.0.1:{}/postgres", server.port());
    let connect = || {
        LockClient::builder(url.clone())
            .postgres_schema(schema)
            .build()
    };
    let e = match connect().await {
        Ok(_) => panic!("{role} connected without the privileges to use {schema}"),
        Err(e) => e.to_string(),
    };
    assert!(e.contains(expect), "{role}: {expect:?} not in: {e}");
    let statement = named_statement(&e);
    server
        .psql(statement)
        .unwrap_or_else(|err| panic!("{role}: the named statement failed: {err}"));
    let client = connect()
        .await
        .unwrap_or_else(|e| panic!("{role}: after `{statement}`: {e}"));
    let guard = client
        .lock("stores:privileges")
        .acquire()
        .await
        .expect("acquire");
    guard.release().await.expect("release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_role_without_create_is_told_the_statement_to_run() {
    if !postgres_available() {
        super::common::skipped("roles without CREATE", "no PostgreSQL server binaries");
        return;
    }
    let server = PgServer::start().expect("start PostgreSQL");
    // A login role with no privilege on the database beyond CONNECT and TEMP (PUBLIC's).
    server
        .psql("CREATE ROLE app LOGIN; CREATE ROLE app2 LOGIN; CREATE ROLE app3 LOGIN")
        .expect("create roles");
    // No schema at all.
    refused_then_granted(
        &server,
        "app",
        "dlock",
        "CREATE SCHEMA \"dlock\" AUTHORIZATION \"app\";",
    )
    .await;
    // A schema someone else created, empty, with no grant to this role.
    server.psql("CREATE SCHEMA locks2").expect("create schema");
    refused_then_granted(
        &server,
        "app2",
        "locks2",
        "GRANT USAGE, CREATE ON SCHEMA \"locks2\" TO \"app2\";",
    )
    .await;
    // A schema its owner migrated, with no grant to this role.
    let owner = LockClient::builder(server.url())
        .postgres_schema("locks3")
        .build()
        .await
        .expect("the superuser migrates");
    drop(owner);
    refused_then_granted(
        &server,
        "app3",
        "locks3",
        "GRANT USAGE ON SCHEMA \"locks3\" TO \"app3\"; GRANT SELECT, INSERT, UPDATE, DELETE \
         ON ALL TABLES IN SCHEMA \"locks3\" TO \"app3\";",
    )
    .await;
}
