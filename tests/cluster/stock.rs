//! Flash-sale helpers on a cluster: `SegmentedStock` spreads its segments over every master and
//! sells exactly its stock to two clients at once; `SegmentLocks` guards stock kept elsewhere.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use dlock::redis::AsyncCommands;
use dlock::stock::Take;
use dlock::{LockError, SegmentLocks, SegmentedStock};

use crate::{bounded, cluster_client, raw, shared_cluster};

const SEGMENTS: u32 = 16;
/// Bound on each test's whole run of buyers.
const RUN: Duration = Duration::from_secs(60);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn segmented_stock_sells_exactly_its_stock_to_two_clients_over_every_master() {
    const UNITS: u64 = 300;
    const ORDERS: usize = 400;
    const BUYERS: usize = 8;
    let cluster = shared_cluster();
    let clients = [cluster_client(cluster).await, cluster_client(cluster).await];
    let stocks: Vec<SegmentedStock> = clients
        .iter()
        .map(|c| SegmentedStock::new(c, "cluster:sku", SEGMENTS).unwrap())
        .collect();

    let masters: BTreeSet<u16> = (0..SEGMENTS)
        .map(|i| {
            cluster
                .master_for_key(stocks[0].segment_key(i))
                .expect("master for a segment")
                .port
        })
        .collect();
    assert_eq!(
        masters.len(),
        3,
        "the 16 segments must land on all 3 masters"
    );
    assert!(matches!(
        stocks[0].init(UNITS).await.unwrap(),
        dlock::stock::Init::Created
    ));
    assert!(matches!(
        stocks[1].init(UNITS).await.unwrap(),
        dlock::stock::Init::Existing { total: UNITS }
    ));

    // Each buyer takes its share of the orders through one client, and sends every order a
    // second time (a retry) through the other: an order takes at most once whichever answers.
    let results: Arc<Mutex<BTreeMap<String, Vec<Take>>>> = Arc::default();
    let buyers = (0..BUYERS).map(|b| {
        let first = stocks[b % 2].clone();
        let retry = stocks[(b + 1) % 2].clone();
        let results = results.clone();
        tokio::spawn(async move {
            for o in (b..ORDERS).step_by(BUYERS) {
                let id = format!("order-{o}");
                let a = first.take(&id, 1).await.expect("take");
                let b = retry.take(&id, 1).await.expect("retried take");
                results.lock().unwrap().insert(id, vec![a, b]);
            }
        })
    });
    for done in bounded(RUN, "buyers", futures_util::future::join_all(buyers)).await {
        done.expect("buyer task");
    }

    let results = std::mem::take(&mut *results.lock().unwrap());
    assert_eq!(results.len(), ORDERS);
    let mut sold = 0u64;
    for (id, takes) in results.iter() {
        let taken = takes.iter().filter(|t| t.is_taken()).count();
        assert!(taken <= 1, "{id} took twice: {takes:?}");
        if taken == 1 {
            sold += 1;
            assert!(
                matches!(takes[..], [Take::Taken { .. }, Take::AlreadyTaken]),
                "{id}: the retry of a taken order must say AlreadyTaken: {takes:?}"
            );
        } else {
            assert!(takes.iter().all(|t| *t == Take::SoldOut), "{id}: {takes:?}");
        }
    }
    let remaining = stocks[1].remaining().await.unwrap();
    let audit = stocks[0].audit().await.unwrap();
    println!(
        "segmented stock on the cluster: {sold} sold, {remaining} left of {UNITS}; {} orders \
         hold stock; segments on {} masters",
        audit.holders,
        masters.len()
    );
    assert_eq!(
        sold, UNITS,
        "every unit sells: there are more orders than units"
    );
    assert_eq!(sold + remaining, UNITS);
    assert!(audit.is_consistent(), "{audit:#?}");
    assert_eq!(audit.sold, sold);
    assert_eq!(audit.holders, sold);
    assert_eq!(audit.initial, UNITS);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn segment_locks_on_a_cluster_deduct_exactly_under_their_locks() {
    const PER_SEGMENT: u64 = 5;
    const LOCK_SEGMENTS: u32 = 8;
    const ORDERS: usize = 60;
    const BUYERS: usize = 6;
    let cluster = shared_cluster();
    let clients = [cluster_client(cluster).await, cluster_client(cluster).await];
    let locks: Vec<SegmentLocks> = clients
        .iter()
        .map(|c| {
            SegmentLocks::new(c, "cluster:seglocks", LOCK_SEGMENTS)
                .unwrap()
                .wait(Duration::from_secs(20))
        })
        .collect();
    let masters: BTreeSet<u16> = (0..LOCK_SEGMENTS)
        .map(|i| {
            let key = clients[0].lock(locks[0].lock_name(i)).key().to_owned();
            cluster.master_for_key(&key).expect("master").port
        })
        .collect();
    assert_eq!(
        masters.len(),
        3,
        "the segment locks must land on all 3 masters"
    );

    // "Your database": one counter per segment, read and written in two steps, so only the
    // segment lock keeps it exact. The last fencing token seen per segment goes with it.
    let db_key = |i: u32| format!("cluster:seglocks:db:{i}");
    let mut conn = raw(cluster).await;
    for i in 0..LOCK_SEGMENTS {
        let () = conn.set(db_key(i), PER_SEGMENT).await.unwrap();
    }
    let fences: Arc<Mutex<BTreeMap<u32, u64>>> = Arc::default();
    let buyers = (0..BUYERS).map(|b| {
        let locks = locks[b % 2].clone();
        let fences = fences.clone();
        let conn = conn.clone();
        tokio::spawn(async move {
            let mut sold = 0u64;
            for o in (b..ORDERS).step_by(BUYERS) {
                let route = format!("buyer-{o}");
                let got = locks
                    .deduct(&route, |seg| {
                        let mut conn = conn.clone();
                        let fences = fences.clone();
                        async move {
                            {
                                let mut f = fences.lock().unwrap();
                                let last = f.entry(seg.segment).or_default();
                                assert!(
                                    seg.fencing_token > *last,
                                    "segment {}: token {} after {}",
                                    seg.segment,
                                    seg.fencing_token,
                                    *last
                                );
                                *last = seg.fencing_token;
                            }
                            let key = format!("cluster:seglocks:db:{}", seg.segment);
                            let left: u64 = conn.get(&key).await.expect("GET");
                            if left == 0 {
                                return Ok::<_, LockError>(None);
                            }
                            tokio::task::yield_now().await;
                            let () = conn.set(&key, left - 1).await.expect("SET");
                            Ok(Some(seg.segment))
                        }
                    })
                    .await
                    .expect("deduct");
                sold += u64::from(got.is_some());
            }
            sold
        })
    });
    let mut sold = 0;
    for done in bounded(RUN, "buyers", futures_util::future::join_all(buyers)).await {
        sold += done.expect("buyer task");
    }
    let mut left = 0u64;
    for i in 0..LOCK_SEGMENTS {
        let n: u64 = conn.get(db_key(i)).await.unwrap();
        left += n;
    }
    println!("segment locks on the cluster: {sold} sold, {left} left");
    let total = PER_SEGMENT * u64::from(LOCK_SEGMENTS);
    assert_eq!(
        sold, total,
        "every unit sells: there are more orders than units"
    );
    assert_eq!(left, 0);
    for i in 0..LOCK_SEGMENTS {
        let lock = clients[0].lock(locks[0].lock_name(i));
        assert!(
            !lock.is_locked().await.unwrap(),
            "segment lock {i} left held"
        );
    }
}
