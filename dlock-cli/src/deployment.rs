//! Connections to the deployment, opened with redis-rs directly: the inspector needs what a
//! lock client never does (SCAN on every master, PUBSUB NUMSUB on every node), and reading
//! must not start a client's watchdog, subscriber and thread.
//!
//! * one server: one connection, for everything;
//! * a cluster: a cluster connection for a lock's keys (routed by slot), plus one connection
//!   per node from `CLUSTER NODES`: masters for SCAN, and every node for NUMSUB, because a
//!   waiter subscribes (classic pub/sub) on whichever one node its client connected to;
//! * Sentinel: the primary the sentinels name, for everything (waiters subscribe there too).

use std::time::Duration;

use dlock_runtime::inspect::redact_url;
use dlock_runtime::redis::aio::{ConnectionLike, MultiplexedConnection};
use dlock_runtime::redis::cluster::ClusterClientBuilder;
use dlock_runtime::redis::cluster_async::ClusterConnection;
use dlock_runtime::redis::{
    self, AsyncConnectionConfig, Cmd, ConnectionAddr, ConnectionInfo, IntoConnectionInfo, Pipeline,
    RedisConnectionInfo, RedisFuture, TlsCertificates, Value,
};

use crate::args::Target;
use crate::cluster_nodes;

/// One node, by its own connection.
pub struct Node {
    /// `host:port`, for messages.
    pub addr: String,
    pub conn: MultiplexedConnection,
}

/// The open deployment.
pub struct Deployment {
    /// Sends commands on a lock's keys to the node that serves them.
    pub keyed: Keyed,
    /// Where keys live: SCAN asks each.
    pub masters: Vec<Node>,
    /// Where waiters may be subscribed: NUMSUB asks each and adds up.
    pub subscribers_on: Vec<Node>,
    /// What was connected to, passwords removed.
    pub shown: String,
    /// A Redis Cluster: the Redisson kinds' waiters may subscribe with SSUBSCRIBE there,
    /// which `PUBSUB NUMSUB` does not count.
    pub cluster: bool,
}

/// A connection that routes commands on a key: a node's own, or the cluster's.
#[derive(Clone)]
pub enum Keyed {
    Node(MultiplexedConnection),
    Cluster(ClusterConnection),
}

impl ConnectionLike for Keyed {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Keyed::Node(c) => c.req_packed_command(cmd),
            Keyed::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Keyed::Node(c) => c.req_packed_commands(pipeline, offset, count),
            Keyed::Cluster(c) => c.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Keyed::Node(c) => c.get_db(),
            Keyed::Cluster(c) => c.get_db(),
        }
    }
}

/// How every connection is opened: the trusted roots for TLS, the timeouts.
struct Opener {
    tls_root: Option<Vec<u8>>,
    timeout: Duration,
}

impl Opener {
    fn certs(&self) -> Option<TlsCertificates> {
        self.tls_root.as_ref().map(|pem| TlsCertificates {
            client_tls: None,
            root_cert: Some(pem.clone()),
        })
    }

    async fn node(&self, info: ConnectionInfo, shown: &str) -> Result<Node, String> {
        let addr = match info.addr() {
            ConnectionAddr::Tcp(host, port) | ConnectionAddr::TcpTls { host, port, .. } => {
                format!("{host}:{port}")
            }
            other => format!("{other:?}"),
        };
        let client = match self.certs() {
            Some(certs) => redis::Client::build_with_tls(info, certs),
            None => redis::Client::open(info),
        }
        .map_err(|e| format!("{shown}: {e}"))?;
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(self.timeout))
            .set_response_timeout(Some(self.timeout));
        let conn = client
            .get_multiplexed_async_connection_with_config(&config)
            .await
            .map_err(|e| format!("cannot connect to {shown}: {e}"))?;
        Ok(Node { addr, conn })
    }
}

impl Deployment {
    pub async fn open(target: &Target) -> Result<Self, String> {
        let opener = Opener {
            tls_root: match &target.tls_ca {
                Some(path) => Some(
                    std::fs::read(path)
                        .map_err(|e| format!("cannot read --tls-ca {}: {e}", path.display()))?,
                ),
                None => None,
            },
            timeout: target.timeout,
        };
        if !target.cluster.is_empty() {
            return open_cluster(&target.cluster, &opener).await;
        }
        if !target.sentinel.is_empty() {
            return open_sentinel(target, &opener).await;
        }
        let url = target.single_url();
        let shown = redact_url(&url);
        let info = url
            .as_str()
            .into_connection_info()
            .map_err(|e| format!("bad --url {shown}: {e}"))?;
        let node = opener.node(info, &shown).await?;
        Ok(Deployment {
            keyed: Keyed::Node(node.conn.clone()),
            subscribers_on: vec![Node {
                addr: node.addr.clone(),
                conn: node.conn.clone(),
            }],
            masters: vec![node],
            shown,
            cluster: false,
        })
    }
}

async fn open_cluster(seeds: &[String], opener: &Opener) -> Result<Deployment, String> {
    let shown = seeds
        .iter()
        .map(|s| redact_url(s))
        .collect::<Vec<_>>()
        .join(",");
    let mut builder = ClusterClientBuilder::new(seeds.iter().map(String::as_str))
        .connection_timeout(opener.timeout)
        .response_timeout(opener.timeout);
    if let Some(certs) = opener.certs() {
        builder = builder.certs(certs);
    }
    let mut cluster = builder
        .build()
        .map_err(|e| format!("bad --cluster {shown}: {e}"))?
        .get_async_connection()
        .await
        .map_err(|e| format!("cannot connect to the cluster {shown}: {e}"))?;
    let text: String = redis::cmd("CLUSTER")
        .arg("NODES")
        .query_async(&mut cluster)
        .await
        .map_err(|e| format!("CLUSTER NODES on {shown}: {e}"))?;
    // Every node is reached the way the first seed is: its scheme (TLS), user and password.
    let template = seeds[0]
        .as_str()
        .into_connection_info()
        .map_err(|e| format!("bad --cluster {shown}: {e}"))?;
    let (mut masters, mut others) = (Vec::new(), Vec::new());
    for n in cluster_nodes::parse(&text) {
        let info = template
            .clone()
            .set_addr(with_host(template.addr(), &n.host, n.port));
        let shown_node = format!("cluster node {}:{}", n.host, n.port);
        if n.master {
            masters.push(opener.node(info, &shown_node).await?);
        } else {
            match opener.node(info, &shown_node).await {
                Ok(node) => others.push(node),
                // A replica that is down holds no subscriber either: say so, go on.
                Err(e) => {
                    eprintln!("dlock: warning: {e} (waiters subscribed there are not counted)")
                }
            }
        }
    }
    if masters.is_empty() {
        return Err(format!(
            "CLUSTER NODES on {shown} named no reachable master"
        ));
    }
    let subscribers_on = masters
        .iter()
        .map(|m| Node {
            addr: m.addr.clone(),
            conn: m.conn.clone(),
        })
        .chain(others)
        .collect();
    Ok(Deployment {
        keyed: Keyed::Cluster(cluster),
        masters,
        subscribers_on,
        shown,
        cluster: true,
    })
}

/// `addr` moved to `host:port`, keeping whether it is TLS.
fn with_host(addr: &ConnectionAddr, host: &str, port: u16) -> ConnectionAddr {
    match addr {
        ConnectionAddr::TcpTls { insecure, .. } => ConnectionAddr::TcpTls {
            host: host.to_owned(),
            port,
            insecure: *insecure,
            tls_params: None,
        },
        _ => ConnectionAddr::Tcp(host.to_owned(), port),
    }
}

async fn open_sentinel(target: &Target, opener: &Opener) -> Result<Deployment, String> {
    let master = target.master.as_deref().unwrap_or_default();
    let sentinels = target
        .sentinel
        .iter()
        .map(|s| redact_url(s))
        .collect::<Vec<_>>()
        .join(",");
    let mut last = String::from("no sentinel given");
    let mut found = None;
    for url in &target.sentinel {
        let shown = redact_url(url);
        let info = match url.as_str().into_connection_info() {
            Ok(info) => info,
            Err(e) => {
                last = format!("bad --sentinel {shown}: {e}");
                continue;
            }
        };
        let mut node = match opener.node(info, &shown).await {
            Ok(node) => node,
            Err(e) => {
                last = e;
                continue;
            }
        };
        let addr: Result<Option<(String, u16)>, _> = redis::cmd("SENTINEL")
            .arg("get-master-addr-by-name")
            .arg(master)
            .query_async(&mut node.conn)
            .await;
        match addr {
            Ok(Some(addr)) => {
                found = Some(addr);
                break;
            }
            Ok(None) => last = format!("sentinel {shown} knows no master named {master:?}"),
            Err(e) => last = format!("sentinel {shown}: {e}"),
        }
    }
    let (host, port) =
        found.ok_or_else(|| format!("no primary found through {sentinels}: {last}"))?;
    // As the client does: TLS to the primary when a CA is given, credentials from --master-*.
    let scheme = if opener.tls_root.is_some() {
        "rediss"
    } else {
        "redis"
    };
    let mut auth = RedisConnectionInfo::default();
    if let Some(user) = &target.master_user {
        auth = auth.set_username(user);
    }
    if let Some(password) = &target.master_password {
        auth = auth.set_password(password);
    }
    let info = format!("{scheme}://{host}:{port}")
        .into_connection_info()
        .map_err(|e| format!("primary {host}:{port}: {e}"))?
        .set_redis_settings(auth);
    let shown = format!("primary {master} at {host}:{port} (through {sentinels})");
    let node = opener.node(info, &shown).await?;
    Ok(Deployment {
        keyed: Keyed::Node(node.conn.clone()),
        subscribers_on: vec![Node {
            addr: node.addr.clone(),
            conn: node.conn.clone(),
        }],
        masters: vec![node],
        shown,
        cluster: false,
    })
}
