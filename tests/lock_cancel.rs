//! Cancelled acquires (DESIGN §4): an acquire future dropped after its request went out may have
//! been granted a lock nobody holds. Hundreds of acquires are dropped at random points, with the
//! lock held by another client (the acquire is waiting) and free (it may be granted just as it
//! is cancelled). Afterwards no lock may be left behind, and nothing may be stuck.

mod common;

use std::time::Duration;

use common::Rng;
use dlock::Lock;
use futures_util::FutureExt;

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
async fn an_acquire_cancelled_on_a_free_lock_is_released_not_left_to_its_ttl() {
    // The narrowest case, many times: the lock is free, so every acquire that reached Redis was
    // granted; the future is dropped before the reply is seen.
    let server = common::server();
    let client = common::client(&server).await;
    let lock = client.lock("orphan").ttl(Duration::from_secs(60));
    let probe = common::client(&server).await.lock("orphan");
    let mut sent = 0;
    for _ in 0..200 {
        // Polled once (the request goes out and the future waits for the reply), then dropped.
        if lock.acquire().now_or_never().is_none() {
            sent += 1;
        }
        common::until_unlocked(&probe, SMALL_BOUND).await;
    }
    assert!(sent > 100, "only {sent} acquires were cut off mid-request");
    // Each free -> held transition takes a fencing token: proof the dropped requests really
    // were granted (and so really had to be cleaned up).
    let mut conn = common::raw(&server.url()).await;
    let grants: u64 = dlock::redis::cmd("GET")
        .arg(format!("{}:fence", lock.key()))
        .query_async(&mut conn)
        .await
        .unwrap();
    println!("{grants} grants for {sent} requests cut off");
    assert!(grants >= 10, "{grants} grants for {sent} requests cut off");
}
