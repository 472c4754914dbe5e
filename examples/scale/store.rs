//! The store under test: its throw-away server(s), lock clients for it, and the server's own
//! counters (memory, connections, time spent renewing).

use std::time::Duration;

use dlock::redis::aio::MultiplexedConnection;
use dlock::testing::{RedisCluster, RedisServer};
use dlock::{LockClient, LockClientBuilder};

use crate::StoreKind;

enum Servers {
    Redis(RedisServer),
    Cluster(RedisCluster),
    #[cfg(feature = "postgres")]
    Postgres(dlock::testing::PgServer),
}

/// One store's servers and a connection to each for reading its counters.
pub struct Store {
    pub kind: StoreKind,
    servers: Servers,
    /// Redis: one plain connection per master, for INFO.
    nodes: Vec<MultiplexedConnection>,
    #[cfg(feature = "postgres")]
    pg: Option<tokio_postgres::Client>,
}

impl Store {
    pub async fn start(kind: StoreKind) -> Result<Store, String> {
        let servers = match kind {
            StoreKind::Redis => Servers::Redis(RedisServer::start().map_err(|e| e.to_string())?),
            StoreKind::Cluster => {
                Servers::Cluster(RedisCluster::start(3, 0).map_err(|e| e.to_string())?)
            }
            #[cfg(feature = "postgres")]
            StoreKind::Postgres => {
                Servers::Postgres(dlock::testing::PgServer::start().map_err(|e| e.to_string())?)
            }
            #[cfg(not(feature = "postgres"))]
            StoreKind::Postgres => {
                return Err("built without the `postgres` feature: \
                            cargo run --release --example scale --features scale/postgres"
                    .into())
            }
        };
        let mut store = Store {
            kind,
            servers,
            nodes: Vec::new(),
            #[cfg(feature = "postgres")]
            pg: None,
        };
        for url in store.redis_urls() {
            let client = dlock::redis::Client::open(url.as_str()).map_err(|e| e.to_string())?;
            let conn = client
                .get_multiplexed_async_connection()
                .await
                .map_err(|e| format!("{url}: {e}"))?;
            store.nodes.push(conn);
        }
        #[cfg(feature = "postgres")]
        if let Servers::Postgres(server) = &store.servers {
            let (pg, conn) = tokio_postgres::connect(&server.url(), tokio_postgres::NoTls)
                .await
                .map_err(|e| e.to_string())?;
            tokio::spawn(conn);
            // Function timings for the renewals' server time; the throw-away server's user is
            // its superuser.
            // Two calls: ALTER SYSTEM refuses to run in a multi-statement batch's transaction.
            for sql in [
                "ALTER SYSTEM SET track_functions = 'all'",
                "SELECT pg_reload_conf()",
            ] {
                pg.batch_execute(sql)
                    .await
                    .map_err(|e| format!("{sql}: {e:?}"))?;
            }
            store.pg = Some(pg);
        }
        Ok(store)
    }

    fn redis_urls(&self) -> Vec<String> {
        match &self.servers {
            Servers::Redis(server) => vec![server.url()],
            Servers::Cluster(cluster) => cluster.urls(),
            #[cfg(feature = "postgres")]
            Servers::Postgres(_) => Vec::new(),
        }
    }

    /// Where the servers are.
    pub fn describe(&self) -> String {
        match &self.servers {
            Servers::Redis(server) => server.url(),
            Servers::Cluster(cluster) => cluster.urls().join(", "),
            #[cfg(feature = "postgres")]
            Servers::Postgres(server) => server.url(),
        }
    }

    /// The URL a worker process connects with (a cluster: its seeds, comma-separated).
    pub fn url(&self) -> String {
        self.describe().replace(", ", ",")
    }

    /// A lock client builder for this store.
    pub fn builder(&self) -> LockClientBuilder {
        builder(self.kind, &self.url())
    }

    async fn info(&self, section: &str) -> Vec<String> {
        let mut texts = Vec::new();
        for node in &self.nodes {
            let mut node = node.clone();
            let text: String = dlock::redis::cmd("INFO")
                .arg(section)
                .query_async(&mut node)
                .await
                .expect("INFO");
            texts.push(text);
        }
        texts
    }

    /// The server's memory for the locks: Redis `used_memory` over every master; PostgreSQL
    /// the size of dlock's tables with their indexes and TOAST.
    pub async fn memory(&self) -> u64 {
        #[cfg(feature = "postgres")]
        if let Some(pg) = &self.pg {
            // VACUUM is not run: dead rows are what a live server keeps too, until autovacuum.
            let row = pg
                .query_one(
                    "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0)::bigint \
                     FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace \
                     WHERE n.nspname = 'dlock' AND c.relkind = 'r'",
                    &[],
                )
                .await
                .expect("table sizes");
            return row.get::<_, i64>(0) as u64;
        }
        sum_field(&self.info("memory").await, "used_memory")
    }

    /// Client connections the server has now, the counters' own excluded.
    pub async fn connections(&self) -> u64 {
        #[cfg(feature = "postgres")]
        if let Some(pg) = &self.pg {
            let row = pg
                .query_one(
                    "SELECT count(*) FROM pg_stat_activity \
                     WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()",
                    &[],
                )
                .await
                .expect("pg_stat_activity");
            return row.get::<_, i64>(0) as u64;
        }
        sum_field(&self.info("clients").await, "connected_clients") - self.nodes.len() as u64
    }

    /// The median of 200 of the store's cheapest round trips (PING, `SELECT 1`): the unit
    /// the latencies are read against.
    pub async fn round_trip(&self) -> Duration {
        let mut samples = Vec::with_capacity(200);
        for _ in 0..200 {
            let sent = std::time::Instant::now();
            #[cfg(feature = "postgres")]
            if let Some(pg) = &self.pg {
                pg.simple_query("SELECT 1").await.expect("SELECT 1");
                samples.push(sent.elapsed());
                continue;
            }
            let mut node = self.nodes[0].clone();
            let _: String = dlock::redis::cmd("PING")
                .query_async(&mut node)
                .await
                .expect("PING");
            samples.push(sent.elapsed());
        }
        crate::stats::quantile(&mut samples, 0.5)
    }

    /// Server time spent so far in the calls that renew leases (and, on Redis, every other
    /// script call: read it across a stretch where only renewals run).
    pub async fn renew_time(&self) -> Duration {
        #[cfg(feature = "postgres")]
        if let Some(pg) = &self.pg {
            // The statistics collector publishes at most every 500 ms by default; a forced
            // flush is not available to another backend, so the caller's stretch is long.
            let row = pg
                .query_one(
                    "SELECT coalesce(sum(total_time), 0)::float8 FROM pg_stat_user_functions \
                     WHERE schemaname = 'dlock' AND funcname = 'renew'",
                    &[],
                )
                .await
                .expect("pg_stat_user_functions");
            return Duration::from_secs_f64(row.get::<_, f64>(0) / 1000.0);
        }
        let texts = self.info("commandstats").await;
        let us: u64 = ["fcall", "evalsha", "eval"]
            .iter()
            .map(|c| sum_stat(&texts, &format!("cmdstat_{c}:"), "usec="))
            .sum();
        Duration::from_micros(us)
    }

    /// Calls the server served so far: every command (Redis's `total_commands_processed`,
    /// script calls included) or every dlock function call (PostgreSQL): the processes sweep's
    /// server work per lock.
    pub async fn calls(&self) -> u64 {
        #[cfg(feature = "postgres")]
        if let Some(pg) = &self.pg {
            let row = pg
                .query_one(
                    "SELECT coalesce(sum(calls), 0)::bigint FROM pg_stat_user_functions \
                     WHERE schemaname = 'dlock'",
                    &[],
                )
                .await
                .expect("pg_stat_user_functions");
            return row.get::<_, i64>(0) as u64;
        }
        sum_field(&self.info("stats").await, "total_commands_processed")
    }
}

/// Takes and releases one lock, so that a client's connections, scripts (or schema) are in
/// place before anything is measured.
pub async fn warm_up(client: &LockClient, name: String) {
    client
        .lock(name)
        .acquire()
        .await
        .expect("warm-up acquire")
        .release()
        .await
        .expect("warm-up release");
}

/// A lock client builder for `kind` at `url` (a cluster's seeds comma-separated).
pub fn builder(kind: StoreKind, url: &str) -> LockClientBuilder {
    match kind {
        StoreKind::Cluster => LockClient::cluster_builder(url.split(',').map(str::to_owned)),
        _ => LockClient::builder(url),
    }
}

/// `field:<n>` summed over INFO texts.
fn sum_field(texts: &[String], field: &str) -> u64 {
    let prefix = format!("{field}:");
    texts
        .iter()
        .flat_map(|t| t.lines())
        .filter_map(|l| l.strip_prefix(&prefix))
        .filter_map(|v| v.trim().parse::<u64>().ok())
        .sum()
}

/// `<name>=<n>` in the commandstats line starting with `line`, summed over INFO texts.
fn sum_stat(texts: &[String], line: &str, name: &str) -> u64 {
    texts
        .iter()
        .flat_map(|t| t.lines())
        .filter(|l| l.starts_with(line))
        .filter_map(|l| {
            l.split(',')
                .find_map(|part| part.split(':').next_back()?.strip_prefix(name))
                .and_then(|v| v.parse::<u64>().ok())
        })
        .sum()
}
