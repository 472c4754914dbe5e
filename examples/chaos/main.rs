//! A Jepsen-style checker for dlock: several client processes take locks under a seeded
//! schedule of faults, every step goes into a history, and a checker reads the history
//! against the model below.
//!
//! ```sh
//! cargo run --release --example chaos -- --minutes 10 --topology single --kind mix --seed 7
//! cargo run --release --example chaos -- --topology sentinel --kind rw --clients 5
//! cargo run --release --example chaos -- --topology cluster --kind fair --seed 3
//! ```
//!
//! Each run writes `target/chaos/<topology>-<kind>-<seed>/`: `history.jsonl` (every event),
//! `summary.txt` (operations, faults by type, violations by property with the offending
//! events, availability) and `timeline.svg` (one lane per client, holds as bars labelled with
//! their tokens, fault bands, violations in red). It exits non-zero on any violation. The same
//! seed replays the same schedule of faults and client choices.
//!
//! # The run
//!
//! * **Servers**, all through `dlock::testing`: a single server with AOF (`--topology single`),
//!   a primary + replica + 3 sentinels (`sentinel`), or 3 masters with a replica each
//!   (`cluster`); and a separate server for the fenced register, which no fault touches.
//! * **Clients**: N processes (`--clients`, default 5), this binary re-run as `chaos client`.
//!   On the single server each connects through its own loopback proxy. Each loops: acquire a
//!   lock of the kind under test (`mix`: plain, fair, read, write and semaphore alike) on one of
//!   a few names, with a random TTL (1-4 s) or a hard lease (0.8-3 s), a random wait (0-4 s),
//!   sometimes cancelled mid-acquire; sometimes re-enter it in its scope; write `(client, op)`
//!   to the register with `fence::set_if_newer` and its token (plain, fair and write holds),
//!   hold 0-400 ms, sometimes write again; then release, drop the guard, or drop the body's
//!   future mid-hold (cancel).
//! * **Nemesis**: one fault at a time, 0.3-2.5 s apart: SIGSTOP/SIGCONT and SIGKILL of a
//!   client (restarted); on the single server a proxy that freezes, delays or cuts one
//!   client's connections, and restarts with the AOF and without it; CLIENT KILL (normal or
//!   pubsub), SCRIPT FLUSH + FUNCTION FLUSH, DEBUG SLEEP; on sentinel and cluster also a
//!   manual failover, SIGSTOP of a primary, and SIGKILL of a primary (the harness does not
//!   restart a killed primary, and its shard cannot fail over again, so kills come only in the
//!   last quarter of the fault phase). No clock jumps. After the fault
//!   phase the clients run 10 s more without faults, then are told to stop (their stdin
//!   closes), release what they hold and shut their clients down.
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
//!   token is lower than one it had
//!   already acknowledged when the write was sent.
//! * **Semaphore**: at most N (2) believed holders at once.
//! * **Liveness**: every client is granted something within 8 s of the last fault healing.
//! * **Nothing stranded**: once every client exited cleanly, a SCAN of every node that takes
//!   writes finds no key under `dlock:` but fencing counters (kept on purpose, so tokens keep
//!   rising) and release latches, after 3 s for short-lived markers to expire.
//! * **Data loss**: a fault that can lose acknowledged writes opens a window from its start to
//!   5 s after its end (a hold from before it learns at its next renewal, a third of a lease
//!   of at most 4 s, or when its hard lease of at most 3 s ends). An overlap (or a semaphore
//!   excess) whose earlier hold was granted before the window closed and whose later hold was
//!   granted inside it is counted apart as *explained by data loss*, not as a violation.
//!   Data-loss faults: a restart without persistence; a SIGKILL of a primary (the replica may
//!   not have had the last writes); a sentinel `SENTINEL FAILOVER` (the sentinels promote the
//!   replica without stopping the old primary, which takes writes until it is told to follow:
//!   those are lost); and a DEBUG SLEEP or SIGSTOP of a primary that made the replicas take
//!   over (seen as the sentinels' primary or the cluster's masters changing within 8 s of its
//!   end), which ends when the deployment has settled (no down or failover flag, every
//!   replica answering ROLE as one). A cluster's `CLUSTER FAILOVER` is coordinated (the master
//!   stops writes until the replica caught up) and is *not* a data-loss fault. Token order is
//!   checked inside these windows too: dlock promises tokens rise across data loss.

mod checker;
mod client;
mod deploy;
mod history;
mod nemesis;
mod proxy;
mod rng;
mod runner;
mod summary;
// The integration tests' proxy, used as it is; this binary uses part of its API.
#[allow(dead_code)]
#[path = "../../tests/common/proxy.rs"]
mod tcp_proxy;
mod timeline;

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

impl Kind {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Kind::Plain => "plain",
            Kind::Fair => "fair",
            Kind::Rw => "rw",
            Kind::Semaphore => "semaphore",
            Kind::Mix => "mix",
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
