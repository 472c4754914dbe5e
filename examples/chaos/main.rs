//! A Jepsen-style checker for dlock: several client processes take locks under a seeded
//! schedule of faults, every step goes into a history, and a checker reads the history
//! against the model below.
//!
//! ```sh
//! cargo run --release --example chaos -- --minutes 10 --topology single --kind mix --seed 7
//! cargo run --release --example chaos -- --topology sentinel --kind rw --clients 5
//! cargo run --release --example chaos -- --topology cluster --kind fair --seed 3
//! cargo run --release --example chaos -- --minutes 0.5 --topology cluster --faults migrate
//! cargo run --release --features postgres --example chaos -- --store postgres --kind mix
//! cargo run --release --features zookeeper --example chaos -- --store zookeeper --kind mix
//! ```
//!
//! Each run writes `target/chaos/<topology or postgres>-<kind>-<seed>/`: `history.jsonl` (every event),
//! `summary.txt` (operations, faults by type, violations by property with the offending
//! events, availability) and `timeline.svg` (one lane per client, holds as bars labelled with
//! their tokens, fault bands, violations in red). It exits non-zero on any violation. The same
//! seed replays the same schedule of faults and client choices.
//!
//! # The run
//!
//! * **Servers**, all through `dlock::testing`: a single server with AOF and a replica
//!   (`--topology single`), a primary + replica + 3 sentinels (`sentinel`), or 3 masters with
//!   a replica each (`cluster`); and a separate server for the fenced register, which no fault
//!   touches. The single server holds `--filler-keys` (15,000) keys no client touches and
//!   loads each one with a `key-load-delay`, so every restart from its AOF answers LOADING for
//!   ~3 s before it serves again.
//! * **Clients**: N processes (`--clients`, default 5), this binary re-run as `chaos client`,
//!   every second one (from a client the seed picks) on a current-thread tokio runtime and
//!   the others on a multi-thread one, and where the deployment has a replica (single,
//!   sentinel) every third with `synced_replicas(1, 500 ms)`. On the single server each connects
//!   through its own loopback proxy. Each loops: acquire a lock of the kind under test (`mix`:
//!   plain, fair, read, write, semaphore, Redisson's `RLock` and `RReadWriteLock` read and
//!   write alike) on one of a few names, with a random TTL (1-4 s) or a hard lease (0.8-3 s),
//!   a random wait (0-4 s), sometimes cancelled mid-acquire; sometimes re-enter it in its
//!   scope; write `(client, op)` to the register with `fence::set_if_newer` and its token
//!   (the exclusive holds of kinds whose tokens are checked: see `modes.rs`), hold 0-400 ms,
//!   sometimes write again; then release (awaited, or written: `release_written`, as the
//!   attribute does), drop the guard, or drop the body's future mid-hold (cancel).
//! * **Nemesis**: one fault at a time, 0.3-2.5 s apart: SIGSTOP/SIGCONT and SIGKILL of a
//!   client (restarted); on the single server a proxy that freezes, delays, throttles (a few
//!   hundred bytes a second: replies queue and arrive late) or cuts one client's connections, restarts from the AOF (`restart_loading`: seconds of LOADING) and
//!   without it (`restart_empty`; the filler is written again after), and `kill_inflight`
//!   (one client's replies held at its proxy while its requests still reach Redis, so Redis
//!   grants and fsyncs what the client never hears; then SIGKILL of Redis, that client's links
//!   cut, and a restart from the AOF 1.5 s later); CLIENT KILL (normal or pubsub), SCRIPT
//!   FLUSH + FUNCTION FLUSH, DEBUG SLEEP; on sentinel and cluster also a manual failover,
//!   SIGSTOP of a primary, and SIGKILL of a primary (the harness does not restart a killed
//!   primary, and its shard cannot fail over again, so kills come only in the last quarter of
//!   the fault phase); on the cluster `migrate`: the slot of a lock in use goes to another
//!   master key by key (IMPORTING / MIGRATING, MIGRATE; clients meet ASK and TRYAGAIN), is
//!   handed over with SETSLOT NODE, and comes back the same way. `--faults a,b` draws from
//!   those kinds only. No clock jumps. After the fault phase the clients run 10 s more without
//!   faults, then are told to stop (their stdin closes), release what they hold and shut their
//!   clients down.
//! * **PostgreSQL** (`--store postgres`, the `postgres` feature): a `PgServer` primary and a
//!   streaming standby (asynchronous), a loopback switch in front of whichever is primary
//!   (`switch.rs`: a promotion repoints it, as a virtual IP would), and one proxy per client in
//!   front of the switch; every client connects with `application_name=chaos-c<id>`, unsynced
//!   (PostgreSQL refuses `synced_replicas`). Kinds: plain, fair, read, write and the semaphore
//!   (`mix` is those five; the store does not offer Redisson's kinds, and the command line
//!   refuses `--kind redisson`). The register stays on its own Redis
//!   server. Faults (`pg.rs`): client SIGSTOP and SIGKILL, proxy freeze, delay, throttle and cut as on
//!   the single server; `restart` (SIGKILL of every server process, a start 0.3-1 s later:
//!   crash recovery from the WAL, nothing committed lost); `terminate` (`pg_terminate_backend`
//!   of every backend of one client, found by its application name, or of every client's,
//!   sent to the primary directly); `pause_server` (SIGSTOP of every server process for
//!   4.65-6.5 s, past every lease, then SIGCONT); `promote` (SIGKILL of the primary, promotion
//!   of the standby, the switch repointed, and a new standby made from the new primary, so
//!   promotions go on all run long; a data-loss fault: whatever the standby had not received
//!   is lost, and the note says whether it was streaming). At the end, every row of dlock's
//!   tables is read as a key (`pg:<table>:<key>`; see `PgDeployment::rows_left`).
//! * **ZooKeeper** (`--store zookeeper`, the `zookeeper` feature): a 3-server ensemble on
//!   loopback, every client given all three servers through proxies of its own, with a 3 s
//!   session (a hold's lease is two thirds of it). Kinds as on PostgreSQL (`mix`: plain, fair,
//!   read, write, semaphore). Faults (`zk.rs`): client SIGSTOP (up to 4 s: past the session,
//!   so the ensemble expires it and frees its locks while the client is frozen) and SIGKILL;
//!   `freeze`, `delay`, `throttle` and `cut` of one client's links to every server (a freeze past the
//!   session expires it as a SIGSTOP does, while the client runs on); `kill_leader` and
//!   `kill_follower` (SIGKILL, a restart 0.3-4 s later); `pause_leader` (SIGSTOP of the leader
//!   for 2.6-4.5 s, past the followers' 2 s patience: they elect another, and the old leader
//!   rejoins on SIGCONT); `restart_ensemble` (every server killed and started from its data).
//!   None loses data (a write is answered once a quorum has it). At the end, the leader's list
//!   of ephemeral nodes (`dump`) must be empty: a lock's child left after every client exited
//!   would be a lock held by nobody until its session ends.
//! * **Clock**: every event is stamped with `CLOCK_MONOTONIC`, which is one clock for every
//!   process on the machine, less the run's origin.
//!
//! # The model
//!
//! * **A believed hold** runs from the grant (the acquire's reply) to the earliest of: the
//!   start of its release (or drop, or cancel), its `is_lost()` transition (seen by `lost()`,
//!   or by a look before each action), the SIGKILL of its process, the process's exit. A
//!   process stopped by SIGSTOP does nothing: if the first thing one of its holds records after
//!   SIGCONT is its loss, the belief ends at the SIGSTOP (dlock promises the holder reads
//!   "lost" at its first look after waking, and it did not act before looking).
//! * **Mutual exclusion**: per lock name, no two believed holds overlap, except two reads.
//! * **Fencing**: a hold granted after another's belief ended has a larger token (two reads
//!   are not compared: Redis grants them side by side, and a read whose reply was delayed is
//!   believed after a read Redis granted later); and the register accepts no write whose
//!   token is lower than one it had already acknowledged when the write was sent. Which kinds'
//!   tokens are checked is `modes.rs`'s call: Redisson's `RLock` for exclusion only, its
//!   read-write lock's counter as rising while Redis keeps its data.
//! * **Semaphore**: at most N (2) believed holders at once.
//! * **Transient replies**: an acquire that may wait does not fail with LOADING, TRYAGAIN,
//!   ASK or MOVED (PostgreSQL: a "not now", such as starting up or in recovery) before its
//!   wait is over, and a release does not fail with one (the lock would stay held until its
//!   lease ran out).
//! * **Bounded waits**: an acquire answers, granted or not, within its wait plus 3.5 s (the
//!   last attempt's response timeout, a synced WAIT, slack), unless its process was stopped.
//! * **Liveness**: every client is granted something within 8 s of the last fault healing.
//! * **Clean exit**: every client, told to stop, exits with success within 40 s.
//! * **Keys left**, by kind (the key with its lock name and ids taken out): no key without an
//!   expiry, ever; and once every client exited cleanly, nothing but fencing counters and
//!   release latches (which expire on their own), after 3 s for short-lived markers to expire.
//!   On PostgreSQL the same for rows, where a row past its `expires_at` counts as gone (every
//!   op reads it as absent; the next op on its key, or a later sweep, deletes it) and a
//!   semaphore's permit count without holder rows is one that never expires.
//! * **Data loss**: a fault that can lose acknowledged writes opens a window from its start to
//!   5 s after its end (a hold from before it learns at its next renewal, a third of a lease
//!   of at most 4 s, or when its hard lease of at most 3 s ends). An overlap (or a semaphore
//!   excess) whose earlier hold was granted before the window closed and whose later hold was
//!   granted inside it is counted apart as *explained by data loss*, not as a violation.
//!   Data-loss faults: a restart without persistence; a SIGKILL of a primary (the replica may
//!   not have had the last writes); a PostgreSQL `promote` (asynchronous replication); a sentinel `SENTINEL FAILOVER` (the sentinels promote the
//!   replica without stopping the old primary, which takes writes until it is told to follow:
//!   those are lost); and a DEBUG SLEEP or SIGSTOP of a primary that made the replicas take
//!   over (seen as the sentinels' primary or the cluster's masters changing within 8 s of its
//!   end), which ends when the deployment has settled (no down or failover flag, every
//!   replica answering ROLE as one). A cluster's `CLUSTER FAILOVER` is coordinated (the master
//!   stops writes until the replica caught up) and is *not* a data-loss fault, nor is
//!   `kill_inflight` (the AOF is fsynced before each reply) or `migrate`. Token order is
//!   checked inside these windows too: dlock promises tokens rise across data loss (a plain
//!   counter's, Redisson's, going back there is counted apart).
//!
//! `summary.txt` ends with a `row:` line: faults by kind, violations, explained by data loss,
//! worst unavailability and keys left, as the README's table gives them.

mod checker;
mod client;
mod deploy;
mod history;
mod keys_left;
mod migrate;
mod modes;
mod nemesis;
mod pg;
mod proxy;
mod restarts;
mod rng;
mod runner;
mod summary;
mod switch;
// The integration tests' proxy, used as it is; this binary uses part of its API.
#[allow(dead_code)]
#[path = "../../tests/common/proxy.rs"]
mod tcp_proxy;
mod timeline;
mod waits;
mod zk;

use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};

#[derive(Parser, Debug)]
#[command(about = "Jepsen-style lock checker: clients, faults, a history and its checker")]
struct Cli {
    #[command(subcommand)]
    client: Option<Sub>,
    #[command(flatten)]
    run: RunArgs,
}

#[derive(Subcommand, Debug)]
enum Sub {
    /// One client process (started by the runner).
    #[command(hide = true)]
    Client(client::ClientArgs),
}

#[derive(clap::Args, Debug, Clone)]
pub(crate) struct RunArgs {
    /// Length of the run, in minutes (faults, then 10 s without).
    #[arg(long, default_value_t = 1.0)]
    pub(crate) minutes: f64,
    /// Where the locks live: Redis (in `--topology`), a PostgreSQL primary with a streaming
    /// standby (needs the `postgres` feature), or a 3-server ZooKeeper ensemble (`zookeeper`).
    #[arg(long, value_enum, default_value_t = Store::Redis)]
    pub(crate) store: Store,
    #[arg(long, value_enum, default_value_t = Topology::Single)]
    pub(crate) topology: Topology,
    #[arg(long, value_enum, default_value_t = Kind::Mix)]
    pub(crate) kind: Kind,
    /// Seeds the fault schedule and every client's choices.
    #[arg(long, default_value_t = 1)]
    pub(crate) seed: u64,
    /// Client processes.
    #[arg(long, default_value_t = 5)]
    pub(crate) clients: usize,
    /// Keys the single server holds besides the locks, so each restart answers LOADING for
    /// seconds (~0.2 ms a key); 0 for restarts that load at once.
    #[arg(long, default_value_t = 15_000)]
    pub(crate) filler_keys: usize,
    /// Only these fault kinds (comma-separated, e.g. `migrate` or `restart_loading,kill_inflight`),
    /// to dwell on one class; default: every fault of the topology.
    #[arg(long, value_delimiter = ',')]
    pub(crate) faults: Vec<String>,
}

#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Store {
    Redis,
    Postgres,
    Zookeeper,
}

#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Topology {
    Single,
    Sentinel,
    Cluster,
}

#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Plain,
    Fair,
    Rw,
    Semaphore,
    /// Redisson's `RLock` and `RReadWriteLock`.
    Redisson,
    Mix,
}

impl Topology {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Topology::Single => "single",
            Topology::Sentinel => "sentinel",
            Topology::Cluster => "cluster",
        }
    }
}

impl RunArgs {
    /// The deployment's name in titles and result directories: the topology, or `postgres`.
    pub(crate) fn setup(&self) -> &'static str {
        match self.store {
            Store::Redis => self.topology.name(),
            Store::Postgres => "postgres",
            Store::Zookeeper => "zookeeper",
        }
    }

    /// What the store cannot run, in words; `None` when the combination is fine.
    fn refused(&self) -> Option<String> {
        if self.store == Store::Zookeeper {
            if self.topology != Topology::Single {
                return Some(format!(
                    "--store zookeeper runs its own deployment (a 3-server ensemble): leave --topology {} out",
                    self.topology.name()
                ));
            }
            if self.kind == Kind::Redisson {
                return Some(
                    "the ZooKeeper store does not offer --kind redisson: plain, fair, rw, semaphore or mix"
                        .to_owned(),
                );
            }
            return store_missing("zk://127.0.0.1:1", "zookeeper");
        }
        if self.store != Store::Postgres {
            return None;
        }
        if self.topology != Topology::Single {
            return Some(format!(
                "--store postgres runs its own deployment (a primary and a standby): leave --topology {} out",
                self.topology.name()
            ));
        }
        if self.kind == Kind::Redisson {
            return Some(
                "the PostgreSQL store does not offer --kind redisson: plain, fair, rw, semaphore or mix"
                    .to_owned(),
            );
        }
        store_missing("postgres://postgres@127.0.0.1:1/postgres", "postgres")
    }
}

impl Kind {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Kind::Plain => "plain",
            Kind::Fair => "fair",
            Kind::Rw => "rw",
            Kind::Semaphore => "semaphore",
            Kind::Redisson => "redisson",
            Kind::Mix => "mix",
        }
    }
}

/// Whether this build's dlock lacks the store of `url` (its cargo feature `feature`), asked of
/// dlock itself (the feature may be on in dlock without being on in this package): a client of
/// a closed port is refused as an invalid argument only when the store is not compiled in.
fn store_missing(url: &str, feature: &str) -> Option<String> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .ok()?;
    let probe = rt.block_on(
        dlock::LockClient::builder(url)
            .connect_timeout(std::time::Duration::from_secs(1))
            .build(),
    );
    match probe {
        Err(e @ dlock::LockError::InvalidArgument { .. }) => Some(format!(
            "--store {feature}: {e} (cargo run --release --features {feature} --example chaos -- ...)"
        )),
        Err(_) => None,
        Ok(client) => {
            rt.block_on(client.shutdown());
            None
        }
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.client {
        Some(Sub::Client(args)) => client::main(args),
        None => {
            if cli.run.clients == 0 || cli.run.minutes <= 0.0 {
                eprintln!("chaos: --clients and --minutes must be positive");
                return ExitCode::from(2);
            }
            if let Some(why) = cli.run.refused() {
                eprintln!("chaos: {why}");
                return ExitCode::from(2);
            }
            if let Err(e) = nemesis::menu_of(cli.run.setup(), &cli.run.faults) {
                eprintln!("chaos: {e}");
                return ExitCode::from(2);
            }
            match runner::run(cli.run) {
                Ok(code) => code,
                Err(e) => {
                    eprintln!("chaos: {e}");
                    ExitCode::from(2)
                }
            }
        }
    }
}
