//! The ZooKeeper deployment (`--store zookeeper`): a 3-server ensemble, every client given all
//! three through proxies of its own (`freeze`, `delay`, `throttle` and `cut` partition one client from the
//! whole ensemble); its faults (the leader or a follower killed and restarted, the leader frozen past the
//! followers' patience, the whole ensemble restarted) and the lock nodes a run leaves behind.

use std::io;
use std::thread::sleep;
use std::time::Duration;

use dlock::testing::ZkEnsemble;

use crate::history::{Ev, Recorder};
use crate::keys_left::KeyLeft;

/// Every client's session timeout: a hold's lease is two thirds of it.
pub const SESSION: Duration = Duration::from_secs(3);

pub struct ZkDeployment {
    pub ensemble: ZkEnsemble,
}

impl ZkDeployment {
    pub fn start() -> io::Result<Self> {
        Ok(ZkDeployment {
            ensemble: ZkEnsemble::start()?,
        })
    }

    pub fn url(&self) -> String {
        self.ensemble.url()
    }

    /// The servers' client ports, in the ensemble's order.
    pub fn ports(&self) -> Vec<u16> {
        (0..self.ensemble.len())
            .map(|i| self.ensemble.port(i))
            .collect()
    }

    /// The URL a client connects with through its proxies (one per server, at `ports`).
    pub fn client_url(ports: &[u16]) -> String {
        let hosts: Vec<String> = ports.iter().map(|p| format!("127.0.0.1:{p}")).collect();
        format!("zk://{}", hosts.join(","))
    }

    /// SIGKILL of the leader (`leader`) or of a follower, and its restart `length` later; the
    /// ensemble elects again in between (a quorum of two stays).
    pub fn kill_server(
        &mut self,
        leader: bool,
        length: Duration,
        rec: &Recorder,
    ) -> Result<(), String> {
        let lead = self.ensemble.leader().map_err(|e| e.to_string())?;
        let victim = if leader {
            lead
        } else {
            (lead + 1) % self.ensemble.len()
        };
        self.ensemble.kill(victim);
        rec.record(&rec.event(Ev::Note).detail(format!(
            "server {victim} ({}) killed",
            if leader { "leader" } else { "follower" }
        )));
        sleep(length);
        self.ensemble.restart(victim).map_err(|e| e.to_string())
    }

    /// SIGSTOP of the leader for `length` (past the followers' 2 s patience they elect
    /// another; its clients move), then SIGCONT: it rejoins as a follower.
    pub fn pause_leader(&mut self, length: Duration) -> Result<(), String> {
        let lead = self.ensemble.leader().map_err(|e| e.to_string())?;
        self.ensemble.stop(lead).map_err(|e| e.to_string())?;
        sleep(length);
        self.ensemble.cont(lead).map_err(|e| e.to_string())?;
        self.ensemble.leader().map(drop).map_err(|e| e.to_string())
    }

    /// Every server killed and started again from its data: sessions and nodes survive on
    /// disk; clients reconnect within their session timeout, or their sessions expire.
    pub fn restart_all(&mut self, rec: &Recorder) -> Result<(), String> {
        self.ensemble.restart_all().map_err(|e| e.to_string())?;
        rec.record(&rec.event(Ev::Note).detail("ensemble restarted"));
        Ok(())
    }

    /// The ephemeral nodes left, from the leader's own list (`dump`): a lock's child left after
    /// every client exited would keep the lock held by nobody until its session ends. Each
    /// counts as a key that expires with its session.
    pub fn nodes_left(&self) -> Result<Vec<KeyLeft>, String> {
        let lead = (0..self.ensemble.len())
            .find(|&i| {
                self.ensemble
                    .four_letter(i, "srvr")
                    .is_ok_and(|s| s.contains("Mode: leader"))
            })
            .ok_or("no server says it leads")?;
        let dump = self
            .ensemble
            .four_letter(lead, "dump")
            .map_err(|e| e.to_string())?;
        let port = self.ensemble.port(lead);
        Ok(dump
            .lines()
            .map(str::trim)
            .filter(|l| l.starts_with('/'))
            .map(|path| KeyLeft {
                key: format!("zk:{path}"),
                ty: "ephemeral".into(),
                pttl: i64::try_from(SESSION.as_millis()).unwrap_or(i64::MAX),
                port,
            })
            .collect())
    }
}
