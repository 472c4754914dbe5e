//! SegmentedStock keys (one cluster slot per segment), set-up rules, bad input, Redis down,
//! and the audit catching a tampered level.

use std::collections::HashSet;
use std::time::Duration;

use dlock::stock::{cluster_slot, Init};
use dlock::testing::RedisServer;
use dlock::{LockClient, LockError, SegmentLocks, SegmentedStock};

async fn client() -> (RedisServer, LockClient) {
    let server = RedisServer::start().expect("redis-server");
    let client = LockClient::connect(&server.url()).await.unwrap();
    (server, client)
}

#[tokio::test]
async fn every_segment_has_its_own_slot_and_its_records_share_it() {
    let (server, client) = client().await;
    for (name, segments) in [("sku:42", 16), ("a{b}c", 3), ("x", 256), ("ünï:%7B", 64)] {
        let stock = SegmentedStock::new(&client, name, segments).unwrap();
        let slots: HashSet<u16> = (0..segments)
            .map(|i| cluster_slot(stock.segment_key(i)))
            .collect();
        assert_eq!(slots.len(), segments as usize, "{name}: shared slots");
        let locks = SegmentLocks::new(&client, name, segments).unwrap();
        let lock_slots: HashSet<u16> = (0..segments)
            .map(|i| cluster_slot(client.lock(locks.lock_name(i)).key()))
            .collect();
        assert_eq!(
            lock_slots.len(),
            segments as usize,
            "{name}: locks share slots"
        );
    }
    // The records live beside each segment, in the same slot, so one script touches one slot.
    let stock = SegmentedStock::new(&client, "sku:42", 16).unwrap();
    let _ = stock.init(10).await.unwrap();
    let _ = stock.take("o1", 1).await.unwrap();
    let mut conn = dlock::redis::Client::open(server.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let keys: Vec<String> = dlock::redis::cmd("KEYS")
        .arg("*")
        .query_async(&mut conn)
        .await
        .unwrap();
    let records: Vec<&String> = keys.iter().filter(|k| k.ends_with(":orders")).collect();
    assert!(!records.is_empty());
    for r in records {
        let segment = r.strip_suffix(":orders").unwrap();
        assert!(keys.iter().any(|k| k == segment));
        assert_eq!(cluster_slot(r), cluster_slot(segment));
    }
}

fn reason(e: LockError) -> String {
    match e {
        LockError::InvalidArgument { reason, .. } => reason,
        other => panic!("expected InvalidArgument, got {other:?}"),
    }
}

#[tokio::test]
async fn bad_input_is_rejected_with_a_reason() {
    let (_server, client) = client().await;
    let zero = SegmentedStock::new(&client, "sku", 0).unwrap_err();
    assert!(
        zero.to_string()
            .starts_with("invalid argument for `sku`: segmented stock"),
        "{zero}"
    );
    assert!(reason(zero).contains("0 segments"));
    assert!(reason(SegmentedStock::new(&client, "sku", 257).unwrap_err()).contains("1 to 256"));
    assert!(reason(SegmentedStock::new(&client, "", 4).unwrap_err()).contains("name is empty"));
    assert!(reason(SegmentLocks::new(&client, "", 4).unwrap_err()).contains("name is empty"));
    assert!(reason(SegmentLocks::new(&client, "sku", 0).unwrap_err()).contains("0 segments"));

    let stock = SegmentedStock::new(&client, "sku:bad", 4).unwrap();
    let e = stock.init(dlock::stock::MAX_UNITS + 1).await.unwrap_err();
    assert_eq!(e.lock_name(), Some("sku:bad"));
    assert!(reason(e).contains("above the limit"));
    // Nothing was set up by the refused init.
    assert!(reason(stock.take("o", 1).await.unwrap_err()).contains("call init() first"));

    assert_eq!(
        stock.init(dlock::stock::MAX_UNITS).await.unwrap(),
        Init::Created
    );
    assert_eq!(stock.remaining().await.unwrap(), dlock::stock::MAX_UNITS);
    assert!(stock.take("o", 1).await.unwrap().is_taken());
    assert_eq!(
        stock.remaining().await.unwrap(),
        dlock::stock::MAX_UNITS - 1
    );

    assert!(reason(stock.take("o", 0).await.unwrap_err()).contains("quantity of 0"));
    let huge = stock
        .take("o2", dlock::stock::MAX_UNITS + 1)
        .await
        .unwrap_err();
    assert!(reason(huge).contains("use 1 to"));
    assert!(reason(stock.take("", 1).await.unwrap_err()).contains("order id of 0 bytes"));
    let long = "x".repeat(dlock::stock::MAX_ORDER_ID_LEN + 1);
    assert!(reason(stock.take(&long, 1).await.unwrap_err()).contains("513 bytes"));
    assert!(reason(stock.give_back("").await.unwrap_err()).contains("order id"));
    // (A negative quantity does not type-check: quantities are u64.)
}

#[tokio::test]
async fn init_is_never_silently_repeated() {
    let (_server, client) = client().await;
    let stock = SegmentedStock::new(&client, "sku:init", 4).unwrap();
    assert_eq!(stock.init(10).await.unwrap(), Init::Created);
    assert!(stock.take("o1", 3).await.unwrap().is_taken());
    // A second instance starting up: told, nothing changes.
    assert_eq!(stock.init(50).await.unwrap(), Init::Existing { total: 10 });
    assert_eq!(stock.remaining().await.unwrap(), 7);
    // Another segment count would mean other keys, a second stock beside the first: refused.
    let other = SegmentedStock::new(&client, "sku:init", 8).unwrap();
    let e = reason(other.init(10).await.unwrap_err());
    assert!(e.contains("set up with 4 segments"), "{e}");
    // Starting over is explicit, and forgets the orders.
    stock.reinit(20).await.unwrap();
    assert_eq!(stock.remaining().await.unwrap(), 20);
    assert!(stock.take("o1", 3).await.unwrap().is_taken());
    let audit = stock.audit().await.unwrap();
    assert!(audit.is_consistent());
    assert_eq!((audit.initial, audit.sold), (20, 3));
    // Remainders are spread one unit each: 20 / 8 -> 3,3,3,3,2,2,2,2.
    other.reinit(20).await.unwrap();
    let audit = other.audit().await.unwrap();
    let initial: Vec<u64> = audit.segments.iter().map(|s| s.initial).collect();
    assert_eq!(initial, [3, 3, 3, 3, 2, 2, 2, 2]);
}

#[tokio::test]
async fn redis_down_gives_an_error_naming_the_item_and_the_url() {
    let (mut server, _) = client().await;
    let client = LockClient::builder(server.url())
        .response_timeout(Duration::from_secs(2))
        .connect_timeout(Duration::from_secs(2))
        .build()
        .await
        .unwrap();
    let stock = SegmentedStock::new(&client, "sku:down", 4).unwrap();
    let _ = stock.init(10).await.unwrap();
    server.kill();
    for e in [
        stock.take("o1", 1).await.unwrap_err(),
        stock.give_back("o1").await.unwrap_err(),
        stock.remaining().await.unwrap_err(),
        stock.audit().await.unwrap_err(),
    ] {
        assert!(matches!(e, LockError::Redis { .. }), "{e:?}");
        assert_eq!(e.lock_name(), Some("sku:down"));
        let msg = e.to_string();
        assert!(
            msg.contains("of item `sku:down`") && msg.contains(&server.url()),
            "{msg}"
        );
        assert!(
            !msg.contains("of lock"),
            "a stock item is not a lock: {msg}"
        );
    }
}

#[tokio::test]
async fn audit_catches_a_level_changed_behind_its_back() {
    let (server, client) = client().await;
    let stock = SegmentedStock::new(&client, "sku:audit", 2).unwrap();
    let _ = stock.init(10).await.unwrap();
    assert!(stock.take("o1", 2).await.unwrap().is_taken());
    let audit = stock.audit().await.unwrap();
    assert!(audit.is_consistent());
    assert_eq!((audit.sold, audit.remaining, audit.holders), (2, 8, 1));

    let mut conn = dlock::redis::Client::open(server.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let _: i64 = dlock::redis::cmd("HINCRBY")
        .arg(stock.segment_key(1))
        .arg("left")
        .arg(-1)
        .query_async(&mut conn)
        .await
        .unwrap();
    let audit = stock.audit().await.unwrap();
    assert!(!audit.is_consistent(), "a unit vanished without an order");
    assert!(!audit.segments[1].is_consistent());
    assert!(audit.segments[0].is_consistent());

    // A key of another type where a segment should be: WRONGTYPE, naming the key.
    let _: () = dlock::redis::cmd("SET")
        .arg(stock.segment_key(0))
        .arg("x")
        .query_async(&mut conn)
        .await
        .unwrap();
    let e = stock.take("o2", 1).await.unwrap_err();
    assert!(matches!(e, LockError::WrongType { .. }), "{e:?}");
}
