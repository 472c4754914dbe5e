//! SegmentLocks: stock kept outside dlock (here: plain Redis keys read and written without any
//! atomicity, like rows of a database), one dlock lock per segment around the deduction.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use dlock::redis::aio::MultiplexedConnection;
use dlock::redis::AsyncCommands;
use dlock::testing::RedisServer;
use dlock::{LockClient, LockError, SegmentLocks};

const SEGMENTS: u32 = 8;

/// "The user's database": one row per segment, read then written (racy without a lock).
#[derive(Clone)]
struct Rows {
    conn: MultiplexedConnection,
}

impl Rows {
    async fn new(url: &str, per_segment: u64) -> Self {
        let conn = dlock::redis::Client::open(url)
            .unwrap()
            .get_multiplexed_async_connection()
            .await
            .unwrap();
        let mut rows = Rows { conn };
        for seg in 0..SEGMENTS {
            let _: () = rows
                .conn
                .set(format!("row:{seg}"), per_segment)
                .await
                .unwrap();
        }
        rows
    }

    async fn get(&self, seg: u32) -> u64 {
        self.conn.clone().get(format!("row:{seg}")).await.unwrap()
    }

    async fn set(&self, seg: u32, v: u64) {
        let _: () = self
            .conn
            .clone()
            .set(format!("row:{seg}"), v)
            .await
            .unwrap();
    }

    async fn total(&self) -> u64 {
        let mut sum = 0;
        for seg in 0..SEGMENTS {
            sum += self.get(seg).await;
        }
        sum
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn segment_locks_never_oversell_and_sell_everything_despite_skewed_routes() {
    let server = RedisServer::start().expect("redis-server");
    let client = LockClient::connect(&server.url()).await.unwrap();
    let rows = Rows::new(&server.url(), 10).await; // 80 units
    let locks = SegmentLocks::new(&client, "sku:rows", SEGMENTS).unwrap();
    // Every route starts at segment 0.
    let routes: Vec<String> = (0..)
        .map(|i| format!("buyer-{i}"))
        .filter(|r| locks.home_segment(r) == 0)
        .take(200)
        .collect();
    let sold = Arc::new(AtomicU64::new(0));
    let tasks: Vec<_> = routes
        .chunks(200 / 64 + 1)
        .map(|chunk| {
            let (locks, rows, sold) = (locks.clone(), rows.clone(), sold.clone());
            let chunk = chunk.to_vec();
            tokio::spawn(async move {
                for route in chunk {
                    let rows = &rows;
                    let got = locks
                        .deduct(&route, |seg| async move {
                            let left = rows.get(seg.segment).await;
                            if left == 0 {
                                return Ok::<_, LockError>(None);
                            }
                            // The row is read and written in two round trips: only the
                            // segment lock keeps two buyers from both taking the same unit.
                            rows.set(seg.segment, left - 1).await;
                            Ok(Some(seg.segment))
                        })
                        .await
                        .unwrap();
                    if got.is_some() {
                        sold.fetch_add(1, Ordering::Relaxed);
                    }
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    assert_eq!(sold.load(Ordering::Relaxed), 80);
    assert_eq!(rows.total().await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_closure_runs_under_the_segment_lock_and_errors_release_it() {
    let server = RedisServer::start().expect("redis-server");
    let client = LockClient::connect(&server.url()).await.unwrap();
    let locks = SegmentLocks::new(&client, "sku:err", 4).unwrap();

    #[derive(Debug)]
    enum AppError {
        Db,
        Lock(#[allow(dead_code)] LockError),
    }
    impl From<LockError> for AppError {
        fn from(e: LockError) -> Self {
            AppError::Lock(e)
        }
    }

    let client2 = client.clone();
    let names: Vec<String> = (0..4).map(|i| locks.lock_name(i).to_owned()).collect();
    let result: Result<Option<()>, AppError> = locks
        .deduct("r1", |seg| {
            let (client, name) = (client2.clone(), names[seg.segment as usize].clone());
            async move {
                assert!(seg.fencing_token > 0);
                // Held while the closure runs ...
                assert!(client.lock(name).is_locked().await.unwrap());
                Err(AppError::Db)
            }
        })
        .await;
    assert!(matches!(result, Err(AppError::Db)), "{result:?}");
    // ... and released when it fails.
    for i in 0..4 {
        assert!(!client.lock(locks.lock_name(i)).is_locked().await.unwrap());
    }

    // Every segment empty: None, after asking each segment once.
    let asked = AtomicU64::new(0);
    let none: Option<u32> = locks
        .deduct("r2", |_| {
            asked.fetch_add(1, Ordering::Relaxed);
            async { Ok::<_, LockError>(None) }
        })
        .await
        .unwrap();
    assert_eq!(none, None);
    assert_eq!(asked.load(Ordering::Relaxed), 4);
    // While all look drained, only the home segment is asked.
    let _ = locks
        .deduct("r3", |_| {
            asked.fetch_add(1, Ordering::Relaxed);
            async { Ok::<_, LockError>(None::<()>) }
        })
        .await
        .unwrap();
    assert_eq!(asked.load(Ordering::Relaxed), 5);
}
