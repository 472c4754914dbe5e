//! Flash sale ("seckill"): 10,000 buyers race for 1,000 units of one hot item, four ways.
//!
//! ```sh
//! cargo run --release --example seckill               # starts a temporary redis-server
//! cargo run --release --example seckill -- --help     # buyers, units, segments, ...
//! REDIS_URL=redis://127.0.0.1:6379 cargo run --release --example seckill
//! ```
//!
//! (a) no lock: read the stock, check it, write it back: the code many tutorials start from.
//! (b) the same code inside `#[distributed_lock(key = "seckill:{item}")]`: correct, and every
//!     buyer of the item queues for one key on one Redis node.
//! (c) the stock in 16 keys with one `#[distributed_lock]` each: buyers queue per segment.
//! (d) `dlock::SegmentedStock`: 16 segments on distinct cluster slots, one atomic script per
//!     take, idempotent per order id, no lock to wait for.
//!
//! Prints a table (throughput, latency, sold, oversold, stock stranded while buyers were
//! refused) and exits non-zero if a locked strategy oversells, strands stock, or fails.

#[path = "support/mod.rs"]
mod support;

#[path = "seckill/report.rs"]
mod report;
#[path = "seckill/run.rs"]
mod run;
#[path = "seckill/strategies.rs"]
mod strategies;

use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use clap::{Parser, ValueEnum};
use dlock::testing::RedisServer;
use dlock::{LockClient, SegmentedStock};

use report::{thousands, Row};
use strategies::Shop;

#[derive(Parser, Debug)]
#[command(about = "Flash sale: N buyers race for one hot item under four strategies")]
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
    /// Buyers in flight at once (a service's concurrency limit).
    #[arg(long, default_value_t = 256)]
    in_flight: usize,
    /// Which strategies to run.
    #[arg(long, value_enum, value_delimiter = ',', default_value = "a,b,c,d")]
    only: Vec<Strategy>,
    /// Redis to use; unset: start a temporary redis-server for this run.
    #[arg(long, env = "REDIS_URL")]
    redis_url: Option<String>,
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum Strategy {
    A,
    B,
    C,
    D,
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

async fn sale(args: &Args) -> i32 {
    if args.buyers == 0 || args.units == 0 || args.in_flight == 0 {
        eprintln!("--buyers, --units and --in-flight must be at least 1");
        return 2;
    }
    if !(1..=dlock::MAX_SEGMENTS).contains(&args.segments) {
        eprintln!("--segments must be 1 to {}", dlock::MAX_SEGMENTS);
        return 2;
    }
    let (url, _server, origin) = match &args.redis_url {
        Some(url) => (url.clone(), None, "REDIS_URL"),
        None => match RedisServer::start() {
            Ok(server) => (server.url(), Some(server), "temporary redis-server"),
            Err(e) => {
                eprintln!("starting a temporary redis-server failed ({e}); set REDIS_URL");
                return 2;
            }
        },
    };
    // Every key of this run under one prefix: a shared Redis keeps runs apart, and cleanup
    // is one SCAN.
    let prefix = format!("seckill-{:08x}:", rand_u32());
    let locks = match LockClient::builder(url.as_str())
        .key_prefix(prefix.clone())
        .build()
        .await
    {
        Ok(locks) => locks,
        Err(e) => {
            eprintln!("{e}");
            return 2;
        }
    };
    let db = dlock::redis::Client::open(url.as_str())
        .expect("valid URL (the lock client accepted it)")
        .get_multiplexed_async_connection()
        .await
        .expect("connect (the lock client did)");
    let shop = Shop { locks, db, prefix };
    let rtt = support::ping_rtt(&url, 2000).await;

    println!(
        "seckill: {} buyers, {} units of one item, {} in flight; redis {url} ({origin}); \
         PING round trip {}",
        thousands(args.buyers as u64),
        thousands(args.units),
        args.in_flight,
        report::latency(rtt)
    );

    let mut rows = Vec::new();
    for strategy in [Strategy::A, Strategy::B, Strategy::C, Strategy::D] {
        if args.only.contains(&strategy) {
            rows.push(run_strategy(strategy, &shop, args).await);
        }
    }
    println!();
    report::print(&rows, args.units, rtt);

    cleanup(&shop).await;
    let failed: Vec<&str> = rows
        .iter()
        .filter(|r| r.locked && !r.problems(args.units).is_empty())
        .map(|r| r.label)
        .collect();
    if failed.is_empty() {
        0
    } else {
        eprintln!("\nFAILED: {}", failed.join("; "));
        1
    }
}

async fn run_strategy(strategy: Strategy, shop: &Shop, args: &Args) -> Row {
    let (buyers, in_flight, units, n) = (args.buyers, args.in_flight, args.units, args.segments);
    let shop = shop.clone();
    match strategy {
        Strategy::A | Strategy::B => {
            let (label, key, locked) = if strategy == Strategy::A {
                ("(a) no lock: GET, then SET", "a", false)
            } else {
                ("(b) #[distributed_lock] per item", "b", true)
            };
            let key = format!("{ITEM}:{key}");
            shop.set(&key, units).await.expect("set up the stock");
            let s = shop.clone();
            let stats = run::run(label, buyers, in_flight, units, move |_| {
                let s = s.clone();
                async move {
                    if locked {
                        strategies::lock_per_item(&s, ITEM).await
                    } else {
                        strategies::no_lock(&s, ITEM).await
                    }
                }
            })
            .await;
            let remaining = shop.get(&key).await.expect("read the stock");
            let books_balance = stats.sold as i64 + remaining == units as i64;
            Row {
                label,
                locked,
                stats,
                remaining,
                books_balance,
            }
        }
        Strategy::C => {
            let label = "(c) #[distributed_lock] per segment";
            for seg in 0..n {
                let share = units / u64::from(n) + u64::from(u64::from(seg) < units % u64::from(n));
                shop.set(&format!("{ITEM}:c#{seg}"), share)
                    .await
                    .expect("set up the stock");
            }
            let drained: Arc<[AtomicBool]> = (0..n).map(|_| AtomicBool::new(false)).collect();
            let s = shop.clone();
            let stats = run::run(label, buyers, in_flight, units, move |buyer| {
                let (s, drained) = (s.clone(), drained.clone());
                async move { strategies::segment_locks(&s, ITEM, buyer, &drained).await }
            })
            .await;
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
            }
        }
        Strategy::D => {
            let label = "(d) SegmentedStock";
            let stock = SegmentedStock::new(&shop.locks, ITEM, n).expect("valid stock");
            stock.reinit(units).await.expect("set up the stock");
            let s = stock.clone();
            let stats = run::run(label, buyers, in_flight, units, move |buyer| {
                let s = s.clone();
                async move { strategies::segmented_stock(&s, &format!("order-{buyer}")).await }
            })
            .await;
            let audit = stock.audit().await.expect("audit");
            let books_balance = audit.is_consistent() && audit.sold == stats.sold;
            Row {
                label,
                locked: true,
                stats,
                remaining: audit.remaining as i64,
                books_balance,
            }
        }
    }
}

/// Deletes this run's keys (lock fencing counters, stock, order records).
async fn cleanup(shop: &Shop) {
    let mut conn = shop.db.clone();
    let mut cursor = 0u64;
    loop {
        let (next, keys): (u64, Vec<String>) = dlock::redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(format!("{}*", shop.prefix))
            .arg("COUNT")
            .arg(1000)
            .query_async(&mut conn)
            .await
            .unwrap_or_default();
        if !keys.is_empty() {
            let _: Result<i64, _> = dlock::redis::cmd("UNLINK")
                .arg(&keys)
                .query_async(&mut conn)
                .await;
        }
        if next == 0 {
            break;
        }
        cursor = next;
    }
}

/// A run id without another dependency: the clock's nanoseconds mixed with the pid.
fn rand_u32() -> u32 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    nanos ^ std::process::id().rotate_left(16)
}
