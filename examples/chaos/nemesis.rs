//! The nemesis: one fault at a time on a seeded schedule, each logged as `fault_start` /
//! `fault_end` (with `data_loss` when it can have lost acknowledged writes).
//!
//! The schedule is the sequence of draws from the seed: which fault, whom it hits, how long
//! it lasts, and the pause before the next one. A seed replays the same sequence; the times
//! shift a little with how long each fault took to heal (a failover's settling, a restart).

use std::thread::sleep;
use std::time::{Duration, Instant};

use rustix::process::Signal;

use crate::deploy::{self, Deployment};
use crate::history::{Ev, Recorder};
use crate::pg::PgDeployment;
use crate::proxy::Proxies;
use crate::rng::Rng;
use crate::runner::Clients;
use crate::{migrate, restarts};

/// How long the nemesis waits for a failover to show after a pause or sleep of a primary
/// (sentinels: 1 s to judge it down, then an election; cluster: 2 s node timeout).
const FAILOVER_SHOWS_WITHIN: Duration = Duration::from_secs(8);
/// How long a failover may take to settle before the fault is closed anyway (and noted).
const SETTLE_BOUND: Duration = Duration::from_secs(30);
/// How fast a throttled client's link carries replies (`throttle`).
const THROTTLE_BYTES_PER_SECOND: usize = 400;

/// What the nemesis works on.
pub struct Nemesis<'a> {
    /// The deployment's name (`single`, `sentinel`, `cluster`, `postgres`): its fault menu.
    pub setup: &'static str,
    pub deployment: &'a mut Deployment,
    pub proxies: Option<&'a Proxies>,
    pub clients: &'a std::sync::Mutex<Clients>,
    pub rec: &'a Recorder,
    pub rng: Rng,
    /// Run time (ns) after which no fault starts.
    pub until: u64,
    /// Filler keys the single server holds (written again after a restart without them).
    pub filler: usize,
    /// The lock names the clients take (a migration moves the slot of one of them).
    pub locks: Vec<&'static str>,
    /// The fault kinds to draw from (empty: all of the topology's).
    pub only: Vec<String>,
    next_id: u64,
}

/// The faults of each deployment, with their weights.
fn menu(setup: &str) -> &'static [(&'static str, u64)] {
    match setup {
        "single" => &[
            ("pause", 10),
            ("kill", 8),
            ("freeze", 10),
            ("delay", 6),
            ("throttle", 5),
            ("cut", 8),
            ("restart_loading", 6),
            ("restart_empty", 4),
            ("kill_inflight", 5),
            ("client_kill", 8),
            ("script_flush", 6),
            ("debug_sleep", 6),
        ],
        "cluster" => &[
            ("pause", 10),
            ("kill", 8),
            ("client_kill", 8),
            ("script_flush", 6),
            ("debug_sleep", 8),
            ("failover", 8),
            ("pause_master", 6),
            ("kill_master", 3),
            ("migrate", 10),
        ],
        "sentinel" => &[
            ("pause", 10),
            ("kill", 8),
            ("client_kill", 8),
            ("script_flush", 6),
            ("debug_sleep", 8),
            ("failover", 8),
            ("pause_master", 6),
            ("kill_master", 3),
        ],
        "zookeeper" => &[
            ("pause", 10),
            ("kill", 8),
            ("freeze", 10),
            ("delay", 6),
            ("throttle", 5),
            ("cut", 8),
            ("kill_leader", 6),
            ("kill_follower", 6),
            ("pause_leader", 5),
            ("restart_ensemble", 3),
        ],
        "postgres" => &[
            ("pause", 10),
            ("kill", 8),
            ("freeze", 10),
            ("delay", 6),
            ("throttle", 5),
            ("cut", 8),
            ("restart", 6),
            ("terminate", 8),
            ("pause_server", 5),
            ("promote", 4),
        ],
        _ => &[],
    }
}

/// The deployment's menu, narrowed to `only` when given; an error names a kind it lacks.
pub fn menu_of(setup: &str, only: &[String]) -> Result<Vec<(&'static str, u64)>, String> {
    let all = menu(setup);
    if let Some(unknown) = only.iter().find(|k| !all.iter().any(|(n, _)| n == k)) {
        let names: Vec<&str> = all.iter().map(|(n, _)| *n).collect();
        return Err(format!(
            "no fault {unknown:?} on {setup}: one of {}",
            names.join(", ")
        ));
    }
    Ok(all
        .iter()
        .filter(|(n, _)| only.is_empty() || only.iter().any(|k| k == n))
        .copied()
        .collect())
}

impl<'a> Nemesis<'a> {
    pub fn new(
        setup: &'static str,
        deployment: &'a mut Deployment,
        proxies: Option<&'a Proxies>,
        clients: &'a std::sync::Mutex<Clients>,
        rec: &'a Recorder,
        rng: Rng,
        until: u64,
    ) -> Self {
        Nemesis {
            setup,
            deployment,
            proxies,
            clients,
            rec,
            rng,
            until,
            filler: 0,
            locks: Vec::new(),
            only: Vec::new(),
            next_id: 0,
        }
    }

    /// Runs faults until the fault phase ends.
    pub fn run(&mut self) {
        let Ok(menu) = menu_of(self.setup, &self.only) else {
            return;
        };
        let total: u64 = menu.iter().map(|(_, w)| w).sum();
        loop {
            let gap = Duration::from_millis(self.rng.range(300, 2_500));
            let mut roll = self.rng.range(0, total - 1);
            let kind = menu
                .iter()
                .find(|(_, w)| {
                    let hit = roll < *w;
                    roll = roll.saturating_sub(*w);
                    hit
                })
                .map_or("pause", |(k, _)| *k);
            // A killed primary stays dead (the harness cannot restart it), and with it the
            // failovers of its shard: kill only in the last quarter of the fault phase.
            let kind = if kind == "kill_master" && self.rec.now() < self.until / 4 * 3 {
                "failover"
            } else {
                kind
            };
            let client = self.rng.range(0, self.clients_count() as u64 - 1) as usize;
            let master = self.rng.range(0, 2) as usize;
            let length = Duration::from_millis(self.rng.range(300, 4_000));
            let variant = self.rng.chance(50);
            let pick = self.rng.next() as usize;
            if self.rec.now() + gap.as_nanos() as u64 >= self.until {
                break;
            }
            sleep(gap);
            let how = How {
                client,
                master,
                length,
                variant,
                pick,
            };
            self.fault(kind, how);
        }
    }

    fn clients_count(&self) -> usize {
        self.clients.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    fn start(&mut self, kind: &str, target: String) -> u64 {
        self.next_id += 1;
        let id = self.next_id;
        self.rec.record(
            &self
                .rec
                .event(Ev::FaultStart)
                .op(id)
                .detail(kind)
                .target(target),
        );
        id
    }

    fn end(&self, id: u64, t: u64, data_loss: bool, note: Option<String>) {
        let mut event = self.rec.event(Ev::FaultEnd).op(id);
        event.t = t;
        event.data_loss = data_loss;
        event.detail = note;
        self.rec.record(&event);
    }

    fn fault(&mut self, kind: &str, how: How) {
        let How {
            client,
            master,
            length,
            variant,
            pick,
        } = how;
        let lock = self.locks.get(pick % self.locks.len().max(1)).copied();
        let target = match kind {
            "pause" | "kill" | "freeze" | "delay" | "throttle" | "cut" => format!("c{client}"),
            // Not `c<n>` alone: the server goes down too (the band spans every lane).
            "kill_inflight" => format!("c{client}, {}", self.master_target(0)),
            "migrate" => format!("slot of {}", lock.unwrap_or("?")),
            // One client's backends (its lane), or every client's (the band spans them all).
            "terminate" if variant => format!("c{client}"),
            "terminate" => format!("all clients, {}", self.master_target(0)),
            "kill_leader" | "pause_leader" => "the leader".into(),
            "kill_follower" => "a follower".into(),
            "restart_ensemble" => "every server".into(),
            _ => self.master_target(master),
        };
        let id = self.start(kind, target);
        let outcome = match kind {
            "pause" => self.pause_client(client, length),
            "kill" => self.kill_client(client, length),
            "freeze" | "delay" | "throttle" | "cut" => self.partition(kind, client, length),
            "restart_loading" | "restart_empty" => self.restart(kind == "restart_empty", length),
            "kill_inflight" => self.kill_inflight(client, length),
            "migrate" => self.migrate(lock.unwrap_or("plain:0"), master, length),
            "client_kill" => self.on_master(master, |port| {
                let kind = if variant { "normal" } else { "pubsub" };
                deploy::call(
                    port,
                    &["CLIENT", "KILL", "TYPE", kind],
                    Duration::from_secs(2),
                )
                .map(|_| ())
            }),
            "script_flush" => self.on_master(master, |port| {
                deploy::call(port, &["SCRIPT", "FLUSH"], Duration::from_secs(2))?;
                deploy::call(port, &["FUNCTION", "FLUSH"], Duration::from_secs(2)).map(|_| ())
            }),
            "debug_sleep" => self.stall_master(master, length, true),
            "pause_master" => self.stall_master(master, length, false),
            "failover" => self.failover(master),
            "restart" => self.on_postgres(|pg, rec| pg.restart(rec, length)),
            "terminate" => self.on_postgres(|pg, rec| {
                let ended = pg.terminate(variant.then_some(client))?;
                rec.record(
                    &rec.event(Ev::Note)
                        .detail(format!("{ended} backend(s) terminated")),
                );
                Ok(())
            }),
            // Past every lease (at most 4 s): holders must see their loss before the server,
            // waking, lets anyone else in.
            "pause_server" => {
                self.on_postgres(|pg, _| pg.pause(Duration::from_millis(4_500) + length / 2))
            }
            // Promotion with asynchronous replication: a grant the standby had not received is
            // lost (a data-loss fault).
            "promote" => self
                .on_postgres(|pg, rec| pg.promote(rec))
                .map(|(end, _)| (end, true)),
            "kill_master" => self.kill_master(master),
            "kill_leader" | "kill_follower" => {
                self.on_zookeeper(|zk, rec| zk.kill_server(kind == "kill_leader", length, rec))
            }
            // Past the followers' 2 s patience: they elect another leader meanwhile.
            "pause_leader" => self
                .on_zookeeper(|zk, _| zk.pause_leader(Duration::from_millis(2_500) + length / 2)),
            "restart_ensemble" => self.on_zookeeper(|zk, rec| zk.restart_all(rec)),
            _ => Err(format!("unknown fault {kind}")),
        };
        let now = self.rec.now();
        match outcome {
            Ok((end, loss)) => self.end(id, end.unwrap_or(now), loss, None),
            Err(e) => self.end(id, now, false, Some(format!("failed: {e}"))),
        }
    }

    /// Runs a fault of the ZooKeeper deployment.
    fn on_zookeeper(
        &mut self,
        fault: impl FnOnce(&mut crate::zk::ZkDeployment, &Recorder) -> Result<(), String>,
    ) -> Outcome {
        let Deployment::Zookeeper(zk) = &mut *self.deployment else {
            return Err("a fault of the ZooKeeper deployment".into());
        };
        fault(zk, self.rec)?;
        Ok((None, false))
    }

    /// Runs a fault of the PostgreSQL deployment.
    fn on_postgres(
        &mut self,
        fault: impl FnOnce(&mut PgDeployment, &Recorder) -> Result<(), String>,
    ) -> Outcome {
        let Deployment::Postgres(pg) = &mut *self.deployment else {
            return Err("a fault of the PostgreSQL deployment".into());
        };
        fault(pg, self.rec)?;
        Ok((None, false))
    }

    fn master_target(&self, master: usize) -> String {
        match self.deployment.masters() {
            Ok(ports) => format!("port {}", ports.get(master).or(ports.first()).unwrap_or(&0)),
            Err(_) => "port ?".into(),
        }
    }

    fn pause_client(&mut self, client: usize, length: Duration) -> Outcome {
        self.signal(client, Signal::STOP)?;
        sleep(length);
        // Stamped before SIGCONT: the client may record its first event before this thread
        // gets to write anything after the signal.
        let cont = self.rec.now();
        self.signal(client, Signal::CONT)?;
        Ok((Some(cont), false))
    }

    fn signal(&self, client: usize, signal: Signal) -> Result<(), String> {
        self.clients
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .signal(client, signal)
            .map_err(|e| e.to_string())
    }

    fn kill_client(&mut self, client: usize, length: Duration) -> Outcome {
        let mut clients = self.clients.lock().unwrap_or_else(|e| e.into_inner());
        clients.kill(client).map_err(|e| e.to_string())?;
        drop(clients);
        sleep(length.min(Duration::from_secs(2)));
        let mut clients = self.clients.lock().unwrap_or_else(|e| e.into_inner());
        clients.restart(client).map_err(|e| e.to_string())?;
        Ok((None, false))
    }

    fn partition(&mut self, kind: &str, client: usize, length: Duration) -> Outcome {
        let proxies = self.proxies.ok_or("no proxies in this topology")?;
        match kind {
            "freeze" => {
                proxies.freeze(client);
                sleep(length);
                proxies.thaw(client);
            }
            "delay" => {
                proxies.delay(
                    client,
                    Duration::from_millis(50 + length.as_millis() as u64 / 8),
                );
                sleep(length);
                proxies.delay(client, Duration::ZERO);
            }
            "throttle" => {
                // A few hundred bytes a second: a renewal, an acquire or a release reply is tens
                // of bytes, so a busy client's replies queue for seconds, as the watchdog's calls
                // queued behind each other in tests/stores/slow_link.rs.
                proxies.throttle(client, THROTTLE_BYTES_PER_SECOND);
                sleep(length);
                proxies.throttle(client, 0);
            }
            _ => {
                if !proxies.cut(client) {
                    return Err("the proxy did not close its connections within 5 s".into());
                }
            }
        }
        Ok((None, false))
    }

    /// Restarts the single server: with its AOF (nothing acknowledged is lost; it loads for
    /// seconds), or after deleting it (everything is: a data-loss fault).
    fn restart(&mut self, empty: bool, length: Duration) -> Outcome {
        let Deployment::Single(server, _) = &mut *self.deployment else {
            return Err("restart is for the single server".into());
        };
        restarts::restart(server, self.rec, empty, length, self.filler)?;
        Ok((None, empty))
    }

    /// A kill while one client's grant replies are in flight, then a restart from the AOF.
    fn kill_inflight(&mut self, client: usize, length: Duration) -> Outcome {
        let proxies = self.proxies.ok_or("no proxies in this topology")?;
        let Deployment::Single(server, _) = &mut *self.deployment else {
            return Err("kill_inflight is for the single server".into());
        };
        restarts::kill_inflight(server, proxies, self.rec, client, length / 2)?;
        Ok((None, false))
    }

    /// A slot of a lock in use migrated to another master and back, key by key.
    fn migrate(&mut self, lock: &str, master: usize, length: Duration) -> Outcome {
        let Deployment::Cluster(cluster) = &*self.deployment else {
            return Err("migrate is for the cluster".into());
        };
        let done = migrate::there_and_back(cluster, lock, master, length / 4)?;
        self.rec.record(&self.rec.event(Ev::Note).detail(done));
        Ok((None, false))
    }

    fn on_master(
        &mut self,
        master: usize,
        action: impl FnOnce(u16) -> Result<(), String>,
    ) -> Outcome {
        let ports = self.deployment.masters().map_err(|e| e.to_string())?;
        action(*ports.get(master).or(ports.first()).ok_or("no master")?)?;
        Ok((None, false))
    }

    /// DEBUG SLEEP or SIGSTOP of a primary. Where replicas can take over, a stall long enough
    /// makes them: then it is a data-loss fault (the stalled primary wakes believing it is
    /// primary, and what it grants then is lost), which ends once the deployment settled.
    fn stall_master(&mut self, master: usize, length: Duration, debug_sleep: bool) -> Outcome {
        let before = self.deployment.masters().map_err(|e| e.to_string())?;
        let port = *before.get(master).or(before.first()).ok_or("no master")?;
        if debug_sleep {
            let secs = format!("{:.3}", length.as_secs_f64());
            deploy::call(
                port,
                &["DEBUG", "SLEEP", &secs],
                length + Duration::from_secs(3),
            )?;
        } else {
            let pid = self.pid_of(port).ok_or("no pid for the master")?;
            let pid = rustix::process::Pid::from_raw(pid as i32).ok_or("bad pid")?;
            rustix::process::kill_process(pid, Signal::STOP).map_err(|e| e.to_string())?;
            sleep(length);
            rustix::process::kill_process(pid, Signal::CONT).map_err(|e| e.to_string())?;
        }
        let woke = self.rec.now();
        if matches!(self.deployment, Deployment::Single(..)) {
            return Ok((None, false));
        }
        let shows = Instant::now();
        while shows.elapsed() < FAILOVER_SHOWS_WITHIN {
            if self.deployment.masters().is_ok_and(|now| now != before) {
                return Ok((Some(self.settle()), true));
            }
            sleep(Duration::from_millis(200));
        }
        Ok((Some(woke), false))
    }

    fn pid_of(&self, port: u16) -> Option<u32> {
        match &*self.deployment {
            Deployment::Single(s, _) => s.pid(),
            Deployment::Sentinel(s) => s.master_pid().ok(),
            Deployment::Cluster(c) => c.server(port).and_then(|s| s.pid()),
            Deployment::Postgres(pg) => Some(pg.primary.pid()),
            // Its faults name servers by role, not by port.
            Deployment::Zookeeper(_) => None,
        }
    }

    /// Waits until the deployment settled (bounded), and returns when that was.
    fn settle(&self) -> u64 {
        let start = Instant::now();
        while start.elapsed() < SETTLE_BOUND {
            if self.deployment.settled().is_ok() {
                return self.rec.now();
            }
            sleep(Duration::from_millis(100));
        }
        let note = self.rec.event(Ev::Note).detail(format!(
            "not settled within {SETTLE_BOUND:?}: {:?}",
            self.deployment.settled()
        ));
        self.rec.record(&note);
        self.rec.now()
    }

    /// SENTINEL FAILOVER (a data-loss fault: the sentinels promote the replica without
    /// stopping writes to the old primary, which takes writes until it is told to follow) or
    /// CLUSTER FAILOVER (coordinated: the master stops taking writes until its replica has
    /// caught up, so nothing acknowledged is lost).
    fn failover(&mut self, master: usize) -> Outcome {
        match &mut *self.deployment {
            Deployment::Sentinel(s) => {
                let before = s.master_url().map_err(|e| e.to_string())?;
                let sentinel = deploy::port_of(&s.sentinel_urls()[0]);
                deploy::call(
                    sentinel,
                    &["SENTINEL", "FAILOVER", s.master_name()],
                    Duration::from_secs(2),
                )?;
                let start = Instant::now();
                while s.master_url().ok().as_ref() == Some(&before) {
                    if start.elapsed() > SETTLE_BOUND {
                        return Err("the sentinels did not promote the replica".into());
                    }
                    sleep(Duration::from_millis(100));
                }
                Ok((Some(self.settle()), true))
            }
            Deployment::Cluster(c) => {
                c.failover(master).map_err(|e| e.to_string())?;
                Ok((Some(self.settle()), false))
            }
            Deployment::Single(..) | Deployment::Postgres(..) | Deployment::Zookeeper(..) => {
                Err("no failover here (PostgreSQL: promote; ZooKeeper: kill_leader)".into())
            }
        }
    }

    /// SIGKILL of the primary / a master, and the promotion of its replica: whatever the
    /// replica had not received is lost.
    fn kill_master(&mut self, master: usize) -> Outcome {
        match &mut *self.deployment {
            Deployment::Sentinel(s) => s.kill_master().map(|_| ()).map_err(|e| e.to_string())?,
            Deployment::Cluster(c) => c
                .kill_master(master)
                .map(|_| ())
                .map_err(|e| e.to_string())?,
            Deployment::Single(..) | Deployment::Postgres(..) | Deployment::Zookeeper(..) => {
                return Err("no promotable replica here (PostgreSQL: promote)".into())
            }
        }
        Ok((Some(self.settle()), true))
    }
}

/// A fault's end time when it is not "now" (a failover's settling), and whether it lost data.
type Outcome = Result<(Option<u64>, bool), String>;

/// The draws that shape one fault: whom it hits, how long, which variant, and a free pick
/// (a migration's lock).
struct How {
    client: usize,
    master: usize,
    length: Duration,
    variant: bool,
    pick: usize,
}
