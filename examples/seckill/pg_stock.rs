//! The stock of `--store postgres`: one table, and a small fixed set of connections to it.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio_postgres::{Client, Config, NoTls, Statement};

/// One row per stock counter. Every run's rows carry its prefix, so runs sharing a server
/// (`--pg-url`) keep apart and the run deletes only its own.
const CREATE_TABLE: &str =
    "CREATE TABLE IF NOT EXISTS seckill_stock (item text PRIMARY KEY, units bigint NOT NULL)";

/// How long opening one connection may take before the run gives up.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// One connection with the statements the strategies send, prepared once: a buyer's query is
/// then one round trip, as a GET or a SET is on Redis.
pub struct StockConn {
    pub client: Client,
    /// `units` of an item.
    pub read: Statement,
    /// Sets `units` of an item (the write-back of read-check-write).
    pub write: Statement,
    /// (f): takes one unit if any is left, under PostgreSQL's own row lock.
    pub take: Statement,
}

/// The connections, used in turn. Each carries many buyers' queries at once (tokio-postgres
/// pipelines them), so a few serve hundreds of buyers in flight: a connection per buyer would
/// run into the server's `max_connections` (100 by default).
#[derive(Clone)]
pub struct StockDb {
    conns: Arc<[StockConn]>,
    next: Arc<AtomicUsize>,
}

impl StockDb {
    /// Opens `connections` connections to `url` and creates the table if it is missing.
    pub async fn open(url: &str, connections: usize) -> Result<StockDb, tokio_postgres::Error> {
        let mut clients = Vec::with_capacity(connections);
        for _ in 0..connections.max(1) {
            clients.push(connect(url).await?);
        }
        // Before preparing: a statement naming a missing table does not prepare.
        clients[0].batch_execute(CREATE_TABLE).await?;
        let mut conns = Vec::with_capacity(clients.len());
        for client in clients {
            conns.push(StockConn {
                read: client
                    .prepare("SELECT units FROM seckill_stock WHERE item = $1")
                    .await?,
                write: client
                    .prepare("UPDATE seckill_stock SET units = $2 WHERE item = $1")
                    .await?,
                take: client
                    .prepare(
                        "UPDATE seckill_stock SET units = units - 1 WHERE item = $1 AND units > 0",
                    )
                    .await?,
                client,
            });
        }
        Ok(StockDb {
            conns: conns.into(),
            next: Arc::new(AtomicUsize::new(0)),
        })
    }

    /// The next connection in turn.
    pub fn conn(&self) -> &StockConn {
        let i = self.next.fetch_add(1, Ordering::Relaxed);
        &self.conns[i % self.conns.len()]
    }

    /// Puts `units` in stock for `item`, creating its row if needed.
    pub async fn set(&self, item: &str, units: u64) -> Result<(), tokio_postgres::Error> {
        let units = i64::try_from(units).unwrap_or(i64::MAX);
        self.conn()
            .client
            .execute(
                "INSERT INTO seckill_stock (item, units) VALUES ($1, $2) \
                 ON CONFLICT (item) DO UPDATE SET units = excluded.units",
                &[&item, &units],
            )
            .await?;
        Ok(())
    }

    /// Units of `item` in stock.
    pub async fn get(&self, item: &str) -> Result<i64, tokio_postgres::Error> {
        let conn = self.conn();
        Ok(conn.client.query_one(&conn.read, &[&item]).await?.get(0))
    }

    /// Deletes the rows whose item starts with `prefix` (this run's).
    pub async fn delete_run(&self, prefix: &str) -> Result<u64, tokio_postgres::Error> {
        self.conn()
            .client
            .execute(
                "DELETE FROM seckill_stock WHERE left(item, length($1)) = $1",
                &[&prefix],
            )
            .await
    }

    /// Vacuums the table once a strategy's rows are set up. Every UPDATE leaves a dead row
    /// version behind, and one strategy's thousands of them sit on the page the next one
    /// reads; vacuumed, each strategy starts from the same few live rows, as each starts from a
    /// fresh key on Redis. A run on a shared server without the right to vacuum skips it.
    pub async fn vacuum(&self) {
        let _ = self
            .conn()
            .client
            .batch_execute("VACUUM seckill_stock")
            .await;
    }

    /// `SHOW <setting>` on the server, for the header line.
    pub async fn show(&self, setting: &str) -> Result<String, tokio_postgres::Error> {
        let rows = self
            .conn()
            .client
            .simple_query(&format!("SHOW {setting}"))
            .await?;
        Ok(rows
            .iter()
            .find_map(|m| match m {
                tokio_postgres::SimpleQueryMessage::Row(r) => r.get(0).map(str::to_owned),
                _ => None,
            })
            .unwrap_or_default())
    }
}

/// One connection, its driver spawned; the driver ends when the client is dropped.
async fn connect(url: &str) -> Result<Client, tokio_postgres::Error> {
    let mut config: Config = url.parse()?;
    config.connect_timeout(CONNECT_TIMEOUT);
    let (client, connection) = config.connect(NoTls).await?;
    tokio::spawn(async move {
        // A broken connection fails the queries waiting on it, which count as buyer errors.
        let _ = connection.await;
    });
    Ok(client)
}

/// Median of `n` sequential prepared `SELECT 1`s on a connection of its own: the unit the
/// PostgreSQL figures compare with, as PING is on Redis (one round trip through the server's
/// query path, nothing read or written).
pub async fn select_one_rtt(url: &str, n: usize) -> Result<Duration, tokio_postgres::Error> {
    let client = connect(url).await?;
    let select = client.prepare("SELECT 1").await?;
    let mut rtts = Vec::with_capacity(n);
    for _ in 0..n.max(1) {
        let t = Instant::now();
        client.query_one(&select, &[]).await?;
        rtts.push(t.elapsed());
    }
    rtts.sort_unstable();
    Ok(rtts[rtts.len() / 2])
}

/// `127.0.0.1:5432/postgres`: where `url` points, without its user or password.
pub fn describe(url: &str) -> String {
    let Ok(config) = url.parse::<Config>() else {
        return "(unparsable URL)".into();
    };
    let host = match config.get_hosts().first() {
        Some(tokio_postgres::config::Host::Tcp(h)) => h.clone(),
        #[cfg(unix)]
        Some(tokio_postgres::config::Host::Unix(p)) => p.display().to_string(),
        None => "localhost".into(),
    };
    let port = config.get_ports().first().copied().unwrap_or(5432);
    let db = config
        .get_dbname()
        .or(config.get_user())
        .unwrap_or("postgres");
    format!("{host}:{port}/{db}")
}
