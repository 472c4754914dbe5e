//! Where the client's Redis is: one server, a cluster or a Sentinel-managed primary, and how
//! its connections are opened.
//!
//! Made once per client from its settings. It opens the command connections (a [`Pool`] of
//! [`Conn`]s, which every layer above sends through) and tells the waiters' subscriber which
//! `redis::Client`s to connect with ([`ClientSource`]).

use std::sync::Arc;
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::cluster::{ClusterClient, ClusterClientBuilder};
use tokio::runtime::Handle;

use crate::error::LockError;
use crate::settings::{Settings, Target};
use crate::store::redis::backend::conn::{Conn, Link, Pool};
use crate::store::redis::backend::library::Mode;
use crate::store::redis::backend::node_conns::NodeConns;
use crate::store::redis::backend::open::{manager_config, open_client, root_only};
use crate::store::redis::backend::sentinel::{Follower, MasterSpec, SentinelConn};
use crate::store::redis::backend::slots::SlotMap;
use crate::store::redis::backend::thread::Background;

/// Where the waiters' subscriber gets its clients, asked at every (re)connect: the server, the
/// cluster's seeds in turn, or the sentinels' current primary.
pub(crate) type ClientSource = Arc<dyn Fn() -> Vec<redis::Client> + Send + Sync>;

/// Where the client's Redis is, as the builder described it. Made once per client, so the size
/// difference between variants does not matter.
#[allow(clippy::large_enum_variant)]
#[derive(Clone)]
pub(crate) enum Topology {
    /// One server (or anything reached through one address).
    Single {
        client: redis::Client,
        /// For errors and logs: the URL with the password removed.
        url: String,
    },
    /// A primary managed by Redis Sentinel (followed across failovers, see `sentinel.rs`).
    Sentinel {
        spec: MasterSpec,
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
    pub(crate) fn from_settings(b: &Settings) -> Result<Self, LockError> {
        match &b.target {
            Target::Single(raw) => {
                let url = b.display_target();
                let client = open_client(raw, b.tls_root.as_deref()).map_err(|source| {
                    LockError::Connect {
                        url: url.clone(),
                        source,
                    }
                })?;
                Ok(Topology::Single { client, url })
            }
            Target::Sentinel { sentinels, master } => {
                let url = b.display_target();
                let sentinels = sentinels
                    .iter()
                    .map(|u| open_client(u, b.tls_root.as_deref()))
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
                Ok(Topology::Sentinel { spec, url })
            }
            Target::Cluster(nodes) => {
                let url = b.display_target();
                let connect_err = |source| LockError::Connect {
                    url: url.clone(),
                    source,
                };
                let seeds = nodes
                    .iter()
                    .map(|u| open_client(u, b.tls_root.as_deref()))
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
        &self,
        bg: &Background,
        n: usize,
        response_timeout: Duration,
        connect_timeout: Duration,
        mode: Arc<Mode>,
    ) -> redis::RedisResult<Pool> {
        let client = match self {
            Topology::Single { client, .. } => client.clone(),
            Topology::Sentinel { spec, .. } => {
                let spec = spec.clone();
                let follower = Follower::start(spec, bg.handle().clone()).await?;
                return Ok(Pool::new(vec![Conn::new(
                    Link::Sentinel(SentinelConn(follower)),
                    mode,
                )]));
            }
            Topology::Cluster { client, seeds, .. } => {
                // One cluster connection already multiplexes over every node.
                let client = (**client).clone();
                let conn = bg
                    .run(async move { client.get_async_connection().await })
                    .await??;
                let nodes = NodeConns::new(
                    seeds[0].clone(),
                    connect_timeout,
                    response_timeout,
                    bg.handle().clone(),
                );
                let conn = Conn::new(Link::Cluster(conn, Arc::new(SlotMap::new(nodes))), mode);
                return Ok(Pool::new(vec![conn]));
            }
        };
        let config = manager_config(response_timeout, connect_timeout);
        let here = tokio::runtime::Handle::current();
        if here.runtime_flavor() != tokio::runtime::RuntimeFlavor::MultiThread {
            let on = Some(bg.handle().clone());
            let conns = bg.run(open_managers(client, config, n, on, mode)).await??;
            return Ok(Pool::new(conns));
        }
        let front = open_managers(client.clone(), config.clone(), n, None, mode.clone()).await?;
        // Opened (so driven) on the client's thread: the watchdog, orphan clean-ups and
        // background releases use them from there, so no caller runtime can stall a renewal,
        // and commands move to them when the caller's runtime is gone. One is enough for
        // background work; after a switch, every command shares it.
        let on = Some(bg.handle().clone());
        let back = bg.run(open_managers(client, config, 1, on, mode)).await??;
        Ok(Pool::fronted(back, front, &here))
    }

    /// One more command connection, of its own and driven by the client's thread: the one that
    /// sends WAIT (see `sync_conn.rs`), which blocks the connection it is sent on.
    pub(crate) async fn open_one(
        &self,
        bg: Handle,
        mode: Arc<Mode>,
        response_timeout: Duration,
        connect_timeout: Duration,
    ) -> redis::RedisResult<Conn> {
        let topology = self.clone();
        let on = bg.clone();
        let open = async move {
            match topology {
                Topology::Single { client, .. } => {
                    let config = manager_config(response_timeout, connect_timeout);
                    let mut one = open_managers(client, config, 1, Some(on), mode).await?;
                    Ok(one.remove(0))
                }
                Topology::Sentinel { spec, .. } => {
                    let follower = Follower::start(spec, on).await?;
                    Ok(Conn::new(Link::Sentinel(SentinelConn(follower)), mode))
                }
                Topology::Cluster { client, seeds, .. } => {
                    let conn = client.get_async_connection().await?;
                    let nodes =
                        NodeConns::new(seeds[0].clone(), connect_timeout, response_timeout, on);
                    let slots = Arc::new(SlotMap::new(nodes));
                    Ok(Conn::new(Link::Cluster(conn, slots), mode))
                }
            }
        };
        bg.spawn(open)
            .await
            .map_err(|e| std::io::Error::other(format!("dlock background thread: {e}")))?
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
                let Some(SentinelConn(follower)) = pool.get().sentinel().cloned() else {
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

/// `n` managers; with `on`, every request on them is sent from that runtime (see `Conn`).
async fn open_managers(
    client: redis::Client,
    config: ConnectionManagerConfig,
    n: usize,
    on: Option<Handle>,
    mode: Arc<Mode>,
) -> redis::RedisResult<Vec<Conn>> {
    let mut conns = Vec::with_capacity(n);
    for _ in 0..n {
        let manager = ConnectionManager::new_with_config(client.clone(), config.clone()).await?;
        conns.push(Conn::new(Link::Single(manager, on.clone()), mode.clone()));
    }
    Ok(conns)
}
