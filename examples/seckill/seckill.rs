//! Flash sale ("seckill"): 10,000 buyers race for 1,000 units of one hot item, five ways.
//!
//! ```sh
//! cargo run --release --example seckill               # starts a temporary redis-server
//! cargo run --release --example seckill -- --help     # buyers, units, segments, ...
//! REDIS_URL=redis://127.0.0.1:6379 cargo run --release --example seckill
//! cargo run --release --example seckill -- --cluster  # starts a temporary 3-master cluster
//! REDIS_CLUSTER_URLS=redis://10.0.0.1:7000,redis://10.0.0.2:7000 \
//!     cargo run --release --example seckill -- --cluster
//! # the stock in a PostgreSQL table and the locks in dlock's PostgreSQL store (starts a
//! # temporary PostgreSQL server unless PG_URL is set)
//! cargo run --release --features seckill/postgres --example seckill -- --store postgres
//! # the stock in ZooKeeper nodes and the locks in dlock's ZooKeeper store (starts a temporary
//! # ZooKeeper server unless ZK_URL is set)
//! cargo run --release --features seckill/zookeeper --example seckill -- --store zookeeper
//! ```
//!
//! (a) no lock: read the stock, check it, write it back: the code many tutorials start from.
//! (b) the same code inside `#[distributed_lock(key = "seckill:{item}")]`: correct, and every
//!     buyer of the item queues for one key on one Redis node.
//! (c) the stock in 16 keys with one `#[distributed_lock]` each: buyers queue per segment.
//! (d) `dlock::SegmentedStock`: 16 segments on distinct cluster slots, one atomic script per
//!     take, idempotent per order id, no lock to wait for.
//! (e) the stock in one key, sold by a Lua script that checks and decrements it: where every
//!     seckill article starts. On one server it is the honest baseline for (d) (both are one
//!     atomic script per buyer); on a cluster all of it lands on one master.
//!
//! With `--store postgres` the stock is a row of a PostgreSQL table and (a), (b) and (c) are the
//! same code over SELECT and UPDATE, the locks kept in PostgreSQL; (d) and (e) are Redis's and
//! are left out, and
//! (f) `UPDATE stock SET units = units - 1 WHERE item = $1 AND units > 0`: the check and the
//!     decrement in one statement, under PostgreSQL's own row lock, no distributed lock: what a
//!     PostgreSQL user writes first, and the baseline a lock kept in the same server has to
//!     justify itself against.
//!
//! With `--store zookeeper` the stock is a node's data and (a), (b) and (c) are the same code
//! over reads and writes of nodes, the locks Curator's mutex recipe in the same ensemble; and
//! (g) a read of the node with its version, then a write of the decrement only if the version
//!     is unchanged, read again when another buyer wrote first: ZooKeeper's own compare-and-
//!     set, what a ZooKeeper user writes without a lock.
//!
//! Every strategy runs several rounds (`--rounds`), in an order that rotates from round to
//! round, each round on a fresh stock; a line per round, then a table of the rounds' median and
//! lowest-highest of two rates: sold/s (units sold per second until the stock is gone) and
//! answers/s (buyers answered per second, "sold out" refusals included), with latency,
//! oversold and stock stranded while buyers were refused. Exits non-zero if a locked strategy
//! oversells, strands stock, fails or its books do not balance in any round. With `--cluster`,
//! a second table gives the commands each master served during each strategy.

#[path = "../support/mod.rs"]
mod support;

#[cfg(feature = "postgres")]
#[path = "pg_sale.rs"]
mod pg_sale;
#[cfg(feature = "postgres")]
#[path = "pg_stock.rs"]
mod pg_stock;
#[cfg(feature = "postgres")]
#[path = "pg_strategies.rs"]
mod pg_strategies;
#[path = "report.rs"]
mod report;
#[path = "rounds.rs"]
mod rounds;
#[path = "run.rs"]
mod run;
#[path = "strategies.rs"]
mod strategies;
#[cfg(feature = "zookeeper")]
#[path = "zk_sale.rs"]
mod zk_sale;
#[cfg(feature = "zookeeper")]
#[path = "zk_stock.rs"]
mod zk_stock;
#[cfg(feature = "zookeeper")]
#[path = "zk_strategies.rs"]
mod zk_strategies;

use std::future::Future;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use clap::{Parser, ValueEnum};
use dlock::redis::aio::MultiplexedConnection;
use dlock::testing::RedisServer;
use dlock::{LockClient, LockClientBuilder, SegmentedStock};

use report::{thousands, Row, Runs};
use run::Stats;
use strategies::Shop;
use support::cluster::{plain_connection, Cluster, Meter};
use support::Db;

#[derive(Parser, Debug)]
#[command(
    about = "Flash sale: N buyers race for one hot item under five strategies (four on PostgreSQL or ZooKeeper)"
)]
struct Args {
    /// Buyers, each trying to buy one unit once.
    #[arg(long, default_value_t = 10_000)]
    buyers: usize,
    /// Units of the item on sale.
    #[arg(long, default_value_t = 1_000)]
    units: u64,
    /// Segments for strategies (c) and (d).
    #[arg(long, default_value_t = 16)]
    segments: u32,
    /// Rounds of every strategy (the table gives their median and range). Default: 9 on Redis
    /// (one server or a cluster), 5 on PostgreSQL: 30 to 75 s on a heavily loaded 2-core VM;
    /// 3 on ZooKeeper: about 5 minutes on a quiet one.
    #[arg(long)]
    rounds: Option<usize>,
    /// Buyers in flight at once (a service's concurrency limit).
    #[arg(long, default_value_t = 256)]
    in_flight: usize,
    /// Which strategies to run: (a) no lock, (b) one lock per item, (c) one lock per segment,
    /// (d) SegmentedStock and (e) a Lua check-and-decrement of one key (Redis only), (f) one
    /// UPDATE ... WHERE units > 0 (PostgreSQL only), (g) a versioned write retried (ZooKeeper
    /// only). Default: every one the store offers.
    #[arg(long, value_enum, value_delimiter = ',')]
    only: Vec<Strategy>,
    /// Where the stock and the locks live: redis, postgres (needs `--features seckill/postgres`)
    /// or zookeeper (needs `--features seckill/zookeeper`).
    #[arg(long, value_enum, default_value = "redis")]
    store: Store,
    /// With --store postgres: the PostgreSQL to use (stock table `seckill_stock`, dlock's schema
    /// `dlock`); unset: start a temporary PostgreSQL server for this run.
    #[arg(long, env = "PG_URL", hide_env_values = true)]
    pg_url: Option<String>,
    /// With --store zookeeper: the ensemble to use (`zk://host:port[,host:port][/chroot]`; stock
    /// nodes under `/seckill-<run>stock`); unset: start a temporary ZooKeeper server for this run.
    #[arg(long, env = "ZK_URL", hide_env_values = true)]
    zk_url: Option<String>,
    /// Redis to use; unset: start a temporary redis-server for this run. Ignored with
    /// --cluster.
    #[arg(long, env = "REDIS_URL", hide_env_values = true)]
    redis_url: Option<String>,
    /// Run on a Redis Cluster instead of one server, and also print the commands each master
    /// served during each strategy. Starts a temporary local cluster of 3 masters unless
    /// --cluster-urls (REDIS_CLUSTER_URLS) names one.
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
    /// With --cluster and no seed URLs: replicas per master of the temporary cluster. They
    /// receive every write, so they cost the masters some throughput.
    #[arg(long, default_value_t = 0)]
    replicas: usize,
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum Strategy {
    A,
    B,
    C,
    D,
    E,
    F,
    G,
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum Store {
    Redis,
    Postgres,
    Zookeeper,
}

impl Args {
    /// `--rounds`, or the store's default: measured rounds took 3 to 5 s on Redis (one server
    /// or a cluster) and 6 to 10 s on PostgreSQL on a heavily loaded 2-core VM.
    fn rounds(&self) -> usize {
        self.rounds.unwrap_or(match self.store {
            Store::Postgres => 5,
            // Its rounds take 90-100 s on a quiet 2-core VM: (b) hands one lock over ~190
            // times a second, and (g)'s lost writes cost the ensemble as much as won ones.
            Store::Zookeeper => 3,
            Store::Redis => 9,
        })
    }

    /// The store's strategies that run, in table order.
    fn strategies(&self, offered: &[Strategy]) -> Vec<Strategy> {
        offered.iter().copied().filter(|s| self.runs(*s)).collect()
    }

    /// Whether `strategy` is among the ones to run (all of the store's when none are named).
    fn runs(&self, strategy: Strategy) -> bool {
        self.only.is_empty() || self.only.contains(&strategy)
    }

    /// Refuses a strategy or a flag the chosen store has no meaning for.
    fn check_store(&self) -> Result<(), String> {
        let named = |s: Strategy| self.only.contains(&s);
        match self.store {
            Store::Redis | Store::Zookeeper if named(Strategy::F) => {
                Err("(f) is the PostgreSQL UPDATE: run it with --store postgres".into())
            }
            Store::Redis | Store::Postgres if named(Strategy::G) => {
                Err("(g) is ZooKeeper's versioned write: run it with --store zookeeper".into())
            }
            Store::Zookeeper if named(Strategy::D) || named(Strategy::E) => Err(
                "(d) SegmentedStock and (e) the Lua script are Redis-only: not with --store zookeeper"
                    .into(),
            ),
            Store::Zookeeper if self.cluster => {
                Err("--cluster is a Redis deployment: not with --store zookeeper".into())
            }
            Store::Postgres if named(Strategy::D) || named(Strategy::E) => Err(
                "(d) SegmentedStock and (e) the Lua script are Redis-only: not with --store postgres"
                    .into(),
            ),
            Store::Postgres if self.cluster => {
                Err("--cluster is a Redis deployment: not with --store postgres".into())
            }
            _ => Ok(()),
        }
    }
}

const ITEM: &str = "hot-item";

#[tokio::main]
async fn main() {
    let args = Args::parse();
    // The exit code comes back out of `sale` so that its temporary redis-server is dropped
    // (killed) first: `process::exit` runs no destructors. Ctrl-C drops `sale` the same way.
    let code = tokio::select! {
        code = sale(&args) => code,
        _ = tokio::signal::ctrl_c() => {
            eprintln!("interrupted");
            130
        }
    };
    std::process::exit(code);
}

/// The Redis this run uses. Temporary servers live as long as this does.
struct Deployment {
    /// Where the header line says the run is.
    describe: String,
    /// The PING round trip the report quotes: the server's, or the median of the masters'.
    rtt: Duration,
    /// Plain connections to every node holding keys (the server, or each master), to delete
    /// this run's keys from at the end.
    nodes: Vec<MultiplexedConnection>,
    /// Counts commands per master (a cluster), or nothing (one server).
    meter: Meter,
    /// The masters' addresses, for the per-master table; empty on one server.
    masters: Vec<String>,
    _server: Option<RedisServer>,
    _cluster: Option<Cluster>,
}

async fn sale(args: &Args) -> i32 {
    if args.buyers == 0 || args.units == 0 || args.in_flight == 0 || args.rounds() == 0 {
        eprintln!("--buyers, --units, --in-flight and --rounds must be at least 1");
        return 2;
    }
    if !(1..=dlock::stock::MAX_SEGMENTS).contains(&args.segments) {
        eprintln!("--segments must be 1 to {}", dlock::stock::MAX_SEGMENTS);
        return 2;
    }
    if let Err(e) = args.check_store() {
        eprintln!("{e}");
        return 2;
    }
    // Every key of this run under one prefix: a shared Redis keeps runs apart, and cleanup
    // is one SCAN per node. (On PostgreSQL: every lock name and stock row.)
    let prefix = format!("seckill-{:08x}:", rand_u32());
    if args.store == Store::Postgres {
        #[cfg(feature = "postgres")]
        return pg_sale::sale(args, &prefix).await;
        #[cfg(not(feature = "postgres"))]
        {
            eprintln!("--store postgres needs the demo built with PostgreSQL: cargo run --release --features seckill/postgres --example seckill -- --store postgres");
            return 2;
        }
    }
    if args.store == Store::Zookeeper {
        #[cfg(feature = "zookeeper")]
        return zk_sale::sale(args, &prefix).await;
        #[cfg(not(feature = "zookeeper"))]
        {
            eprintln!("--store zookeeper needs the demo built with ZooKeeper: cargo run --release --features seckill/zookeeper --example seckill -- --store zookeeper");
            return 2;
        }
    }
    let opened = if args.cluster {
        open_cluster(args, &prefix).await
    } else {
        open_server(args, &prefix).await
    };
    let (shop, redis) = match opened {
        Ok(opened) => opened,
        Err(e) => {
            eprintln!("{e}");
            return 2;
        }
    };

    println!(
        "seckill: {} buyers, {} units of one item, {} in flight, {} rounds; {}",
        thousands(args.buyers as u64),
        thousands(args.units),
        args.in_flight,
        args.rounds(),
        redis.describe
    );

    let strategies = args.strategies(&[
        Strategy::A,
        Strategy::B,
        Strategy::C,
        Strategy::D,
        Strategy::E,
    ]);
    let (shop_ref, meter) = (&shop, &redis.meter);
    let runs = rounds::run(&strategies, args.rounds(), move |strategy| {
        run_strategy(strategy, shop_ref, meter, args)
    })
    .await;
    println!();
    report::print(&runs, args.units, redis.rtt, "PING");
    if !redis.masters.is_empty() {
        println!();
        report::print_per_master(&runs, &redis.masters);
    }

    cleanup(&shop.prefix, &redis.nodes).await;
    exit_code(&runs)
}

/// 1 (after naming them) if a strategy that claims to be correct oversold, stranded stock,
/// failed, or its books do not balance in any round; else 0.
fn exit_code(runs: &[Runs]) -> i32 {
    let failed: Vec<String> = runs
        .iter()
        .flat_map(|r| {
            r.failed_rounds()
                .into_iter()
                .map(move |(round, p)| format!("{} round {round}: {}", r.label, p.join(", ")))
        })
        .collect();
    if failed.is_empty() {
        0
    } else {
        eprintln!("\nFAILED: {}", failed.join("; "));
        1
    }
}

/// One server: `--redis-url` (`REDIS_URL`), or a temporary redis-server.
async fn open_server(args: &Args, prefix: &str) -> Result<(Shop, Deployment), String> {
    let (url, server, origin) = match &args.redis_url {
        Some(url) => (url.clone(), None, "REDIS_URL"),
        None => match RedisServer::start() {
            Ok(server) => (server.url(), Some(server), "temporary redis-server"),
            Err(e) => {
                return Err(format!(
                    "starting a temporary redis-server failed ({e}); set REDIS_URL"
                ))
            }
        },
    };
    let locks = build(LockClient::builder(url.as_str()), prefix).await?;
    let db = plain_connection(&url)
        .await
        .expect("connect (the lock client did)");
    let rtt = support::ping_rtt(&url, 2000).await;
    let shop = Shop {
        locks,
        db: Db::Single(db.clone()),
        prefix: prefix.to_owned(),
    };
    let redis = Deployment {
        describe: format!(
            "redis {url} ({origin}); PING round trip {}",
            report::latency(rtt)
        ),
        rtt,
        nodes: vec![db],
        meter: Meter::none(),
        masters: Vec::new(),
        _server: server,
        _cluster: None,
    };
    Ok((shop, redis))
}

/// A cluster: `--cluster-urls` (`REDIS_CLUSTER_URLS`), or a temporary local one.
async fn open_cluster(args: &Args, prefix: &str) -> Result<(Shop, Deployment), String> {
    let cluster = Cluster::open(args.cluster_urls.clone(), args.replicas).await?;
    let locks = build(cluster.lock_client(), prefix).await?;
    let mut nodes = Vec::new();
    let mut rtts = Vec::new();
    for m in &cluster.masters {
        let conn = plain_connection(&m.url).await;
        nodes.push(conn.map_err(|e| format!("{}: {e}", m.addr))?);
        rtts.push(support::ping_rtt(&m.url, 2000).await);
    }
    let each: Vec<String> = rtts.iter().map(|d| report::latency(*d)).collect();
    let rtt = support::percentile(&mut rtts, 0.5);
    let shop = Shop {
        locks,
        db: cluster.db().await,
        prefix: prefix.to_owned(),
    };
    let redis = Deployment {
        describe: format!(
            "redis cluster {} ({}); PING round trip {} (median of the masters: {})",
            cluster.addrs(),
            cluster.origin,
            report::latency(rtt),
            each.join(", ")
        ),
        rtt,
        nodes,
        meter: Meter::new(&cluster.masters).await,
        masters: cluster.masters.iter().map(|m| m.addr.clone()).collect(),
        _server: None,
        _cluster: Some(cluster),
    };
    Ok((shop, redis))
}

/// The lock client, all of its keys under this run's prefix.
/// A temporary server for `--store postgres` or `zookeeper`, started off the runtime's worker
/// threads (the harness blocks while it starts); the error names the store and `env`, the
/// variable that names a server to use instead.
#[cfg(any(feature = "postgres", feature = "zookeeper"))]
async fn temporary<S: Send + 'static>(
    start: fn() -> std::io::Result<S>,
    store: &str,
    env: &str,
) -> Result<S, String> {
    match tokio::task::spawn_blocking(start).await {
        Ok(Ok(server)) => Ok(server),
        Ok(Err(e)) => Err(format!(
            "starting a temporary {store} server failed ({e}); set {env}"
        )),
        Err(e) => Err(format!("starting a temporary {store} server failed ({e})")),
    }
}

async fn build(builder: LockClientBuilder, prefix: &str) -> Result<LockClient, String> {
    builder
        .key_prefix(prefix)
        .build()
        .await
        .map_err(|e| e.to_string())
}

async fn run_strategy(strategy: Strategy, shop: &Shop, meter: &Meter, args: &Args) -> Row {
    match strategy {
        Strategy::A | Strategy::B | Strategy::E => one_key(strategy, shop, meter, args).await,
        Strategy::C => segment_locks(shop, meter, args).await,
        Strategy::D => segmented_stock(shop, meter, args).await,
        Strategy::F | Strategy::G => {
            unreachable!("(f) and (g) run on PostgreSQL and ZooKeeper only (check_store)")
        }
    }
}

/// Runs the buyers, with the commands each master served meanwhile (the setup before and the
/// books read after are not counted).
async fn measured(meter: &Meter, buyers: impl Future<Output = Stats>) -> (Stats, Vec<u64>) {
    let before = meter.read().await;
    let stats = buyers.await;
    let served = meter.served(&before).await;
    (stats, served)
}

/// (a), (b) and (e): the stock in one counter key.
async fn one_key(strategy: Strategy, shop: &Shop, meter: &Meter, args: &Args) -> Row {
    let (label, key, locked) = match strategy {
        Strategy::A => ("(a) no lock: GET, then SET", "a", false),
        Strategy::B => ("(b) #[distributed_lock] per item", "b", true),
        _ => ("(e) Lua GET > 0 then DECR, one key", "e", true),
    };
    let key = format!("{ITEM}:{key}");
    shop.set(&key, args.units).await.expect("set up the stock");
    if strategy == Strategy::E {
        strategies::load_sell_script(shop)
            .await
            .expect("load the script");
    }
    let s = shop.clone();
    let buyers = run::run(label, args.buyers, args.in_flight, args.units, move |_| {
        let s = s.clone();
        async move {
            match strategy {
                Strategy::A => strategies::no_lock(&s, ITEM).await,
                Strategy::B => strategies::lock_per_item(&s, ITEM).await,
                _ => strategies::lua_decrement(&s, ITEM).await,
            }
        }
    });
    let (stats, served) = measured(meter, buyers).await;
    let remaining = shop.get(&key).await.expect("read the stock");
    let books_balance = stats.sold as i64 + remaining == args.units as i64;
    Row {
        label,
        locked,
        stats,
        remaining,
        books_balance,
        served,
    }
}

/// (c): the stock in `--segments` counter keys, one lock each.
async fn segment_locks(shop: &Shop, meter: &Meter, args: &Args) -> Row {
    let label = "(c) #[distributed_lock] per segment";
    let (units, n) = (args.units, args.segments);
    for seg in 0..n {
        let share = units / u64::from(n) + u64::from(u64::from(seg) < units % u64::from(n));
        shop.set(&format!("{ITEM}:c#{seg}"), share)
            .await
            .expect("set up the stock");
    }
    let drained: Arc<[AtomicBool]> = (0..n).map(|_| AtomicBool::new(false)).collect();
    let s = shop.clone();
    let buyers = run::run(label, args.buyers, args.in_flight, units, move |buyer| {
        let (s, drained) = (s.clone(), drained.clone());
        async move { strategies::segment_locks(&s, ITEM, buyer, &drained).await }
    });
    let (stats, served) = measured(meter, buyers).await;
    let mut remaining = 0;
    for seg in 0..n {
        remaining += shop.get(&format!("{ITEM}:c#{seg}")).await.expect("read");
    }
    let books_balance = stats.sold as i64 + remaining == units as i64;
    Row {
        label,
        locked: true,
        stats,
        remaining,
        books_balance,
        served,
    }
}

/// (d): `SegmentedStock` with `--segments` segments.
async fn segmented_stock(shop: &Shop, meter: &Meter, args: &Args) -> Row {
    let label = "(d) SegmentedStock";
    let stock = SegmentedStock::new(&shop.locks, ITEM, args.segments).expect("valid stock");
    stock.reinit(args.units).await.expect("set up the stock");
    let s = stock.clone();
    let buyers = run::run(
        label,
        args.buyers,
        args.in_flight,
        args.units,
        move |buyer| {
            let s = s.clone();
            async move { strategies::segmented_stock(&s, &format!("order-{buyer}")).await }
        },
    );
    let (stats, served) = measured(meter, buyers).await;
    let audit = stock.audit().await.expect("audit");
    let books_balance = audit.is_consistent() && audit.sold == stats.sold;
    Row {
        label,
        locked: true,
        stats,
        remaining: audit.remaining as i64,
        books_balance,
        served,
    }
}

/// Deletes this run's keys (lock fencing counters, stock, order records) from every node.
async fn cleanup(prefix: &str, nodes: &[MultiplexedConnection]) {
    for node in nodes {
        cleanup_node(prefix, &mut node.clone()).await;
    }
}

async fn cleanup_node(prefix: &str, conn: &mut MultiplexedConnection) {
    let mut cursor = 0u64;
    loop {
        let (next, keys): (u64, Vec<String>) = dlock::redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(format!("{prefix}*"))
            .arg("COUNT")
            .arg(1000)
            .query_async(conn)
            .await
            .unwrap_or_default();
        unlink(conn, &keys).await;
        if next == 0 {
            break;
        }
        cursor = next;
    }
}

/// One UNLINK per key, pipelined: a cluster node refuses a multi-key UNLINK unless every key
/// hashes to one slot.
async fn unlink(conn: &mut MultiplexedConnection, keys: &[String]) {
    if keys.is_empty() {
        return;
    }
    let mut pipe = dlock::redis::pipe();
    for key in keys {
        pipe.cmd("UNLINK").arg(key).ignore();
    }
    let _: Result<(), _> = pipe.query_async(conn).await;
}

/// A run id without another dependency: the clock's nanoseconds mixed with the pid.
fn rand_u32() -> u32 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    nanos ^ std::process::id().rotate_left(16)
}
