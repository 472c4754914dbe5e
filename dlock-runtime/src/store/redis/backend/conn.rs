//! The connection seam: one connection type for every deployment dlock talks to.
//!
//! Commands, the watchdog, orphan clean-up and the stock helpers send through [`Conn`]
//! (`topology.rs` opens them). Nothing above this module knows whether it talks to one server
//! or a cluster, except where the watchdog asks which node serves which key
//! (`Conn::node_groups`), to renew in one call per node.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use redis::aio::{ConnectionLike, ConnectionManager};
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{Route, SingleNodeRoutingInfo, SlotAddr};
use redis::{Cmd, Pipeline, RedisFuture, Value};
use tokio::runtime::Handle;

use crate::store::redis::backend::library::Mode;
use crate::store::redis::backend::names::cluster_slot;
use crate::store::redis::backend::sentinel::SentinelConn;
use crate::store::redis::backend::slots::{self, NodeAddr, Owners, SlotMap};
use crate::store::redis::backend::thread::from_runtime;

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

/// Connections driven by the caller's runtime while it is alive (see `Topology::open_pool`).
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
    /// Connections the client's own thread drives.
    pub(crate) fn new(back: Vec<Conn>) -> Self {
        Pool {
            front: None,
            back,
            next: AtomicUsize::new(0),
        }
    }

    /// `front` (driven by the runtime `here`) while that runtime lives, then `back`.
    pub(crate) fn fronted(back: Vec<Conn>, front: Vec<Conn>, here: &Handle) -> Self {
        let alive = Arc::new(AtomicBool::new(true));
        let (canary, stop) = Canary::new(alive.clone());
        here.spawn(canary.watch());
        Pool {
            front: Some(Front {
                conns: front,
                alive,
                _stop: stop,
            }),
            ..Pool::new(back)
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

    /// The command connection for requests about `key`: always the same one while the pool's
    /// connections do not change, so requests about one key reach Redis in the order they
    /// were sent. A release that returns once written (`LockGuard::release_written`) relies
    /// on it: this client's next acquire of the key queues behind the release on the socket.
    pub(crate) fn for_key(&self, key: &str) -> Conn {
        let conns = match &self.front {
            Some(front) if front.alive.load(Ordering::Acquire) => &front.conns,
            _ => &self.back,
        };
        if conns.len() == 1 {
            return conns[0].clone();
        }
        let mut hash = std::hash::DefaultHasher::new();
        std::hash::Hash::hash(key, &mut hash);
        let i = std::hash::Hasher::finish(&hash) as usize % conns.len();
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
pub(crate) struct Conn {
    link: Link,
    /// FCALL or EVALSHA, shared by every connection of one client.
    pub(crate) mode: Arc<Mode>,
}

/// The connection itself, per deployment.
#[derive(Clone)]
pub(crate) enum Link {
    /// With a runtime: requests are sent from it (connections the client's thread drives).
    Single(ConnectionManager, Option<Handle>),
    Cluster(ClusterConnection, Arc<SlotMap>),
    Sentinel(SentinelConn),
}

impl Conn {
    pub(crate) fn new(link: Link, mode: Arc<Mode>) -> Self {
        Conn { link, mode }
    }

    /// The connection to a Sentinel-managed primary, if that is what this is.
    pub(crate) fn sentinel(&self) -> Option<&SentinelConn> {
        match &self.link {
            Link::Sentinel(c) => Some(c),
            _ => None,
        }
    }

    /// Whether this is a cluster connection.
    pub(crate) fn is_cluster(&self) -> bool {
        matches!(self.link, Link::Cluster(..))
    }

    /// Groups `keys` (by index) by the node that serves them, so the watchdog can renew them
    /// in one call per node. `None` as the node: send the group the usual way (one server, or
    /// a cluster whose slot map is unknown right now, where each group is one slot).
    pub(crate) async fn node_groups(
        &mut self,
        keys: &[&str],
    ) -> Vec<(Option<NodeAddr>, Vec<usize>)> {
        match &mut self.link {
            Link::Single(..) | Link::Sentinel(_) => vec![(None, (0..keys.len()).collect())],
            Link::Cluster(conn, slots) => slots.group(conn, keys).await,
        }
    }

    /// Sends `cmd` to one node of a cluster (on one server: to the server).
    pub(crate) async fn query_on(
        &mut self,
        node: &NodeAddr,
        cmd: &Cmd,
    ) -> redis::RedisResult<Value> {
        if let Link::Cluster(_, slots) = &self.link {
            return slots.query_on(node, cmd).await;
        }
        cmd.query_async(self).await
    }

    /// Sends the first `count` commands of `pipeline` together to the node serving `key` (on one
    /// server: to it), replies in order; a server error in a reply stays a value.
    pub(crate) async fn pipeline_to_key(
        &mut self,
        pipeline: &Pipeline,
        count: usize,
        key: &str,
    ) -> redis::RedisResult<Vec<Value>> {
        if let Link::Cluster(c, _) = &mut self.link {
            let slot = cluster_slot(key);
            let route = SingleNodeRoutingInfo::SpecificNode(Route::new(slot, SlotAddr::Master));
            return c.route_pipeline(pipeline.clone(), 0, count, route).await;
        }
        self.req_packed_commands(pipeline, 0, count).await
    }

    /// Which master serves which slots, asked now (`None` when not a cluster, or no answer);
    /// the answer also becomes the slot map per-node calls are grouped by.
    pub(crate) async fn slot_owners(&mut self) -> Option<Owners> {
        match &mut self.link {
            Link::Cluster(conn, slots) => slots.owners_now(conn).await,
            Link::Single(..) | Link::Sentinel(_) => None,
        }
    }

    /// Which master (by address) serves which slots, asked now (`None` when not a cluster, or
    /// no answer).
    pub(crate) async fn slot_masters(&mut self) -> Option<Vec<(u16, u16, NodeAddr)>> {
        match &mut self.link {
            Link::Cluster(conn, _) => slots::masters(conn).await,
            Link::Single(..) | Link::Sentinel(_) => None,
        }
    }

    /// Forgets the cluster's slot map (a grouped call failed: slots moved).
    pub(crate) fn slots_changed(&self) {
        if let Link::Cluster(_, slots) = &self.link {
            slots.invalidate();
        }
    }
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match &mut self.link {
            Link::Single(c, None) => c.req_packed_command(cmd),
            Link::Single(c, Some(rt)) => {
                let (mut c, cmd) = (c.clone(), cmd.clone());
                from_runtime(rt, async move { c.req_packed_command(&cmd).await })
            }
            Link::Cluster(c, _) => c.req_packed_command(cmd),
            Link::Sentinel(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match &mut self.link {
            Link::Single(c, None) => c.req_packed_commands(pipeline, offset, count),
            Link::Single(c, Some(rt)) => {
                let (mut c, pipeline) = (c.clone(), pipeline.clone());
                from_runtime(rt, async move {
                    c.req_packed_commands(&pipeline, offset, count).await
                })
            }
            Link::Cluster(c, _) => c.req_packed_commands(pipeline, offset, count),
            Link::Sentinel(c) => c.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match &self.link {
            Link::Single(c, _) => c.get_db(),
            Link::Cluster(c, _) => c.get_db(),
            Link::Sentinel(c) => c.get_db(),
        }
    }
}
