//! The runner: starts the servers, the clients and the nemesis, then checks what happened.

use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use dlock::testing::RedisServer;
use rustix::process::{Pid, Signal};

use crate::checker::{self, Config};
use crate::deploy::Deployment;
use crate::history::{self, mono_ns, Ev, Recorder, NEMESIS};
use crate::keys_left::{self, Ending};
use crate::nemesis::Nemesis;
use crate::pg::PgDeployment;
use crate::proxy::Proxies;
use crate::rng::Rng;
use crate::{modes, summary, timeline, RunArgs, Store, Topology};

/// After the faults, the clients run on this long before they are told to stop: the
/// liveness bound plus room to see it met.
const TAIL: Duration = Duration::from_secs(10);
/// Every client must be granted something this soon after the last fault healed.
pub const LIVENESS: Duration = Duration::from_secs(8);
/// How long a told-to-stop client may take to finish its operation and shut down.
const EXIT_BOUND: Duration = Duration::from_secs(40);

/// How one client process runs, drawn from the seed: its runtime flavour, and whether its
/// locks wait for a replica (only where the deployment has one). Every second client runs on
/// a current-thread runtime and every third is synced, from seeded starts, so a run of three
/// clients or more has both of each.
#[derive(Debug, Clone, Copy)]
pub struct Flavour {
    pub current_thread: bool,
    pub synced: bool,
}

pub fn flavours(seed: u64, clients: usize, topology: Topology, store: Store) -> Vec<Flavour> {
    let mut rng = Rng::derive(seed, 0xF1A7);
    let threads = rng.range(0, 1) as usize;
    let synced = rng.range(0, 2) as usize;
    // PostgreSQL refuses synced_replicas (its own synchronous_commit does that job).
    let replica =
        store == Store::Redis && matches!(topology, Topology::Single | Topology::Sentinel);
    (0..clients)
        .map(|id| Flavour {
            current_thread: (id + threads).is_multiple_of(2),
            synced: replica && (id + synced).is_multiple_of(3),
        })
        .collect()
}

/// The client processes; the nemesis stops, kills and restarts them.
pub struct Clients {
    procs: Vec<(Child, u64)>,
    spawn: Box<dyn Fn(usize, u64) -> io::Result<Child> + Send>,
}

impl Clients {
    pub fn len(&self) -> usize {
        self.procs.len()
    }

    pub fn signal(&self, id: usize, signal: Signal) -> io::Result<()> {
        let pid = Pid::from_raw(self.procs[id].0.id() as i32).ok_or(io::ErrorKind::InvalidInput)?;
        rustix::process::kill_process(pid, signal).map_err(io::Error::from)
    }

    /// SIGKILL, and reap it.
    pub fn kill(&mut self, id: usize) -> io::Result<()> {
        let child = &mut self.procs[id].0;
        child.kill()?;
        child.wait().map(|_| ())
    }

    /// Starts client `id` again (its next incarnation).
    pub fn restart(&mut self, id: usize) -> io::Result<()> {
        let incarnation = self.procs[id].1 + 1;
        let child = (self.spawn)(id, incarnation)?;
        self.procs[id] = (child, incarnation);
        Ok(())
    }

    /// Tells every client to stop (closes its stdin).
    fn stop_all(&mut self) {
        for (child, _) in &mut self.procs {
            drop(child.stdin.take());
        }
    }
}

/// Where results go: `target/chaos/<topology or postgres>-<kind>-<seed>/`.
fn results_dir(args: &RunArgs) -> PathBuf {
    // The binary is target/<profile>/examples/chaos.
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .or_else(|| {
            let exe = std::env::current_exe().ok()?;
            exe.ancestors().nth(3).map(Path::to_path_buf)
        })
        .unwrap_or_else(|| PathBuf::from("target"));
    target.join("chaos").join(format!(
        "{}-{}-{}",
        args.setup(),
        args.kind.name(),
        args.seed
    ))
}

pub fn run(args: RunArgs) -> Result<ExitCode, Box<dyn std::error::Error>> {
    let dir = results_dir(&args);
    let _ = std::fs::remove_dir_all(&dir);
    let parts = dir.join("parts");
    std::fs::create_dir_all(&parts)?;
    let origin = mono_ns();
    let rec = Recorder::create(&parts.join("nemesis.jsonl"), origin, NEMESIS)?;
    let title = format!(
        "{} {} seed {} clients {} minutes {}",
        args.setup(),
        args.kind.name(),
        args.seed,
        args.clients,
        args.minutes
    );
    println!("chaos: {title}; results in {}", dir.display());

    let register = RedisServer::start()?;
    let mut deployment = match args.store {
        Store::Redis => Deployment::start(args.topology, args.filler_keys)?,
        Store::Postgres => Deployment::Postgres(Box::new(PgDeployment::start()?)),
        Store::Zookeeper => Deployment::Zookeeper(Box::new(crate::zk::ZkDeployment::start()?)),
    };
    let proxies = match &deployment {
        Deployment::Single(s, _) => Some(Proxies::start(args.clients, s.port())),
        Deployment::Postgres(pg) => Some(Proxies::start(args.clients, pg.switch.port())),
        Deployment::Zookeeper(zk) => Some(Proxies::start_each(args.clients, &zk.ports())),
        _ => None,
    };
    let flavours = flavours(args.seed, args.clients, args.topology, args.store);
    let duration = Duration::from_secs_f64(args.minutes * 60.0);
    let spawn = {
        let exe = std::env::current_exe()?;
        let urls: Vec<Vec<String>> = (0..args.clients)
            .map(|id| match (&proxies, args.store) {
                (Some(p), Store::Postgres) => vec![PgDeployment::client_url(p.port(id), id)],
                (Some(p), Store::Redis) => vec![p.url(id)],
                (Some(p), Store::Zookeeper) => {
                    vec![crate::zk::ZkDeployment::client_url(&p.ports(id))]
                }
                (None, _) => deployment.urls(),
            })
            .collect();
        let master_name = deployment.master_name();
        let register = register.url();
        let parts = parts.clone();
        // A hard stop for clients that never see their stdin close.
        let until = rec.now() + (duration + TAIL + Duration::from_secs(120)).as_nanos() as u64;
        let (kind, topology, seed) = (args.kind, args.topology, args.seed);
        let store = match args.store {
            Store::Redis => "redis",
            Store::Postgres => "postgres",
            Store::Zookeeper => "zookeeper",
        };
        let flavours = flavours.clone();
        move |id: usize, incarnation: u64| -> io::Result<Child> {
            let log = std::fs::File::create(parts.join(format!("c{id}.{incarnation}.stderr")))?;
            let mut flags = Vec::new();
            if flavours[id].current_thread {
                flags.push("--current-thread");
            }
            if flavours[id].synced {
                flags.push("--synced");
            }
            Command::new(&exe)
                .arg("client")
                .args(flags)
                .args(["--id", &id.to_string()])
                .args(["--incarnation", &incarnation.to_string()])
                .args(["--origin", &origin.to_string()])
                .args(["--until", &until.to_string()])
                .args(["--kind", kind.name()])
                .args(["--topology", topology.name()])
                .args(["--store", store])
                .args(["--seed", &seed.to_string()])
                .args(["--urls", &urls[id].join(",")])
                .args(["--master-name", &master_name])
                .args(["--register", &register])
                .arg("--out")
                .arg(parts.join(format!("c{id}.{incarnation}.jsonl")))
                .stdin(Stdio::piped())
                .stdout(Stdio::null())
                .stderr(log)
                .spawn()
        }
    };
    let mut procs = Vec::new();
    for id in 0..args.clients {
        procs.push((spawn(id, 0)?, 0));
    }
    let clients = Mutex::new(Clients {
        procs,
        spawn: Box::new(spawn),
    });

    // Faults run until the duration less the tail (at least half of it), then the clients
    // run on fault-free for the tail.
    let faults_until = duration.saturating_sub(TAIL).max(duration / 2);
    let mut nemesis = Nemesis::new(
        args.setup(),
        &mut deployment,
        proxies.as_ref(),
        &clients,
        &rec,
        Rng::derive(args.seed, 0xFA17),
        faults_until.as_nanos() as u64,
    );
    nemesis.filler = args.filler_keys;
    nemesis.locks = modes::locks_of(args.kind, args.store);
    nemesis.only = args.faults.clone();
    nemesis.run();
    std::thread::sleep(TAIL.max(duration.saturating_sub(Duration::from_nanos(rec.now()))));
    rec.record(&rec.event(Ev::Note).detail("stop"));
    let mut clients = clients.into_inner().unwrap_or_else(|e| e.into_inner());
    clients.stop_all();
    let mut notes = Vec::new();
    let mut unclean = Vec::new();
    let deadline = Instant::now() + EXIT_BOUND;
    for (id, (child, _)) in clients.procs.iter_mut().enumerate() {
        let status = loop {
            if let Some(status) = child.try_wait()? {
                break Some(status);
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        if !status.is_some_and(|s| s.success()) {
            let f = flavours[id];
            unclean.push(format!(
                "c{id} ({}, {}) did not exit cleanly: {} (see parts/c{id}.*.stderr)",
                if f.current_thread {
                    "current-thread"
                } else {
                    "multi-thread"
                },
                if f.synced { "synced" } else { "unsynced" },
                status.map_or_else(
                    || format!("still running {EXIT_BOUND:?} after being told to stop, killed"),
                    |s| s.to_string()
                )
            ));
        }
    }
    if !unclean.is_empty() {
        notes.push("nothing-stranded not checked: not every client exited cleanly".into());
    }
    let ending = Ending {
        keys: keys_left::scan(&deployment, unclean.is_empty(), &mut notes),
        unclean,
    };

    let events = history::read_dir(&parts)?;
    history::write(&dir.join("history.jsonl"), &events)?;
    let cfg = Config {
        permits: crate::client::PERMITS,
        liveness_ns: LIVENESS.as_nanos() as u64,
        loss_grace_ns: 5_000_000_000,
    };
    let report = checker::check(&events, &ending, &cfg);
    let text = summary::render(&title, &events, &report, &ending, &cfg, &notes);
    std::fs::write(dir.join("summary.txt"), &text)?;
    std::fs::write(
        dir.join("timeline.svg"),
        timeline::render(&title, args.clients, &report),
    )?;
    io::stdout().write_all(text.as_bytes())?;
    println!("results: {}", dir.display());
    drop(proxies);
    Ok(if report.is_clean() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
