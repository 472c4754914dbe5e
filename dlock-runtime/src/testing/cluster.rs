//! [`RedisCluster`]: a local Redis Cluster of throw-away nodes.

use std::io;
use std::ops::RangeInclusive;
use std::process::Command;
use std::time::{Duration, Instant};

use super::bins::{self, run_ok};
use super::cluster_view::{owner, served, view_of, NodeState, Role, SLOTS};
use super::options::Mode;
use super::resp::{self, info_field, Reply};
use super::server::{start_many, RedisServer};
use super::support::{wait_until, SETTLE_TIMEOUT};

/// Per-call timeout when the harness asks a node about the cluster.
const ASK: Duration = Duration::from_secs(2);
/// A manual failover the master did not cooperate with is dropped after 5 s (Redis's
/// `CLUSTER_MF_TIMEOUT`); the harness asks again after this long.
const FAILOVER_RETRY: Duration = Duration::from_secs(6);

/// A node of a [`RedisCluster`], as the cluster sees it at the moment of the call.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ClusterNode {
    /// The cluster node id.
    pub id: String,
    /// Its loopback port.
    pub port: u16,
    /// `redis://127.0.0.1:<port>`.
    pub url: String,
    /// The redis-server process id.
    pub pid: u32,
    /// Master or replica.
    pub role: Role,
    /// For a replica, the port of the master it follows.
    pub master_port: Option<u16>,
    /// The slots a master serves (inclusive ranges, sorted); empty for a replica.
    pub slots: Vec<RangeInclusive<u16>>,
}

/// A local Redis Cluster: `masters` masters sharing the 16384 slots, each with
/// `replicas_per_master` replicas, every node a [`RedisServer`] on a free loopback port
/// (killed on drop, or when the test process exits).
///
/// Masters are numbered by the slots they serve (master 0 serves slot 0); the number stays with
/// the slots across [`failover`](RedisCluster::failover) and
/// [`kill_master`](RedisCluster::kill_master). Every wait is bounded (30 s) and a time-out
/// error includes CLUSTER NODES from every node. Needs `redis-cli` to create the cluster.
#[derive(Debug)]
pub struct RedisCluster {
    nodes: Vec<RedisServer>,
    master_count: usize,
    replicas_per_master: usize,
    /// The first slot of each master's range, by master number.
    first_slots: Vec<u16>,
    /// The port serving each master number's slots, as last confirmed by every node.
    master_ports: Vec<u16>,
}

impl RedisCluster {
    /// Starts `masters` (at least 3, as `redis-cli --cluster create` requires) masters with
    /// `replicas_per_master` replicas each, and returns once every node reports
    /// `cluster_state:ok`, every node agrees on the slot map and the roles, and every replica's
    /// link to its master is up. Takes ~3 s.
    pub fn start(masters: usize, replicas_per_master: usize) -> io::Result<Self> {
        let total = masters * (1 + replicas_per_master);
        if !(3..=64).contains(&masters) || total > 128 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("a test cluster has 3 to 64 masters and at most 128 nodes, not {masters} masters x {} nodes", 1 + replicas_per_master),
            ));
        }
        let nodes = start_many(total, &RedisServer::builder().mode(Mode::ClusterNode))?;
        let mut cluster = RedisCluster {
            nodes,
            master_count: masters,
            replicas_per_master,
            first_slots: Vec::new(),
            master_ports: Vec::new(),
        };
        let mut create = Command::new(bins::cli_bin());
        create.args(["--cluster", "create"]);
        create.args(
            cluster
                .nodes
                .iter()
                .map(|n| format!("127.0.0.1:{}", n.port())),
        );
        create.args([
            "--cluster-replicas",
            &replicas_per_master.to_string(),
            "--cluster-yes",
        ]);
        run_ok(&mut create, Duration::from_secs(60))?;
        let view = cluster.settle("every slot served and every replica in sync", |view| {
            for master in view.iter().filter(|n| n.role == Role::Master) {
                let replicas = followers(view, master.port).count();
                if replicas != replicas_per_master {
                    return Err(format!(
                        "127.0.0.1:{} has {replicas} replicas, not {replicas_per_master}",
                        master.port
                    ));
                }
            }
            Ok(())
        })?;
        let mut masters: Vec<&NodeState> = view.iter().filter(|n| n.role == Role::Master).collect();
        masters.sort_unstable_by_key(|n| *n.slots[0].start());
        cluster.first_slots = masters.iter().map(|n| *n.slots[0].start()).collect();
        cluster.master_ports = masters.iter().map(|n| n.port).collect();
        Ok(cluster)
    }

    /// The masters' URLs by master number (`redis://127.0.0.1:<port>`), as last confirmed by
    /// [`start`](RedisCluster::start), [`failover`](RedisCluster::failover) or
    /// [`kill_master`](RedisCluster::kill_master): seeds for a cluster client.
    pub fn urls(&self) -> Vec<String> {
        self.master_ports.iter().map(|p| url(*p)).collect()
    }

    /// Every running node as a running node sees the cluster now, by port. Killed nodes are
    /// left out.
    pub fn nodes(&self) -> io::Result<Vec<ClusterNode>> {
        let live = self.live_ports();
        let mut last_err = io::Error::other("no node of the cluster is running");
        for &port in &live {
            match self.view_from(port, &live) {
                Ok((view, _)) => return Ok(view.iter().map(|n| self.describe(n)).collect()),
                Err(e) => last_err = io::Error::other(e),
            }
        }
        Err(last_err)
    }

    /// The masters serving slots, by master number.
    pub fn masters(&self) -> io::Result<Vec<ClusterNode>> {
        let mut masters: Vec<ClusterNode> = self
            .nodes()?
            .into_iter()
            .filter(|n| n.role == Role::Master && !n.slots.is_empty())
            .collect();
        masters.sort_unstable_by_key(|n| *n.slots[0].start());
        Ok(masters)
    }

    /// The master serving `slot` (0..16384).
    pub fn master_for_slot(&self, slot: u16) -> io::Result<ClusterNode> {
        self.masters()?
            .into_iter()
            .find(|n| n.slots.iter().any(|r| r.contains(&slot)))
            .ok_or_else(|| io::Error::other(format!("no running master serves slot {slot}")))
    }

    /// The master serving `key`, by the cluster's own CLUSTER KEYSLOT (so a test can check a
    /// client's routing against the server's hashing, hash tags included).
    pub fn master_for_key(&self, key: &str) -> io::Result<ClusterNode> {
        let port = *self
            .live_ports()
            .first()
            .ok_or_else(|| io::Error::other("no node is running"))?;
        match resp::call(port, &["CLUSTER", "KEYSLOT", key], ASK)? {
            Reply::Int(slot) => self.master_for_slot(slot as u16),
            other => Err(io::Error::other(format!(
                "CLUSTER KEYSLOT answered {other:?}"
            ))),
        }
    }

    /// The [`RedisServer`] of the node on `port`, e.g. to SIGSTOP it or run `redis-cli`.
    pub fn server(&self, port: u16) -> Option<&RedisServer> {
        self.nodes.iter().find(|n| n.port() == port)
    }

    /// Runs `redis-cli -c` (following MOVED redirects) against a running master.
    pub fn cli(&self, args: &[&str]) -> io::Result<String> {
        let seed = self
            .master_ports
            .iter()
            .find_map(|p| self.server(*p).filter(|s| s.is_running()))
            .ok_or_else(|| io::Error::other("no master is running"))?;
        seed.cli(&[&["-c"], args].concat())
    }

    /// Promotes a replica of master `master_index` with CLUSTER FAILOVER (a coordinated
    /// handover: the master stops taking writes until the replica has caught up, so nothing
    /// acknowledged is lost). Returns the new master once every node agrees and the old master
    /// replicates it, in sync. Takes 0.3-1 s.
    pub fn failover(&mut self, master_index: usize) -> io::Result<ClusterNode> {
        let (old, replicas) = self.master_and_replicas(master_index)?;
        let replica = replicas[0];
        let ask = || resp::call(replica, &["CLUSTER", "FAILOVER"], ASK);
        ask()?;
        let mut asked = Instant::now();
        let slot = self.first_slots[master_index];
        let what = format!(
            "127.0.0.1:{replica} taking master {master_index}'s slots over from 127.0.0.1:{old}"
        );
        let view = self.settle(&what, |view| {
            let demoted = view
                .iter()
                .any(|n| n.port == old && n.master_port == Some(replica));
            if owner(view, slot).map(|n| n.port) == Some(replica) && demoted {
                return Ok(());
            }
            if asked.elapsed() > FAILOVER_RETRY {
                ask().map_err(|e| e.to_string())?;
                asked = Instant::now();
            }
            Err(format!(
                "127.0.0.1:{replica} is not yet master with 127.0.0.1:{old} following it"
            ))
        })?;
        self.promoted(master_index, replica, &view)
    }

    /// Kills master `master_index` (SIGKILL) and returns one of its replicas once the cluster
    /// has promoted it (after `cluster-node-timeout`, 2 s, and an election), every remaining
    /// node agrees and reports `cluster_state:ok`. Writes the replica had not received are
    /// lost, as in production. Takes ~4 s.
    pub fn kill_master(&mut self, master_index: usize) -> io::Result<ClusterNode> {
        let (old, heirs) = self.master_and_replicas(master_index)?;
        if let Some(server) = self.nodes.iter_mut().find(|n| n.port() == old) {
            server.kill();
        }
        let slot = self.first_slots[master_index];
        let what =
            format!("a replica of 127.0.0.1:{old} (killed) serving master {master_index}'s slots");
        let view = self.settle(&what, |view| match owner(view, slot) {
            Some(n) if heirs.contains(&n.port) => Ok(()),
            _ => Err(format!(
                "no replica of 127.0.0.1:{old} serves slot {slot} yet"
            )),
        })?;
        let heir = owner(&view, slot).map_or(old, |n| n.port);
        self.promoted(master_index, heir, &view)
    }

    /// The current master of `master_index` and its replicas (at least one), from a settled
    /// cluster.
    fn master_and_replicas(&self, master_index: usize) -> io::Result<(u16, Vec<u16>)> {
        let slot = *self.first_slots.get(master_index).ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "master {master_index} does not exist: the cluster has {}",
                    self.master_count
                ),
            )
        })?;
        let view = self.settle("the cluster settled", |_| Ok(()))?;
        let master = owner(&view, slot).map_or(0, |n| n.port);
        let replicas: Vec<u16> = followers(&view, master).map(|n| n.port).collect();
        if replicas.is_empty() {
            return Err(io::Error::other(format!(
                "master {master_index} (127.0.0.1:{master}) has no running replica to promote"
            )));
        }
        Ok((master, replicas))
    }

    fn promoted(
        &mut self,
        master_index: usize,
        port: u16,
        view: &[NodeState],
    ) -> io::Result<ClusterNode> {
        self.master_ports[master_index] = port;
        let node = view.iter().find(|n| n.port == port).ok_or_else(|| {
            io::Error::other(format!("127.0.0.1:{port} vanished from the cluster"))
        })?;
        Ok(self.describe(node))
    }

    /// Waits until [`RedisCluster::observe`] and `also` both pass.
    fn settle(
        &self,
        what: &str,
        mut also: impl FnMut(&[NodeState]) -> Result<(), String>,
    ) -> io::Result<Vec<NodeState>> {
        wait_until(
            what,
            SETTLE_TIMEOUT,
            || {
                let view = self.observe()?;
                also(&view)?;
                Ok(view)
            },
            || self.dump(),
        )
    }

    /// The cluster as every running node agrees it is, or why it is not settled: a node not
    /// reporting `cluster_state:ok`, two nodes seeing different masters, slots or roles, a slot
    /// nobody serves, a master without slots, or a replica whose link is not up.
    fn observe(&self) -> Result<Vec<NodeState>, String> {
        let live = self.live_ports();
        let mut agreed: Option<(u16, Vec<NodeState>)> = None;
        for &port in &live {
            let info =
                resp::call_text(port, &["CLUSTER", "INFO"], ASK).map_err(|e| e.to_string())?;
            if info_field(&info, "cluster_state") != Some("ok") {
                return Err(format!("127.0.0.1:{port}: cluster_state is not ok"));
            }
            let (view, problems) = self.view_from(port, &live)?;
            if let Some(problem) = problems.first() {
                return Err(format!("as 127.0.0.1:{port} sees it, {problem}"));
            }
            match &agreed {
                None => agreed = Some((port, view)),
                Some((first, seen)) if *seen != view => {
                    return Err(format!(
                        "127.0.0.1:{first} and 127.0.0.1:{port} disagree on masters, slots or roles"
                    ))
                }
                Some(_) => {}
            }
        }
        let (_, view) = agreed.ok_or("no node is running")?;
        let masters = view.iter().filter(|n| n.role == Role::Master).count();
        if masters != self.master_count || served(&view) != SLOTS {
            return Err(format!(
                "{masters} masters serve {} of {SLOTS} slots",
                served(&view)
            ));
        }
        for node in &view {
            match node.role {
                // E.g. a demoted master the others have not yet heard is following its heir.
                Role::Master if node.slots.is_empty() => {
                    return Err(format!("127.0.0.1:{} is a master without slots", node.port))
                }
                Role::Master => {}
                Role::Replica => replica_in_sync(node)?,
            }
        }
        Ok(view)
    }

    fn view_from(&self, port: u16, live: &[u16]) -> Result<(Vec<NodeState>, Vec<String>), String> {
        let text = resp::call_text(port, &["CLUSTER", "NODES"], ASK).map_err(|e| e.to_string())?;
        view_of(&text, live)
    }

    fn describe(&self, node: &NodeState) -> ClusterNode {
        ClusterNode {
            id: node.id.clone(),
            port: node.port,
            url: url(node.port),
            pid: self
                .server(node.port)
                .and_then(RedisServer::pid)
                .unwrap_or(0),
            role: node.role,
            master_port: node.master_port,
            slots: node.slots.clone(),
        }
    }

    fn live_ports(&self) -> Vec<u16> {
        self.nodes
            .iter()
            .filter(|n| n.is_running())
            .map(RedisServer::port)
            .collect()
    }

    /// CLUSTER NODES from every running node, for time-out errors.
    fn dump(&self) -> String {
        let mut out = format!(
            "cluster of {} masters x {} replicas; CLUSTER NODES from each running node:",
            self.master_count, self.replicas_per_master
        );
        for port in self.live_ports() {
            let text = resp::call_text(port, &["CLUSTER", "NODES"], ASK)
                .unwrap_or_else(|e| format!("(no answer: {e})"));
            out.push_str(&format!("\n--- 127.0.0.1:{port}\n{}", text.trim_end()));
        }
        out
    }
}

/// The replicas following the master on `port`.
fn followers(view: &[NodeState], port: u16) -> impl Iterator<Item = &NodeState> {
    view.iter()
        .filter(move |n| n.role == Role::Replica && n.master_port == Some(port))
}

/// Whether a replica replicates the master the cluster says it does, with the link up.
fn replica_in_sync(node: &NodeState) -> Result<(), String> {
    let info =
        resp::call_text(node.port, &["INFO", "replication"], ASK).map_err(|e| e.to_string())?;
    let master = info_field(&info, "master_port").and_then(|p| p.parse().ok());
    if master != node.master_port || info_field(&info, "master_link_status") != Some("up") {
        return Err(format!(
            "replica 127.0.0.1:{} is not in sync with {:?} (INFO: master_port {master:?}, link {:?})",
            node.port,
            node.master_port,
            info_field(&info, "master_link_status")
        ));
    }
    Ok(())
}

fn url(port: u16) -> String {
    format!("redis://127.0.0.1:{port}")
}
