//! `--cluster` for the examples: the Redis Cluster to run against, its masters, and how many
//! commands each master served.

use std::ops::RangeInclusive;

use dlock::redis::aio::MultiplexedConnection;
use dlock::redis::cluster::ClusterClient;
use dlock::redis::{self, RedisResult};
use dlock::testing::RedisCluster;
use dlock::LockClientBuilder;

use super::Db;

/// Masters of the cluster started when no seed URLs are given: the fewest
/// `redis-cli --cluster create` accepts, enough to show load landing on one node or on all.
pub const LOCAL_MASTERS: usize = 3;

/// A Redis Cluster: a temporary local one (killed when this is dropped), or one named by seed
/// URLs.
pub struct Cluster {
    pub seeds: Vec<String>,
    /// The masters serving slots, sorted by their first slot (master 0 serves slot 0).
    pub masters: Vec<Master>,
    /// Where it came from, for the report.
    pub origin: String,
    _local: Option<RedisCluster>,
}

/// One master, as CLUSTER NODES described it when the run started.
pub struct Master {
    /// `host:port`.
    pub addr: String,
    /// A URL for a plain (non-cluster) connection to this master alone, with the seeds'
    /// scheme and credentials.
    pub url: String,
    pub slots: Vec<RangeInclusive<u16>>,
}

impl Cluster {
    /// The cluster at `seeds`, or, with no seeds, a local one of [`LOCAL_MASTERS`] masters
    /// with `replicas` replicas each.
    pub async fn open(seeds: Vec<String>, replicas: usize) -> Result<Cluster, String> {
        let (seeds, local, origin) = if seeds.is_empty() {
            let local = start_local(replicas).await?;
            let origin =
                format!("temporary local cluster, {LOCAL_MASTERS} masters x {replicas} replicas");
            (local.urls(), Some(local), origin)
        } else {
            (seeds, None, "REDIS_CLUSTER_URLS".to_owned())
        };
        let masters = discover_masters(&seeds).await?;
        Ok(Cluster {
            seeds,
            masters,
            origin,
            _local: local,
        })
    }

    /// A lock client of this cluster.
    pub fn lock_client(&self) -> LockClientBuilder {
        dlock::LockClient::cluster_builder(self.seeds.clone())
    }

    /// A connection that routes each command to the master of its key.
    pub async fn db(&self) -> Db {
        let client = ClusterClient::new(self.seeds.clone()).expect("valid seed URLs");
        Db::Cluster(
            client
                .get_async_connection()
                .await
                .expect("connect to the cluster"),
        )
    }

    /// The index in [`Cluster::masters`] of the master serving `key`.
    pub fn master_of(&self, key: &str) -> usize {
        let slot = dlock::stock::cluster_slot(key);
        self.masters
            .iter()
            .position(|m| m.slots.iter().any(|r| r.contains(&slot)))
            .expect("every slot is served (checked at discovery)")
    }

    /// `127.0.0.1:7000, 127.0.0.1:7001, ...`.
    pub fn addrs(&self) -> String {
        let addrs: Vec<&str> = self.masters.iter().map(|m| m.addr.as_str()).collect();
        addrs.join(", ")
    }
}

/// Starts the local cluster off the async threads: it blocks for ~3 s while the nodes meet.
async fn start_local(replicas: usize) -> Result<RedisCluster, String> {
    tokio::task::spawn_blocking(move || RedisCluster::start(LOCAL_MASTERS, replicas))
        .await
        .map_err(|e| e.to_string())?
        .map_err(|e| {
            format!("starting a local cluster failed ({e}); set REDIS_CLUSTER_URLS instead")
        })
}

/// The masters serving slots, from CLUSTER NODES of the first seed that answers.
async fn discover_masters(seeds: &[String]) -> Result<Vec<Master>, String> {
    let mut last_err = String::from("no seed URL given");
    for seed in seeds {
        match cluster_nodes(seed).await {
            Ok(text) => return masters_from(&text, seed),
            Err(e) => last_err = format!("{seed}: {e}"),
        }
    }
    Err(format!(
        "no seed node answered CLUSTER NODES; last: {last_err}"
    ))
}

async fn cluster_nodes(seed: &str) -> RedisResult<String> {
    let mut conn = plain_connection(seed).await?;
    redis::cmd("CLUSTER")
        .arg("NODES")
        .query_async(&mut conn)
        .await
}

/// Parses CLUSTER NODES (`<id> <host:port@bus[,hostname]> <flags> <master> <ping> <pong>
/// <epoch> <link> <slot ranges>...`) into the live masters that serve slots, sorted by slot.
fn masters_from(text: &str, seed: &str) -> Result<Vec<Master>, String> {
    let mut masters: Vec<Master> = text
        .lines()
        .filter_map(|line| master_line(line, seed))
        .collect();
    masters.sort_by_key(|m| *m.slots[0].start());
    let served: usize = masters.iter().flat_map(|m| &m.slots).map(|r| r.len()).sum();
    if served != 16384 {
        return Err(format!(
            "the cluster's masters serve {served} of 16384 slots; is it still being set up?"
        ));
    }
    Ok(masters)
}

fn master_line(line: &str, seed: &str) -> Option<Master> {
    let fields: Vec<&str> = line.split_whitespace().collect();
    let flags = fields.get(2)?;
    // A master the others consider failing serves nothing until a replica takes over.
    if !flags.split(',').any(|f| f == "master") || flags.contains("fail") {
        return None;
    }
    let mut slots: Vec<RangeInclusive<u16>> = fields[8.min(fields.len())..]
        .iter()
        .filter_map(|s| slot_range(s))
        .collect();
    if slots.is_empty() {
        return None;
    }
    slots.sort_by_key(|r| *r.start());
    let addr = fields[1].split('@').next()?;
    // A node that has not learnt its own address yet prints `:port`; it is the seed's host.
    let addr = match addr.strip_prefix(':') {
        Some(port) => format!("{}:{port}", host_of(seed)),
        None => addr.to_owned(),
    };
    Some(Master {
        url: node_url(seed, &addr),
        addr,
        slots,
    })
}

/// `5461-10922` or `5461`; `[...]` entries (slots being migrated) are not served yet.
fn slot_range(field: &str) -> Option<RangeInclusive<u16>> {
    match field.split_once('-') {
        Some((a, b)) => Some(a.parse().ok()?..=b.parse().ok()?),
        None => field.parse().ok().map(|s| s..=s),
    }
}

/// `addr` with the scheme and credentials of `seed`, so a plain connection to one master
/// authenticates the way the cluster client does.
fn node_url(seed: &str, addr: &str) -> String {
    let (scheme, rest) = seed.split_once("://").unwrap_or(("redis", seed));
    match rest.rsplit_once('@') {
        Some((creds, _)) => format!("{scheme}://{creds}@{addr}"),
        None => format!("{scheme}://{addr}"),
    }
}

fn host_of(url: &str) -> &str {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let rest = rest.rsplit_once('@').map_or(rest, |(_, r)| r);
    rest.rsplit_once(':').map_or(rest, |(h, _)| h)
}

/// A connection to one node alone (no redirects), for PING, INFO and CLIENT LIST on that
/// node.
pub async fn plain_connection(url: &str) -> RedisResult<MultiplexedConnection> {
    redis::Client::open(url)?
        .get_multiplexed_async_connection()
        .await
}

/// Commands the node has run since it started (`INFO stats` `total_commands_processed`). It
/// counts the commands a script calls as well as the script itself, and includes the INFO
/// that reads it: [`served`] takes that one off.
pub async fn commands_processed(node: &mut MultiplexedConnection) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("stats")
        .query_async(node)
        .await
        .expect("INFO stats");
    info.lines()
        .find_map(|l| l.strip_prefix("total_commands_processed:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

/// Per-node command counts, read before and after a measured stretch.
pub struct Meter {
    nodes: Vec<MultiplexedConnection>,
}

impl Meter {
    pub async fn new(masters: &[Master]) -> Meter {
        let mut nodes = Vec::new();
        for m in masters {
            nodes.push(plain_connection(&m.url).await.expect("connect to a master"));
        }
        Meter { nodes }
    }

    /// No nodes: every reading is empty (one server, where nothing is split).
    pub fn none() -> Meter {
        Meter { nodes: Vec::new() }
    }

    pub async fn read(&self) -> Vec<u64> {
        let mut counts = Vec::with_capacity(self.nodes.len());
        for node in &self.nodes {
            counts.push(commands_processed(&mut node.clone()).await);
        }
        counts
    }

    /// Commands each node served since `before` was read, the reading INFO excluded.
    pub async fn served(&self, before: &[u64]) -> Vec<u64> {
        let after = self.read().await;
        served(before, &after)
    }
}

/// `after - before - 1` per node: the 1 is the INFO of the first reading, which the counter
/// includes once it has run.
pub fn served(before: &[u64], after: &[u64]) -> Vec<u64> {
    before
        .iter()
        .zip(after)
        .map(|(b, a)| a.saturating_sub(*b).saturating_sub(1))
        .collect()
}
