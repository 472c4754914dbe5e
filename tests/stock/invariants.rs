//! SegmentedStock under concurrency: sold + remaining == initial, never negative, each order id
//! at most once (retries and duplicates included), give-back restores and is idempotent.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use dlock::stock::Take;
use dlock::testing::RedisServer;
use dlock::{LockClient, SegmentedStock};

async fn stock(segments: u32, total: u64) -> (RedisServer, SegmentedStock) {
    let server = RedisServer::start().expect("redis-server");
    let client = LockClient::connect(&server.url()).await.unwrap();
    let stock = SegmentedStock::new(&client, "sku:inv", segments).unwrap();
    assert_eq!(
        stock.init(total).await.unwrap(),
        dlock::stock::Init::Created
    );
    (server, stock)
}

/// Runs `jobs` on 64 tasks pulling from one queue.
async fn on_64_tasks<J, F, Fut>(jobs: Vec<J>, f: F)
where
    J: Send + 'static,
    F: Fn(J) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = ()> + Send,
{
    let queue = Arc::new(Mutex::new(jobs.into_iter()));
    let f = Arc::new(f);
    let tasks: Vec<_> = (0..64)
        .map(|_| {
            let (queue, f) = (queue.clone(), f.clone());
            tokio::spawn(async move {
                loop {
                    let job = queue.lock().unwrap().next();
                    match job {
                        Some(job) => f(job).await,
                        None => break,
                    }
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_takes_retries_and_give_backs_keep_every_invariant() {
    const INITIAL: u64 = 300;
    let (_server, stock) = stock(8, INITIAL).await;

    // 400 orders of 1 to 3 units (demand ~800 > 300), each sent twice, the copies far apart
    // in the queue so they race with other orders rather than each other only.
    let qty = |i: usize| 1 + (i % 3) as u64;
    let jobs: Vec<usize> = (0..400).chain(0..400).collect();
    let results: Arc<Mutex<HashMap<usize, Vec<Take>>>> = Arc::default();
    let (s, r) = (stock.clone(), results.clone());
    on_64_tasks(jobs, move |i| {
        let (stock, results) = (s.clone(), r.clone());
        async move {
            let take = stock.take(&format!("order-{i}"), qty(i)).await.unwrap();
            results.lock().unwrap().entry(i).or_default().push(take);
        }
    })
    .await;

    let results = Arc::try_unwrap(results).unwrap().into_inner().unwrap();
    let mut held: HashMap<usize, u64> = HashMap::new();
    for (i, takes) in &results {
        let taken = takes.iter().filter(|t| t.is_taken()).count();
        assert!(taken <= 1, "order-{i} deducted {taken} times: {takes:?}");
        if taken == 1 {
            for t in takes.iter().filter(|t| !t.is_taken()) {
                assert_eq!(*t, Take::AlreadyTaken, "order-{i}: {takes:?}");
            }
            held.insert(*i, qty(*i));
        }
        for t in takes {
            if let Take::Split { parts } = t {
                assert_eq!(parts.iter().map(|p| p.units).sum::<u64>(), qty(*i));
            }
        }
    }
    let sold: u64 = held.values().sum();
    let audit = stock.audit().await.unwrap();
    assert!(audit.is_consistent(), "{audit:#?}");
    assert_eq!(
        audit.sold, sold,
        "the records agree with what the callers were told"
    );
    assert_eq!(audit.remaining, INITIAL - sold);
    assert_eq!(stock.remaining().await.unwrap(), INITIAL - sold);

    // Cancel every fifth order that holds stock, twice at once: one give-back's worth returns.
    let cancelled: Vec<usize> = held.keys().copied().filter(|i| i % 5 == 0).collect();
    let jobs: Vec<usize> = cancelled.iter().chain(cancelled.iter()).copied().collect();
    let returned: Arc<Mutex<HashMap<usize, u64>>> = Arc::default();
    let (s, r) = (stock.clone(), returned.clone());
    on_64_tasks(jobs, move |i| {
        let (stock, returned) = (s.clone(), r.clone());
        async move {
            let units = stock.give_back(&format!("order-{i}")).await.unwrap();
            *returned.lock().unwrap().entry(i).or_default() += units;
        }
    })
    .await;
    let returned = Arc::try_unwrap(returned).unwrap().into_inner().unwrap();
    let mut back = 0;
    for i in &cancelled {
        assert_eq!(returned[i], qty(*i), "order-{i} gave back once, in full");
        back += qty(*i);
        // A late retry of a cancelled order deducts nothing.
        let again = stock.take(&format!("order-{i}"), qty(*i)).await.unwrap();
        assert_eq!(again, Take::GivenBack);
        assert_eq!(stock.give_back(&format!("order-{i}")).await.unwrap(), 0);
    }
    assert!(back > 0, "some orders were cancelled");
    assert_eq!(stock.remaining().await.unwrap(), INITIAL - sold + back);

    // A second wave of single-unit buyers, more than the stock: everything sells.
    let (s, sold2) = (stock.clone(), Arc::new(Mutex::new(0u64)));
    let counter = sold2.clone();
    on_64_tasks((0..400).collect(), move |i: usize| {
        let (stock, counter) = (s.clone(), counter.clone());
        async move {
            if stock
                .take(&format!("wave2-{i}"), 1)
                .await
                .unwrap()
                .is_taken()
            {
                *counter.lock().unwrap() += 1;
            }
        }
    })
    .await;
    assert_eq!(*sold2.lock().unwrap(), INITIAL - sold + back);
    assert_eq!(stock.remaining().await.unwrap(), 0);
    let audit = stock.audit().await.unwrap();
    assert!(audit.is_consistent(), "{audit:#?}");
    assert_eq!(audit.sold, INITIAL);
    assert_eq!(audit.returned, back);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_never_deducts_where_the_first_attempt_walked_past() {
    // Two segments of one unit. `a` and `b` both start at segment 0: `a` takes it, `b` walks
    // past to segment 1. Then `a` is cancelled, refilling segment 0. A retry of `b` must stop
    // at segment 1 (AlreadyTaken), not take segment 0's unit a second time.
    let (_server, stock) = stock(2, 2).await;
    let mut home0 = (0..)
        .map(|i| format!("o{i}"))
        .filter(|id| stock.home_segment(id) == 0);
    let (a, b) = (home0.next().unwrap(), home0.next().unwrap());
    assert_eq!(stock.take(&a, 1).await.unwrap(), Take::Taken { segment: 0 });
    assert_eq!(stock.take(&b, 1).await.unwrap(), Take::Taken { segment: 1 });
    assert_eq!(stock.give_back(&a).await.unwrap(), 1);
    assert_eq!(stock.take(&b, 1).await.unwrap(), Take::AlreadyTaken);
    assert_eq!(stock.remaining().await.unwrap(), 1);
    // Asking for another quantity does not make it a new order either.
    assert_eq!(stock.take(&b, 2).await.unwrap(), Take::AlreadyTaken);
    assert_eq!(stock.give_back(&b).await.unwrap(), 1);
    assert_eq!(stock.give_back(&b).await.unwrap(), 0, "idempotent");
    assert_eq!(stock.remaining().await.unwrap(), 2);
    assert!(stock.audit().await.unwrap().is_consistent());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn duplicates_of_one_order_fired_at_once_deduct_once() {
    let (_server, stock) = stock(4, 40).await;
    let mut sold = 0;
    for round in 0..20 {
        let id = format!("dup-{round}");
        let qty = 1 + round % 4;
        let tasks: Vec<_> = (0..16)
            .map(|_| {
                let (stock, id) = (stock.clone(), id.clone());
                tokio::spawn(async move { stock.take(&id, qty).await.unwrap() })
            })
            .collect();
        let mut answers = Vec::new();
        for t in tasks {
            answers.push(t.await.unwrap());
        }
        let taken = answers.iter().filter(|t| t.is_taken()).count();
        assert!(taken <= 1, "{id} reported taken {taken} times: {answers:?}");
        if taken == 1 {
            sold += qty;
        }
        // Exactly the order's quantity, once, or nothing: the records are the judge.
        let audit = stock.audit().await.unwrap();
        assert!(audit.is_consistent(), "{audit:#?}");
        assert_eq!(audit.sold, sold, "{id}: {answers:?}");
    }
    assert_eq!(stock.remaining().await.unwrap(), 40 - sold);
}
