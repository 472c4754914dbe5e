//! Transient Redis states a caller must not see (issue 28): a restart that stays LOADING for
//! seconds, an acquire granted in Redis whose reply was lost with the server, and a
//! replica-synced acquire racing the same client's written release.
//!
//! * A waiter whose retry meets LOADING waits on and gets the lock within its wait.
//! * A release (dropped guard, `release_written`, `release`) that meets LOADING still frees
//!   the lock once the load ends, not at the end of its lease.
//! * A waiter whose retry was granted in Redis while its reply was lost (SIGKILL, restart from
//!   the AOF) is not kept waiting by that orphaned grant until the grant's lease ends; a
//!   semaphore never shows more than its permits meanwhile.
//! * With `synced_replicas`, the same client sees a lock free right after `release_written`
//!   (what `#[distributed_lock]` does), so a skipping job is never skipped by its own release.
//!
//! The slow load is Redis's own `key-load-delay` (µs slept per key loaded) over filler keys,
//! with `loading-process-events-interval-bytes` at its minimum so the server answers (LOADING)
//! while it loads. Every such test asserts it saw `loading:1` in `INFO persistence`.

use crate::common;

use std::collections::BTreeSet;
use std::future::Future;
use std::time::{Duration, Instant};

use common::proxy::Proxy;
use dlock::redis::aio::MultiplexedConnection;
use dlock::testing::{Persistence, RedisServer};
use dlock::{LockClient, LockError};

/// Every call in these tests must come back within this, error or not.
const NO_HANG: Duration = Duration::from_secs(20);
/// Filler keys in the snapshot, and the µs Redis sleeps per key loaded (`key-load-delay` is
/// a usleep per key; ~290 µs each in practice): loads of 3.7-4.1 s measured on a 2-core VM
/// with Redis 7.0.
const FILLER_KEYS: usize = 13_000;
const KEY_LOAD_DELAY_US: &str = "200";

async fn bounded<T>(what: &str, fut: impl Future<Output = T>) -> T {
    tokio::time::timeout(NO_HANG, fut)
        .await
        .unwrap_or_else(|_| panic!("{what} hung for {NO_HANG:?}"))
}

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

/// Script calls (FCALL, EVALSHA, EVAL) the server counted, refused ones included: while it
/// loads, every one of them was refused with LOADING.
async fn script_calls(conn: &mut MultiplexedConnection) -> u64 {
    let stats: String = match dlock::redis::cmd("INFO")
        .arg("commandstats")
        .query_async(conn)
        .await
    {
        Ok(s) => s,
        Err(_) => return 0,
    };
    stats
        .lines()
        .filter_map(|l| l.strip_prefix("cmdstat_")?.split_once(':'))
        .filter(|(cmd, _)| cmd.starts_with("fcall") || cmd.starts_with("eval"))
        .flat_map(|(_, fields)| fields.split(','))
        .filter_map(|f| f.split_once('='))
        .filter(|(k, _)| matches!(*k, "calls" | "rejected_calls"))
        .filter_map(|(_, v)| v.parse::<u64>().ok())
        .sum()
}

/// Waits until at least `n` connections subscribe to `channel`.
async fn until_subscribers(conn: &MultiplexedConnection, channel: &str, n: i64) {
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

/// A waiter parked on a held lock meets a restart that loads for seconds: its retries meet
/// LOADING (the subscriber reconnects while Redis loads and wakes it), and it waits on, within
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

// ---- a grant whose reply was lost with the server ------------------------------------------

/// The lease of the waiter's grant that is orphaned: its reply never arrives.
const ORPHAN_TTL: Duration = Duration::from_secs(10);
/// How long Redis stays down: longer than the orphan clean-up keeps trying today (one retry
/// after 100 ms).
const DOWN_FOR: Duration = Duration::from_millis(1500);
/// "A few seconds" after the restart: the waiter must hold by then.
const RECOVERED_WITHIN: Duration = Duration::from_secs(4);

/// What a test observed of the orphaned grant.
struct Orphaned {
    /// When the grant was first seen in Redis (it was made no later).
    granted_seen: Instant,
    restarted: Instant,
}

/// Brings a waiter (its client behind `proxy`, command connection #0, already parked: its last
/// refusal delivered) to the point where its retry is granted in Redis with the reply held by
/// the proxy; then SIGKILLs Redis, cuts every proxied connection, and restarts Redis from its
/// AOF `DOWN_FOR` later.
///
/// `granted` says, from the set of members/fields of the lock's key, whether a new owner (the
/// waiter) holds. The holder's hard lease ending is what makes the waiter retry.
async fn orphan_the_waiters_grant<F, Fut>(
    server: &mut RedisServer,
    proxy: &Proxy,
    granted: F,
) -> Orphaned
where
    F: Fn() -> Fut,
    Fut: Future<Output = bool>,
{
    proxy.hold_replies(0);
    common::eventually(
        Duration::from_secs(10),
        "the waiter's retry granted",
        &granted,
    )
    .await;
    let granted_seen = Instant::now();
    // Its reply (sent after the AOF was fsynced) sits in the proxy.
    common::eventually(Duration::from_secs(5), "the grant's reply held", || {
        let held = proxy.held_bytes(0);
        async move { held > 0 }
    })
    .await;
    server.kill();
    proxy.kill_all();
    // Time is the subject: Redis down for this long.
    tokio::time::sleep(DOWN_FOR).await;
    server.restart().expect("restart from the AOF");
    let restarted = Instant::now();
    println!(
        "grant seen, Redis killed; restarted {:?} later",
        restarted - granted_seen
    );
    Orphaned {
        granted_seen,
        restarted,
    }
}

/// Waits until the waiter behind `proxy` is parked: its two attempts (before and after it
/// subscribed) ran in Redis at least `SETTLE` ago and nothing is held in the proxy, so their
/// replies were delivered (the proxy forwards a reply within microseconds of Redis sending
/// it). Panics if it sent more.
async fn until_parked(admin: &MultiplexedConnection, proxy: &Proxy, base: u64) {
    const SETTLE: Duration = Duration::from_millis(20);
    let mut admin = admin.clone();
    let start = Instant::now();
    let mut second_seen = None::<Instant>;
    loop {
        let calls = script_calls(&mut admin).await - base;
        assert!(calls <= 2, "the waiter sent {calls} attempts, not 2");
        if calls == 2 {
            let seen = *second_seen.get_or_insert_with(Instant::now);
            if seen.elapsed() >= SETTLE && proxy.held_bytes(0) == 0 {
                return;
            }
        }
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "the waiter did not park within 5 s ({calls} attempts)"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// The waiter's outcome against the orphaned grant's lease: it must hold within a few seconds
/// of the restart, well before that lease could end.
fn assert_recovered_soon(what: &str, orphan: &Orphaned, acquired: Instant) {
    let orphan_end = orphan.granted_seen + ORPHAN_TTL;
    let after_restart = acquired.saturating_duration_since(orphan.restarted);
    println!(
        "{what}: acquired {after_restart:?} after the restart ({:?} after the orphaned grant; \
         its lease ends {:?} after it)",
        acquired - orphan.granted_seen,
        ORPHAN_TTL
    );
    assert!(
        after_restart < RECOVERED_WITHIN && acquired + Duration::from_secs(3) < orphan_end,
        "{what}: the waiter got it {after_restart:?} after the restart, {:?} after its own \
         orphaned grant (lease {ORPHAN_TTL:?}): it waited behind the grant it never heard of",
        acquired - orphan.granted_seen
    );
}

/// A waiter whose retry was granted while its reply was lost (Redis SIGKILLed, restarted from
/// its AOF) gets the lock within a few seconds of the restart, not when that orphaned grant's
/// lease ends; then the lock hash has exactly one owner.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_is_not_kept_waiting_by_its_own_orphaned_grant() {
    let mut server = RedisServer::start_persistent(Persistence::Aof).unwrap();
    let proxy = Proxy::start(server.port());
    let admin = common::raw(&server.url()).await;
    let holder = common::client(&server).await;
    let waiting = LockClient::connect(&proxy.url()).await.unwrap();
    let lock = holder.lock("orphan:lock");
    let key = lock.key().to_owned();
    let held = lock
        .clone()
        .lease(Duration::from_secs(2))
        .acquire()
        .await
        .unwrap();
    let fields = |admin: &MultiplexedConnection| {
        let (mut admin, key) = (admin.clone(), key.clone());
        async move {
            let f: BTreeSet<String> = dlock::redis::cmd("HKEYS")
                .arg(&key)
                .query_async(&mut admin)
                .await
                .unwrap_or_default();
            f
        }
    };
    let holder_fields = fields(&admin).await;
    let base = script_calls(&mut admin.clone()).await;

    let waiter_lock = waiting
        .lock("orphan:lock")
        .ttl(ORPHAN_TTL)
        .wait(Duration::from_secs(40));
    let waiter = tokio::spawn(async move {
        let r = waiter_lock.acquire().await;
        (r, Instant::now())
    });
    until_parked(&admin, &proxy, base).await;

    let orphan = orphan_the_waiters_grant(&mut server, &proxy, || {
        let (fields, holder_fields) = (fields(&admin), holder_fields.clone());
        async move { fields.await.iter().any(|f| !holder_fields.contains(f)) }
    })
    .await;

    let admin = common::raw(&server.url()).await;
    let (outcome, acquired) = bounded("waiter", waiter).await.expect("waiter panicked");
    let guard = outcome.expect("the waiter gets the lock within its 40 s wait");
    let now_fields = fields(&admin).await;
    assert_recovered_soon("lock", &orphan, acquired);
    assert_eq!(
        now_fields.len(),
        1,
        "the lock hash once the waiter holds: {now_fields:?}"
    );
    guard.release().await.unwrap();
    drop(held);
}

/// Permits whose deadline is ahead, by the server's clock.
async fn live_permits(conn: &mut MultiplexedConnection, key: &str) -> i64 {
    dlock::redis::cmd("EVAL")
        .arg(
            "local t = redis.call('TIME') \
             local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) \
             return redis.call('ZCOUNT', KEYS[1], '(' .. now, '+inf')",
        )
        .arg(1)
        .arg(key)
        .query_async(conn)
        .await
        .unwrap()
}

/// The semaphore version, 2 permits: one held for the whole test, one with a 2 s lease whose
/// end lets the waiter in. After the restart the waiter holds within a few seconds, and the
/// permits alive in Redis never exceed 2 (its orphaned permit and a new one never coexist).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_semaphore_waiter_is_not_kept_waiting_by_its_own_orphaned_permit() {
    const PERMITS: u32 = 2;
    let mut server = RedisServer::start_persistent(Persistence::Aof).unwrap();
    let proxy = Proxy::start(server.port());
    let admin = common::raw(&server.url()).await;
    let holders = common::client(&server).await;
    let waiting = LockClient::connect(&proxy.url()).await.unwrap();
    let key = format!("{}{{orphan:sem}}:sem", dlock::DEFAULT_PREFIX);
    let sem = holders.semaphore("orphan:sem", PERMITS);
    let long = sem
        .clone()
        .lease(Duration::from_secs(60))
        .acquire()
        .await
        .unwrap();
    let short = sem
        .clone()
        .lease(Duration::from_secs(2))
        .acquire()
        .await
        .unwrap();
    let members = |admin: &MultiplexedConnection| {
        let (mut admin, key) = (admin.clone(), key.clone());
        async move {
            let m: BTreeSet<String> = dlock::redis::cmd("ZRANGE")
                .arg(&key)
                .arg(0)
                .arg(-1)
                .query_async(&mut admin)
                .await
                .unwrap_or_default();
            m
        }
    };
    let holder_members = members(&admin).await;
    assert_eq!(holder_members.len(), 2, "{holder_members:?}");
    let base = script_calls(&mut admin.clone()).await;

    let waiter_sem = waiting
        .semaphore("orphan:sem", PERMITS)
        .ttl(ORPHAN_TTL)
        .wait(Duration::from_secs(40));
    let waiter = tokio::spawn(async move {
        let r = waiter_sem.acquire().await;
        (r, Instant::now())
    });
    until_parked(&admin, &proxy, base).await;

    let orphan = orphan_the_waiters_grant(&mut server, &proxy, || {
        let (members, holder_members) = (members(&admin), holder_members.clone());
        async move { members.await.iter().any(|m| !holder_members.contains(m)) }
    })
    .await;

    // From the restart on, sample the live permits until the waiter holds.
    let mut conn = common::raw(&server.url()).await;
    let mut most = 0;
    let mut samples = 0u32;
    let (outcome, acquired) = {
        let waiting_for = bounded("waiter", async {
            let mut waiter = waiter;
            loop {
                tokio::select! {
                    r = &mut waiter => break r.expect("waiter panicked"),
                    () = tokio::time::sleep(Duration::from_millis(5)) => {
                        most = most.max(live_permits(&mut conn, &key).await);
                        samples += 1;
                    }
                }
            }
        });
        waiting_for.await
    };
    let permit = outcome.expect("the waiter gets a permit within its 40 s wait");
    let now_live = live_permits(&mut conn, &key).await;
    let now_members = members(&conn).await;
    println!(
        "permits alive: at most {most} in {samples} samples while the waiter waited; \
         {now_live} once it holds ({now_members:?})"
    );
    assert!(
        most <= i64::from(PERMITS) && now_live <= i64::from(PERMITS),
        "more than {PERMITS} permits alive: {most} while waiting, {now_live} once the waiter \
         holds ({now_members:?})"
    );
    assert_recovered_soon("semaphore", &orphan, acquired);
    permit.release().await.unwrap();
    drop((long, short));
}

// ---- replica-synced acquires after the same client's written release -----------------------

/// What `#[distributed_lock]` ends with (`release_written`) followed by the same client's next
/// synced acquire: the lock must be free to it, every round.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_synced_acquire_sees_the_same_clients_written_release() {
    let (primary, _replica) = crate::synced::primary_and_replica().await;
    let client = LockClient::builder(primary.url())
        .synced_replicas(1, Duration::from_secs(1))
        .build()
        .await
        .unwrap();
    let lock = client.lock("synced:written");
    common::until_synced_acquire(&lock).await;
    let rounds = 300;
    let started = Instant::now();
    let mut busy = Vec::new();
    for round in 0..rounds {
        assert!(
            started.elapsed() < Duration::from_secs(25),
            "round {round}: out of time"
        );
        let g = bounded("acquire", lock.acquire()).await.unwrap();
        g.release_written().await;
        match bounded("try_acquire", lock.try_acquire()).await.unwrap() {
            Some(g) => g.release().await.unwrap(),
            None => busy.push(round),
        }
    }
    println!(
        "{} of {rounds} rounds found the lock busy after release_written ({:?})",
        busy.len(),
        started.elapsed()
    );
    assert!(
        busy.is_empty(),
        "{} of {rounds} rounds: the synced try_acquire found the lock busy right after this \
         client's release_written (rounds {:?}...)",
        busy.len(),
        &busy[..busy.len().min(10)]
    );
}

#[dlock::distributed_lock(
    key = "synced:job",
    client = locks,
    ttl = "30s",
    wait = "0s",
    on_busy = "skip"
)]
async fn synced_job(locks: &LockClient) -> Result<Option<()>, LockError> {
    Ok(Some(()))
}

/// A skipping job run again and again by one task of a synced client is never skipped: the
/// only holder it could meet is its own previous run, whose release was written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_skipping_synced_job_is_never_skipped_by_its_own_last_run() {
    let (primary, _replica) = crate::synced::primary_and_replica().await;
    let client = LockClient::builder(primary.url())
        .synced_replicas(1, Duration::from_secs(1))
        .build()
        .await
        .unwrap();
    common::until_synced_acquire(&client.lock("synced:job")).await;
    let runs = 300;
    let started = Instant::now();
    let mut skipped = Vec::new();
    for run in 0..runs {
        assert!(
            started.elapsed() < Duration::from_secs(25),
            "run {run}: out of time"
        );
        if bounded("job", synced_job(&client)).await.unwrap().is_none() {
            skipped.push(run);
        }
    }
    println!(
        "{} of {runs} runs skipped ({:?})",
        skipped.len(),
        started.elapsed()
    );
    assert!(
        skipped.is_empty(),
        "{} of {runs} runs of a skipping job were skipped, with no other holder than its own \
         last run (runs {:?}...)",
        skipped.len(),
        &skipped[..skipped.len().min(10)]
    );
}
