//! `--store postgres`: the stock in a PostgreSQL table, the locks in dlock's PostgreSQL store
//! on the same server, and strategies (a), (b), (c) and (f).

use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use dlock::testing::PgServer;
use dlock::LockClient;

use crate::pg_stock::{self, StockDb};
use crate::pg_strategies::{self, PgShop};
use crate::report::{self, thousands, Row};
use crate::{rounds, run, Args, Strategy, ITEM};

/// Connections to the stock table. Buyers' queries are pipelined over them, so a few carry the
/// 256 buyers in flight; more would mostly add backends contending for the one hot row.
const STOCK_CONNECTIONS: usize = 16;

/// Sequential `SELECT 1`s whose median is the run's round trip.
const RTT_SAMPLES: usize = 2000;

/// Runs the PostgreSQL sale; the exit code as `crate::sale`'s.
pub async fn sale(args: &Args, prefix: &str) -> i32 {
    let (url, server, origin) = match &args.pg_url {
        Some(url) => (url.clone(), None, "PG_URL"),
        None => match crate::temporary(PgServer::start, "PostgreSQL", "PG_URL").await {
            Ok(server) => (server.url(), Some(server), "temporary server"),
            Err(e) => {
                eprintln!("{e}");
                return 2;
            }
        },
    };
    let code = sell(args, prefix, &url, origin).await;
    drop(server);
    code
}

async fn sell(args: &Args, prefix: &str, url: &str, origin: &str) -> i32 {
    let locks = match crate::build(LockClient::builder(url), prefix).await {
        Ok(locks) => locks,
        Err(e) => {
            eprintln!("{e}");
            return 2;
        }
    };
    let stock = match StockDb::open(url, STOCK_CONNECTIONS).await {
        Ok(stock) => stock,
        Err(e) => {
            eprintln!("the stock table at {}: {e}", pg_stock::describe(url));
            return 2;
        }
    };
    let rtt = match pg_stock::select_one_rtt(url, RTT_SAMPLES).await {
        Ok(rtt) => rtt,
        Err(e) => {
            eprintln!("measuring the round trip: {e}");
            return 2;
        }
    };
    // Commit cost decides every figure here: the header says what the server does at commit.
    let mut server = Vec::new();
    for setting in ["server_version", "fsync", "synchronous_commit"] {
        let value = stock.show(setting).await.unwrap_or_else(|_| "?".into());
        // `15.20 (Debian 15.20-0+deb12u1)`: the version is the first word.
        let value = value.split_whitespace().next().unwrap_or("?").to_owned();
        server.push(value);
    }
    println!(
        "seckill: {} buyers, {} units of one item, {} in flight, {} rounds; postgres {} ({origin}: \
         PostgreSQL {}, fsync {}, synchronous_commit {}); SELECT 1 round trip {}; \
         (d) SegmentedStock and (e) the Lua script are Redis-only",
        thousands(args.buyers as u64),
        thousands(args.units),
        args.in_flight,
        args.rounds(),
        pg_stock::describe(url),
        server[0],
        server[1],
        server[2],
        report::latency(rtt)
    );

    let shop = PgShop {
        locks,
        stock,
        prefix: prefix.to_owned(),
    };
    let strategies = args.strategies(&[Strategy::A, Strategy::B, Strategy::C, Strategy::F]);
    let shop_ref = &shop;
    let runs = rounds::run(&strategies, args.rounds(), move |strategy| async move {
        match strategy {
            Strategy::C => segment_locks(shop_ref, args).await,
            _ => one_row(strategy, shop_ref, args).await,
        }
    })
    .await;
    println!();
    report::print(&runs, args.units, rtt, "SELECT 1");

    // dlock's own rows (a fencing counter per lock name) stay, as they do for any lock.
    if let Err(e) = shop.stock.delete_run(prefix).await {
        eprintln!("deleting this run's stock rows: {e}");
    }
    crate::exit_code(&runs)
}

/// (a), (b) and (f): the stock in one row.
async fn one_row(strategy: Strategy, shop: &PgShop, args: &Args) -> Row {
    let (label, row, locked) = match strategy {
        Strategy::A => ("(a) no lock: SELECT, then UPDATE", "a", false),
        Strategy::B => ("(b) #[distributed_lock] per item", "b", true),
        _ => ("(f) one UPDATE .. WHERE units > 0", "f", true),
    };
    let item = shop.item(&format!("{ITEM}:{row}"));
    shop.stock
        .set(&item, args.units)
        .await
        .expect("set up the stock");
    shop.stock.vacuum().await;
    let s = shop.clone();
    let stats = run::run(label, args.buyers, args.in_flight, args.units, move |_| {
        let s = s.clone();
        async move {
            match strategy {
                Strategy::A => pg_strategies::no_lock(&s, ITEM).await,
                Strategy::B => pg_strategies::lock_per_item(&s, ITEM).await,
                _ => pg_strategies::one_update(&s, ITEM).await,
            }
        }
    })
    .await;
    let remaining = shop.stock.get(&item).await.expect("read the stock");
    let books_balance = stats.sold as i64 + remaining == args.units as i64;
    Row {
        label,
        locked,
        stats,
        remaining,
        books_balance,
        served: Vec::new(),
    }
}

/// (c): the stock in `--segments` rows, one lock each.
async fn segment_locks(shop: &PgShop, args: &Args) -> Row {
    let label = "(c) #[distributed_lock] per segment";
    let (units, n) = (args.units, args.segments);
    let items: Vec<String> = (0..n)
        .map(|seg| shop.item(&format!("{ITEM}:c#{seg}")))
        .collect();
    for (seg, item) in items.iter().enumerate() {
        let seg = seg as u64;
        let share = units / u64::from(n) + u64::from(seg < units % u64::from(n));
        shop.stock.set(item, share).await.expect("set up the stock");
    }
    shop.stock.vacuum().await;
    let drained: Arc<[AtomicBool]> = (0..n).map(|_| AtomicBool::new(false)).collect();
    let s = shop.clone();
    let stats = run::run(label, args.buyers, args.in_flight, units, move |buyer| {
        let (s, drained) = (s.clone(), drained.clone());
        async move { pg_strategies::segment_locks(&s, ITEM, buyer, &drained).await }
    })
    .await;
    let mut remaining = 0;
    for item in &items {
        remaining += shop.stock.get(item).await.expect("read the stock");
    }
    let books_balance = stats.sold as i64 + remaining == units as i64;
    Row {
        label,
        locked: true,
        stats,
        remaining,
        books_balance,
        served: Vec::new(),
    }
}
