//! Cancelled acquires (DESIGN §4): an acquire future dropped after its request went out may have
//! been granted a lock nobody holds. Hundreds of acquires are dropped at random points, with the
//! lock held by another client (the acquire is waiting) and free (it may be granted just as it
//! is cancelled). Afterwards no lock may be left behind, and nothing may be stuck.

use crate::common;

use std::time::Duration;

use common::Rng;
use dlock::Lock;
use futures_util::{FutureExt, StreamExt};

const ITERATIONS: usize = 300;
const SMALL_BOUND: Duration = Duration::from_secs(2);

/// Starts an acquire of `lock` and drops it at a random point (or lets it finish and drops the
/// guard), one of three ways a real program cancels.
async fn cancelled_acquire(lock: &Lock, rng: &mut Rng) {
    match rng.below(3) {
        0 => {
            let limit = Duration::from_micros(rng.below(2000));
            drop(tokio::time::timeout(limit, lock.acquire()).await);
        }
        1 => {
            let yields = rng.below(20);
            tokio::select! {
                r = lock.acquire() => drop(r),
                _ = common::yield_times(yields) => {}
            }
        }
        _ => {
            let l = lock.clone();
            let task = tokio::spawn(async move { drop(l.acquire().await) });
            common::yield_times(rng.below(20)).await;
            task.abort();
            let _ = task.await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acquires_dropped_at_random_points_leave_no_lock_behind() {
    let server = common::server();
    let holder = common::client(&server).await;
    let canceller = common::client(&server).await;
    let fresh = common::client(&server).await;
    let mut rng = Rng::from_clock();
    let name = "cancel-storm";
    // Long TTL: only an explicit release (of the orphan too) frees the lock in time.
    let ttl = Duration::from_secs(60);

    for i in 0..ITERATIONS {
        let held = rng.below(2) == 0;
        let guard = if held {
            Some(holder.lock(name).ttl(ttl).acquire().await.unwrap())
        } else {
            None
        };
        for _ in 0..1 + rng.below(3) {
            // Mostly another client; sometimes the holder's own client, whose acquires queue
            // locally behind the hold.
            let client = if rng.below(4) == 0 {
                &holder
            } else {
                &canceller
            };
            cancelled_acquire(&client.lock(name).ttl(ttl), &mut rng).await;
        }
        if let Some(g) = guard {
            // The cancelled acquires did not disturb the real holder.
            assert!(!g.is_lost(), "iteration {i}");
            g.release()
                .await
                .unwrap_or_else(|e| panic!("iteration {i}: {e}"));
        }

        let lock = fresh.lock(name);
        common::until_unlocked(&lock, SMALL_BOUND).await;
        // Free in Redis: a client with no local state gets it at once...
        let g = lock.try_acquire().await.unwrap();
        assert!(g.is_some(), "iteration {i}: free lock refused");
        g.unwrap().release().await.unwrap();
        // ...and neither client that cancelled is stuck on it.
        for client in [&holder, &canceller] {
            let g = client.lock(name).wait(SMALL_BOUND).acquire().await;
            let g = g.unwrap_or_else(|e| panic!("iteration {i}: {e}"));
            g.release().await.unwrap();
        }
    }

    let mut conn = common::raw(&server.url()).await;
    assert!(common::lock_keys(&mut conn).await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acquire_dropped_after_its_request_reached_redis_is_released_not_left_to_its_ttl() {
    // The narrowest case, made deterministic: Redis holds back writes (CLIENT PAUSE WRITE), the
    // acquire's script reaches it and blocks, the future is dropped, then Redis resumes and
    // grants the lock to an owner nobody holds any more. The clean-up must free it at once.
    const ROUNDS: u64 = 50;
    let server = common::server();
    let client = common::client(&server).await;
    let lock = client.lock("orphan").ttl(Duration::from_secs(60));
    let probe = common::client(&server).await.lock("orphan");
    let mut admin = common::raw(&server.url()).await;
    // Load the scripts first: a paused EVALSHA that met NOSCRIPT would never run at all.
    lock.acquire().await.unwrap().release().await.unwrap();
    let grants = count_grants(&server.url(), lock.key()).await;
    let calls = common::script_calls(&mut admin).await;

    for round in 0..ROUNDS {
        redis_cmd(&mut admin, &["CLIENT", "PAUSE", "10000", "WRITE"]).await;
        {
            let mut acquire = std::pin::pin!(lock.acquire());
            // Poll until the script is parked inside Redis (reads still run during the pause).
            common::eventually(Duration::from_secs(5), "acquire blocked in redis", || {
                let pending = acquire.as_mut().now_or_never().is_none();
                assert!(
                    pending,
                    "round {round}: acquire finished while writes were paused"
                );
                let mut conn = admin.clone();
                async move { blocked_clients(&mut conn).await >= 1 }
            })
            .await;
        } // dropped here: the request is in Redis, its reply will never be read
        redis_cmd(&mut admin, &["CLIENT", "UNPAUSE"]).await;
        common::until_unlocked(&probe, SMALL_BOUND).await;
    }
    // Every round really was granted (and so really had to be cleaned up).
    assert_eq!(grants.finish().await, ROUNDS);
    // With one script call each way: the acquire and its undo. An undo whose answer the
    // clean-up failed to read would be sent again 100 ms later on another connection: time is
    // the subject here, so wait five times that for any repeat to show.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        common::script_calls(&mut admin).await - calls,
        2 * ROUNDS,
        "script calls of {ROUNDS} cancelled acquires and their clean-ups"
    );
    assert!(common::lock_keys(&mut admin).await.is_empty());
}

async fn redis_cmd(conn: &mut dlock::redis::aio::MultiplexedConnection, args: &[&str]) {
    let () = dlock::redis::cmd(args[0])
        .arg(&args[1..])
        .query_async(conn)
        .await
        .unwrap();
}

/// `blocked_clients` from INFO clients (clients parked by CLIENT PAUSE count as blocked).
async fn blocked_clients(conn: &mut dlock::redis::aio::MultiplexedConnection) -> u64 {
    let info: String = dlock::redis::cmd("INFO")
        .arg("clients")
        .query_async(conn)
        .await
        .unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix("blocked_clients:"))
        .and_then(|v| v.trim().parse().ok())
        .expect("blocked_clients in INFO")
}

/// Counts the grants of a lock (HSET on its key: acquire.lua's free -> held write) through
/// keyspace notifications, until `finish`.
struct GrantCounter {
    conn: dlock::redis::aio::MultiplexedConnection,
    marker: String,
    task: tokio::task::JoinHandle<u64>,
}

async fn count_grants(url: &str, key: &str) -> GrantCounter {
    let mut conn = common::raw(url).await;
    let () = dlock::redis::cmd("CONFIG")
        .arg("SET")
        .arg("notify-keyspace-events")
        .arg("Kh")
        .query_async(&mut conn)
        .await
        .unwrap();
    let events = format!("__keyspace@0__:{key}");
    let marker = "test:grant-counter:end".to_owned();
    let mut pubsub = dlock::redis::Client::open(url)
        .unwrap()
        .get_async_pubsub()
        .await
        .unwrap();
    pubsub.subscribe(&[&events, &marker]).await.unwrap();
    let end = marker.clone();
    let task = tokio::spawn(async move {
        let mut messages = pubsub.into_on_message();
        let mut grants = 0;
        while let Some(msg) = messages.next().await {
            if msg.get_channel_name() == end {
                break;
            }
            if msg.get_payload::<String>().unwrap() == "hset" {
                grants += 1;
            }
        }
        grants
    });
    GrantCounter { conn, marker, task }
}

impl GrantCounter {
    /// Every event before this call is counted: Redis delivers the marker after them.
    async fn finish(mut self) -> u64 {
        let _: i64 = dlock::redis::cmd("PUBLISH")
            .arg(&self.marker)
            .arg("end")
            .query_async(&mut self.conn)
            .await
            .unwrap();
        tokio::time::timeout(Duration::from_secs(5), self.task)
            .await
            .expect("grant counter did not see its end marker")
            .unwrap()
    }
}
