//! A restart that stays LOADING for seconds: waiters wait it out, releases are not lost.

use std::time::{Duration, Instant};

use super::{bounded, script_calls, until_subscribers};
use crate::common;
use dlock::redis::aio::MultiplexedConnection;
use dlock::testing::{Persistence, RedisServer};

/// Filler keys in the snapshot, and the µs Redis sleeps per key loaded (`key-load-delay` is
/// a usleep per key; ~290 µs each in practice): loads of 3.7-4.1 s measured on a 2-core VM
/// with Redis 7.0.
const FILLER_KEYS: usize = 13_000;
const KEY_LOAD_DELAY_US: &str = "200";

// ---- a restart that stays LOADING ---------------------------------------------------------

/// A server keeping RDB snapshots (SAVE only) whose restarts load slowly, or `None` (printed)
/// if this redis-server does not know the debugging configs that make a load slow.
fn slow_loading_server() -> Option<RedisServer> {
    let started = RedisServer::builder()
        .persistence(Persistence::Rdb)
        .args(["--key-load-delay", KEY_LOAD_DELAY_US])
        .args(["--loading-process-events-interval-bytes", "1024"])
        .start();
    match started {
        Ok(server) => Some(server),
        Err(e) if e.to_string().contains("Bad directive") => {
            println!("SKIPPED: this redis-server has no key-load-delay (a slow load): {e}");
            None
        }
        Err(e) => panic!("start redis-server: {e}"),
    }
}

/// Writes the filler keys that make a load of the next snapshot take seconds.
async fn fill(conn: &mut MultiplexedConnection) {
    for chunk in (0..FILLER_KEYS).collect::<Vec<_>>().chunks(1000) {
        let mut mset = dlock::redis::cmd("MSET");
        for i in chunk {
            mset.arg(format!("filler:{i}")).arg("0123456789");
        }
        let () = mset.query_async(conn).await.unwrap();
    }
}

async fn save(conn: &mut MultiplexedConnection) {
    let () = dlock::redis::cmd("SAVE").query_async(conn).await.unwrap();
}

/// `INFO persistence`'s `loading:` field: `Some(true)` while the server loads, `None` when
/// the server cannot be asked (down, or a connection broken by the restart).
async fn loading(conn: &mut MultiplexedConnection) -> Option<bool> {
    let info: String = dlock::redis::cmd("INFO")
        .arg("persistence")
        .query_async(conn)
        .await
        .ok()?;
    info.lines()
        .find_map(|l| l.strip_prefix("loading:"))
        .map(|v| v.trim() == "1")
}

/// A restart in progress: `RedisServer::restart` returns once the load is done, so it runs on
/// a blocking thread while the test watches the load through its own connection.
struct SlowRestart {
    restarting: tokio::task::JoinHandle<RedisServer>,
    url: String,
    /// The test's own connection to the loading server (opened while it loads).
    watch: MultiplexedConnection,
    began: Instant,
    /// When this test first saw `loading:1`.
    loading_seen: Instant,
}

impl SlowRestart {
    /// Kills `server` (SIGKILL) and starts it again from its snapshot; returns once this test
    /// has seen it LOADING. Panics if it never does (the test would prove nothing).
    async fn begin(server: RedisServer) -> SlowRestart {
        let url = server.url();
        let began = Instant::now();
        let restarting = tokio::task::spawn_blocking(move || {
            let mut server = server;
            server.restart().expect("restart redis-server");
            server
        });
        let bound = Duration::from_secs(10);
        loop {
            assert!(
                !restarting.is_finished(),
                "the restart finished before this test saw Redis LOADING (load too fast?)"
            );
            assert!(began.elapsed() < bound, "no LOADING seen within {bound:?}");
            let opened = tokio::time::timeout(
                Duration::from_millis(500),
                dlock::redis::Client::open(url.as_str())
                    .unwrap()
                    .get_multiplexed_async_connection(),
            )
            .await;
            if let Ok(Ok(mut conn)) = opened {
                if loading(&mut conn).await == Some(true) {
                    let loading_seen = Instant::now();
                    println!(
                        "LOADING seen {:?} after the restart began",
                        loading_seen - began
                    );
                    return SlowRestart {
                        restarting,
                        url,
                        watch: conn,
                        began,
                        loading_seen,
                    };
                }
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Whether the server still loads.
    async fn still_loading(&mut self) -> bool {
        loading(&mut self.watch).await == Some(true)
    }

    /// Waits until the load is over; returns the server and when the load was seen over.
    async fn finish(mut self) -> (RedisServer, Instant) {
        // Script calls counted while it loads were all refused with LOADING.
        let mut refused = 0;
        let bound = Duration::from_secs(20);
        loop {
            let calls = script_calls(&mut self.watch).await;
            match loading(&mut self.watch).await {
                Some(false) => break,
                Some(true) => refused = calls,
                None => panic!("the server stopped answering while it loaded"),
            }
            assert!(
                self.began.elapsed() < bound,
                "still loading {bound:?} after the restart began"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let loaded = Instant::now();
        let server = bounded("the restart", self.restarting)
            .await
            .expect("restart thread");
        println!(
            "load: LOADING from <= {:?} to {:?} after the restart began ({} script calls \
             refused with LOADING by the time this test checked, {})",
            self.loading_seen - self.began,
            loaded - self.began,
            refused,
            self.url
        );
        (server, loaded)
    }
}

/// its 30 s wait, until the holder's lease (restored from the snapshot) ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_whose_retry_meets_loading_waits_on_and_gets_the_lock() {
    let Some(server) = slow_loading_server() else {
        return;
    };
    let mut admin = common::raw(&server.url()).await;
    fill(&mut admin).await;
    let holder = common::client(&server).await;
    let waiting = common::client(&server).await;
    let lease = Duration::from_secs(8);
    let held_at = Instant::now();
    let channel = holder.lock("loading:wait").channel().to_owned();
    let held = holder
        .lock("loading:wait")
        .lease(lease)
        .acquire()
        .await
        .unwrap();
    let wait = Duration::from_secs(30);
    let lock = waiting.lock("loading:wait").wait(wait);
    let waiter = tokio::spawn(async move {
        let started = Instant::now();
        let r = lock.acquire().await;
        (r, started, Instant::now())
    });
    until_subscribers(&admin, &channel, 1).await;
    // The hold is in the snapshot: after the load it is still held, until its lease ends.
    save(&mut admin).await;

    let restart = SlowRestart::begin(server).await;
    let began = restart.began;
    let (server, loaded) = restart.finish().await;

    let (outcome, started, at) = bounded("waiter", waiter).await.expect("waiter panicked");
    println!(
        "waiter: {:?} at {:?} after the restart began (load over at {:?}, the holder's lease \
         ends at {:?})",
        outcome.as_ref().map(|_| "acquired"),
        at - began,
        loaded - began,
        (held_at + lease).saturating_duration_since(began)
    );
    let guard = outcome.unwrap_or_else(|e| {
        panic!(
            "the waiter failed {:?} into its {wait:?} wait, {:?} after the restart began \
             (load over at {:?}): {e:?}",
            at - started,
            at - began,
            loaded - began
        )
    });
    assert!(at - started < wait, "{:?}", at - started);
    // Not before the restored hold's lease ended (slack: Redis's clock vs ours).
    assert!(
        at + Duration::from_millis(200) >= held_at + lease,
        "the waiter got the lock {:?} before the holder's lease ended",
        (held_at + lease) - at
    );
    guard.release().await.unwrap();
    drop(held);
    drop(server);
}

/// How a test gives back a hold while Redis loads.
#[derive(Debug, Clone, Copy)]
enum GiveBack {
    Drop,
    ReleaseWritten,
    Release,
}

/// A hold (ttl 60 s) in the snapshot; Redis restarts and loads for seconds; while it loads the
/// hold is given back `how`. Within 10 s of the load's end the lock key is gone, long before
/// its 60 s lease.
async fn a_give_back_that_meets_loading_frees_the_lock(how: GiveBack) {
    let Some(server) = slow_loading_server() else {
        return;
    };
    let mut admin = common::raw(&server.url()).await;
    fill(&mut admin).await;
    let client = common::client(&server).await;
    let lock = client.lock("loading:release").ttl(Duration::from_secs(60));
    let key = lock.key().to_owned();
    let guard = lock.acquire().await.unwrap();
    save(&mut admin).await;

    let mut restart = SlowRestart::begin(server).await;
    assert!(restart.still_loading().await, "the load ended at once");
    let given_at = Instant::now();
    match how {
        GiveBack::Drop => drop(guard),
        GiveBack::ReleaseWritten => bounded("release_written", guard.release_written()).await,
        GiveBack::Release => {
            let r = bounded("release", guard.release()).await;
            println!(
                "release() while loading: {r:?}, after {:?}",
                given_at.elapsed()
            );
        }
    }
    // `release()` may have waited the load out; the others return at once, within the load.
    if !matches!(how, GiveBack::Release) {
        assert!(
            restart.still_loading().await,
            "{how:?}: the load ended before the hold was given back; the test proved nothing"
        );
    }
    let began = restart.began;
    let (server, loaded) = restart.finish().await;
    println!(
        "{how:?} at {:?} after the restart began, load over at {:?}",
        given_at - began,
        loaded - began
    );

    let mut conn = common::raw(&server.url()).await;
    let bound = Duration::from_secs(10);
    let mut gone = false;
    while loaded.elapsed() < bound {
        let n: i64 = dlock::redis::cmd("EXISTS")
            .arg(&key)
            .query_async(&mut conn)
            .await
            .unwrap();
        if n == 0 {
            gone = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let state = common::describe_lock(&mut conn, &key).await;
    assert!(
        gone,
        "{how:?} during the load: the lock is still held {bound:?} after the load ended \
         (left to its 60 s lease): {state}"
    );
    println!(
        "{how:?}: the lock freed {:?} after the load",
        loaded.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guard_dropped_while_redis_loads_frees_the_lock_after_the_load() {
    a_give_back_that_meets_loading_frees_the_lock(GiveBack::Drop).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_written_release_while_redis_loads_frees_the_lock_after_the_load() {
    a_give_back_that_meets_loading_frees_the_lock(GiveBack::ReleaseWritten).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_awaited_release_while_redis_loads_frees_the_lock_after_the_load() {
    a_give_back_that_meets_loading_frees_the_lock(GiveBack::Release).await;
}
