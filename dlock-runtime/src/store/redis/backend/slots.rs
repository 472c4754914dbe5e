//! Which cluster node serves which slot, so the watchdog can renew in one call per node.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr};
use redis::Value;

use crate::store::redis::backend::names::cluster_slot;

/// How long a slot map is trusted without a failure saying otherwise. A failover moves slots
/// within seconds; a renewal sent to the old node fails, invalidates the map and is retried.
const MAX_AGE: Duration = Duration::from_secs(5);

/// A node's address, as the cluster announces it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct NodeAddr {
    host: String,
    port: u16,
}

impl NodeAddr {
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

/// Where one grouped call goes: the master our slot map names for its keys, reached through
/// the slot of its first key, not through the master's address.
///
/// By address, redis-rs's cluster connection answers a node it has no connection to (a
/// replica promoted since it last read the slots: it connects to masters only) by dropping
/// every connection and connecting to the seed nodes again, and no request of the client
/// moves until each seed has answered or timed out. With a master frozen rather than dead
/// (SIGSTOP, a stalled host, a link that drops packets) and its replica promoted, the first
/// renewal sent to the new master stopped every lock of the client for the connect timeout
/// (5 s): releases and acquires on healthy masters failed with "timed out" (tests/cluster
/// `failover::a_promotion_past_a_frozen_master_does_not_hold_up_the_other_masters`).
///
/// By slot, redis-rs sends the call where its own slot map says. Where that map disagrees
/// with ours, the node refuses the keys it does not serve and the call is retried per slot;
/// while redis-rs still names the frozen master, the calls for its slots time out (every
/// request for them does) and the other masters' go on.
#[derive(Debug, Clone)]
pub(crate) struct NodeCall {
    node: NodeAddr,
    slot: u16,
}

impl NodeCall {
    pub(crate) fn routing(&self) -> RoutingInfo {
        RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(Route::new(
            self.slot,
            SlotAddr::Master,
        )))
    }
}

impl std::fmt::Display for NodeCall {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} (slot {})", self.node, self.slot)
    }
}

/// First slot, last slot, the master serving them.
type Ranges = Vec<(u16, u16, NodeAddr)>;

/// Slot ranges -> master, fetched with `CLUSTER SLOTS` and cached.
#[derive(Default)]
pub(crate) struct SlotMap {
    cached: Mutex<Option<(Ranges, Instant)>>,
}

impl SlotMap {
    pub(crate) fn invalidate(&self) {
        *self.cached.lock().unwrap_or_else(|e| e.into_inner()) = None;
    }

    /// `keys` by index, grouped by the master serving them. Without a slot map (the fetch
    /// failed), one group per slot, sent the usual way: correct, just more calls.
    pub(crate) async fn group(
        &self,
        conn: &mut ClusterConnection,
        keys: &[&str],
    ) -> Vec<(Option<NodeCall>, Vec<usize>)> {
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
        groups
            .into_iter()
            .map(|(node, idx)| {
                let slot = cluster_slot(keys[idx[0]]);
                (node.map(|node| NodeCall { node, slot }), idx)
            })
            .collect()
    }

    async fn ranges(&self, conn: &mut ClusterConnection) -> Option<Ranges> {
        if let Some((ranges, at)) = &*self.cached.lock().unwrap_or_else(|e| e.into_inner()) {
            if at.elapsed() < MAX_AGE {
                return Some(ranges.clone());
            }
        }
        let ranges = fetch(conn).await?;
        *self.cached.lock().unwrap_or_else(|e| e.into_inner()) =
            Some((ranges.clone(), Instant::now()));
        Some(ranges)
    }
}

/// First slot, last slot, the id of the master serving them; sorted by first slot.
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

/// Which master (by node id) serves which slots, as one node sees it now. Node ids, not
/// addresses: without `cluster-announce-ip`, nodes may know one master by different addresses.
pub(crate) async fn owners(conn: &mut ClusterConnection) -> Option<Owners> {
    let mut owners = slot_entries(&cluster_slots(conn).await?, |master| text(master.get(2)?))?;
    owners.sort();
    Some(owners)
}

/// Which master (by address) serves which slots, as one node sees it now, uncached.
pub(crate) async fn masters(conn: &mut ClusterConnection) -> Option<Vec<(u16, u16, NodeAddr)>> {
    fetch(conn).await
}

/// `keys` by index, one group per slot, each sent the usual way (routed by its key).
pub(crate) fn by_slot(keys: &[&str]) -> Vec<(Option<NodeCall>, Vec<usize>)> {
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
        Some(NodeAddr { host, port })
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
