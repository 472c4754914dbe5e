//! How dlock's cost grows with what it serves (issue 39): three sweeps, each printed as a table
//! and drawn as curves (SVG and PNG under `--out`, `docs/scale` by default).
//!
//! * **held**: N locks held at once by one client (N = 1k, 10k, 100k): the client's heap bytes
//!   per hold, the server's bytes per hold, the server time spent on renewals per second of
//!   wall time (a short lease on Redis, `--lease`, so that renewals come every `lease / 3`; at
//!   the 30 s default they come ten times more rarely; PostgreSQL keeps the default,
//!   `--lease-postgres`), the watchdog's tick duration (p50 / p99, from the
//!   `dlock_renew_tick_seconds` histogram).
//! * **waiters**: W tasks of one client waiting on K keys held by another client (W = 10 ..
//!   10k, K = 1, 10, 1k): the server's client connections (they must not grow with W), the
//!   client's heap bytes per waiting task, and the wake-up latency from a release to the next
//!   holder (p50 / p99 over every handoff; the waiters release at once, so each key's waiters
//!   take it in turn; the first handoff of each key crosses clients, the rest may be local).
//! * **processes**: P processes (P = 2 .. 32), one task each, on one key and on 16 keys, with
//!   the plain lock and the fair lock: locks per second, the smallest and largest process's
//!   share of them (1.0 = the mean), wait p50 / p99, and the server's commands per lock
//!   (Redis's `total_commands_processed`, script calls included; PostgreSQL's dlock function
//!   calls).
//!
//! Stores (`--stores`): `redis` (a throw-away redis-server), `cluster` (a throw-away local
//! 3-master cluster: the processes sweep on 16 keys spreads them over the masters, the
//! throughput ceiling beside one server), `postgres` (feature `postgres`: a throw-away
//! PostgreSQL server). Server memory is Redis's `used_memory` (summed over masters) and
//! PostgreSQL's size of dlock's tables with their indexes; server time on renewals is the
//! `usec` of Redis's script commands (`INFO commandstats`) and PostgreSQL's `renew()` function
//! time (`pg_stat_user_functions`).
//!
//! It is an example: nothing is asserted about time; figures vary from run to run on a shared
//! machine. The pictures need a TrueType font for their text (`--font`, else DejaVu Sans or
//! Liberation Sans where Debian puts them); without one the tables are still printed.

mod held;
mod pictures;
mod processes;
mod stats;
mod store;
mod waiters;

use std::path::PathBuf;
use std::time::Duration;

use clap::{Parser, ValueEnum};

/// Every allocation goes through this wrapper, which counts live heap bytes: the client's
/// memory per hold and per waiter.
#[global_allocator]
static ALLOCATOR: cap::Cap<std::alloc::System> = cap::Cap::new(std::alloc::System, usize::MAX);

/// Live heap bytes of this process now.
pub fn heap_bytes() -> usize {
    ALLOCATOR.allocated()
}

/// Where the locks live.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum StoreKind {
    /// A throw-away redis-server.
    Redis,
    /// A throw-away local cluster of 3 masters.
    Cluster,
    /// A throw-away PostgreSQL server.
    Postgres,
}

impl StoreKind {
    /// The name in tables and pictures.
    pub fn label(self) -> &'static str {
        match self {
            StoreKind::Redis => "Redis",
            StoreKind::Cluster => "Redis Cluster (3 masters)",
            StoreKind::Postgres => "PostgreSQL",
        }
    }
}

/// What grows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Sweep {
    /// Locks held at once by one client.
    Held,
    /// Tasks of one client waiting on keys another client holds.
    Waiters,
    /// Processes contending on one key or a few.
    Processes,
}

/// The lock kind the processes sweep takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Kind {
    /// `client.lock(..)`: a release wakes every waiting process, the first to ask wins.
    Plain,
    /// `client.fair_lock(..)`: a release grants the first in line.
    Fair,
}

/// The command line.
#[derive(Parser, Debug)]
#[command(about = "How dlock's cost grows: held locks, waiting tasks and processes per store")]
pub struct Args {
    /// Stores to sweep (postgres needs `--features scale/postgres`).
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "redis,cluster"
    )]
    pub stores: Vec<StoreKind>,
    /// Sweeps to run.
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "held,waiters,processes"
    )]
    pub sweeps: Vec<Sweep>,
    /// Locks held at once by one client.
    #[arg(long, value_delimiter = ',', default_value = "1000,10000,100000")]
    pub held: Vec<usize>,
    /// The lease of the held locks; renewals come every third of it.
    #[arg(long, value_parser = parse_secs, default_value = "3")]
    pub lease: Duration,
    /// How long renewals are watched at each N.
    #[arg(long, value_parser = parse_secs, default_value = "6")]
    pub watch: Duration,
    /// The lease and the watch on PostgreSQL, whose renewals cost its server about ten times
    /// Redis's per hold (at a 3 s lease, 100k holds would need more than one backend's time).
    #[arg(long, value_parser = parse_secs, default_value = "30")]
    pub lease_postgres: Duration,
    /// How long renewals are watched at each N on PostgreSQL.
    #[arg(long, value_parser = parse_secs, default_value = "21")]
    pub watch_postgres: Duration,
    /// Waiting tasks.
    #[arg(long, value_delimiter = ',', default_value = "10,100,1000,10000")]
    pub waiters: Vec<usize>,
    /// Keys the waiting tasks are spread over (a count above the tasks is skipped).
    #[arg(long, value_delimiter = ',', default_value = "1,10,1000")]
    pub keys: Vec<usize>,
    /// Processes contending.
    #[arg(long, value_delimiter = ',', default_value = "2,4,8,16,32")]
    pub processes: Vec<usize>,
    /// Keys the processes contend on.
    #[arg(long, value_delimiter = ',', default_value = "1,16")]
    pub process_keys: Vec<usize>,
    /// Lock kinds the processes take (`fair`: the release grants the next in line).
    #[arg(long, value_enum, value_delimiter = ',', default_value = "plain,fair")]
    pub process_kinds: Vec<Kind>,
    /// How long each process count runs.
    #[arg(long, value_parser = parse_secs, default_value = "3")]
    pub run: Duration,
    /// Where the pictures go (`<sweep>-<figure>.svg` and `.png`).
    #[arg(long, default_value = "docs/scale")]
    pub out: PathBuf,
    /// A TrueType font for the pictures' text.
    #[arg(long)]
    pub font: Option<PathBuf>,
    /// Internal: run as one contending process of the processes sweep.
    #[arg(long, hide = true, num_args = 6, value_names = ["STORE", "URL", "KIND", "PREFIX", "KEYS", "SECS"])]
    pub worker: Option<Vec<String>>,
}

fn parse_secs(s: &str) -> Result<Duration, String> {
    let secs: f64 = s.parse().map_err(|e| format!("{s:?}: {e}"))?;
    if !(secs > 0.0 && secs < 3600.0) {
        return Err(format!("{s:?}: seconds between 0 and 3600"));
    }
    Ok(Duration::from_secs_f64(secs))
}

#[tokio::main]
async fn main() {
    let args = Args::parse();
    if let Some(worker) = &args.worker {
        processes::worker(worker).await;
        return;
    }
    let snapshots = stats::install_recorder();
    let mut curves = pictures::Curves::default();
    for &kind in &args.stores {
        let store = match store::Store::start(kind).await {
            Ok(store) => store,
            Err(e) => {
                eprintln!("{}: cannot start: {e}", kind.label());
                std::process::exit(1);
            }
        };
        let round_trip = store.round_trip().await;
        println!(
            "== {} ({}), round trip {} (PING or SELECT 1, median of 200)",
            kind.label(),
            store.describe(),
            stats::show(round_trip)
        );
        for sweep in &args.sweeps {
            match sweep {
                Sweep::Held => held::sweep(&store, &args, &snapshots, &mut curves).await,
                Sweep::Waiters => waiters::sweep(&store, &args, round_trip, &mut curves).await,
                Sweep::Processes => processes::sweep(&store, &args, &mut curves).await,
            }
        }
    }
    match pictures::draw(&curves, &args.out, args.font.as_deref()) {
        Ok(written) => {
            for path in written {
                println!("wrote {}", path.display());
            }
        }
        Err(e) => println!("skipped: pictures ({e})"),
    }
}
