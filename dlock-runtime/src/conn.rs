//! The topology seam: one connection type for every deployment dlock talks to.
//!
//! Commands, the watchdog, orphan clean-up and the stock helpers send through [`Conn`]; the
//! waiters' subscriber gets its `redis::Client`s from [`Topology`]. Nothing above this module
//! knows whether it talks to one server or a cluster, except where the watchdog asks which
//! node serves which key (`Conn::node_groups`), to renew in one call per node.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster::{ClusterClient, ClusterClientBuilder};
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, Pipeline, RedisFuture, Value};
use tokio::runtime::Handle;

use crate::background::Background;
use crate::builder::{LockClientBuilder, Target};
use crate::error::LockError;
use crate::sentinel::{Follower, MasterSpec, SentinelConn};
use crate::slots::{NodeAddr, SlotMap};
use crate::waiters::ClientSource;

/// Where the client's Redis is, as the builder described it. Made once per client, so the size
/// difference between variants does not matter.
#[allow(clippy::large_enum_variant)]
pub(crate) enum Topology {
    /// One server (or anything reached through one address).
    Single {
        client: redis::Client,
        /// For errors and logs: the URL with the password removed.
        url: String,
    },
    /// A primary managed by Redis Sentinel (followed across failovers, see `sentinel.rs`).
    Sentinel {
        spec: Option<MasterSpec>,
        /// `<master> via <sentinel URLs>`, passwords removed.
        url: String,
    },
    /// A Redis Cluster.
    Cluster {
        client: Box<ClusterClient>,
        /// One client per seed node: the subscriber connects to one of them (classic PUBLISH
        /// reaches every node of a cluster) and moves to the next when it loses its node.
        seeds: Vec<redis::Client>,
        /// The seed URLs, passwords removed, comma-separated.
        url: String,
    },
}

impl Topology {
    pub(crate) fn from_builder(b: &LockClientBuilder) -> Result<Self, LockError> {
        match &b.target {
            Target::Single(raw) => {
                let url = redact(raw);
                let client = open_client(raw, b).map_err(|source| LockError::Connect {
                    url: url.clone(),
                    source,
                })?;
                Ok(Topology::Single { client, url })
            }
            Target::Sentinel { sentinels, master } => {
                let url = format!("{master} via {}", redact_all(sentinels));
                let sentinels = sentinels
                    .iter()
                    .map(|u| open_client(u, b))
                    .collect::<redis::RedisResult<Vec<_>>>()
                    .map_err(|source| LockError::Connect {
                        url: url.clone(),
                        source,
                    })?;
                let spec = MasterSpec {
                    sentinels,
                    name: master.clone(),
                    username: b.master_auth.0.clone(),
                    password: b.master_auth.1.clone(),
                    tls_root: b.tls_root.clone(),
                    config: manager_config(b.response_timeout, b.connect_timeout),
                };
                Ok(Topology::Sentinel {
                    spec: Some(spec),
                    url,
                })
            }
            Target::Cluster(nodes) => {
                let url = nodes
                    .iter()
                    .map(|u| redact(u))
                    .collect::<Vec<_>>()
                    .join(",");
                let connect_err = |source| LockError::Connect {
                    url: url.clone(),
                    source,
                };
                let seeds = nodes
                    .iter()
                    .map(|u| open_client(u, b))
                    .collect::<redis::RedisResult<Vec<_>>>()
                    .map_err(connect_err)?;
                let mut builder = ClusterClientBuilder::new(nodes.iter().map(String::as_str))
                    .response_timeout(b.response_timeout)
                    .connection_timeout(b.connect_timeout);
                if let Some(pem) = &b.tls_root {
                    builder = builder.certs(root_only(pem));
                }
                let client = builder.build().map_err(connect_err)?;
                Ok(Topology::Cluster {
                    client: Box::new(client),
                    seeds,
                    url,
                })
            }
        }
    }

    /// Whether this is a Redis Cluster.
    pub(crate) fn is_cluster(&self) -> bool {
        matches!(self, Topology::Cluster { .. })
    }

    /// The deployment's address for messages, passwords removed.
    pub(crate) fn display_url(&self) -> String {
        match self {
            Topology::Single { url, .. }
            | Topology::Cluster { url, .. }
            | Topology::Sentinel { url, .. } => url.clone(),
        }
    }

    /// Opens the command connections. On a multi-thread runtime (a service's `#[tokio::main]`)
    /// one server's connections are driven by that runtime, which saves two thread wake-ups
    /// per command; a second set, made on the client's own thread, connects only if that
    /// runtime shuts down while the client lives on. Elsewhere (a `#[tokio::test]`, which a
    /// `static` client may outlive), and for a cluster, they are driven by the client's own
    /// thread from the start.
    pub(crate) async fn open_pool(
        &mut self,
        bg: &Background,
        n: usize,
        response_timeout: Duration,
        connect_timeout: Duration,
    ) -> redis::RedisResult<Pool> {
        let client = match self {
            Topology::Single { client, .. } => client.clone(),
            Topology::Sentinel { spec, .. } => {
                let spec = spec
                    .take()
                    .expect("a sentinel topology opens its pool once");
                let follower = Follower::start(spec, bg.handle().clone()).await?;
                return Ok(Pool::new(
                    vec![Conn::Sentinel(SentinelConn(follower))],
                    None,
                ));
            }
            Topology::Cluster { client, .. } => {
                // One cluster connection already multiplexes over every node.
                let client = (**client).clone();
                let conn = bg
                    .run(async move { client.get_async_connection().await })
                    .await??;
                let conn = Conn::Cluster(conn, Arc::new(SlotMap::default()));
                return Ok(Pool::new(vec![conn], None));
            }
        };
        let config = manager_config(response_timeout, connect_timeout);
        let here = tokio::runtime::Handle::current();
        if here.runtime_flavor() != tokio::runtime::RuntimeFlavor::MultiThread {
            let on = Some(bg.handle().clone());
            let conns = bg.run(open_managers(client, config, n, on)).await??;
            return Ok(Pool::new(conns, None));
        }
        let front = open_managers(client.clone(), config.clone(), n, None).await?;
        // Opened (so driven) on the client's thread: the watchdog, orphan clean-ups and
        // background releases use them from there, so no caller runtime can stall a renewal,
        // and commands move to them when the caller's runtime is gone. One is enough for
        // background work; after a switch, every command shares it.
        let on = Some(bg.handle().clone());
        let back = bg.run(open_managers(client, config, 1, on)).await??;
        let alive = Arc::new(AtomicBool::new(true));
        let (canary, stop) = Canary::new(alive.clone());
        here.spawn(canary.watch());
        Ok(Pool::new(
            back,
            Some(Front {
                conns: front,
                alive,
                _stop: stop,
            }),
        ))
    }

    /// The clients the waiters' subscriber connects with, asked at every (re)connect: the
    /// server, the cluster's seeds in turn, or the sentinels' current primary.
    pub(crate) fn pubsub_source(&self, pool: &Pool) -> ClientSource {
        match self {
            Topology::Single { client, .. } => {
                let client = client.clone();
                Arc::new(move || vec![client.clone()])
            }
            Topology::Cluster { seeds, .. } => {
                let seeds = seeds.clone();
                Arc::new(move || seeds.clone())
            }
            Topology::Sentinel { .. } => {
                let Conn::Sentinel(SentinelConn(follower)) = pool.get() else {
                    unreachable!("a sentinel topology's pool holds its follower")
                };
                Arc::new(move || {
                    // A reconnect may mean a failover: ask the sentinels (rate-limited).
                    follower.kick();
                    vec![follower.client()]
                })
            }
        }
    }
}

/// A client for one URL, trusting the builder's root certificates for `rediss://` if it set
/// any (else the system's trust store).
fn open_client(url: &str, b: &LockClientBuilder) -> redis::RedisResult<redis::Client> {
    match &b.tls_root {
        Some(pem) => redis::Client::build_with_tls(url, root_only(pem)),
        None => redis::Client::open(url),
    }
}

pub(crate) fn root_only(pem: &[u8]) -> redis::TlsCertificates {
    redis::TlsCertificates {
        client_tls: None,
        root_cert: Some(pem.to_vec()),
    }
}

fn manager_config(
    response_timeout: Duration,
    connect_timeout: Duration,
) -> ConnectionManagerConfig {
    ConnectionManagerConfig::new()
        .set_response_timeout(Some(response_timeout))
        .set_connection_timeout(Some(connect_timeout))
        .set_number_of_retries(2)
}

/// `n` managers; with `on`, every request on them is sent from that runtime (see `Conn`).
async fn open_managers(
    client: redis::Client,
    config: ConnectionManagerConfig,
    n: usize,
    on: Option<Handle>,
) -> redis::RedisResult<Vec<Conn>> {
    let mut conns = Vec::with_capacity(n);
    for _ in 0..n {
        let manager = ConnectionManager::new_with_config(client.clone(), config.clone()).await?;
        conns.push(Conn::Single(manager, on.clone()));
    }
    Ok(conns)
}

/// Sends one request from `rt`. redis-rs opens a replacement connection (and spawns its
/// driver) from whichever task polls a broken manager first; polling only from the client's
/// runtime keeps the driver there, so no caller runtime that ends can take it along. The
/// request goes out even if the caller stops waiting (a multiplexed connection is cancel-safe
/// either way), and requests spawned in order reach the socket in order (the client's runtime
/// runs tasks first come, first served), which orphan clean-up relies on.
pub(crate) fn from_runtime<'a, T: Send + 'static>(
    rt: &Handle,
    request: impl std::future::Future<Output = redis::RedisResult<T>> + Send + 'static,
) -> RedisFuture<'a, T> {
    let task = rt.spawn(request);
    Box::pin(async move {
        task.await
            .map_err(|e| redis::RedisError::from(std::io::Error::other(e.to_string())))?
    })
}

/// Lives on the runtime that drives the front connections; dropped (when that runtime shuts
/// down and drops its tasks) it switches the pool over to the client's own connections. It
/// ends with the pool (the sender `Pool` keeps), so dropped clients leave no task behind.
struct Canary(Arc<AtomicBool>, tokio::sync::oneshot::Receiver<()>);

impl Canary {
    /// The canary and the sender whose drop ends its task.
    fn new(alive: Arc<AtomicBool>) -> (Self, tokio::sync::oneshot::Sender<()>) {
        let (tx, rx) = tokio::sync::oneshot::channel();
        (Canary(alive, rx), tx)
    }

    async fn watch(mut self) {
        let _ = (&mut self.1).await;
    }
}

impl Drop for Canary {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

/// Connections driven by the caller's runtime while it is alive (see [`Topology::open_pool`]).
struct Front {
    conns: Vec<Conn>,
    alive: Arc<AtomicBool>,
    /// Dropped with the pool: ends the canary's task.
    _stop: tokio::sync::oneshot::Sender<()>,
}

/// The command connections, used round-robin.
pub(crate) struct Pool {
    front: Option<Front>,
    /// Driven by the client's own thread.
    back: Vec<Conn>,
    next: AtomicUsize,
}

impl Pool {
    fn new(back: Vec<Conn>, front: Option<Front>) -> Self {
        Pool {
            front,
            back,
            next: AtomicUsize::new(0),
        }
    }

    /// A command connection. Clones share the underlying socket(s), so a command sent on a
    /// clone is ordered after everything sent earlier on it to the same node (orphan clean-up
    /// relies on that; see `Conn`).
    pub(crate) fn get(&self) -> Conn {
        let conns = match &self.front {
            Some(front) if front.alive.load(Ordering::Acquire) => &front.conns,
            _ => &self.back,
        };
        let i = self.next.fetch_add(1, Ordering::Relaxed) % conns.len();
        conns[i].clone()
    }

    /// A connection driven by the client's own thread, for its background work (renewals,
    /// clean-ups): no caller runtime, blocked or gone, can hold those back.
    pub(crate) fn background(&self) -> Conn {
        let i = self.next.fetch_add(1, Ordering::Relaxed) % self.back.len();
        self.back[i].clone()
    }
}

/// A command connection to the deployment: multiplexed, reconnecting, cheap to clone.
///
/// On a cluster, requests for one key go to the node serving its slot over one socket, so an
/// orphan's undo still runs after its acquire. The exception is a redirect (MOVED/ASK during a
/// failover or resharding): redis-rs retries the redirected request on the new node, and an
/// undo sent meanwhile can get there first and find nothing to undo. The hold it meant to undo
/// then expires with its lease (it is never renewed: it was never activated).
#[derive(Clone)]
pub(crate) enum Conn {
    /// With a runtime: requests are sent from it (connections the client's thread drives).
    Single(ConnectionManager, Option<Handle>),
    Cluster(ClusterConnection, Arc<SlotMap>),
    Sentinel(SentinelConn),
}

impl Conn {
    /// Groups `keys` (by index) by the node that serves them, so the watchdog can renew them
    /// in one call per node. `None` as the node: send the group the usual way (one server, or
    /// a cluster whose slot map is unknown right now, where each group is one slot).
    pub(crate) async fn node_groups(
        &mut self,
        keys: &[&str],
    ) -> Vec<(Option<NodeAddr>, Vec<usize>)> {
        match self {
            Conn::Single(..) | Conn::Sentinel(_) => vec![(None, (0..keys.len()).collect())],
            Conn::Cluster(conn, slots) => slots.group(conn, keys).await,
        }
    }

    /// Sends `cmd` to one node of a cluster (on one server: to the server).
    pub(crate) async fn query_on(
        &mut self,
        node: &NodeAddr,
        cmd: &Cmd,
    ) -> redis::RedisResult<Value> {
        match self {
            Conn::Single(..) => cmd.query_async(self).await,
            Conn::Sentinel(c) => cmd.query_async(c).await,
            Conn::Cluster(c, _) => c.route_command(cmd.clone(), node.routing()).await,
        }
    }

    /// Forgets the cluster's slot map (a grouped call failed: slots moved).
    pub(crate) fn slots_changed(&self) {
        if let Conn::Cluster(_, slots) = self {
            slots.invalidate();
        }
    }
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Conn::Single(c, None) => c.req_packed_command(cmd),
            Conn::Single(c, Some(rt)) => {
                let (mut c, cmd) = (c.clone(), cmd.clone());
                from_runtime(rt, async move { c.req_packed_command(&cmd).await })
            }
            Conn::Cluster(c, _) => c.req_packed_command(cmd),
            Conn::Sentinel(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Conn::Single(c, None) => c.req_packed_commands(pipeline, offset, count),
            Conn::Single(c, Some(rt)) => {
                let (mut c, pipeline) = (c.clone(), pipeline.clone());
                from_runtime(rt, async move {
                    c.req_packed_commands(&pipeline, offset, count).await
                })
            }
            Conn::Cluster(c, _) => c.req_packed_commands(pipeline, offset, count),
            Conn::Sentinel(c) => c.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Conn::Single(c, _) => c.get_db(),
            Conn::Cluster(c, _) => c.get_db(),
            Conn::Sentinel(c) => c.get_db(),
        }
    }
}

/// `redis://user:secret@host` -> `redis://user:***@host`, so URLs can go into errors and logs.
/// Several URLs, redacted, comma-separated.
pub(crate) fn redact_all(urls: &[String]) -> String {
    urls.iter().map(|u| redact(u)).collect::<Vec<_>>().join(",")
}

pub(crate) fn redact(url: &str) -> String {
    let Some(scheme_end) = url.find("://").map(|i| i + 3) else {
        return url.to_owned();
    };
    let rest = &url[scheme_end..];
    let Some(at) = rest.find('@') else {
        return url.to_owned();
    };
    let creds = &rest[..at];
    let user = creds.split(':').next().unwrap_or("");
    if creds.contains(':') {
        format!("{}{user}:***{}", &url[..scheme_end], &rest[at..])
    } else {
        format!("{}***{}", &url[..scheme_end], &rest[at..])
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn redact_hides_passwords() {
        assert_eq!(super::redact("redis://a:pw@h:1"), "redis://a:***@h:1");
        assert_eq!(super::redact("redis://pw@h"), "redis://***@h");
        assert_eq!(super::redact("redis://h:1/0"), "redis://h:1/0");
    }
}
