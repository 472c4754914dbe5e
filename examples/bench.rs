//! The lock runtime's figures, each also as a ratio to a PING round trip measured in this run.
//!
//! `cargo run --release --example bench` (starts its own redis-server unless REDIS_URL is set).
//! Scenarios: uncontended acquire+release (async, and through `dlock::blocking`); handoff (release issued -> waiter holding) within one
//! client and across clients; 16 tasks on one key for 5 s; 10,000 waiters over 1,000 keys;
//! 10,000 held locks under the watchdog; renew calls per hold per lease for 1 and for 1,000
//! locks held with a 3 s ttl over 9 s (3 leases).
//!
//! `cargo run --release --example bench -- --cluster`: the same on a Redis Cluster, a temporary
//! local one of 3 masters unless REDIS_CLUSTER_URLS (comma-separated seed URLs) is set. A
//! figure about one key is divided by the PING of the master owning that key; one over many
//! keys by the median of the masters' PINGs (each line says which). Command counts are summed
//! over the masters.

#[path = "support/mod.rs"]
mod support;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Parser;
use dlock::redis::{self, aio::MultiplexedConnection};
use dlock::testing::RedisServer;
use dlock::{LockClient, DEFAULT_PREFIX};
use support::cluster::{plain_connection, Cluster};
use support::{fmt_rtt, percentile, ping_rtt, ping_rtt_after, redis_url, Db};

#[derive(Parser, Debug)]
#[command(
    about = "The lock runtime's figures, each as a ratio to a PING round trip of this run",
    long_about = "The lock runtime's figures, each as a ratio to a PING round trip of this run. \
                  Starts a temporary redis-server unless REDIS_URL is set."
)]
struct Args {
    /// Run on a Redis Cluster: a temporary local one of 3 masters unless --cluster-urls
    /// (REDIS_CLUSTER_URLS) names one. Figures about one key are divided by the PING of that
    /// key's master, figures over many keys by the median of the masters' PINGs.
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
}

/// A node whose commands are counted: the server, or one master.
struct Node {
    addr: String,
    admin: MultiplexedConnection,
    /// Median PING round trip, hot.
    rtt: Duration,
    /// Median PING round trip after 3 ms idle.
    idle_rtt: Duration,
}

impl Node {
    async fn measure(addr: String, url: &str) -> Node {
        Node {
            admin: plain_connection(url).await.expect("connect"),
            rtt: ping_rtt(url, 2000).await,
            idle_rtt: ping_rtt_after(url, 300, Duration::from_millis(3)).await,
            addr,
        }
    }
}

/// The round trips a figure is divided by, and, on a cluster, which node they are from.
struct Unit {
    rtt: Duration,
    idle_rtt: Duration,
    /// Appended to the figure's line; empty on one server, so that output is as it was.
    note: String,
}

/// The deployment under test: one server, or a cluster and its masters.
struct Setup {
    url: String,
    cluster: Option<Cluster>,
    nodes: Vec<Node>,
    _server: Option<RedisServer>,
}

impl Setup {
    async fn single() -> Setup {
        let (url, server) = redis_url();
        let addr = url.clone();
        let node = Node::measure(addr, &url).await;
        Setup {
            url,
            cluster: None,
            nodes: vec![node],
            _server: server,
        }
    }

    async fn cluster(seeds: Vec<String>) -> Setup {
        let cluster = Cluster::open(seeds, 0).await.unwrap_or_else(|e| {
            eprintln!("{e}");
            std::process::exit(2);
        });
        eprintln!("cluster: {} ({})", cluster.addrs(), cluster.origin);
        let mut nodes = Vec::new();
        for m in &cluster.masters {
            nodes.push(Node::measure(m.addr.clone(), &m.url).await);
        }
        Setup {
            url: cluster.seeds.join(","),
            cluster: Some(cluster),
            nodes,
            _server: None,
        }
    }

    fn print_rtts(&self) {
        if self.cluster.is_none() {
            let n = &self.nodes[0];
            println!(
                "PING RTT (median of 2000): {:?}; after 3 ms idle (median of 300): {:?}\n",
                n.rtt, n.idle_rtt
            );
            return;
        }
        println!("PING RTT per master (median of 2000; after 3 ms idle, median of 300):");
        for n in &self.nodes {
            println!("  {:<22} {:?}; {:?}", n.addr, n.rtt, n.idle_rtt);
        }
        let median = self.median_unit();
        println!(
            "  {:<22} {:?}; {:?}\n",
            "median of the masters", median.rtt, median.idle_rtt
        );
    }

    async fn client(&self) -> LockClient {
        match &self.cluster {
            Some(c) => c.lock_client().build().await.expect("connect"),
            None => LockClient::connect(&self.url).await.expect("connect"),
        }
    }

    /// A connection for the bench's own keys, routed to their master on a cluster.
    async fn db(&self) -> Db {
        match &self.cluster {
            Some(c) => c.db().await,
            None => Db::Single(plain_connection(&self.url).await.expect("connect")),
        }
    }

    /// The unit for figures about the lock `name` (default prefix): its master's PING.
    fn unit_for_lock(&self, name: &str) -> Unit {
        let Some(cluster) = &self.cluster else {
            return self.median_unit();
        };
        // A lock's keys are `<prefix>{<name>}...` (the names here need no escaping).
        let node = &self.nodes[cluster.master_of(&format!("{DEFAULT_PREFIX}{{{name}}}"))];
        Unit {
            rtt: node.rtt,
            idle_rtt: node.idle_rtt,
            note: format!("  [RTT of {}, the key's master]", node.addr),
        }
    }

    /// The unit for figures over keys on every master: the median of the masters' PINGs (on
    /// one server, its PING).
    fn median_unit(&self) -> Unit {
        let mut rtts: Vec<Duration> = self.nodes.iter().map(|n| n.rtt).collect();
        let mut idle: Vec<Duration> = self.nodes.iter().map(|n| n.idle_rtt).collect();
        let note = match self.cluster {
            Some(_) => format!("  [RTT: median of the {} masters' PING]", self.nodes.len()),
            None => String::new(),
        };
        Unit {
            rtt: percentile(&mut rtts, 0.5),
            idle_rtt: percentile(&mut idle, 0.5),
            note,
        }
    }

    /// `  [summed over 3 masters: 10/11/9]` for per-node counts; nothing on one server.
    fn per_node_note(&self, what: &str, counts: &[u64]) -> String {
        if self.cluster.is_none() {
            return String::new();
        }
        let each: Vec<String> = counts.iter().map(u64::to_string).collect();
        format!(
            "  [summed over {} masters; {what} per master {}]",
            counts.len(),
            each.join("/")
        )
    }

    async fn reset_stats(&self) {
        for n in &self.nodes {
            let _: () = redis::cmd("CONFIG")
                .arg("RESETSTAT")
                .query_async(&mut n.admin.clone())
                .await
                .unwrap();
        }
    }

    /// `INFO commandstats` of every node, for [`calls`].
    async fn commandstats(&self) -> Vec<String> {
        let mut all = Vec::new();
        for n in &self.nodes {
            all.push(commandstats(&mut n.admin.clone()).await);
        }
        all
    }

    /// Connections open on every node.
    async fn connected_clients(&self) -> usize {
        let mut sum = 0;
        for n in &self.nodes {
            sum += connected_clients(&mut n.admin.clone()).await;
        }
        sum
    }
}

#[tokio::main]
async fn main() {
    let args = Args::parse();
    let setup = if args.cluster {
        Setup::cluster(args.cluster_urls).await
    } else {
        Setup::single().await
    };
    setup.print_rtts();
    let client = setup.client().await;

    uncontended(&client, &setup).await;
    uncontended_blocking(&client, &setup).await;
    handoff(&client, &client, "same client (local queue)", &setup, false).await;
    let other = setup.client().await;
    handoff(&client, &other, "two clients (pub/sub)", &setup, false).await;
    handoff(&client, &other, "two clients, fair (grant)", &setup, true).await;
    contention(&client, &setup).await;
    many_waiters(&setup).await;
    watchdog(&setup).await;
    renew_rate(&setup, 1, "1 held lock, ttl 3 s").await;
    renew_rate(&setup, 1000, "1,000 held locks, ttl 3 s").await;
}

async fn uncontended(client: &LockClient, setup: &Setup) {
    let name = "bench:uncontended";
    let unit = setup.unit_for_lock(name);
    let lock = client.lock(name);
    for _ in 0..200 {
        lock.acquire().await.unwrap().release().await.unwrap();
    }
    let mut samples = Vec::new();
    for _ in 0..3000 {
        let t = Instant::now();
        lock.acquire().await.unwrap().release().await.unwrap();
        samples.push(t.elapsed());
    }
    println!(
        "uncontended acquire+release  p50 {}  p99 {}{}",
        fmt_rtt(percentile(&mut samples, 0.5), unit.rtt),
        fmt_rtt(percentile(&mut samples, 0.99), unit.rtt),
        unit.note
    );
}

/// The same cycle through `dlock::blocking` from a plain thread: each call crosses to the
/// client's thread and back, the price of not having a runtime.
async fn uncontended_blocking(client: &LockClient, setup: &Setup) {
    let name = "bench:uncontended:blocking";
    let unit = setup.unit_for_lock(name);
    let locks = dlock::blocking::LockClient::from(client.clone());
    let mut samples = tokio::task::spawn_blocking(move || {
        let lock = locks.lock(name);
        for _ in 0..200 {
            lock.acquire().unwrap().release().unwrap();
        }
        let mut samples = Vec::new();
        for _ in 0..3000 {
            let t = Instant::now();
            lock.acquire().unwrap().release().unwrap();
            samples.push(t.elapsed());
        }
        samples
    })
    .await
    .unwrap();
    println!(
        "uncontended, blocking API    p50 {}  p99 {}{}",
        fmt_rtt(percentile(&mut samples, 0.5), unit.rtt),
        fmt_rtt(percentile(&mut samples, 0.99), unit.rtt),
        unit.note
    );
}

/// Holder in `a`, waiter in `b`: time from the holder issuing release to the waiter holding.
/// Over 8 keys, so on a cluster over every master: divided by the median of their PINGs.
/// `fair`: the fair lock, whose release hands the lock to the waiter with its message.
async fn handoff(a: &LockClient, b: &LockClient, label: &str, setup: &Setup, fair: bool) {
    let lock_of = |c: &LockClient, name: &str| {
        if fair {
            c.fair_lock(name)
        } else {
            c.lock(name)
        }
    };
    let unit = setup.median_unit();
    let mut samples = Vec::new();
    for i in 0..500 {
        let name = format!("bench:handoff:{}", i % 8);
        let guard = lock_of(a, &name).acquire().await.unwrap();
        let waiter_lock = lock_of(b, &name);
        let waiter = tokio::spawn(async move {
            let g = waiter_lock.acquire().await.unwrap();
            let at = Instant::now();
            g.release().await.unwrap();
            at
        });
        // Give the waiter time to park (subscribe + retry): this is a benchmark, not a test.
        tokio::time::sleep(Duration::from_millis(3)).await;
        let released_at = Instant::now();
        guard.release().await.unwrap();
        let held_at = waiter.await.unwrap();
        samples.push(held_at.saturating_duration_since(released_at));
    }
    let p50 = percentile(&mut samples, 0.5);
    // A cluster's bus delays some messages by tens of milliseconds (see
    // `perf/cluster-bus/`): too few to move the p99 of 500, so they are counted.
    let slow = samples
        .iter()
        .filter(|d| **d > Duration::from_millis(10))
        .count();
    println!(
        "handoff, {label:<26} p50 {}  p99 {}  max {}, {slow} of {} over 10 ms  (p50 = {:.2} idle-PING RTT){}",
        fmt_rtt(p50, unit.rtt),
        fmt_rtt(percentile(&mut samples, 0.99), unit.rtt),
        fmt_rtt(percentile(&mut samples, 1.0), unit.rtt),
        samples.len(),
        p50.as_secs_f64() / unit.idle_rtt.as_secs_f64(),
        unit.note
    );
}

/// The lock of [`contention`], and its counter: the counter shares the lock's hash tag, so on
/// a cluster both live on one master and an op's round trips all go to that node.
const CONTENDED: &str = "bench:contended";
const COUNTER: &str = "{bench:contended}:counter";

async fn contention(client: &LockClient, setup: &Setup) {
    let tasks = 16;
    let run_for = Duration::from_secs(5);
    let unit = setup.unit_for_lock(CONTENDED);
    let mut admin = setup.db().await;
    let _: () = redis::cmd("SET")
        .arg(COUNTER)
        .arg(0)
        .query_async(&mut admin)
        .await
        .unwrap();
    // One connection per task, as separate workers would have; opened before the clock starts.
    let mut conns = Vec::with_capacity(tasks);
    for _ in 0..tasks {
        conns.push(setup.db().await);
    }
    let done = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let handles: Vec<_> = conns
        .into_iter()
        .map(|mut conn| {
            let client = client.clone();
            let done = done.clone();
            tokio::spawn(async move {
                let lock = client.lock(CONTENDED).wait(Duration::from_secs(30));
                let mut mine = 0u64;
                while start.elapsed() < run_for {
                    let g = lock.acquire().await.unwrap();
                    let n: u64 = redis::cmd("GET")
                        .arg(COUNTER)
                        .query_async(&mut conn)
                        .await
                        .unwrap();
                    let _: () = redis::cmd("SET")
                        .arg(COUNTER)
                        .arg(n + 1)
                        .query_async(&mut conn)
                        .await
                        .unwrap();
                    g.release().await.unwrap();
                    mine += 1;
                }
                done.fetch_add(mine, Ordering::Relaxed);
                mine
            })
        })
        .collect();
    let mut per_task = Vec::new();
    for h in handles {
        per_task.push(h.await.unwrap());
    }
    let elapsed = start.elapsed();
    let total = done.load(Ordering::Relaxed);
    let counter: u64 = redis::cmd("GET")
        .arg(COUNTER)
        .query_async(&mut admin)
        .await
        .unwrap();
    let mean = total as f64 / tasks as f64;
    let per_op = elapsed / total.max(1) as u32;
    println!(
        "16 tasks, one key, 5 s       {:.0} ops/s, {} per op, lost updates {}, share min {:.2} / max {:.2} of mean{}",
        total as f64 / elapsed.as_secs_f64(),
        fmt_rtt(per_op, unit.rtt),
        total - counter,
        *per_task.iter().min().unwrap() as f64 / mean,
        *per_task.iter().max().unwrap() as f64 / mean,
        unit.note
    );
}

async fn connected_clients(admin: &mut MultiplexedConnection) -> usize {
    let list: String = redis::cmd("CLIENT")
        .arg("LIST")
        .query_async(admin)
        .await
        .unwrap();
    list.lines().count()
}

async fn many_waiters(setup: &Setup) {
    let unit = setup.median_unit();
    let holder = setup.client().await;
    let mut held = Vec::new();
    for k in 0..1000 {
        held.push(
            holder
                .lock(format!("bench:many:{k}"))
                .acquire()
                .await
                .unwrap(),
        );
    }
    let before = setup.connected_clients().await;
    let waiters = setup.client().await;
    let (parked_tx, mut parked_rx) = tokio::sync::mpsc::unbounded_channel::<()>();
    let tasks: Vec<_> = (0..10_000)
        .map(|i| {
            let lock = waiters
                .lock(format!("bench:many:{}", i % 1000))
                .wait(Duration::from_secs(120));
            let parked_tx = parked_tx.clone();
            tokio::spawn(async move {
                let _ = parked_tx.send(());
                lock.acquire().await.unwrap().release().await.unwrap();
            })
        })
        .collect();
    for _ in 0..10_000 {
        parked_rx.recv().await;
    }
    // Let the heads of the local queues subscribe and park on Redis.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let during = setup.connected_clients().await;
    let start = Instant::now();
    for g in held {
        g.release().await.unwrap();
    }
    for t in tasks {
        t.await.unwrap();
    }
    let all_held = start.elapsed();
    let expected = match setup.cluster {
        // One cluster connection holds a socket to each master; waiters listen on the master
        // of their key, one pub/sub connection per master, beside the one that watches a node.
        Some(_) => format!(
            "summed over the masters: pool 1 cluster connection = {n} sockets, + subscriber 1, \
             + 1 per master with waiters = {n}",
            n = setup.nodes.len()
        ),
        // On a multi-thread runtime the client's own thread drives one more (see
        // `LockClientBuilder::connections`).
        None => "pool 1 + subscriber 1 + 1 driven by the client's thread".to_owned(),
    };
    println!(
        "10,000 waiters / 1,000 keys  connections of the waiting client {} ({expected}), all held in {:?} ({:.0} RTT, {:.2} RTT per waiter){}",
        during - before,
        all_held,
        all_held.as_secs_f64() / unit.rtt.as_secs_f64(),
        all_held.as_secs_f64() / unit.rtt.as_secs_f64() / 10_000.0,
        unit.note
    );
}

async fn watchdog(setup: &Setup) {
    let client = setup.client().await;
    let ttl = Duration::from_secs(3);
    let mut held = Vec::new();
    for k in 0..10_000 {
        held.push(
            client
                .lock(format!("bench:wd:{k}"))
                .ttl(ttl)
                .acquire()
                .await
                .unwrap(),
        );
    }
    setup.reset_stats().await;
    let window = Duration::from_secs(4);
    tokio::time::sleep(window).await;
    let stats = setup.commandstats().await;
    let per_node: Vec<u64> = stats.iter().map(|s| script_calls(s)).collect();
    let scripts: u64 = per_node.iter().sum();
    let renewed: u64 = stats.iter().map(|s| calls(s, "pexpire")).sum();
    let ticks = renewed as f64 / 10_000.0;
    let lost = held.iter().filter(|g| g.is_lost()).count();
    // What a tick should cost, next to what it did: on a cluster the watchdog means to send one
    // call per master per 500 of its keys, the masters' calls side by side.
    let design = match setup.cluster {
        Some(_) => "by design 1 call per master per 500 keys, sent together".to_owned(),
        None => format!(
            "sent together: 1 round trip per tick = {:.3} per 100 locks",
            100.0 / 10_000.0
        ),
    };
    println!(
        "10,000 held locks, ttl 3 s   {} renewals in {:?} = {:.1} ticks; {} script calls ({:.1} per tick, {design}); lost {}{}",
        renewed,
        window,
        ticks,
        scripts,
        scripts as f64 / ticks.max(1.0),
        lost,
        setup.per_node_note("script calls", &per_node)
    );
    for g in held {
        g.release().await.unwrap();
    }
}

/// `INFO commandstats`, for [`calls`].
async fn commandstats(admin: &mut MultiplexedConnection) -> String {
    redis::cmd("INFO")
        .arg("commandstats")
        .query_async(admin)
        .await
        .unwrap()
}

/// How many times Redis ran `cmd` (lower case) since its stats were reset, commands called by
/// scripts included.
fn calls(stats: &str, cmd: &str) -> u64 {
    stats
        .lines()
        .find(|l| l.starts_with(&format!("cmdstat_{cmd}:")))
        .and_then(|l| l.split("calls=").nth(1))
        .and_then(|s| s.split(',').next())
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

/// Script calls (FCALL; EVALSHA, and EVAL after a NOSCRIPT or a missing library) Redis ran.
fn script_calls(stats: &str) -> u64 {
    calls(stats, "fcall") + calls(stats, "evalsha") + calls(stats, "eval")
}

/// `n` locks held with a 3 s ttl: renew script calls and renewals counted over 3 leases.
///
/// Two figures, because the watchdog batches: every hold is renewed at a third of its lease, so
/// *renewals per hold per lease* (PEXPIREs run by the renew script, per hold) is ~3 whatever `n`
/// is; the holds due within a twelfth of their lease share one tick, sent as one script call per
/// 500 keys, so *script calls* per lease is ~3 per 500 holds, and per hold it is ~3 for a lone
/// lock but far below 3 for 1,000 (~0.006). The first is the renewal rate the lease relies on,
/// the second what it costs Redis. On a cluster the watchdog is designed to send one call per
/// master per 500 of its keys, so 1,000 holds over 3 masters should cost ~9 calls per lease.
async fn renew_rate(setup: &Setup, n: usize, label: &str) {
    // Its own client, so its watchdog renews these holds and nothing else.
    let client = setup.client().await;
    let ttl = Duration::from_secs(3);
    let leases = 3;
    let mut held = Vec::with_capacity(n);
    for k in 0..n {
        held.push(
            client
                .lock(format!("bench:renew:{n}:{k}"))
                .ttl(ttl)
                .acquire()
                .await
                .unwrap(),
        );
    }
    // The window opens half a renewal period after the acquires and lasts whole leases, so its
    // edges fall between the watchdog's ticks, and it holds none of our acquires or releases:
    // every script call in it is a renewal (nothing else runs meanwhile).
    tokio::time::sleep(ttl / 6).await;
    let before = setup.commandstats().await;
    let window = ttl * leases;
    tokio::time::sleep(window).await;
    let after = setup.commandstats().await;
    let per_node: Vec<u64> = before
        .iter()
        .zip(&after)
        .map(|(b, a)| script_calls(a) - script_calls(b))
        .collect();
    let scripts: u64 = per_node.iter().sum();
    let renewals: u64 = before
        .iter()
        .zip(&after)
        .map(|(b, a)| calls(a, "pexpire") - calls(b, "pexpire"))
        .sum();
    let lost = held.iter().filter(|g| g.is_lost()).count();
    for g in held {
        g.release().await.unwrap();
    }
    let per_lease = scripts as f64 / f64::from(leases);
    println!(
        "{label:<29}{scripts} renew script calls in {window:?}: {per_lease:.2} per lease, {:.3} per hold per lease; {renewals} renewals: {:.2} per hold per lease; lost {lost}{}",
        per_lease / n as f64,
        renewals as f64 / f64::from(leases) / n as f64,
        setup.per_node_note("renew script calls", &per_node)
    );
}
