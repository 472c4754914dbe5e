//! [`ZkEnsemble`]: three ZooKeeper servers on loopback ports electing a leader.

use std::collections::BTreeSet;
use std::io;
use std::time::{Duration, Instant};

use super::install;
use super::node::{Mode, Node, Peer};
use crate::testing::support::{free_port, wait_until, SETTLE_TIMEOUT};

/// Servers in an ensemble: the smallest that survives the loss of one.
const SIZE: usize = 3;
/// How many fresh sets of ports to try when another process takes one we picked.
const PORT_ATTEMPTS: usize = 5;
/// How often a wait looks again.
const POLL: Duration = Duration::from_millis(20);

/// Three ZooKeeper servers on `127.0.0.1`, each with its own client, quorum and election port
/// and data directory, owned by the test: killed and their directories removed when dropped.
/// Servers are numbered 0, 1, 2 here (their `myid` is one more).
///
/// The leader is whichever server the election picked: ask [`ZkEnsemble::leader`] before
/// killing it.
///
/// ```no_run
/// # extern crate dlock_runtime as dlock;
/// use dlock::testing::ZkEnsemble;
///
/// let mut ensemble = ZkEnsemble::start().unwrap();
/// let old = ensemble.leader().unwrap();
/// ensemble.kill(old);
/// let new = ensemble.leader().unwrap(); // the two left elect one of themselves
/// assert_ne!(old, new);
/// ensemble.restart(old).unwrap(); // back as a follower
/// ```
///
/// Everything here blocks the calling thread (a start takes ~1 s): call it before building a
/// runtime, or from `spawn_blocking` inside one.
#[derive(Debug)]
pub struct ZkEnsemble {
    nodes: Vec<Node>,
}

impl ZkEnsemble {
    /// Starts three servers at once and returns when all three serve and exactly one of them
    /// leads. The error says why no server could be found (see the module docs) or shows each
    /// server's state and last log lines.
    pub fn start() -> io::Result<ZkEnsemble> {
        let install = install::install()?;
        let mut last_err = None;
        for _ in 0..PORT_ATTEMPTS {
            let ports = distinct_free_ports(3 * SIZE)?;
            let peers: Vec<Peer> = (0..SIZE)
                .map(|i| Peer {
                    id: i as u32 + 1,
                    quorum_port: ports[SIZE + 2 * i],
                    election_port: ports[SIZE + 2 * i + 1],
                })
                .collect();
            let mut ensemble = ZkEnsemble {
                nodes: Vec::with_capacity(SIZE),
            };
            for (i, peer) in peers.iter().enumerate() {
                let node = Node::new(install, ports[i], Some((peer.id, peers.clone())))?;
                ensemble.nodes.push(node);
            }
            match ensemble.spawn_all() {
                Ok(()) => return Ok(ensemble),
                Err(e) if e.kind() == io::ErrorKind::AddrInUse => last_err = Some(e),
                Err(e) => return Err(e),
            }
        }
        Err(last_err.unwrap_or_else(|| io::Error::other("the ZooKeeper ensemble did not start")))
    }

    /// How many servers it has (3).
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Always `false`: an ensemble has servers (for clippy's `len_without_is_empty`).
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// `zk://127.0.0.1:<a>,127.0.0.1:<b>,127.0.0.1:<c>`: the whole ensemble, as dlock's
    /// ZooKeeper store will take it.
    pub fn url(&self) -> String {
        format!("zk://{}", self.connect_string())
    }

    /// One URL per server, `zk://127.0.0.1:<port>`, for a client that must talk to that server
    /// only.
    pub fn urls(&self) -> Vec<String> {
        self.nodes
            .iter()
            .map(|n| format!("zk://127.0.0.1:{}", n.client_port))
            .collect()
    }

    /// `127.0.0.1:<a>,127.0.0.1:<b>,127.0.0.1:<c>`: the connect string ZooKeeper clients take.
    pub fn connect_string(&self) -> String {
        self.nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.client_port))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// Server `i`'s client port, the same across restarts.
    pub fn port(&self, i: usize) -> u16 {
        self.nodes[i].client_port
    }

    /// Server `i`'s JVM process id while it runs.
    pub fn pid(&self, i: usize) -> Option<u32> {
        self.nodes[i].pid()
    }

    /// Whether server `i` has a JVM running (frozen or not).
    pub fn is_running(&self, i: usize) -> bool {
        self.nodes[i].is_running()
    }

    /// Sends a four-letter word to server `i` (`srvr` says its `Mode:`, `mntr` its
    /// `zk_server_state`) and returns the answer; bounded like [`super::ZkServer::four_letter`].
    pub fn four_letter(&self, i: usize, word: &str) -> io::Result<String> {
        self.nodes[i].ask(word)
    }

    /// The index of the current leader, once the servers settle: every running, unfrozen
    /// server serves, at least two of the three do, and exactly one of them says
    /// `Mode: leader`. Waits up to 30 s for that (an election after a leader's SIGKILL takes
    /// well under a second, after a SIGSTOP 2 s more: the followers' `syncLimit`); fails at
    /// once when fewer than two servers are running and unfrozen.
    pub fn leader(&mut self) -> io::Result<usize> {
        self.settle()
    }

    /// Kills server `i` (SIGKILL): its connections drop; its data is kept for
    /// [`ZkEnsemble::restart`]. Does nothing if it is not running.
    pub fn kill(&mut self, i: usize) {
        self.nodes[i].kill();
    }

    /// Freezes server `i` (SIGSTOP): its connections stay open, nothing is answered. A frozen
    /// leader's followers elect another after `syncLimit` (2 s). [`ZkEnsemble::cont`] resumes
    /// it.
    pub fn stop(&mut self, i: usize) -> io::Result<()> {
        self.nodes[i].freeze(true)
    }

    /// Resumes server `i` after [`ZkEnsemble::stop`] (SIGCONT). A former leader finds it has
    /// lost its followers and rejoins; [`ZkEnsemble::leader`] waits for that.
    pub fn cont(&mut self, i: usize) -> io::Result<()> {
        self.nodes[i].freeze(false)
    }

    /// Starts server `i` again (same ports, same data; a running one is killed first). When
    /// a majority is then running, returns once it serves and the ensemble has one leader;
    /// otherwise (restarting the servers of a lost quorum one by one) once its JVM answers
    /// `ruok`.
    pub fn restart(&mut self, i: usize) -> io::Result<()> {
        self.nodes[i].spawn()?;
        if self.live_count() > SIZE / 2 {
            return self.settle().map(|_| ());
        }
        let node = &mut self.nodes[i];
        let start = Instant::now();
        loop {
            node.check_alive()?;
            if node.ask("ruok").is_ok_and(|answer| answer == "imok") {
                return Ok(());
            }
            if start.elapsed() >= SETTLE_TIMEOUT {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!(
                        "no `imok` within {SETTLE_TIMEOUT:?}: {}",
                        self.nodes[i].describe()
                    ),
                ));
            }
            std::thread::sleep(POLL);
        }
    }

    /// Kills every server and starts them all again from their data, as after a power cut,
    /// and returns once they settle with one leader.
    pub fn restart_all(&mut self) -> io::Result<()> {
        for node in &mut self.nodes {
            node.kill();
        }
        self.spawn_all()
    }

    fn spawn_all(&mut self) -> io::Result<()> {
        for node in &mut self.nodes {
            node.spawn()?;
        }
        self.settle().map(|_| ())
    }

    fn live_count(&self) -> usize {
        self.nodes.iter().filter(|n| n.is_live()).count()
    }

    /// Waits until every live server serves, a majority does, and exactly one leads.
    fn settle(&mut self) -> io::Result<usize> {
        let live = self.live_count();
        if live <= SIZE / 2 {
            return Err(io::Error::new(
                io::ErrorKind::NotConnected,
                format!(
                    "only {live} of {SIZE} ZooKeeper servers are running and unfrozen: no \
                     quorum, so no leader:\n{}",
                    self.describe()
                ),
            ));
        }
        // A server that exited (a port taken at start-up, a bad config) fails the wait at
        // once, with what it said; `wait_until` cannot return that error, so it is kept here.
        let mut exited = None;
        let nodes = &mut self.nodes;
        let outcome = wait_until(
            "a ZooKeeper ensemble with one leader",
            SETTLE_TIMEOUT,
            || {
                if exited.is_some() {
                    return Ok(None);
                }
                let mut leaders = Vec::new();
                let mut waiting = Vec::new();
                for (i, node) in nodes.iter_mut().enumerate() {
                    if !node.is_live() {
                        continue;
                    }
                    if let Err(e) = node.check_alive() {
                        exited = Some(e);
                        return Ok(None);
                    }
                    match node.mode() {
                        Ok(Mode::Leader) => leaders.push(i),
                        Ok(_) => {}
                        Err(why) => waiting.push(format!("server {i}: {why}")),
                    }
                }
                match (leaders.as_slice(), waiting.is_empty()) {
                    ([leader], true) => Ok(Some(*leader)),
                    _ => Err(format!(
                        "leaders {leaders:?}{}{}",
                        if waiting.is_empty() { "" } else { "; " },
                        waiting.join("; ")
                    )),
                }
            },
            String::new,
        );
        if let Some(e) = exited {
            return Err(e);
        }
        match outcome {
            Ok(Some(leader)) => Ok(leader),
            Ok(None) => Err(io::Error::other("a ZooKeeper server exited")),
            Err(e) => Err(io::Error::new(
                e.kind(),
                format!("{e}\n{}", self.describe()),
            )),
        }
    }

    /// Every server's state, `srvr` mode and last log lines.
    fn describe(&self) -> String {
        self.nodes
            .iter()
            .enumerate()
            .map(|(i, n)| format!("[{i}] {}", n.describe()))
            .collect::<Vec<_>>()
            .join("\n")
    }
}

/// `count` distinct free loopback ports (a port just released can be handed out again).
fn distinct_free_ports(count: usize) -> io::Result<Vec<u16>> {
    let mut seen = BTreeSet::new();
    let mut ports = Vec::with_capacity(count);
    for _ in 0..count * 20 {
        let port = free_port()?;
        if seen.insert(port) {
            ports.push(port);
            if ports.len() == count {
                return Ok(ports);
            }
        }
    }
    Err(io::Error::new(
        io::ErrorKind::AddrNotAvailable,
        format!("found no {count} distinct free loopback ports"),
    ))
}
