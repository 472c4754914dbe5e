//! The Redis deployment under test, started through `dlock::testing`, and the runner's own
//! look at it: who is primary now, and whether a failover has settled.

use std::io;
use std::time::Duration;

use dlock::redis::{self, Value};
use dlock::testing::{Persistence, RedisCluster, RedisSentinel, RedisServer, Role};

use crate::pg::PgDeployment;
use crate::zk::ZkDeployment;
use crate::Topology;

/// How long one admin command may take (a DEBUG SLEEP's caller waits longer: see `call`).
const ASK: Duration = Duration::from_secs(2);
/// The filler's keys: a dataset for the single server to load after a restart, never touched by
/// a client, and left out of the end-of-run key check.
pub const FILLER_PREFIX: &str = "chaos:filler:";
/// Microseconds the single server spends on each key it loads (`key-load-delay`, which Redis
/// 7.0 applies to AOF and RDB loading alike): ~190 us a key in fact (the sleep's overhead), so
/// 15,000 filler keys keep it answering LOADING for ~3 s after each restart. On the command
/// line: a CONFIG SET would not survive the restart.
const KEY_LOAD_DELAY_US: &str = "100";

pub enum Deployment {
    /// With AOF (`appendfsync always`), so a restart can keep every acknowledged write; the
    /// filler makes each restart load for seconds. The second server is its replica, for
    /// replica-synced clients (never promoted: nothing watches over it).
    Single(
        RedisServer,
        // Held, not read: dropping it would stop the replica.
        #[allow(dead_code)] Box<RedisServer>,
    ),
    /// A primary, a replica and three sentinels.
    Sentinel(RedisSentinel),
    /// Three masters, one replica each.
    Cluster(RedisCluster),
    /// A PostgreSQL primary and its streaming standby, behind a switch (`--store postgres`).
    Postgres(Box<PgDeployment>),
    /// A 3-server ZooKeeper ensemble (`--store zookeeper`).
    Zookeeper(Box<ZkDeployment>),
}

impl Deployment {
    /// Starts the servers; the single server gets `filler` keys.
    pub fn start(topology: Topology, filler: usize) -> io::Result<Self> {
        Ok(match topology {
            Topology::Single => {
                let server = RedisServer::builder()
                    .persistence(Persistence::Aof)
                    .args(["--key-load-delay", KEY_LOAD_DELAY_US])
                    // RDB loading answers clients only every this many bytes (2 MB by default,
                    // more than the filler): an AOF rewrite's RDB preamble must answer LOADING
                    // too, not hang its clients.
                    .args(["--loading-process-events-interval-bytes", "1024"])
                    .start()?;
                write_filler(server.port(), filler).map_err(io::Error::other)?;
                let replica = RedisServer::start_with_args(&[
                    "--replicaof",
                    "127.0.0.1",
                    &server.port().to_string(),
                ])?;
                Deployment::Single(server, Box::new(replica))
            }
            Topology::Sentinel => Deployment::Sentinel(RedisSentinel::start()?),
            Topology::Cluster => Deployment::Cluster(RedisCluster::start(3, 1)?),
        })
    }

    /// What a client is given: the server, the sentinels, or the cluster's seeds.
    pub fn urls(&self) -> Vec<String> {
        match self {
            Deployment::Single(s, _) => vec![s.url()],
            Deployment::Sentinel(s) => s.sentinel_urls(),
            Deployment::Cluster(c) => c.urls(),
            Deployment::Postgres(pg) => vec![PgDeployment::client_url(pg.switch.port(), 0)],
            Deployment::Zookeeper(zk) => vec![zk.url()],
        }
    }

    pub fn master_name(&self) -> String {
        match self {
            Deployment::Sentinel(s) => s.master_name().to_owned(),
            _ => String::new(),
        }
    }

    /// The ports that take writes now (by master number on a cluster).
    pub fn masters(&self) -> io::Result<Vec<u16>> {
        match self {
            Deployment::Single(s, _) => Ok(vec![s.port()]),
            Deployment::Sentinel(s) => Ok(vec![port_of(&s.master_url()?)]),
            Deployment::Cluster(c) => Ok(c.masters()?.iter().map(|n| n.port).collect()),
            Deployment::Postgres(pg) => Ok(vec![pg.primary.port()]),
            // Nothing to SCAN: its nodes are read with `dump` (see `ZkDeployment::nodes_left`).
            Deployment::Zookeeper(_) => Ok(Vec::new()),
        }
    }

    /// Whether the deployment is quiet: every sentinel sees the same primary with no down or
    /// failover flag and every replica it lists (and reaches) answers ROLE as a replica; or
    /// every cluster node reports `cluster_state:ok` and the role the cluster gives it.
    pub fn settled(&self) -> Result<(), String> {
        match self {
            Deployment::Single(..) | Deployment::Postgres(..) | Deployment::Zookeeper(..) => Ok(()),
            Deployment::Sentinel(s) => sentinel_settled(s),
            Deployment::Cluster(c) => {
                let nodes = c.nodes().map_err(|e| e.to_string())?;
                for node in nodes {
                    let info = text(call(node.port, &["CLUSTER", "INFO"], ASK)?);
                    if !info.contains("cluster_state:ok") {
                        return Err(format!("{}: cluster_state not ok", node.port));
                    }
                    let want = if node.role == Role::Master {
                        "master"
                    } else {
                        "slave"
                    };
                    let role = role(node.port)?;
                    if role != want {
                        return Err(format!(
                            "{} answers ROLE {role}, cluster says {want}",
                            node.port
                        ));
                    }
                }
                Ok(())
            }
        }
    }
}

fn sentinel_settled(set: &RedisSentinel) -> Result<(), String> {
    let mut primary = None;
    let mut replicas = Vec::new();
    for url in set.sentinel_urls() {
        let port = port_of(&url);
        let master = pairs(call(port, &["SENTINEL", "MASTER", set.master_name()], ASK)?);
        let field = |k: &str| {
            master
                .iter()
                .find(|(key, _)| key == k)
                .map(|(_, v)| v.clone())
        };
        if field("flags").as_deref() != Some("master") {
            return Err(format!("sentinel {port}: flags {:?}", field("flags")));
        }
        let at = field("port");
        if primary.is_some() && primary != at {
            return Err(format!("sentinels disagree: {primary:?} / {at:?}"));
        }
        primary = at;
        if replicas.is_empty() {
            if let Value::Array(list) =
                call(port, &["SENTINEL", "REPLICAS", set.master_name()], ASK)?
            {
                replicas = list.into_iter().map(pairs).collect();
            }
        }
    }
    for replica in replicas {
        let field = |k: &str| {
            replica
                .iter()
                .find(|(key, _)| key == k)
                .map(|(_, v)| v.clone())
        };
        if field("flags").is_some_and(|f| f.contains("s_down")) {
            continue; // a killed primary stays listed, down
        }
        let port: u16 = field("port").and_then(|p| p.parse().ok()).unwrap_or(0);
        let role = role(port)?;
        if role != "slave" {
            return Err(format!("replica {port} still answers ROLE {role}"));
        }
    }
    Ok(())
}

/// Writes `count` filler keys to the server on `port`, in pipelines of 1,000 (~0.2 s for
/// 15,000 with every write fsynced).
pub fn write_filler(port: u16, count: usize) -> Result<(), String> {
    let client =
        redis::Client::open(format!("redis://127.0.0.1:{port}")).map_err(|e| e.to_string())?;
    let mut con = client
        .get_connection_with_timeout(ASK)
        .map_err(|e| format!("{port}: {e}"))?;
    con.set_read_timeout(Some(Duration::from_secs(10)))
        .map_err(|e| e.to_string())?;
    let value = "f".repeat(64);
    for start in (0..count).step_by(1_000) {
        let mut pipe = redis::pipe();
        for i in start..(start + 1_000).min(count) {
            pipe.cmd("SET")
                .arg(format!("{FILLER_PREFIX}{i}"))
                .arg(&value)
                .ignore();
        }
        pipe.query::<()>(&mut con)
            .map_err(|e| format!("{port}: filler: {e}"))?;
    }
    Ok(())
}

/// Runs one command on `127.0.0.1:port`, waiting up to `timeout` for the reply.
pub fn call(port: u16, args: &[&str], timeout: Duration) -> Result<Value, String> {
    let client =
        redis::Client::open(format!("redis://127.0.0.1:{port}")).map_err(|e| e.to_string())?;
    let mut con = client
        .get_connection_with_timeout(ASK)
        .map_err(|e| format!("{port}: {e}"))?;
    con.set_read_timeout(Some(timeout))
        .map_err(|e| e.to_string())?;
    redis::cmd(args[0])
        .arg(&args[1..])
        .query(&mut con)
        .map_err(|e| format!("{port} {}: {e}", args.join(" ")))
}

/// Every key on the node matching `pattern` (SCAN, bounded to 10,000 rounds).
pub fn scan(port: u16, pattern: &str) -> Result<Vec<String>, String> {
    let mut keys = Vec::new();
    let mut cursor = "0".to_owned();
    for _ in 0..10_000 {
        let reply = call(
            port,
            &["SCAN", &cursor, "MATCH", pattern, "COUNT", "1000"],
            ASK,
        )?;
        let Value::Array(parts) = reply else {
            return Err(format!("{port}: SCAN answered {reply:?}"));
        };
        let mut parts = parts.into_iter();
        cursor = parts.next().map(text).unwrap_or_default();
        if let Some(Value::Array(found)) = parts.next() {
            keys.extend(found.into_iter().map(text));
        }
        if cursor == "0" {
            break;
        }
    }
    Ok(keys)
}

/// The first element of ROLE: `master`, `slave` or `sentinel`.
fn role(port: u16) -> Result<String, String> {
    match call(port, &["ROLE"], ASK)? {
        Value::Array(parts) => Ok(parts.into_iter().next().map(text).unwrap_or_default()),
        other => Err(format!("{port}: ROLE answered {other:?}")),
    }
}

pub fn text(value: Value) -> String {
    match value {
        Value::BulkString(b) => String::from_utf8_lossy(&b).into_owned(),
        Value::SimpleString(s) => s,
        Value::VerbatimString { text, .. } => text,
        Value::Int(i) => i.to_string(),
        other => format!("{other:?}"),
    }
}

/// A RESP2 flat array (or RESP3 map) of field/value pairs.
fn pairs(value: Value) -> Vec<(String, String)> {
    match value {
        Value::Array(items) => items
            .chunks(2)
            .filter_map(|kv| match kv {
                [k, v] => Some((text(k.clone()), text(v.clone()))),
                _ => None,
            })
            .collect(),
        Value::Map(items) => items.into_iter().map(|(k, v)| (text(k), text(v))).collect(),
        _ => Vec::new(),
    }
}

/// The port of `redis://127.0.0.1:<port>`.
pub fn port_of(url: &str) -> u16 {
    url.rsplit(':')
        .next()
        .and_then(|p| p.parse().ok())
        .unwrap_or(0)
}
