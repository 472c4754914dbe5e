//! Fencing a SQL table with dlock's tokens (the pattern is explained in the `dlock::fence`
//! docs): every write carries the hold's fencing token, and a row refuses a token lower than
//! the one that last wrote it.
//!
//! `DATABASE_URL=postgres://user:password@127.0.0.1/db cargo run --example fenced_sql`
//! creates the table `dlock_fenced_reports` if missing, and starts its own redis-server unless
//! `REDIS_URL` is set.
//!
//! It plays the failure fencing exists for, once per way of writing the row: holder A takes
//! the lock with a short lease and stalls past it; B takes the lock and writes; A resumes and
//! writes with its old token, and the table refuses it.

#[path = "support/mod.rs"]
mod support;

use std::error::Error;
use std::time::Duration;

use dlock::LockClient;
use tokio_postgres::types::ToSql;
use tokio_postgres::{Client, NoTls};

type Result<T> = std::result::Result<T, Box<dyn Error + Send + Sync>>;

const CREATE: &str = "CREATE TABLE IF NOT EXISTS dlock_fenced_reports (
    id    bigint PRIMARY KEY,
    body  text   NOT NULL,
    fence bigint NOT NULL
)";

/// PostgreSQL: insert-if-absent and the fenced update in one statement.
const UPSERT: &str = "INSERT INTO dlock_fenced_reports (id, body, fence) VALUES ($1, $2, $3)
    ON CONFLICT (id) DO UPDATE SET body = EXCLUDED.body, fence = EXCLUDED.fence
    WHERE dlock_fenced_reports.fence <= EXCLUDED.fence";

/// The shape any SQL database allows: the fenced update...
const UPDATE: &str =
    "UPDATE dlock_fenced_reports SET body = $2, fence = $3 WHERE id = $1 AND fence <= $3";
/// ...and, when it found no row, an insert that does nothing if the row exists by then
/// (`INSERT IGNORE` in MySQL, or catch the unique-key violation).
const INSERT: &str = "INSERT INTO dlock_fenced_reports (id, body, fence) VALUES ($1, $2, $3)
    ON CONFLICT (id) DO NOTHING";

/// Which statements write the row.
#[derive(Clone, Copy, Debug)]
enum Statements {
    Upsert,
    UpdateThenInsert,
}

/// What a fenced write did.
#[derive(Debug, PartialEq)]
enum Write {
    Written,
    /// A higher token wrote the row: this holder's lease ended, refuse its work.
    Stale,
}

async fn write_fenced(
    db: &Client,
    how: Statements,
    id: i64,
    body: &str,
    token: u64,
) -> Result<Write> {
    // bigint is signed. dlock's tokens (the Redis clock in µs times 1024, about 2^61) fit;
    // `as` would turn a token above i64::MAX into a negative one that compares lower.
    let fence = i64::try_from(token)?;
    let params: [&(dyn ToSql + Sync); 3] = [&id, &body, &fence];
    let rows = match how {
        Statements::Upsert => db.execute(UPSERT, &params).await?,
        Statements::UpdateThenInsert => update_then_insert(db, &params).await?,
    };
    // The row count is the answer, decided inside the statement: reading the fence first
    // and writing after would let another holder write in between.
    Ok(if rows == 1 {
        Write::Written
    } else {
        Write::Stale
    })
}

/// The rows written (0 or 1) by the fenced update, or by the insert when the row is missing.
async fn update_then_insert(db: &Client, params: &[&(dyn ToSql + Sync)]) -> Result<u64> {
    if db.execute(UPDATE, params).await? == 1 {
        return Ok(1);
    }
    // No row with a fence at most ours: a higher fence, or no row at all.
    if db.execute(INSERT, params).await? == 1 {
        return Ok(1);
    }
    // The row appeared after our UPDATE (its writer may hold a lower token than ours). It
    // exists now, so this UPDATE's answer is final.
    Ok(db.execute(UPDATE, params).await?)
}

/// A stalls past its lease, B writes, A's late write is refused. A and B are two clients, as
/// two machines would be (within one client, B would queue behind A's guard).
async fn late_holder_is_refused(
    [machine_a, machine_b]: &[LockClient; 2],
    db: &Client,
    how: Statements,
    id: i64,
) -> Result<()> {
    let name = format!("report:{id}");
    let a = machine_a
        .lock(&name)
        .lease(Duration::from_millis(300))
        .acquire()
        .await?;
    // A stalls (a GC pause, say) until its lease is gone; `lost()` tells the demo when, so
    // it need not guess with a sleep. A real stalled holder would not look.
    tokio::time::timeout(Duration::from_secs(5), a.lost()).await?;

    let b = machine_b.lock(&name).acquire().await?;
    let by_b = write_fenced(db, how, id, "written by B", b.fencing_token()).await?;
    let by_a = write_fenced(db, how, id, "written by A, late", a.fencing_token()).await?;
    println!(
        "{how:?}: B (token {}) {by_b:?}; A (token {}) {by_a:?}",
        b.fencing_token(),
        a.fencing_token()
    );
    b.release().await?;
    // A's release finds the lock is not its own any more.
    println!("A's release: {:?}", a.release().await.err());

    let row = db
        .query_one(
            "SELECT body FROM dlock_fenced_reports WHERE id = $1",
            &[&id],
        )
        .await?;
    let body: String = row.get(0);
    println!("row {id}: {body:?}");
    assert_eq!((by_b, by_a), (Write::Written, Write::Stale));
    Ok(())
}

#[tokio::main]
async fn main() -> Result<()> {
    let Ok(database) = std::env::var("DATABASE_URL") else {
        eprintln!(
            "set DATABASE_URL to a PostgreSQL database, e.g. postgres://user:password@127.0.0.1/db"
        );
        std::process::exit(2);
    };
    let (redis, _server) = support::redis_url();
    let (db, connection) = tokio_postgres::connect(&database, NoTls).await?;
    // tokio-postgres hands the socket's I/O to a future the caller drives.
    tokio::spawn(async move {
        if let Err(e) = connection.await {
            eprintln!("postgres connection: {e}");
        }
    });
    db.execute(CREATE, &[]).await?;
    let machines = [
        LockClient::connect(&redis).await?,
        LockClient::connect(&redis).await?,
    ];
    late_holder_is_refused(&machines, &db, Statements::Upsert, 1).await?;
    late_holder_is_refused(&machines, &db, Statements::UpdateThenInsert, 2).await?;
    Ok(())
}
