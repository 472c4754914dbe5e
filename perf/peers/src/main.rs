//! dlock against its peers, in one process on one redis-server: `rslock` (Redlock on one
//! server) and the `distributed-lock` crate's Redis backend, each as its README uses it.
//!
//! (`distributed-lock`'s Redis backend is its `distributed-lock-redis` crate, used directly.)
//!
//! `cargo run --release --manifest-path perf/peers/Cargo.toml` (starts its own redis-server
//! unless REDIS_URL is set; `-- --rounds 7 --samples 2000` for more). A crate of its own, so
//! the peers are not dev-dependencies of dlock (see its Cargo.toml).
//!
//! Every round runs each path sample by sample: a hot PING (for handoffs also a PING sent after
//! the same idle time as a parked waiter), then one run of each library in an order that
//! rotates, so the load of a shared machine, which drifts within seconds, falls on all of them
//! alike. Each run is followed by a PING that is not counted: dlock's call returns with its
//! release's reply still to come, and that reply must not land on the next library's clock
//! (before this, it made the peers' calls and the PING look slower).
//!
//! Paths:
//! * **cycle**: acquire + release of one key, uncontended, the release awaited; dlock twice:
//!   with its command connection driven on the caller's multi-thread runtime (what a client
//!   built there does), and through the client's own thread (a client built on a
//!   current-thread runtime), so the row pair is the cost of that thread hop;
//! * **attribute-style call**: one locked call with an empty body on a fresh key: dlock's
//!   `#[distributed_lock]` (returns once its release is written), the same with the release
//!   awaited (`acquire` + `release().await`, which is what the attribute did before), rslock's
//!   `using`, and distributed-lock's acquire + release;
//! * **handoff across two clients**: a holder in one client releases while a waiter of another
//!   client waits for the key; from the release issued to the waiter holding. dlock's waiter
//!   sleeps until the release's message; rslock's `acquire` retries with its default backoff
//!   (3 tries, a random 0-200 ms between); distributed-lock has no waiting acquire (its
//!   `acquire` tries once), so its waiter retries at once, which is its fastest possible
//!   handoff and loads Redis with a request per round trip.
//!
//! `--in-task` runs all of it (PINGs included) inside a spawned task, as a request handler or a
//! job runs, rather than in `main`'s `block_on`, whose every request reaches the connection's
//! driver task on a worker thread through a thread wake-up.
//!
//! Figures are p50/p99 in RTT of the hot PING (handoffs also in the idle PING's), each round's
//! line, then the median and range of the rounds' p50s, and dlock's ratio to the best peer.
//! Last, the cycle again with Redis's own time per cycle beside it (`INFO commandstats`
//! around each sample, see [`server_time`]): the gap to a peer split into Redis's part and
//! the rest.

// The examples' helpers (where Redis is, the PING round trip), shared rather than copied.
#[path = "../../../examples/support/mod.rs"]
mod support;

use std::future::Future;
use std::time::{Duration, Instant};

use clap::Parser;
use distributed_lock_core::traits::{DistributedLock, LockHandle, LockProvider};
use distributed_lock_redis::RedisLockProvider;
use dlock::redis::aio::MultiplexedConnection;
use dlock::{distributed_lock, LockClient, LockError};
use support::{percentile, redis_url};

#[derive(Parser, Debug)]
#[command(about = "dlock against rslock and distributed-lock, interleaved, in RTT of one run")]
struct Args {
    /// Rounds; each measures every path of every library once.
    #[arg(long, default_value_t = 5)]
    rounds: usize,
    /// Samples per path and library in a round (handoffs take a tenth as many: each waits for
    /// its waiter to park, and rslock's waiter backs off for up to 200 ms).
    #[arg(long, default_value_t = 1000)]
    samples: usize,
    /// Only the libraries whose row name starts with this (`dlock`, `rslock`,
    /// `distributed-lock`): to see one without the others' background work beside it.
    #[arg(long)]
    only: Option<String>,
    /// Run the measurements inside a spawned task, where a web handler or job runs, instead of
    /// in `main`'s `block_on` (which reaches every connection's driver task through another
    /// thread).
    #[arg(long)]
    in_task: bool,
}

/// How long a waiter is given to park before the holder releases (and the idle time of the
/// PING the handoffs are also divided by).
const PARK: Duration = Duration::from_millis(3);

const TTL: Duration = Duration::from_secs(30);

/// The libraries, each with its own clients (two, for handoffs).
struct Libs {
    dlock: [LockClient; 2],
    /// A client whose commands its own thread carries (see [`on_its_own_thread`]).
    dlock_own: LockClient,
    rslock: [rslock::LockManager; 2],
    dlk: [RedisLockProvider; 2],
}

#[distributed_lock(key = "peers:attr:{round}:{i}", client = locks, ttl = "30s", wait = "5s")]
async fn attributed(locks: &LockClient, round: usize, i: usize) -> Result<(), LockError> {
    Ok(())
}

/// One measured path of one library: its name and each round's samples.
struct Row {
    path: &'static str,
    lib: &'static str,
    /// Whether dlock's (ratios are dlock's over the best peer's).
    ours: bool,
    idle_unit: bool,
    /// Each round's p50 and p99 in hot-PING RTT, and for handoffs the p50 and p99 in RTT of
    /// the PING after the same idle time.
    p50: Vec<f64>,
    p99: Vec<f64>,
    idle_p50: Vec<f64>,
    idle_p99: Vec<f64>,
}

/// Times the whole of `f`.
async fn timed<Fut: Future<Output = ()>>(f: Fut) -> Duration {
    let t = Instant::now();
    f.await;
    t.elapsed()
}

/// One sample of one path of one library (`i`: the sample's number in its round).
async fn one(libs: &Libs, path: &str, lib: &str, round: usize, i: usize) -> Duration {
    let [d0, d1] = &libs.dlock;
    let [r0, r1] = &libs.rslock;
    let [p0, p1] = &libs.dlk;
    // Fresh keys for calls; 8 keys in turn for handoffs.
    let key = format!("peers:{path}:{lib}:{round}:{i}");
    let handoff_key = format!("peers:{path}:{lib}:{}", i % 8);
    match (path, lib) {
        ("cycle", "dlock") => {
            let lock = d0.lock("peers:cycle:dlock");
            timed(async {
                lock.acquire().await.unwrap().release().await.unwrap();
            })
            .await
        }
        ("cycle", "dlock, client's thread") => {
            let lock = libs.dlock_own.lock("peers:cycle:dlock-own");
            timed(async {
                lock.acquire().await.unwrap().release().await.unwrap();
            })
            .await
        }
        ("cycle", "rslock") => {
            timed(async {
                let l = r0.lock("peers:cycle:rslock", TTL).await.unwrap();
                r0.unlock(&l).await;
            })
            .await
        }
        ("cycle", "distributed-lock") => {
            let lock = p0.create_lock("peers:cycle");
            timed(async {
                let h = lock.acquire(None).await.unwrap();
                h.release().await.unwrap();
            })
            .await
        }
        ("call", "dlock") => timed(async { attributed(d0, round, i).await.unwrap() }).await,
        ("call", "dlock, release awaited") => {
            let lock = d0.lock(key);
            timed(async {
                let g = lock.acquire().await.unwrap();
                g.release().await.unwrap();
            })
            .await
        }
        ("call", "rslock") => {
            timed(async {
                r0.using(key.as_bytes(), TTL, async || ()).await.unwrap();
            })
            .await
        }
        ("call", "distributed-lock") => {
            let lock = p0.create_lock(&key);
            timed(async {
                let h = lock.acquire(None).await.unwrap();
                h.release().await.unwrap();
            })
            .await
        }
        ("handoff", "dlock") | ("handoff", "dlock fair") => {
            let (held, waiting) = if lib == "dlock fair" {
                (d0.fair_lock(&handoff_key), d1.fair_lock(&handoff_key))
            } else {
                (d0.lock(&handoff_key), d1.lock(&handoff_key))
            };
            let g = held.acquire().await.unwrap();
            let waiter = tokio::spawn(async move {
                let w = waiting.acquire().await.unwrap();
                let at = Instant::now();
                w.release().await.unwrap();
                at
            });
            tokio::time::sleep(PARK).await;
            let released = Instant::now();
            g.release().await.unwrap();
            waiter.await.unwrap().saturating_duration_since(released)
        }
        ("handoff", "rslock") => {
            let name = handoff_key;
            let waiting = r1.clone();
            let g = r0.lock(name.as_bytes(), TTL).await.unwrap();
            let waiter = tokio::spawn(async move {
                let w = waiting
                    .acquire_no_guard(name.as_bytes(), TTL)
                    .await
                    .unwrap();
                let at = Instant::now();
                waiting.unlock(&w).await;
                at
            });
            tokio::time::sleep(PARK).await;
            let released = Instant::now();
            r0.unlock(&g).await;
            waiter.await.unwrap().saturating_duration_since(released)
        }
        ("handoff", "distributed-lock") => {
            let (held, waiting) = (p0.create_lock(&handoff_key), p1.create_lock(&handoff_key));
            let g = held.acquire(None).await.unwrap();
            let waiter = tokio::spawn(async move {
                // Its acquire tries once: retry at once, for as long as it takes (bounded: the
                // holder releases within milliseconds).
                for _ in 0..1_000_000 {
                    if let Ok(w) = waiting.acquire(None).await {
                        let at = Instant::now();
                        w.release().await.unwrap();
                        return at;
                    }
                }
                panic!("distributed-lock never got the lock");
            });
            tokio::time::sleep(PARK).await;
            let released = Instant::now();
            g.release().await.unwrap();
            waiter.await.unwrap().saturating_duration_since(released)
        }
        _ => unreachable!("no path {path} for {lib}"),
    }
}

/// A client built on a current-thread runtime that is gone by the time it is used: its
/// command connections are driven by the client's own thread, so each request of a caller on
/// `main`'s runtime crosses to that thread and its reply crosses back (the hop the client makes
/// for callers it cannot drive connections on: a current-thread runtime, blocking code). The
/// `dlock` row's client, built on `main`'s multi-thread runtime, drives its command connections
/// there. Both rows in one run measure what the hop costs.
fn on_its_own_thread(url: &str) -> LockClient {
    let url = url.to_owned();
    std::thread::spawn(move || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a current-thread runtime")
            .block_on(LockClient::connect(&url))
            .expect("connect")
    })
    .join()
    .expect("the building thread")
}

/// One PING's round trip on `conn`, after `idle` of doing nothing.
async fn ping(conn: &mut MultiplexedConnection, idle: Duration) -> Duration {
    if !idle.is_zero() {
        tokio::time::sleep(idle).await;
    }
    let t = Instant::now();
    let _: String = dlock::redis::cmd("PING")
        .query_async(conn)
        .await
        .expect("PING");
    t.elapsed()
}

const PATHS: [(&str, &[&str]); 3] = [
    (
        "cycle",
        &[
            "dlock",
            "dlock, client's thread",
            "rslock",
            "distributed-lock",
        ],
    ),
    (
        "call",
        &[
            "dlock",
            "dlock, release awaited",
            "rslock",
            "distributed-lock",
        ],
    ),
    (
        "handoff",
        &["dlock", "dlock fair", "rslock", "distributed-lock"],
    ),
];

/// The libraries of a path that `--only` selects.
fn selected(impls: &[&'static str], only: &Option<String>) -> Vec<&'static str> {
    impls
        .iter()
        .copied()
        .filter(|lib| only.as_ref().is_none_or(|o| lib.starts_with(o.as_str())))
        .collect()
}

fn path_title(path: &str) -> &'static str {
    match path {
        "cycle" => "uncontended acquire + release",
        "call" => "attribute-style call, fresh key",
        _ => "handoff across two clients",
    }
}

#[tokio::main]
async fn main() {
    let args = Args::parse();
    let (url, _server) = redis_url();
    let libs = Libs {
        dlock: [
            LockClient::connect(&url).await.expect("connect"),
            LockClient::connect(&url).await.expect("connect"),
        ],
        dlock_own: on_its_own_thread(&url),
        rslock: [
            rslock::LockManager::new(vec![url.as_str()]),
            rslock::LockManager::new(vec![url.as_str()]),
        ],
        dlk: [
            RedisLockProvider::new(url.as_str()).await.expect("connect"),
            RedisLockProvider::new(url.as_str()).await.expect("connect"),
        ],
    };
    let conn = dlock::redis::Client::open(url.as_str())
        .expect("redis url")
        .get_multiplexed_async_connection()
        .await
        .expect("connect for PING");
    let (rounds, in_task) = (args.rounds, args.in_task);
    let run = measure(libs, conn, args);
    let (rows, server) = if in_task {
        tokio::spawn(run).await.expect("the measuring task")
    } else {
        run.await
    };
    summary(&rows, rounds);
    for line in server {
        println!("{line}");
    }
}

/// Every round of every path, printing each round's figures; the rows for the summary, and
/// the lines of the server-time section ([`server_time`]).
async fn measure(
    libs: Libs,
    mut conn: MultiplexedConnection,
    args: Args,
) -> (Vec<Row>, Vec<String>) {
    let mut rows: Vec<Row> = Vec::new();
    for (path, impls) in PATHS {
        for lib in selected(impls, &args.only) {
            rows.push(Row {
                path,
                lib,
                ours: lib.starts_with("dlock"),
                idle_unit: path == "handoff",
                p50: Vec::new(),
                p99: Vec::new(),
                idle_p50: Vec::new(),
                idle_p99: Vec::new(),
            });
        }
    }
    // Warm every connection and code path.
    for (path, impls) in PATHS {
        for lib in selected(impls, &args.only) {
            for i in 0..20 {
                one(&libs, path, lib, usize::MAX, i).await;
            }
        }
    }
    for round in 0..args.rounds {
        println!("round {round}:");
        for (path, impls) in PATHS {
            let impls = selected(impls, &args.only);
            let handoff = path == "handoff";
            let n = if handoff {
                (args.samples / 10).max(10)
            } else {
                args.samples
            };
            // Sample by sample: one PING (and for handoffs one after the waiter's idle time),
            // then one run of each library in an order that rotates, so the load of a shared
            // machine, which drifts within seconds, falls on all of them alike.
            let mut hot = Vec::with_capacity(n);
            let mut idle = Vec::with_capacity(n);
            let mut samples = vec![Vec::with_capacity(n); impls.len()];
            for i in 0..n {
                hot.push(ping(&mut conn, Duration::ZERO).await);
                if handoff {
                    idle.push(ping(&mut conn, PARK).await);
                }
                for k in 0..impls.len() {
                    let j = (k + i) % impls.len();
                    samples[j].push(one(&libs, path, impls[j], round, i).await);
                    // Uncounted: dlock's call returns with its release still in flight, and
                    // without this the next library's sample (or the next PING) waited behind
                    // it. Every library gets the same pause, so none is favoured.
                    ping(&mut conn, Duration::ZERO).await;
                }
            }
            let rtt = percentile(&mut hot, 0.5);
            let idle = if handoff {
                percentile(&mut idle, 0.5)
            } else {
                rtt
            };
            let idle_note = if handoff {
                format!(", after {PARK:?} idle {idle:.1?}")
            } else {
                String::new()
            };
            println!("  {} (PING {rtt:.1?}{idle_note}):", path_title(path));
            for (lib, mut s) in impls.iter().zip(samples) {
                let (p50, p99) = (percentile(&mut s, 0.5), percentile(&mut s, 0.99));
                let r = rows
                    .iter_mut()
                    .find(|r| r.path == path && r.lib == *lib)
                    .expect("a row per path and library");
                r.p50.push(p50.as_secs_f64() / rtt.as_secs_f64());
                r.p99.push(p99.as_secs_f64() / rtt.as_secs_f64());
                r.idle_p50.push(p50.as_secs_f64() / idle.as_secs_f64());
                r.idle_p99.push(p99.as_secs_f64() / idle.as_secs_f64());
                let idle_part = if handoff {
                    format!(
                        "; {:.2} / {:.2} idle-PING RTT",
                        r.idle_p50[round], r.idle_p99[round]
                    )
                } else {
                    String::new()
                };
                println!(
                    "    {lib:<24} p50 {p50:>9.1?} p99 {p99:>9.1?} = {:.2} / {:.2} RTT{idle_part}",
                    r.p50[round], r.p99[round],
                );
            }
        }
    }
    let server = server_time(&libs, &mut conn, &args).await;
    (rows, server)
}

/// Whether `lib` sends `command` itself, so that its `INFO commandstats` time counts once (a
/// script's time includes what it calls). A script's own `SET` is counted under `set` as well,
/// so `set` is the peers' (their acquire is a bare `SET NX PX`) and not dlock's (its scripts
/// call it).
fn sends_itself(lib: &str, command: &str) -> bool {
    const SCRIPTS: [&str; 6] = [
        "fcall",
        "fcall_ro",
        "evalsha",
        "evalsha_ro",
        "eval",
        "eval_ro",
    ];
    SCRIPTS.contains(&command) || (command == "set" && !lib.starts_with("dlock"))
}

/// The server's own time per uncontended cycle, from its counters, sample by sample: `INFO
/// commandstats` before and after each cycle, the `usec` of the commands the library sends
/// itself, with the libraries in an order that rotates, as in the rounds. Each sample's cycle
/// less its server time is the round trips and the client's work, so the gap between dlock's
/// cycle and a peer's splits into Redis's part and the rest (p50s, in the hot PING's RTT).
/// Nothing is reset, so a server given by `REDIS_URL` keeps its statistics; a server that
/// refuses `INFO` gets a line saying so. `distributed-lock`'s handle extends its lease on a
/// timer whose first tick is at once: that extend is in its figures.
async fn server_time(libs: &Libs, conn: &mut MultiplexedConnection, args: &Args) -> Vec<String> {
    let impls = selected(PATHS[0].1, &args.only);
    let n = args.samples;
    if impls.is_empty() || n == 0 {
        return Vec::new();
    }
    let mut hot = Vec::with_capacity(n);
    let mut server = vec![Vec::with_capacity(n); impls.len()];
    let mut cycle = vec![Vec::with_capacity(n); impls.len()];
    let mut rest = vec![Vec::with_capacity(n); impls.len()];
    const REFUSED: &str = "server time per cycle: skipped (INFO commandstats refused)";
    for i in 0..n {
        hot.push(ping(conn, Duration::ZERO).await);
        for k in 0..impls.len() {
            let j = (k + i) % impls.len();
            let lib = impls[j];
            let Some(before) = scripts_usec(conn, lib).await else {
                return vec![REFUSED.into()];
            };
            let took = one(libs, "cycle", lib, usize::MAX - 1, i)
                .await
                .as_secs_f64()
                * 1e6;
            let Some(after) = scripts_usec(conn, lib).await else {
                return vec![REFUSED.into()];
            };
            server[j].push(after - before);
            cycle[j].push(took);
            rest[j].push(took - (after - before));
        }
    }
    let rtt = percentile(&mut hot, 0.5).as_secs_f64() * 1e6;
    let mut lines = vec![format!(
        "server time per uncontended cycle ({n} cycles each, interleaved; INFO commandstats usec \
         of the commands each library sends itself, before and after each cycle; p50s in RTT of \
         the hot PING, {rtt:.1} us):"
    )];
    for (j, lib) in impls.iter().enumerate() {
        let mean = server[j].iter().sum::<f64>() / n as f64;
        lines.push(format!(
            "  {lib:<24} server {:>5.2} (mean {:>5.1} us)  cycle {:>5.2}  cycle less server {:>5.2}",
            median(&server[j]) / rtt,
            mean,
            median(&cycle[j]) / rtt,
            median(&rest[j]) / rtt,
        ));
    }
    lines
}

/// The `usec` so far of the commands `lib` sends itself ([`sends_itself`]); `None` when the
/// server refuses `INFO`.
async fn scripts_usec(conn: &mut MultiplexedConnection, lib: &str) -> Option<f64> {
    let stats: String = dlock::redis::cmd("INFO")
        .arg("commandstats")
        .query_async(conn)
        .await
        .ok()?;
    Some(
        commands_usec(&stats)
            .filter(|(command, _)| sends_itself(lib, command))
            .map(|(_, usec)| usec)
            .sum(),
    )
}

/// Each command's `usec` in an `INFO commandstats` reply (`cmdstat_<name>:calls=..,usec=..`).
fn commands_usec(stats: &str) -> impl Iterator<Item = (&str, f64)> {
    stats.lines().filter_map(|line| {
        let (command, fields) = line.strip_prefix("cmdstat_")?.split_once(':')?;
        let usec = fields.split(',').find_map(|f| f.strip_prefix("usec="))?;
        Some((command, usec.parse().ok()?))
    })
}

fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn summary(rows: &[Row], rounds: usize) {
    println!("\nover {rounds} rounds: median of the rounds' p50 [range], median p99; ratio = p50 / best peer's p50");
    for (path, _) in PATHS {
        let unit = if path == "handoff" {
            "idle-PING RTT"
        } else {
            "RTT"
        };
        println!("{} (in {unit}):", path_title(path));
        let of_path: Vec<&Row> = rows.iter().filter(|r| r.path == path).collect();
        let pick = |r: &Row| {
            if r.idle_unit {
                (r.idle_p50.clone(), r.idle_p99.clone())
            } else {
                (r.p50.clone(), r.p99.clone())
            }
        };
        let best_peer = of_path
            .iter()
            .filter(|r| !r.ours)
            .map(|r| median(&pick(r).0))
            .fold(f64::INFINITY, f64::min);
        for r in of_path {
            let (p50, p99) = pick(r);
            let lo = p50.iter().copied().fold(f64::INFINITY, f64::min);
            let hi = p50.iter().copied().fold(0.0, f64::max);
            let ratio = if r.ours && best_peer.is_finite() {
                format!("  ratio to the best peer {:.2}", median(&p50) / best_peer)
            } else {
                String::new()
            };
            let hot = if r.idle_unit {
                format!("  (hot-PING RTT: p50 {:.2})", median(&r.p50))
            } else {
                String::new()
            };
            println!(
                "  {:<24} p50 {:>8.2} [{lo:.2}-{hi:.2}]  p99 {:>8.2}{ratio}{hot}",
                r.lib,
                median(&p50),
                median(&p99)
            );
        }
    }
}
