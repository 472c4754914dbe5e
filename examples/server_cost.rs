//! What each lock costs the Redis server: microseconds per acquire, per release and per cycle
//! for every dlock kind, next to Redisson's own RLock scripts and rslock's commands, and the
//! throughput ceiling that cost sets (issue 31).
//!
//! `cargo run --release --example server_cost` (starts its own redis-server unless REDIS_URL
//! is set; keys `sc:*` and `ceil:*` are left there, and the slots' fencing counters
//! `dlock:fence:{*}`, expiring within a day). `-- --cluster`: the same on a temporary local
//! cluster of 3 masters (or REDIS_CLUSTER_URLS), with the ceiling on one master and on all of
//! them.
//!
//! Per call: for each row, `--calls` acquires of fresh keys (all held), then their releases,
//! then as many whole cycles, then re-entries of held keys and their releases; each stretch
//! alone between `CONFIG RESETSTAT` and `INFO cpu commandstats`. `--tasks` tasks call at once,
//! one call after another each, so the server, not the round trip, sets the pace. dlock's
//! kinds go through the real API (the watchdog's lease long enough that no renewal lands in a
//! stretch); the peers' commands are sent with redis-rs: Redisson's RLock scripts as its
//! documentation describes tryLockInner and unlockInner (3.24+, with the unlock latch), written
//! here, not copied, and rslock's SET NX PX with a compare-and-delete script.
//!
//! Script time is `usec` of the commands the client sends (FCALL, EVALSHA, EVAL; SET for
//! rslock), which includes the calls a script makes; server CPU is the main thread's
//! `used_cpu_user` (and `_sys`) delta, which adds reading requests and writing replies.
//!
//! Ceiling: pipelines of `--depth` cycles from `--workers` connections per loaded node, for
//! `--ceiling-secs`: cycles per second and the servers' CPU. Through the API as well
//! (`--api-tasks` tasks), where the client, on the same cores here, may be the limit.
//!
//! It is an example: nothing is asserted about time. The figures vary from run to run on a
//! shared machine; compare rows of one run.

#[path = "support/mod.rs"]
mod support;

#[path = "server_cost/ceiling.rs"]
mod ceiling;
#[path = "server_cost/phases.rs"]
mod phases;
#[path = "server_cost/report.rs"]
mod report;
#[path = "server_cost/stats.rs"]
mod stats;
#[path = "server_cost/subjects.rs"]
mod subjects;

use std::sync::Arc;

use clap::Parser;
use dlock::testing::RedisServer;
use dlock::LockClient;
use support::cluster::{plain_connection, Cluster};
use support::Db;

use ceiling::{CeilingRun, Load, Target};
use stats::Servers;
use subjects::{Ids, Kind, Subject};

#[derive(Parser, Debug)]
#[command(
    about = "Redis server time per lock call for every dlock kind and its peers, and the \
                   throughput ceiling it sets"
)]
struct Args {
    /// Run on a Redis Cluster: a temporary local one of 3 masters unless --cluster-urls
    /// (REDIS_CLUSTER_URLS) names one.
    #[arg(long)]
    cluster: bool,
    /// With --cluster: seed node URLs of an existing cluster, comma-separated.
    #[arg(
        long,
        env = "REDIS_CLUSTER_URLS",
        value_delimiter = ',',
        hide_env_values = true
    )]
    cluster_urls: Vec<String>,
    /// Operations per measured stretch.
    #[arg(long, default_value_t = 20_000)]
    calls: usize,
    /// Tasks calling at once in the per-call stretches.
    #[arg(long, default_value_t = 64)]
    tasks: usize,
    /// Only the rows whose label starts with one of these, `;`-separated (labels hold commas),
    /// e.g. `dlock plain;Redisson`.
    #[arg(long, value_delimiter = ';')]
    only: Vec<String>,
    /// Rounds of the per-call table: each measures every row (in an order that rotates), and
    /// each cell is the median of the rounds.
    #[arg(long, default_value_t = 1)]
    rounds: usize,
    /// Seconds of each ceiling run; 0 skips the ceiling.
    #[arg(long, default_value_t = 3.0)]
    ceiling_secs: f64,
    /// Rounds of the ceiling: each runs every load (in an order that rotates); the table gives
    /// medians, and each dlock load's server CPU per cycle over its peer's is taken round by
    /// round.
    #[arg(long, default_value_t = 1)]
    ceiling_rounds: usize,
    /// Only the ceiling loads whose label starts with one of these, `;`-separated (e.g.
    /// `dlock plain;Redisson's own RFencedLock`).
    #[arg(long, value_delimiter = ';')]
    ceiling_only: Vec<String>,
    /// Pipelining connections per loaded node in the ceiling runs.
    #[arg(long, default_value_t = 4)]
    workers: usize,
    /// Cycles per pipeline in the ceiling runs.
    #[arg(long, default_value_t = 64)]
    depth: usize,
    /// Tasks of the API ceiling run; 0 skips it.
    #[arg(long, default_value_t = 128)]
    api_tasks: usize,
}

/// The deployment: where the lock clients and raw connections go, and which nodes are counted.
struct Setup {
    /// URLs of the counted nodes (the server, or every master).
    node_urls: Vec<String>,
    cluster: Option<Cluster>,
    url: String,
    _server: Option<RedisServer>,
}

impl Setup {
    async fn open(args: &Args) -> Setup {
        if !args.cluster {
            let (url, server) = support::redis_url();
            return Setup {
                node_urls: vec![url.clone()],
                cluster: None,
                url,
                _server: server,
            };
        }
        let cluster = Cluster::open(args.cluster_urls.clone(), 0)
            .await
            .unwrap_or_else(|e| {
                eprintln!("{e}");
                std::process::exit(2);
            });
        eprintln!("cluster: {} ({})", cluster.addrs(), cluster.origin);
        Setup {
            node_urls: cluster.masters.iter().map(|m| m.url.clone()).collect(),
            url: cluster.seeds.join(","),
            cluster: Some(cluster),
            _server: None,
        }
    }

    async fn client(&self, functions: bool) -> LockClient {
        let builder = match &self.cluster {
            Some(c) => c.lock_client(),
            None => LockClient::builder(self.url.as_str()),
        };
        builder.functions(functions).build().await.expect("connect")
    }

    async fn db(&self) -> Db {
        match &self.cluster {
            Some(c) => c.db().await,
            None => Db::Single(plain_connection(&self.url).await.expect("connect")),
        }
    }

    /// Whether `key` lives on node `node`.
    fn on_node(&self, node: usize, key: &str) -> bool {
        self.cluster
            .as_ref()
            .is_none_or(|c| c.master_of(key) == node)
    }
}

#[tokio::main]
async fn main() {
    let args = Args::parse();
    let setup = Setup::open(&args).await;
    let mut servers = Servers::open(&setup.node_urls).await;
    for url in &setup.node_urls {
        let mut node = plain_connection(url).await.expect("connect to a node");
        subjects::load_raw_scripts(&mut node).await;
        ceiling::load_dlock_scripts(&mut node).await;
    }
    let (fcall, evalsha) = (setup.client(true).await, setup.client(false).await);
    let run = std::process::id().to_string();
    let dlock = |label: &str, client: &LockClient, kind: Kind| {
        (
            label.to_owned(),
            Subject::Dlock {
                client: client.clone(),
                kind,
            },
        )
    };
    let mut rows = vec![
        dlock("dlock plain", &fcall, Kind::Plain),
        dlock(
            "dlock plain, EVALSHA (functions off)",
            &evalsha,
            Kind::Plain,
        ),
        dlock("dlock rw read", &fcall, Kind::RwRead),
        dlock("dlock rw write", &fcall, Kind::RwWrite),
        dlock("dlock fair", &fcall, Kind::Fair),
        dlock("dlock semaphore (1 permit)", &fcall, Kind::Semaphore),
        dlock("dlock multi_lock of 2 plain", &fcall, Kind::Multi2),
        dlock("dlock Redisson RLock", &fcall, Kind::RedissonLock),
        dlock(
            "dlock Redisson RFencedLock",
            &fcall,
            Kind::RedissonFencedLock,
        ),
        dlock(
            "dlock Redisson RReadWriteLock read",
            &fcall,
            Kind::RedissonRead,
        ),
        dlock(
            "dlock Redisson RReadWriteLock write",
            &fcall,
            Kind::RedissonWrite,
        ),
    ];
    rows.push((
        "Redisson's own RLock scripts (tryLockInner / unlockInner, 3.24+ latch)".to_owned(),
        Subject::RedissonScripts {
            db: setup.db().await,
            ids: Ids::new(&format!("{run}:redisson")),
            fenced: false,
        },
    ));
    rows.push((
        "Redisson's own RFencedLock scripts (RLock's, and INCR of the token counter)".to_owned(),
        Subject::RedissonScripts {
            db: setup.db().await,
            ids: Ids::new(&format!("{run}:redisson-fenced")),
            fenced: true,
        },
    ));
    for (label, load) in [
        (
            "dlock plain scripts sent raw, as the peers' are",
            Load::DlockScripts,
        ),
        (
            "dlock RLock kind scripts sent raw, as the peers' are",
            Load::DlockRlockKind,
        ),
    ] {
        rows.push((
            label.to_owned(),
            Subject::DlockRaw {
                db: setup.db().await,
                ids: Ids::new(&format!("{run}:{load:?}")),
                load,
            },
        ));
    }
    rows.push((
        "SET NX PX + compare-and-delete script (what rslock sends)".to_owned(),
        Subject::Rslock {
            db: setup.db().await,
            ids: Ids::new(&format!("{run}:rslock")),
        },
    ));
    rows.retain(|(label, _)| {
        args.only.is_empty() || args.only.iter().any(|o| label.starts_with(o.as_str()))
    });

    println!(
        "server-cost: {} node(s), {} operations per stretch, {} tasks at once, {}",
        servers.len(),
        args.calls,
        args.tasks,
        server_version(&setup.node_urls[0]).await
    );
    let rows: Vec<(String, Arc<Subject>)> = rows
        .into_iter()
        .map(|(label, subject)| (label, Arc::new(subject)))
        .collect();
    for (i, (_, subject)) in rows.iter().enumerate() {
        // Connections, the library and the scripts' cache warmed outside the stretches.
        phases::measure(
            subject.clone(),
            &mut servers,
            args.tasks,
            args.tasks,
            &format!("{run}:{i}:warm"),
        )
        .await;
    }
    let mut costs: Vec<(String, Vec<phases::Costs>)> =
        rows.iter().map(|(l, _)| (l.clone(), Vec::new())).collect();
    for round in 0..args.rounds.max(1) {
        for k in 0..rows.len() {
            // A drifting load on a shared machine falls on a different row each round.
            let i = (k + round) % rows.len();
            let (label, subject) = &rows[i];
            let c = phases::measure(
                subject.clone(),
                &mut servers,
                args.calls,
                args.tasks,
                &format!("{run}:{i}:{round}"),
            )
            .await;
            eprintln!(
                "round {round}, {label}: cycle {:.2} us",
                c.cycle.usec as f64 / c.ops as f64
            );
            costs[i].1.push(c);
        }
    }
    report::per_call(&costs);

    if args.ceiling_secs > 0.0 {
        let ceilings = measure_ceilings(&args, &setup, &mut servers, &fcall).await;
        report::ceilings(&ceilings);
        if setup.cluster.is_some() {
            print_factors(&ceilings);
        }
    }
    fcall.shutdown().await;
    evalsha.shutdown().await;
}

async fn measure_ceilings(
    args: &Args,
    setup: &Setup,
    servers: &mut Servers,
    client: &LockClient,
) -> Vec<CeilingRun> {
    let target = |node: usize| Target {
        url: setup.node_urls[node].clone(),
        bases: ceiling::bases_for(node, args.workers, args.depth, &|k| setup.on_node(node, k)),
    };
    let one = vec![target(0)];
    let all: Vec<Target> = (0..setup.node_urls.len()).map(target).collect();
    let mut out = Vec::new();
    let loads: Vec<Load> = Load::ALL
        .into_iter()
        .filter(|l| {
            args.ceiling_only.is_empty()
                || args
                    .ceiling_only
                    .iter()
                    .any(|o| l.label().starts_with(o.as_str()))
        })
        .collect();
    if loads.is_empty() {
        eprintln!(
            "--ceiling-only {:?} names no load; the loads: {:?}",
            args.ceiling_only,
            Load::ALL.map(Load::label)
        );
        std::process::exit(2);
    }
    for round in 0..args.ceiling_rounds.max(1) {
        for k in 0..loads.len() {
            // As in the per-call table: a drifting load falls on a different row each round.
            let load = loads[(k + round) % loads.len()];
            let c = ceiling::scripts(load, &one, servers, args.ceiling_secs).await;
            eprintln!(
                "round {round}, ceiling {}: {:.0}/s ({} cycles)",
                load.label(),
                c.per_sec(),
                c.cycles
            );
            out.push(CeilingRun {
                label: load.label().to_owned(),
                load: Some(load),
                round,
                ceiling: c,
            });
            if setup.cluster.is_some() {
                let c = ceiling::scripts(load, &all, servers, args.ceiling_secs).await;
                eprintln!(
                    "round {round}, ceiling {}, all masters: {:.0}/s",
                    load.label(),
                    c.per_sec()
                );
                out.push(CeilingRun {
                    label: load.label().to_owned(),
                    load: Some(load),
                    round,
                    ceiling: c,
                });
            }
        }
    }
    if args.api_tasks == 0 {
        return out;
    }
    let c = ceiling::api(client, args.api_tasks, servers, args.ceiling_secs).await;
    out.push(CeilingRun {
        label: format!(
            "dlock plain through the API, {} tasks on one client",
            args.api_tasks
        ),
        load: None,
        round: 0,
        ceiling: c,
    });
    out
}

/// On a cluster: each load's cycles per second on every master over those on one.
fn print_factors(rows: &[CeilingRun]) {
    println!();
    for load in Load::ALL {
        let of = |many: bool| {
            report::median(
                rows.iter()
                    .filter(|r| r.load == Some(load) && (r.ceiling.nodes > 1) == many)
                    .map(|r| r.ceiling.per_sec()),
            )
        };
        if let (Some(one), Some(all)) = (of(false), of(true)) {
            println!(
                "{}: all masters / one master = {:.2}x",
                load.label(),
                all / one
            );
        }
    }
}

/// `redis_version:7.0.15` of the first node, for the report.
async fn server_version(url: &str) -> String {
    let mut node = plain_connection(url).await.expect("connect to a node");
    let info: String = dlock::redis::cmd("INFO")
        .arg("server")
        .query_async(&mut node)
        .await
        .expect("INFO server");
    info.lines()
        .find(|l| l.starts_with("redis_version:"))
        .unwrap_or("redis_version:?")
        .trim()
        .to_owned()
}
