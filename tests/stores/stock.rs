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
            Store::Postgres(_) => {
                let Err(e) = made else {
                    panic!("postgres: a SegmentedStock was made");
                };
                let text = e.to_string();
                assert!(
                    matches!(e, dlock::LockError::InvalidArgument { .. })
                        && text.contains("`stores:sku`")
                        && text.contains("SegmentedStock needs Redis")
                        && text.contains("PostgreSQL")
                        && !e.is_transient(),
                    "{text}"
                );
            }
        }
    }
}
