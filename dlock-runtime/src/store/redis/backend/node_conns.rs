//! Connections of the client's own to cluster masters, for the calls it routes to a node
//! itself (the watchdog's per-node renewals, a library load after one), by the slot map it
//! read (`slots.rs`). Every other request goes through redis-rs's cluster connection.
//!
//! Not through redis-rs's cluster connection, for two reasons seen with a master frozen
//! (SIGSTOP; a stalled host or a link that drops packets is the same) and its replica promoted:
//! - By address, the cluster connection answers a node it has no connection to (a replica
//!   promoted since it last read the slots: it connects to masters only) by dropping every
//!   connection and connecting to the seeds again, and no request of the client moves until
//!   each seed has answered or timed out: the first renewal sent to the new master stopped
//!   every lock of the client for the connect timeout (5 s), acquires and releases on healthy
//!   masters included (tests/cluster `failover::a_promotion_past_a_frozen_master_…`, 6 runs in
//!   7 before).
//! - By slot, it sends the call where its own slot map says, and it reads that map again only
//!   on a redirect or a broken link, not on a timeout: renewals kept going to the frozen node
//!   and its holds were lost when their lease ran out, though the new master had them.
//!
//! Here a call goes to the master our slot map names, over a connection to that node alone,
//! so one frozen node holds up only the calls sent to it. One connection per master, opened at
//! its first call on the client's own thread (so no caller's runtime drives it), with the
//! seeds' TLS and credentials; dropped after a failure on it, and when its node no longer
//! serves slots. Then the calls still waiting on it end at once ([`left_the_map`]): a renewal
//! stuck on a frozen master would otherwise hold up the watchdog's next pass, the one that
//! renews every hold on the new master, for up to a third of the lease.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, Client, ConnectionAddr, RedisResult};
use tokio::runtime::Handle;
use tokio_util::sync::CancellationToken;

/// A node's address, as the cluster announces it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct NodeAddr {
    host: String,
    port: u16,
}

impl NodeAddr {
    pub(crate) fn new(host: String, port: u16) -> Self {
        NodeAddr { host, port }
    }

    /// The host the cluster announces for the node.
    pub(crate) fn host(&self) -> &str {
        &self.host
    }

    pub(crate) fn port(&self) -> u16 {
        self.port
    }
}

impl std::fmt::Display for NodeAddr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.host, self.port)
    }
}

/// One node's connection, opened by the first caller that needs it.
#[derive(Default)]
struct Node {
    conn: tokio::sync::Mutex<Option<MultiplexedConnection>>,
    /// Cancelled when the node leaves the slot map: its calls end with [`left_the_map`].
    left: CancellationToken,
}

type Entry = Arc<Node>;

/// How the detail of the error a call gets when its node left the slot map meanwhile starts.
const LEFT: &str = "the cluster node no longer serves slots";

/// Whether `e` says the call's node left the slot map while the call waited: the call may not
/// have run, and the map has changed since it was grouped.
pub(crate) fn left_the_map(e: &redis::RedisError) -> bool {
    e.kind() == redis::ErrorKind::Client && e.detail().is_some_and(|d| d.starts_with(LEFT))
}

pub(crate) struct NodeConns {
    /// A seed's client: the TLS settings and credentials every node is reached with.
    template: Client,
    connect_timeout: Duration,
    response_timeout: Duration,
    /// The client's own runtime, which drives every connection opened here.
    rt: Handle,
    /// A std mutex, held only to find or add an entry: connecting happens under the entry's
    /// own lock, so a node that does not answer holds up only its own callers.
    nodes: Mutex<HashMap<NodeAddr, Entry>>,
}

impl NodeConns {
    pub(crate) fn new(
        template: Client,
        connect_timeout: Duration,
        response_timeout: Duration,
        rt: Handle,
    ) -> Self {
        NodeConns {
            template,
            connect_timeout,
            response_timeout,
            rt,
            nodes: Mutex::new(HashMap::new()),
        }
    }

    /// Sends `cmd` to `node` and returns its reply; a failure of the link (not a server's
    /// error reply) drops the connection, so the next call opens a new one.
    pub(crate) async fn query(
        &self,
        node: &NodeAddr,
        cmd: &redis::Cmd,
    ) -> RedisResult<redis::Value> {
        let entry = self.lock().entry(node.clone()).or_default().clone();
        let left = || {
            let detail = format!("{LEFT} ({node})");
            redis::RedisError::from((redis::ErrorKind::Client, "call abandoned", detail))
        };
        let reply = tokio::select! {
            reply = async {
                let mut conn = self.conn(node, &entry).await?;
                cmd.query_async(&mut conn).await
            } => reply,
            _ = entry.left.cancelled() => return Err(left()),
        };
        // A server's error reply (it has a code) says nothing against the connection.
        if reply.as_ref().is_err_and(|e| e.code().is_none()) {
            self.forget(node, &entry);
        }
        reply
    }

    /// Keeps the connections of `masters` only (the slot map was read again); the calls
    /// waiting on the others end.
    pub(crate) fn keep_only(&self, masters: &[&NodeAddr]) {
        self.lock().retain(|node, entry| {
            let keep = masters.contains(&node);
            if !keep {
                entry.left.cancel();
            }
            keep
        });
    }

    /// Drops `entry`'s connection if it is still `node`'s (a later one may have replaced it).
    fn forget(&self, node: &NodeAddr, entry: &Entry) {
        let mut nodes = self.lock();
        if nodes.get(node).is_some_and(|e| Arc::ptr_eq(e, entry)) {
            nodes.remove(node);
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<NodeAddr, Entry>> {
        self.nodes.lock().unwrap_or_else(|e| e.into_inner())
    }

    async fn conn(&self, node: &NodeAddr, entry: &Entry) -> RedisResult<MultiplexedConnection> {
        let mut slot = entry.conn.lock().await;
        if let Some(conn) = &*slot {
            return Ok(conn.clone());
        }
        // Forgotten while this caller waited its turn: the caller before it failed on the node
        // just now. Fail too rather than try again, each caller in turn, for a connect timeout
        // each (a frozen node).
        if !self.lock().get(node).is_some_and(|e| Arc::ptr_eq(e, entry)) {
            return Err(redis::RedisError::from((
                redis::ErrorKind::Io,
                "not connected",
                format!("the connection to cluster node {node} failed just now"),
            )));
        }
        let client = self.client_for(node)?;
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(self.connect_timeout))
            .set_response_timeout(Some(self.response_timeout));
        let open = self.rt.spawn(async move {
            client
                .get_multiplexed_async_connection_with_config(&config)
                .await
        });
        let conn = open.await.map_err(|e| {
            redis::RedisError::from((
                redis::ErrorKind::Io,
                "dlock's thread ended while connecting to a cluster node",
                e.to_string(),
            ))
        })??;
        *slot = Some(conn.clone());
        Ok(conn)
    }

    /// The seed's client with `node`'s address.
    fn client_for(&self, node: &NodeAddr) -> RedisResult<Client> {
        let info = self.template.get_connection_info().clone();
        let addr = match info.addr() {
            ConnectionAddr::TcpTls {
                insecure,
                tls_params,
                ..
            } => ConnectionAddr::TcpTls {
                host: node.host().to_owned(),
                port: node.port(),
                insecure: *insecure,
                tls_params: tls_params.clone(),
            },
            _ => ConnectionAddr::Tcp(node.host().to_owned(), node.port()),
        };
        Client::open(info.set_addr(addr))
    }
}
