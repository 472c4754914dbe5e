//! `SegmentedStock` is Redis's: its segments are keys spread over cluster slots and taken by
//! Lua scripts. On another store it is refused when it is made, naming the item and the store.

use dlock::SegmentedStock;

use super::both::{stores, Store};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn segmented_stock_is_redis_only_and_says_so_elsewhere() {
    for store in stores() {
        let client = store.client().await;
        let made = SegmentedStock::new(&client, "stores:sku", 4);
        match store {
            Store::Redis(_) => {
                let stock = made.expect("stock on redis");
                let _init = stock.init(10).await.expect("init");
                let _take = stock.take("order-1", 1).await.expect("take");
                assert_eq!(stock.remaining().await.expect("remaining"), 9);
            }
            Store::Postgres(_) | Store::Zookeeper(_) => {
                let Err(e) = made else {
                    panic!("{}: a SegmentedStock was made", store.name());
                };
                let text = e.to_string();
                let shown = if store.name() == "postgres" {
                    "PostgreSQL"
                } else {
                    "ZooKeeper"
                };
                assert!(
                    matches!(e, dlock::LockError::InvalidArgument { .. })
                        && text.contains("`stores:sku`")
                        && text.contains("SegmentedStock needs Redis")
                        && text.contains(shown)
                        && !e.is_transient(),
                    "{text}"
                );
            }
        }
    }
}

/// The same from synchronous code (`dlock::blocking::SegmentedStock`), no runtime in the
/// caller: takes on Redis, the same refusal on PostgreSQL.
#[test]
fn the_blocking_stock_takes_on_redis_and_is_refused_elsewhere() {
    for store in stores() {
        let builder = dlock::LockClient::builder(store.url());
        let client = dlock::blocking::LockClient::build(builder)
            .unwrap_or_else(|e| panic!("{}: connect: {e}", store.name()));
        let made = client.segmented_stock("stores:sku:sync", 4);
        match store {
            Store::Redis(_) => {
                let stock = made.expect("stock on redis");
                let _init = stock.init(3).expect("init");
                assert!(stock.take("order-1", 1).expect("take").is_taken());
                assert!(stock.take("order-2", 2).expect("take").is_taken());
                assert!(!stock.take("order-3", 1).expect("take").is_taken());
                assert_eq!(stock.give_back("order-2").expect("give back"), 2);
                assert_eq!(stock.remaining().expect("remaining"), 2);
                assert!(stock.audit().expect("audit").is_consistent());
            }
            Store::Postgres(_) | Store::Zookeeper(_) => {
                let e = made.expect_err("a blocking SegmentedStock was made off Redis");
                let text = e.to_string();
                assert!(
                    text.contains("`stores:sku:sync`")
                        && text.contains("SegmentedStock needs Redis"),
                    "{text}"
                );
            }
        }
    }
}
