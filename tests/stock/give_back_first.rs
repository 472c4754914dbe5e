//! A give-back that arrives before its take: the cancelled order must hold nothing, whatever
//! the later take of the same order id finds (its home segment drained, several instances, an
//! order split over segments, a walk that had already passed every segment).

use std::sync::Arc;
use std::time::Duration;

use dlock::stock::Take;
use dlock::testing::RedisServer;
use dlock::{LockClient, SegmentedStock};

async fn client(server: &RedisServer) -> LockClient {
    LockClient::connect(&server.url()).await.unwrap()
}

/// A fresh server and a stock of `total` units in `segments` segments, set up through `name`.
async fn stock(name: &str, segments: u32, total: u64) -> (RedisServer, SegmentedStock) {
    let server = RedisServer::start().expect("redis-server");
    let stock = SegmentedStock::new(&client(&server).await, name, segments).unwrap();
    assert_eq!(
        stock.init(total).await.unwrap(),
        dlock::stock::Init::Created
    );
    (server, stock)
}

/// The audit holds: levels and records agree, and the records say `sold` units are held.
async fn assert_audit(stock: &SegmentedStock, sold: u64) {
    let audit = stock.audit().await.unwrap();
    assert!(audit.is_consistent(), "{audit:#?}");
    assert_eq!(audit.sold, sold, "{audit:#?}");
}

/// The first id `prefix-0`, `prefix-1`, ... whose home segment is `home`.
fn id_homed_at(stock: &SegmentedStock, prefix: &str, home: u32) -> String {
    (0..10_000)
        .map(|i| format!("{prefix}-{i}"))
        .find(|id| stock.home_segment(id) == home)
        .expect("some id in 10,000 hashes to each segment")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_give_back_before_the_take_leaves_the_take_nothing() {
    let (_server, stock) = stock("sku:first", 4, 20).await;

    assert_eq!(stock.give_back("o1").await.unwrap(), 0, "it held nothing");
    assert_eq!(stock.take("o1", 1).await.unwrap(), Take::GivenBack);
    assert_eq!(stock.remaining().await.unwrap(), 20);
    // Still idempotent, and the closing records count as neither sold nor returned units.
    assert_eq!(stock.give_back("o1").await.unwrap(), 0);
    assert_eq!(stock.take("o1", 1).await.unwrap(), Take::GivenBack);
    assert_audit(&stock, 0).await;
    assert_eq!(stock.audit().await.unwrap().returned, 0);
    // Other orders are untouched by it.
    assert!(stock.take("o2", 1).await.unwrap().is_taken());
    assert_audit(&stock, 1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_on_one_instance_stops_the_take_on_another() {
    let server = RedisServer::start().expect("redis-server");
    // Two instances of the service: two clients, two handles on the same item.
    let a = SegmentedStock::new(&client(&server).await, "sku:two", 4).unwrap();
    let b = SegmentedStock::new(&client(&server).await, "sku:two", 4).unwrap();
    let _ = a.init(10).await.unwrap();
    assert!(matches!(
        b.init(10).await.unwrap(),
        dlock::stock::Init::Existing { total: 10 }
    ));

    assert_eq!(a.give_back("order-9").await.unwrap(), 0);
    assert_eq!(b.take("order-9", 3).await.unwrap(), Take::GivenBack);
    assert_eq!(b.remaining().await.unwrap(), 10);
    assert_eq!(a.remaining().await.unwrap(), 10);
    assert_audit(&b, 0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_take_after_a_cancel_does_not_walk_on_from_its_drained_home() {
    let server = RedisServer::start().expect("redis-server");
    // Instance A's take of `late` timed out before reaching Redis; instance B cancelled the
    // order; then A's take lands. One unit per segment, and `late`'s home segment is drained,
    // so the take would walk on to a segment that still has its unit.
    let a = SegmentedStock::new(&client(&server).await, "sku:late", 4)
        .unwrap()
        .drained_for(Duration::ZERO);
    let b = SegmentedStock::new(&client(&server).await, "sku:late", 4).unwrap();
    let _ = a.init(4).await.unwrap();
    let late = "late-order";
    let home = a.home_segment(late);
    let drainer = id_homed_at(&a, "drainer", home);
    assert_eq!(
        a.take(&drainer, 1).await.unwrap(),
        Take::Taken { segment: home }
    );

    assert_eq!(b.give_back(late).await.unwrap(), 0);
    assert_eq!(a.take(late, 1).await.unwrap(), Take::GivenBack);
    assert_eq!(
        a.remaining().await.unwrap(),
        3,
        "only the drainer's unit is gone"
    );
    assert_audit(&a, 1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_split_order_given_back_first_takes_nothing() {
    // Two units per segment: an order of 5 can only be served in parts.
    let (_server, stock) = stock("sku:split", 4, 8).await;

    assert_eq!(stock.give_back("big").await.unwrap(), 0);
    assert_eq!(stock.take("big", 5).await.unwrap(), Take::GivenBack);
    assert_eq!(stock.remaining().await.unwrap(), 8);
    assert_audit(&stock, 0).await;
    // The stock is all still there for a new order of the same size.
    assert!(matches!(
        stock.take("big-2", 5).await.unwrap(),
        Take::Split { .. }
    ));
    assert_audit(&stock, 5).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sold_out_order_cancelled_then_retried_after_a_refill_takes_nothing() {
    // `walker` finds every segment empty and leaves a pass (`w0`) on each; it is cancelled;
    // stock comes back; then a retry of its request arrives. The passes alone would let the
    // retry take the refilled unit: the give-back must have closed them.
    let (_server, stock) = stock("sku:refill", 2, 2).await;
    let stock = stock.drained_for(Duration::ZERO);
    assert!(stock.take("first", 1).await.unwrap().is_taken());
    assert!(stock.take("second", 1).await.unwrap().is_taken());
    assert_eq!(stock.take("walker", 1).await.unwrap(), Take::SoldOut);

    assert_eq!(stock.give_back("walker").await.unwrap(), 0);
    assert_eq!(stock.give_back("first").await.unwrap(), 1);
    assert_eq!(stock.take("walker", 1).await.unwrap(), Take::GivenBack);
    assert_eq!(stock.remaining().await.unwrap(), 1);
    assert_audit(&stock, 1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn takes_racing_their_give_backs_leave_every_cancelled_order_holding_nothing() {
    const INITIAL: u64 = 40;
    let (_server, stock) = stock("sku:race", 8, INITIAL).await;
    let stock = Arc::new(stock.drained_for(Duration::ZERO));
    // Each order's take and give-back run at once: whichever lands first on a segment, the
    // order ends up holding nothing. Five units per segment and orders of 1 to 12 make takes
    // walk past drained homes and split; the give-back starts 0 to 15 round trips after the
    // take (a stagger, not a synchronisation: any interleaving must pass), so it meets takes
    // at every stage of their walk.
    let tasks: Vec<_> = (0..200u64)
        .map(|i| {
            let stock = stock.clone();
            tokio::spawn(async move {
                let id = format!("race-{i}");
                let qty = 1 + (i * 7) % 12;
                let give_back = async {
                    for _ in 0..i % 16 {
                        stock.remaining().await.unwrap();
                    }
                    stock.give_back(&id).await
                };
                let (take, back) = tokio::join!(stock.take(&id, qty), give_back);
                let (take, back) = (take.unwrap(), back.unwrap());
                assert_race_outcome(&id, qty, &take, back);
                assert_eq!(stock.take(&id, qty).await.unwrap(), Take::GivenBack);
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    assert_eq!(stock.remaining().await.unwrap(), INITIAL);
    assert_audit(&stock, 0).await;
}

/// What a take racing its order's give-back may answer. A take that reports stock had all of
/// it returned by the give-back. A split can meet the give-back halfway: it answers GivenBack
/// (or SoldOut, if it rolled back) and the give-back returned the parts it had taken, so there
/// only a bound holds.
fn assert_race_outcome(id: &str, qty: u64, take: &Take, back: u64) {
    match take {
        Take::Taken { .. } | Take::Split { .. } => {
            assert_eq!(back, qty, "{id}: {take:?} but {back} given back")
        }
        Take::GivenBack | Take::SoldOut => assert!(back <= qty, "{id}: {take:?}, {back} back"),
        other => panic!("{id}: {other:?} for an order taken once"),
    }
}
