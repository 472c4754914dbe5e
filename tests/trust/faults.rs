//! Faults on the Redis side (DESIGN §7-8): a flushed script cache, a killed subscriber
//! connection, a Redis restart. Each ends in recovery or a clear error, never a panic or a hang.

use crate::common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use dlock::{LockClient, LockError};

/// Every call in these tests must come back within this, error or not.
const NO_HANG: Duration = Duration::from_secs(15);

async fn bounded<T>(what: &str, fut: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(NO_HANG, fut)
        .await
        .unwrap_or_else(|_| panic!("{what} hung for {NO_HANG:?}"))
}

async fn script_flush(conn: &mut dlock::redis::aio::MultiplexedConnection) {
    let () = dlock::redis::cmd("SCRIPT")
        .arg("FLUSH")
        .query_async(conn)
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn script_flush_while_locks_are_held_and_waited_on_is_invisible() {
    let server = common::server();
    let mut admin = common::raw(&server.url()).await;
    let holder = common::client(&server).await;
    let waiting = common::client(&server).await;

    // Held (short TTL, so the watchdog's renew script runs often) and waited on.
    let lock = holder.lock("flushed").ttl(Duration::from_millis(600));
    let held = lock.acquire().await.unwrap();
    let waiter = {
        let l = waiting.lock("flushed").wait(Duration::from_secs(10));
        tokio::spawn(async move {
            let g = l.acquire().await?;
            g.release().await
        })
    };
    script_flush(&mut admin).await;
    // Renewals (every 200 ms) meet NOSCRIPT, reload, and keep the 600 ms lease alive.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(!held.is_lost(), "a renewal failed after SCRIPT FLUSH");
    assert!(lock.is_locked().await.unwrap());

    script_flush(&mut admin).await;
    held.release().await.expect("release after SCRIPT FLUSH");
    // No flush while the woken waiter runs: one landing between its reload and its EVALSHA
    // is the runtime bug shown by `calls_racing_a_script_flush_storm_still_succeed`.
    bounded("waiter", waiter)
        .await
        .unwrap()
        .expect("waiter acquire/release after SCRIPT FLUSH");

    // Every script once more, each right after a flush.
    for i in 0..20 {
        script_flush(&mut admin).await;
        let g = lock
            .acquire()
            .await
            .unwrap_or_else(|e| panic!("round {i}: {e}"));
        script_flush(&mut admin).await;
        let inner = g.scope(lock.acquire()).await.unwrap();
        script_flush(&mut admin).await;
        inner.release().await.unwrap();
        script_flush(&mut admin).await;
        g.release()
            .await
            .unwrap_or_else(|e| panic!("round {i}: {e}"));
    }
    let _held = lock.acquire().await.unwrap();
    script_flush(&mut admin).await;
    assert!(lock.force_unlock().await.unwrap());
    assert!(common::lock_keys(&mut admin).await.is_empty());
}

// Regression (fixed in 0133e04): redis-rs's `Script::invoke_async` answers NOSCRIPT with SCRIPT
// LOAD and one more EVALSHA, so a flush landing between the two failed the call; a failed
// release then left the lock held by nobody until its TTL. Two flushers in a loop hit that
// window on almost every call; the runtime now falls back to EVAL with the script's text.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_racing_a_script_flush_storm_still_succeed() {
    calls_racing_a_flush_storm_still_succeed("SCRIPT").await;
}

// The same with the function library (issue 17 item 4): a call that finds the library
// missing runs from its text while the library is loaded again, so no FUNCTION FLUSH, however
// timed, fails it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_racing_a_function_flush_storm_still_succeed() {
    if common::functions_or_skip("FUNCTION FLUSH under calls") {
        calls_racing_a_flush_storm_still_succeed("FUNCTION").await;
    }
}

/// 200 acquire + release calls while two tasks send `<what> FLUSH` in a loop.
async fn calls_racing_a_flush_storm_still_succeed(what: &'static str) {
    let server = common::server();
    let mut admin = common::raw(&server.url()).await;
    let done = Arc::new(AtomicBool::new(false));
    let flushers: Vec<_> = (0..2)
        .map(|_| {
            let mut conn = admin.clone();
            let done = done.clone();
            tokio::spawn(async move {
                while !done.load(Ordering::SeqCst) {
                    let () = dlock::redis::cmd(what)
                        .arg("FLUSH")
                        .query_async(&mut conn)
                        .await
                        .unwrap();
                }
            })
        })
        .collect();
    let client = common::client(&server).await;
    let mut failures = Vec::new();
    for i in 0..200 {
        let lock = client
            .lock(format!("storm-{}", i % 5))
            .wait(Duration::from_secs(1));
        match bounded("acquire", lock.acquire()).await {
            Ok(g) => {
                if let Err(e) = bounded("release", g.release()).await {
                    failures.push(format!("release {i}: {e}"));
                }
            }
            Err(e) => failures.push(format!("acquire {i}: {e}")),
        }
    }
    done.store(true, Ordering::SeqCst);
    for f in flushers {
        f.await.unwrap();
    }
    let left = common::lock_keys(&mut admin).await;
    assert!(
        failures.is_empty() && left.is_empty(),
        "{} failed calls (first: {:?}); locks left held by nobody: {left:?}",
        failures.len(),
        failures.first()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_still_get_the_lock_after_their_subscriber_is_killed() {
    let server = common::server();
    let holder = common::client(&server).await;
    // Short leases everywhere: even a waiter that missed every message would retry at the
    // holder's PTTL, so the bounds below hold through reconnect or fallback alike.
    let lease = Duration::from_secs(2);
    let guard = holder
        .lock("sub-kill")
        .lease(lease)
        .acquire()
        .await
        .unwrap();
    let channel = guard_channel(&holder, "sub-kill");

    let mut waiters = Vec::new();
    for _ in 0..2 {
        let client = common::client(&server).await;
        for _ in 0..3 {
            let lock = client
                .lock("sub-kill")
                .lease(lease)
                .wait(Duration::from_secs(30));
            waiters.push(tokio::spawn(async move {
                let g = lock.acquire().await?;
                let at = Instant::now();
                g.release().await?;
                Ok::<_, LockError>(at)
            }));
        }
    }
    let mut admin = common::raw(&server.url()).await;
    until_subscribers(&mut admin, &channel, 2).await;

    let killed: i64 = dlock::redis::cmd("CLIENT")
        .arg("KILL")
        .arg("TYPE")
        .arg("pubsub")
        .query_async(&mut admin)
        .await
        .unwrap();
    assert!(killed >= 2, "killed {killed} subscriber connections");
    // Both clients reconnect and subscribe again while their tasks keep waiting.
    until_subscribers(&mut admin, &channel, 2).await;

    let released_at = Instant::now();
    guard.release().await.unwrap();
    let mut first = None::<Instant>;
    for w in waiters {
        let at = bounded("waiter", w).await.unwrap().expect("waiter failed");
        first = Some(first.map_or(at, |f| f.min(at)));
    }
    let handoff = first.unwrap() - released_at;
    assert!(
        handoff < Duration::from_secs(1),
        "first waiter woke after {handoff:?}"
    );
    assert!(released_at.elapsed() < Duration::from_secs(10));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_during_the_subscriber_reconnect_is_not_waited_out_past_the_lease() {
    let server = common::server();
    let holder = common::client(&server).await;
    let waiting = common::client(&server).await;
    let lease = Duration::from_secs(2);
    let guard = holder
        .lock("sub-race")
        .lease(lease)
        .acquire()
        .await
        .unwrap();
    let channel = guard_channel(&holder, "sub-race");
    let lock = waiting.lock("sub-race").wait(Duration::from_secs(30));
    let waiter = tokio::spawn(async move { lock.acquire().await.map(|_| Instant::now()) });
    let mut admin = common::raw(&server.url()).await;
    until_subscribers(&mut admin, &channel, 1).await;

    // Kill and release at once: the release message may be lost. The reconnect wake-up or,
    // at worst, the holder's PTTL gets the waiter going.
    let _: i64 = dlock::redis::cmd("CLIENT")
        .arg("KILL")
        .arg("TYPE")
        .arg("pubsub")
        .query_async(&mut admin)
        .await
        .unwrap();
    let released_at = Instant::now();
    guard.release().await.unwrap();
    let at = bounded("waiter", waiter)
        .await
        .unwrap()
        .expect("waiter failed");
    let took = at - released_at;
    assert!(took < lease + Duration::from_millis(500), "{took:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_restart_under_held_and_waited_locks_gives_errors_or_recovery_not_hangs() {
    let mut server = common::server();
    let url = server.url();
    let holder = common::client(&server).await;
    let waiting = common::client(&server).await;
    let short = holder.lock("restart-short").ttl(Duration::from_secs(2));
    let held_short = short.acquire().await.unwrap();
    let held_long = holder.lock("restart-long").acquire().await.unwrap();

    let mut waiters = Vec::new();
    for _ in 0..3 {
        let lock = waiting.lock("restart-short").wait(Duration::from_secs(8));
        waiters.push(tokio::spawn(async move {
            match lock.acquire().await {
                Ok(g) => g.release().await.map(|_| "acquired"),
                Err(e) => Err(e),
            }
        }));
    }
    let mut admin = common::raw(&url).await;
    until_subscribers(&mut admin, short.channel(), 1).await;

    server.kill();
    // Down: calls fail with an error naming the URL, promptly.
    let err = bounded("is_locked while down", short.is_locked())
        .await
        .expect_err("redis is down");
    assert!(
        err.to_string().contains(&url),
        "error does not name {url}: {err}"
    );
    // Unreachable past its 2 s lease: the holder is told it lost the lock.
    bounded("lost() while down", held_short.lost()).await;

    server.restart().unwrap();
    for w in waiters {
        // Each waiter either got the (now empty) lock after the restart or failed clearly.
        let outcome = bounded("waiter", w).await.expect("waiter panicked");
        println!("waiter across the restart: {outcome:?}");
        match outcome {
            Ok(_) => {}
            Err(LockError::Redis { url: u, .. }) => assert_eq!(u, url),
            Err(LockError::Timeout { .. } | LockError::NotHeld { .. }) => {}
            Err(e) => panic!("unexpected error from a waiter: {e}"),
        }
    }
    // The holds from before the restart are gone with Redis' data: releasing them is an error
    // (NotHeld, or Redis while reconnecting), not a panic or a hang.
    for (name, guard) in [("short", held_short), ("long", held_long)] {
        let r = bounded("release after restart", guard.release()).await;
        println!("release of {name} after the restart: {r:?}");
        assert!(
            matches!(r, Err(LockError::NotHeld { .. } | LockError::Redis { .. })),
            "{name}: {r:?}"
        );
    }

    // Recovery: both clients take and give back locks again.
    for client in [&holder, &waiting] {
        let lock = client.lock("after-restart").wait(Duration::from_secs(2));
        let start = Instant::now();
        loop {
            match bounded("acquire after restart", lock.acquire()).await {
                Ok(g) => {
                    g.release().await.unwrap();
                    break;
                }
                Err(e) if start.elapsed() < Duration::from_secs(10) => {
                    eprintln!("retrying after restart: {e}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Err(e) => panic!("no recovery 10 s after the restart: {e}"),
            }
        }
    }
    assert!(!holder.lock("restart-long").is_locked().await.unwrap());
}

/// A waiter whose retry meets Redis down (restarting, failing over) waits on within its wait
/// and gets the lock once Redis is back, instead of handing the caller a connection error
/// from the middle of its wait.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_waits_out_a_redis_restart_and_gets_the_lock() {
    let mut server = common::server();
    let holder = common::client(&server).await;
    let waiting = common::client(&server).await;
    let held = holder
        .lock("ride-out")
        .ttl(Duration::from_secs(1))
        .acquire()
        .await
        .unwrap();
    let lock = waiting.lock("ride-out").wait(Duration::from_secs(20));
    let waiter = tokio::spawn(async move { lock.acquire().await });
    let mut admin = common::raw(&server.url()).await;
    until_subscribers(&mut admin, holder.lock("ride-out").channel(), 1).await;

    server.kill();
    bounded("lost() while down", held.lost()).await;
    // Time is the subject: down for longer than the waiter sleeps between tries (at most the
    // 1 s lease it read), so at least one of its retries meets Redis down.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    server.restart().unwrap();

    let outcome = bounded("waiter", waiter).await.expect("waiter panicked");
    let g = outcome.expect("the waiter gets the lock once Redis is back, within its wait");
    g.release().await.unwrap();
    drop(held);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_built_while_redis_is_up_reports_errors_with_the_url_while_it_is_down() {
    let mut server = common::server();
    let url = server.url();
    let client = LockClient::builder(url.clone())
        .response_timeout(Duration::from_millis(500))
        .connect_timeout(Duration::from_millis(500))
        .build()
        .await
        .unwrap();
    server.kill();
    let lock = client.lock("down").wait(Duration::from_secs(1));
    let start = Instant::now();
    let err = bounded("acquire while down", lock.acquire())
        .await
        .expect_err("redis is down");
    assert!(
        matches!(&err, LockError::Redis { name, op: "acquire", .. } if name == "down"),
        "{err:?}"
    );
    assert!(err.to_string().contains(&url), "{err}");
    assert!(start.elapsed() < Duration::from_secs(10));
    assert!(bounded("try_acquire while down", lock.try_acquire())
        .await
        .is_err());
    assert!(bounded("force_unlock while down", lock.force_unlock())
        .await
        .is_err());
}

/// The release channel of `name` in `client`.
fn guard_channel(client: &LockClient, name: &str) -> String {
    client.lock(name).channel().to_owned()
}

/// Waits until at least `n` connections subscribe to `channel`.
async fn until_subscribers(
    conn: &mut dlock::redis::aio::MultiplexedConnection,
    channel: &str,
    n: i64,
) {
    let conn = conn.clone();
    common::eventually(Duration::from_secs(5), "subscribers", || {
        let mut conn = conn.clone();
        async move {
            let (_, subs): (String, i64) = dlock::redis::cmd("PUBSUB")
                .arg("NUMSUB")
                .arg(channel)
                .query_async(&mut conn)
                .await
                .unwrap();
            subs >= n
        }
    })
    .await;
}
