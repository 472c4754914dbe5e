//! Which cluster node serves which slot, so the watchdog can renew in one call per node, and
//! the connections those calls go over (`node_conns.rs`).

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{RoutingInfo, SingleNodeRoutingInfo};
use redis::Value;

use crate::store::redis::backend::names::cluster_slot;
pub(crate) use crate::store::redis::backend::node_conns::NodeAddr;
use crate::store::redis::backend::node_conns::NodeConns;

/// How long a slot map is trusted without being read again. A failover moves slots within
/// seconds; while holds exist the failover watch reads the map every 250 ms
/// ([`SlotMap::owners_now`]), and a per-node call refused by its node (slots moved) invalidates
/// it.
const MAX_AGE: Duration = Duration::from_secs(5);

/// First slot, last slot, the master serving them.
type Ranges = Vec<(u16, u16, NodeAddr)>;

/// Slot ranges -> master, fetched with `CLUSTER SLOTS` and cached, and a connection to each
/// master it names.
pub(crate) struct SlotMap {
    cached: Mutex<Option<Cached>>,
    nodes: NodeConns,
}

/// One read of the slot map: by address (where calls go) and by node id (what tells a change).
struct Cached {
    ranges: Ranges,
    owners: Owners,
    at: Instant,
}

impl SlotMap {
    pub(crate) fn new(nodes: NodeConns) -> Self {
        SlotMap {
            cached: Mutex::new(None),
            nodes,
        }
    }

    /// Sends `cmd` to `node` over the connection to it alone (`node_conns.rs` says why).
    pub(crate) async fn query_on(
        &self,
        node: &NodeAddr,
        cmd: &redis::Cmd,
    ) -> redis::RedisResult<Value> {
        self.nodes.query(node, cmd).await
    }

    pub(crate) fn invalidate(&self) {
        *self.cached.lock().unwrap_or_else(|e| e.into_inner()) = None;
    }

    /// `keys` by index, grouped by the master serving them. Without a slot map (the fetch
    /// failed), one group per slot, sent the usual way: correct, just more calls.
    pub(crate) async fn group(
        &self,
        conn: &mut ClusterConnection,
        keys: &[&str],
    ) -> Vec<(Option<NodeAddr>, Vec<usize>)> {
        let Some(ranges) = self.ranges(conn).await else {
            return by_slot(keys);
        };
        let mut groups: BTreeMap<Option<NodeAddr>, Vec<usize>> = BTreeMap::new();
        for (i, key) in keys.iter().enumerate() {
            let slot = cluster_slot(key);
            let node = ranges
                .iter()
                .find(|(lo, hi, _)| (*lo..=*hi).contains(&slot))
                .map(|(_, _, n)| n.clone());
            match node {
                Some(n) => groups.entry(Some(n)).or_default().push(i),
                // A slot nobody serves right now: leave it to per-slot routing and retries.
                None => return by_slot(keys),
            }
        }
        groups.into_iter().collect()
    }

    async fn ranges(&self, conn: &mut ClusterConnection) -> Option<Ranges> {
        if let Some(c) = &*self.cached.lock().unwrap_or_else(|e| e.into_inner()) {
            if c.at.elapsed() < MAX_AGE {
                return Some(c.ranges.clone());
            }
        }
        let reply = cluster_slots(conn).await?;
        self.take(&reply).map(|(ranges, _)| ranges)
    }

    /// Which master (by node id) serves which slots, as one node sees it now. The addresses in
    /// the same answer become the cached map: the failover watch reads this every 250 ms, so
    /// the renewals it starts on a promotion go where that read said, with no second read that
    /// may go to the master that stopped answering (a random node is asked) and leave them to
    /// per-slot routing, which still names it.
    pub(crate) async fn owners_now(&self, conn: &mut ClusterConnection) -> Option<Owners> {
        let reply = cluster_slots(conn).await?;
        self.take(&reply).map(|(_, owners)| owners)
    }

    /// A `CLUSTER SLOTS` reply read now, made the cached map. The same masters (by node id) as
    /// cached keep the cached addresses and their connections: one node's answer may name a
    /// master by another address than the last one asked did (no `cluster-announce-ip`), which
    /// is no change. Other masters replace them, and the calls still waiting on a node that
    /// left end ([`NodeConns::keep_only`]).
    fn take(&self, reply: &Value) -> Option<(Ranges, Owners)> {
        let ranges = parse_slots(reply)?;
        let mut owners = slot_entries(reply, |master| text(master.get(2)?))?;
        owners.sort();
        let mut cached = self.cached.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(c) = cached.as_mut().filter(|c| c.owners == owners) {
            c.at = Instant::now();
            return Some((c.ranges.clone(), owners));
        }
        self.nodes
            .keep_only(&ranges.iter().map(|(_, _, n)| n).collect::<Vec<_>>());
        *cached = Some(Cached {
            ranges: ranges.clone(),
            owners: owners.clone(),
            at: Instant::now(),
        });
        Some((ranges, owners))
    }
}

/// First slot, last slot, the id of the master serving them; sorted by first slot. Node ids,
/// not addresses, to tell a change: without `cluster-announce-ip`, nodes may know one master
/// by different addresses.
pub(crate) type Owners = Vec<(u16, u16, String)>;

/// `CLUSTER SLOTS` as one node (any) answers it now, uncached; `None` if it did not answer.
async fn cluster_slots(conn: &mut ClusterConnection) -> Option<Value> {
    conn.route_command(
        redis::cmd("CLUSTER").arg("SLOTS").clone(),
        RoutingInfo::SingleNode(SingleNodeRoutingInfo::Random),
    )
    .await
    .ok()
}

/// The slot map, uncached.
async fn fetch(conn: &mut ClusterConnection) -> Option<Ranges> {
    parse_slots(&cluster_slots(conn).await?)
}

/// Which master (by address) serves which slots, as one node sees it now, uncached.
pub(crate) async fn masters(conn: &mut ClusterConnection) -> Option<Vec<(u16, u16, NodeAddr)>> {
    fetch(conn).await
}

/// `keys` by index, one group per slot, each sent the usual way (routed by its key).
pub(crate) fn by_slot(keys: &[&str]) -> Vec<(Option<NodeAddr>, Vec<usize>)> {
    let mut slots: BTreeMap<u16, Vec<usize>> = BTreeMap::new();
    for (i, key) in keys.iter().enumerate() {
        slots.entry(cluster_slot(key)).or_default().push(i);
    }
    slots.into_values().map(|idx| (None, idx)).collect()
}

/// `CLUSTER SLOTS`: `[[start, end, [host, port, id, ...], replicas...], ...]`.
fn parse_slots(v: &Value) -> Option<Ranges> {
    slot_entries(v, |master| {
        let host = text(master.first()?)?;
        let port = int(master.get(1)?)?;
        Some(NodeAddr::new(host, port))
    })
}

/// Each range of a `CLUSTER SLOTS` reply with what `master` reads from its master's entry.
fn slot_entries<T>(
    v: &Value,
    master: impl Fn(&[Value]) -> Option<T>,
) -> Option<Vec<(u16, u16, T)>> {
    let Value::Array(entries) = v else {
        return None;
    };
    entries
        .iter()
        .map(|entry| {
            let Value::Array(parts) = entry else {
                return None;
            };
            let (lo, hi) = (int(parts.first()?)?, int(parts.get(1)?)?);
            let Value::Array(node) = parts.get(2)? else {
                return None;
            };
            Some((lo, hi, master(node)?))
        })
        .collect()
}

fn int(v: &Value) -> Option<u16> {
    match v {
        Value::Int(n) => u16::try_from(*n).ok(),
        _ => None,
    }
}

fn text(v: &Value) -> Option<String> {
    match v {
        Value::BulkString(b) => String::from_utf8(b.clone()).ok(),
        Value::SimpleString(s) => Some(s.clone()),
        _ => None,
    }
}
