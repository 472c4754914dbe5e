//! `--store zookeeper`: the stock in ZooKeeper nodes, the locks in dlock's ZooKeeper store on
//! the same ensemble, and strategies (a), (b), (c) and (g).

use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use dlock::testing::ZkServer;
use dlock::LockClient;

use crate::report::{self, thousands, Row};
use crate::zk_stock::{self, StockTree};
use crate::zk_strategies::{self, ZkShop};
use crate::{rounds, run, Args, Strategy, ITEM};

/// Sequential `exists` requests whose median is the run's round trip.
const RTT_SAMPLES: usize = 2000;

/// Runs the ZooKeeper sale; the exit code as `crate::sale`'s.
pub async fn sale(args: &Args, prefix: &str) -> i32 {
    let (url, server, origin) = match &args.zk_url {
        Some(url) => (url.clone(), None, "ZK_URL"),
        None => match crate::temporary(ZkServer::start, "ZooKeeper", "ZK_URL").await {
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
    // This run's stock nodes under one parent, so a shared ensemble keeps runs apart.
    let root = format!("/{}stock", prefix.trim_end_matches(':'));
    let stock = match StockTree::open(url, &root).await {
        Ok(stock) => stock,
        Err(e) => {
            eprintln!("the stock nodes at {}: {e}", zk_stock::describe(url));
            return 2;
        }
    };
    let rtt = match stock.exists_rtt(RTT_SAMPLES).await {
        Ok(rtt) => rtt,
        Err(e) => {
            eprintln!("measuring the round trip: {e}");
            return 2;
        }
    };
    println!(
        "seckill: {} buyers, {} units of one item, {} in flight, {} rounds; zookeeper {} \
         ({origin}); exists round trip {}; (d) SegmentedStock and (e) the Lua script are \
         Redis-only",
        thousands(args.buyers as u64),
        thousands(args.units),
        args.in_flight,
        args.rounds(),
        zk_stock::describe(url),
        report::latency(rtt)
    );

    let shop = ZkShop { locks, stock };
    let strategies = args.strategies(&[Strategy::A, Strategy::B, Strategy::C, Strategy::G]);
    let shop_ref = &shop;
    let runs = rounds::run(&strategies, args.rounds(), move |strategy| async move {
        match strategy {
            Strategy::C => segment_locks(shop_ref, args).await,
            _ => one_node(strategy, shop_ref, args).await,
        }
    })
    .await;
    println!();
    report::print(&runs, args.units, rtt, "exists");

    // The lock nodes are containers: the server deletes them once empty.
    if let Err(e) = shop.stock.delete_run().await {
        eprintln!("deleting this run's stock nodes: {e}");
    }
    crate::exit_code(&runs)
}

/// (a), (b) and (g): the stock in one node.
async fn one_node(strategy: Strategy, shop: &ZkShop, args: &Args) -> Row {
    let (label, node, locked) = match strategy {
        Strategy::A => ("(a) no lock: read, then write", "a", false),
        Strategy::B => ("(b) #[distributed_lock] per item", "b", true),
        _ => ("(g) a versioned write, retried", "g", true),
    };
    let item = format!("{ITEM}:{node}");
    shop.stock
        .set(&item, args.units)
        .await
        .expect("set up the stock");
    let s = shop.clone();
    let stats = run::run(label, args.buyers, args.in_flight, args.units, move |_| {
        let s = s.clone();
        async move {
            match strategy {
                Strategy::A => zk_strategies::no_lock(&s, ITEM).await,
                Strategy::B => zk_strategies::lock_per_item(&s, ITEM).await,
                _ => zk_strategies::versioned_write(&s, ITEM).await,
            }
        }
    })
    .await;
    let (remaining, _) = shop.stock.get(&item).await.expect("read the stock");
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

/// (c): the stock in `--segments` nodes, one lock each.
async fn segment_locks(shop: &ZkShop, args: &Args) -> Row {
    let label = "(c) #[distributed_lock] per segment";
    let (units, n) = (args.units, args.segments);
    let items: Vec<String> = (0..n).map(|seg| format!("{ITEM}:c#{seg}")).collect();
    for (seg, item) in items.iter().enumerate() {
        let seg = seg as u64;
        let share = units / u64::from(n) + u64::from(seg < units % u64::from(n));
        shop.stock.set(item, share).await.expect("set up the stock");
    }
    let drained: Arc<[AtomicBool]> = (0..n).map(|_| AtomicBool::new(false)).collect();
    let s = shop.clone();
    let stats = run::run(label, args.buyers, args.in_flight, units, move |buyer| {
        let (s, drained) = (s.clone(), drained.clone());
        async move { zk_strategies::segment_locks(&s, ITEM, buyer, &drained).await }
    })
    .await;
    let mut remaining = 0;
    for item in &items {
        remaining += shop.stock.get(item).await.expect("read the stock").0;
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
