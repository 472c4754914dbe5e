//! SegmentedStock sells everything it has: skewed routing, multi-unit and split orders, and
//! the drained view after a sell-out.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use dlock::stock::Take;
use dlock::testing::RedisServer;
use dlock::{LockClient, SegmentedStock};

async fn client() -> (RedisServer, LockClient) {
    let server = RedisServer::start().expect("redis-server");
    let client = LockClient::connect(&server.url()).await.unwrap();
    (server, client)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn all_stock_sells_when_every_buyer_routes_to_one_segment() {
    let (_server, client) = client().await;
    let stock = SegmentedStock::new(&client, "sku:skewed", 8).unwrap();
    assert!(matches!(
        stock.init(200).await.unwrap(),
        dlock::stock::Init::Created
    ));
    // 1,000 buyers whose ids all hash to segment 0: it drains after 25, and the other 175 units
    // must still sell through the walk, not strand in segments nobody is routed to.
    let ids: Vec<String> = (0..)
        .map(|i| format!("skewed-{i}"))
        .filter(|id| stock.home_segment(id) == 0)
        .take(1_000)
        .collect();
    let ids = Arc::new(std::sync::Mutex::new(ids.into_iter()));
    let sold = Arc::new(AtomicU64::new(0));
    let tasks: Vec<_> = (0..64)
        .map(|_| {
            let (stock, ids, sold) = (stock.clone(), ids.clone(), sold.clone());
            tokio::spawn(async move {
                loop {
                    let Some(id) = ids.lock().unwrap().next() else {
                        break;
                    };
                    match stock.take(&id, 1).await.unwrap() {
                        Take::Taken { .. } => {
                            sold.fetch_add(1, Ordering::Relaxed);
                        }
                        Take::SoldOut => {}
                        other => panic!("{id}: {other:?}"),
                    }
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    assert_eq!(sold.load(Ordering::Relaxed), 200);
    assert_eq!(stock.remaining().await.unwrap(), 0);
    let audit = stock.audit().await.unwrap();
    assert!(audit.is_consistent(), "{audit:#?}");
    assert_eq!(audit.holders, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_order_larger_than_any_segment_is_served_in_parts() {
    let (_server, client) = client().await;
    let stock = SegmentedStock::new(&client, "sku:big", 4).unwrap();
    let _ = stock.init(8).await.unwrap(); // 2 units per segment

    let Take::Split { parts } = stock.take("big", 5).await.unwrap() else {
        panic!("an order of 5 over segments of 2 is served in parts");
    };
    assert_eq!(parts.iter().map(|p| p.units).sum::<u64>(), 5);
    assert!(parts.iter().all(|p| p.units <= 2));
    assert_eq!(stock.remaining().await.unwrap(), 3);
    assert_eq!(stock.take("big", 5).await.unwrap(), Take::AlreadyTaken);
    assert_eq!(stock.remaining().await.unwrap(), 3, "a retry takes nothing");

    // More than the whole stock: a true sell-out, and nothing stays reserved.
    assert_eq!(stock.take("too-big", 4).await.unwrap(), Take::SoldOut);
    assert_eq!(stock.remaining().await.unwrap(), 3);

    assert_eq!(stock.give_back("big").await.unwrap(), 5);
    assert_eq!(stock.give_back("big").await.unwrap(), 0);
    assert_eq!(stock.remaining().await.unwrap(), 8);
    assert_eq!(stock.take("big", 5).await.unwrap(), Take::GivenBack);

    // Exactly the whole stock, spread over every segment.
    let Take::Split { parts } = stock.take("all", 8).await.unwrap() else {
        panic!("the whole stock in one order");
    };
    assert_eq!(parts.len(), 4);
    assert_eq!(stock.remaining().await.unwrap(), 0);
    let audit = stock.audit().await.unwrap();
    assert!(audit.is_consistent(), "{audit:#?}");
    assert_eq!((audit.sold, audit.returned), (8, 5));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_last_units_spread_thin_still_sell_to_a_multi_unit_order() {
    let (_server, client) = client().await;
    let stock = SegmentedStock::new(&client, "sku:thin", 4).unwrap();
    let _ = stock.init(4).await.unwrap(); // one unit per segment
    assert!(stock.take("three", 3).await.unwrap().is_taken());
    assert_eq!(stock.take("two", 2).await.unwrap(), Take::SoldOut);
    assert!(stock.take("one", 1).await.unwrap().is_taken());
    assert_eq!(stock.remaining().await.unwrap(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_multi_unit_orders_never_oversell() {
    let (_server, client) = client().await;
    let stock = SegmentedStock::new(&client, "sku:multi", 8).unwrap();
    let _ = stock.init(250).await.unwrap();
    let sold = Arc::new(AtomicU64::new(0));
    let tasks: Vec<_> = (0..64u64)
        .map(|t| {
            let (stock, sold) = (stock.clone(), sold.clone());
            tokio::spawn(async move {
                for i in 0..10u64 {
                    // 1 to 40 units: some orders are larger than a segment (31-32 units).
                    let qty = 1 + (t * 7 + i * 13) % 40;
                    if stock
                        .take(&format!("m{t}-{i}"), qty)
                        .await
                        .unwrap()
                        .is_taken()
                    {
                        sold.fetch_add(qty, Ordering::Relaxed);
                    }
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    let audit = stock.audit().await.unwrap();
    assert!(audit.is_consistent(), "{audit:#?}");
    assert_eq!(audit.sold, sold.load(Ordering::Relaxed));
    assert!(audit.sold <= 250);
    // Single units mop up whatever the large orders left.
    for i in 0..250 {
        let _ = stock.take(&format!("mop-{i}"), 1).await.unwrap();
    }
    assert_eq!(stock.remaining().await.unwrap(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sold_out_answers_from_the_drained_view_and_sees_give_backs() {
    let (_server, client) = client().await;
    // A long window, so the test cannot race its expiry.
    let stock = SegmentedStock::new(&client, "sku:view", 4)
        .unwrap()
        .drained_for(Duration::from_secs(3600));
    let _ = stock.init(4).await.unwrap();
    for i in 0..3 {
        assert!(stock.take(&format!("v{i}"), 1).await.unwrap().is_taken());
    }
    // The last unit goes to an order whose home segment is already empty: it walks on.
    let walked = (0..)
        .map(|i| format!("w{i}"))
        .find(|id| stock.home_segment(id) == stock.home_segment("v0"))
        .unwrap();
    let Take::Taken { segment } = stock.take(&walked, 1).await.unwrap() else {
        panic!("the last unit sells");
    };
    assert_ne!(segment, stock.home_segment(&walked));
    // Every segment has been seen at 0 by now (each take reports its segment's level, and a
    // walk visits the ones it passes): sold-out answers come from the view.
    for i in 0..4 {
        let _ = stock.take(&format!("late{i}"), 1).await.unwrap();
    }
    assert_eq!(stock.take("late", 1).await.unwrap(), Take::SoldOut);
    // A retry of an order that holds stock is still told so, not "sold out": whether it took
    // at its home segment, or walked on from there to another one.
    assert_eq!(stock.take("v0", 1).await.unwrap(), Take::AlreadyTaken);
    assert_eq!(stock.take(&walked, 1).await.unwrap(), Take::AlreadyTaken);
    // This handle's own give-back reopens its segment at once.
    assert_eq!(stock.give_back("v2").await.unwrap(), 1);
    assert!(stock.take("after", 1).await.unwrap().is_taken());

    // Another process's give-back is seen once the window ends; with the view off, at once.
    let other = SegmentedStock::new(&client, "sku:view", 4).unwrap();
    assert_eq!(other.give_back(&walked).await.unwrap(), 1);
    let fresh = stock.clone().drained_for(Duration::ZERO);
    assert!(fresh.take("after2", 1).await.unwrap().is_taken());
    assert_eq!(fresh.remaining().await.unwrap(), 0);
}
