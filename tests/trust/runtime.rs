//! A client is not tied to the runtime that built it (issue 7, item 5; DESIGN §4): its
//! background work (watchdog, subscriber, background releases, orphan clean-up) belongs to the
//! client, so it keeps renewing after the runtime that built it shut down, serves several
//! `#[tokio::test]` runtimes from one `static`, and releases what a guard or an acquire
//! dropped on a plain thread (no tokio context) held.
//!
//! Every hold below uses a 1 s lease held for longer than that, while another client tries to
//! take the lock every 200 ms: one stopped watchdog lets it in.

use crate::common;

use std::sync::OnceLock;
use std::time::{Duration, Instant};

use dlock::testing::RedisServer;
use dlock::LockClient;

const TTL: Duration = Duration::from_secs(1);
const PROBE_EVERY: Duration = Duration::from_millis(200);

/// Holds `name` through `holder` with a 1 s lease for `hold_for`, while `other` tries to take
/// it every 200 ms: it must never get it, the guard must never be lost, and the release must
/// succeed and free the lock.
async fn hold_and_probe(holder: &LockClient, other: &LockClient, name: &str, hold_for: Duration) {
    let guard = holder
        .lock(name)
        .ttl(TTL)
        .wait(Duration::from_secs(5))
        .acquire()
        .await
        .unwrap_or_else(|e| panic!("{name}: acquire: {e}"));
    let start = Instant::now();
    let mut ticks = tokio::time::interval(PROBE_EVERY);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut probes = 0;
    while start.elapsed() < hold_for {
        ticks.tick().await;
        let stolen = other
            .lock(name)
            .try_acquire()
            .await
            .unwrap_or_else(|e| panic!("{name}: probe: {e}"));
        if stolen.is_some() {
            panic!(
                "{name}: another client took the lock {:?} into a hold with a {TTL:?} lease \
                 (after {probes} refused probes): the holder's renewals stopped (guard lost: {})",
                start.elapsed(),
                guard.is_lost()
            );
        }
        probes += 1;
        assert!(
            !guard.is_lost(),
            "{name}: the guard was marked lost {:?} into the hold",
            start.elapsed()
        );
    }
    println!(
        "{name}: held {:?} with a {TTL:?} lease, {probes} probes all refused, lost: {}",
        start.elapsed(),
        guard.is_lost()
    );
    guard
        .release()
        .await
        .unwrap_or_else(|e| panic!("{name}: release after the hold: {e}"));
    let after = other
        .lock(name)
        .try_acquire()
        .await
        .unwrap_or_else(|e| panic!("{name}: acquire after the release: {e}"));
    assert!(after.is_some(), "{name}: still held after its release");
}

fn current_thread() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime")
}

/// Builds a client (and uses it once) on `r1`, shuts `r1` down, then checks on a second
/// runtime that the client still excludes and renews.
fn outlives_its_runtime(r1: tokio::runtime::Runtime, name: &str) {
    let server = RedisServer::start().expect("redis-server");
    let url = server.url();
    let client = r1
        .block_on(async {
            let client = LockClient::connect(&url).await?;
            // Used once on its own runtime, so whatever it drives there is live when it dies.
            let warm = format!("{name}:warm");
            client.lock(warm).acquire().await?.release().await?;
            Ok::<_, dlock::LockError>(client)
        })
        .expect("connect and use on the first runtime");
    drop(r1);

    current_thread().block_on(async {
        let other = LockClient::connect(&url)
            .await
            .expect("connect on the second runtime");
        hold_and_probe(&client, &other, name, Duration::from_millis(2500)).await;
    });
}

/// (a) The runtime that built the client is shut down before the client is used.
#[test]
fn a_client_keeps_working_after_the_runtime_that_built_it_shut_down() {
    outlives_its_runtime(current_thread(), "trust:runtime:outlived");
}

/// The same with a multi-thread building runtime: there the client's command connections are
/// driven by that runtime (faster), and must be replaced by the client's own once it is gone.
#[test]
fn a_client_built_on_a_multi_thread_runtime_outlives_it() {
    let r1 = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("multi-thread runtime");
    outlives_its_runtime(r1, "trust:runtime:outlived-multi");
}

// (b) One client in a `static`, shared by several `#[tokio::test]`s: each test has its own
// runtime, and the client is built on whichever test's runtime gets there first; that runtime
// shuts down when its test ends, while the others are still running (or not started yet).
// The holds differ in length (1.5 s apart, more than the 1 s lease plus a probe interval), so
// that run in parallel every test outlasting the builder's test is exposed; the shortest comes
// first in name order, which libtest starts first.

static SERVER: OnceLock<RedisServer> = OnceLock::new();
static CLIENT: tokio::sync::OnceCell<LockClient> = tokio::sync::OnceCell::const_new();

fn shared_url() -> String {
    SERVER
        .get_or_init(|| RedisServer::start().expect("redis-server"))
        .url()
}

async fn shared_case(name: &str, hold_for: Duration) {
    let client = CLIENT
        .get_or_init(|| async {
            LockClient::connect(&shared_url())
                .await
                .expect("connect the shared client")
        })
        .await;
    let other = LockClient::connect(&shared_url())
        .await
        .expect("connect this test's client");
    hold_and_probe(client, &other, name, hold_for).await;
}

#[tokio::test]
async fn a_static_client_serves_test_runtime_1() {
    shared_case("trust:runtime:shared:1", Duration::from_millis(1500)).await;
}

#[tokio::test]
async fn a_static_client_serves_test_runtime_2() {
    shared_case("trust:runtime:shared:2", Duration::from_millis(3000)).await;
}

#[tokio::test]
async fn a_static_client_serves_test_runtime_3() {
    shared_case("trust:runtime:shared:3", Duration::from_millis(4500)).await;
}

#[tokio::test]
async fn a_static_client_serves_test_runtime_4() {
    shared_case("trust:runtime:shared:4", Duration::from_millis(6000)).await;
}

/// (c) A guard dropped on a thread without a tokio context is released, not left to its lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guard_dropped_on_a_plain_thread_is_released() {
    let server = common::server();
    let client = common::client(&server).await;
    let other = common::client(&server).await;
    let name = "trust:runtime:guard-on-thread";
    let guard = client
        .lock(name)
        .ttl(Duration::from_secs(30))
        .acquire()
        .await
        .expect("acquire");
    std::thread::spawn(move || drop(guard))
        .join()
        .expect("the dropping thread panicked");

    let start = Instant::now();
    let taken = other
        .lock(name)
        .wait(Duration::from_secs(5))
        .acquire()
        .await;
    println!(
        "guard dropped on a plain thread: the next acquire {} after {:?}",
        if taken.is_ok() { "succeeded" } else { "failed" },
        start.elapsed()
    );
    let taken = taken.unwrap_or_else(|e| {
        panic!("the lock was not released within 5 s of the guard's drop (lease 30 s): {e}")
    });
    taken.release().await.expect("release");
}

async fn blocked_clients(conn: &dlock::redis::aio::MultiplexedConnection) -> u64 {
    let mut conn = conn.clone();
    let info: String = dlock::redis::cmd("INFO")
        .arg("clients")
        .query_async(&mut conn)
        .await
        .expect("INFO clients");
    info.lines()
        .find_map(|l| l.strip_prefix("blocked_clients:"))
        .and_then(|n| n.trim().parse().ok())
        .expect("blocked_clients in INFO clients")
}

async fn get(conn: &dlock::redis::aio::MultiplexedConnection, key: &str) -> Option<String> {
    let mut conn = conn.clone();
    dlock::redis::cmd("GET")
        .arg(key)
        .query_async(&mut conn)
        .await
        .expect("GET")
}

/// (d) An acquire whose request reached Redis, dropped on a thread without a tokio context:
/// what Redis grants it afterwards is released promptly, not left to the 30 s lease.
///
/// `CLIENT PAUSE WRITE` holds the acquire script inside Redis (it shows as a blocked client)
/// until `CLIENT UNPAUSE`: the request is surely on the wire and its reply cannot arrive.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acquire_dropped_on_a_plain_thread_after_sending_leaves_no_lock() {
    let server = common::server();
    let client = common::client(&server).await;
    let other = common::client(&server).await;
    let name = "trust:runtime:acquire-on-thread";
    let lock = client
        .lock(name)
        .ttl(Duration::from_secs(30))
        .wait(Duration::from_secs(5));
    let probe = other.lock(name);
    let fence = dlock::inspect::fence_counter(dlock::DEFAULT_PREFIX, lock.key());
    // Load the scripts first: the acquire below is then one EVALSHA that runs when unpaused.
    lock.acquire()
        .await
        .expect("warm-up acquire")
        .release()
        .await
        .expect("warm-up release");

    let admin = common::raw(&server.url()).await;
    let counter_before = get(&admin, &fence).await;
    let () = dlock::redis::cmd("CLIENT")
        .arg("PAUSE")
        .arg(10_000)
        .arg("WRITE")
        .query_async(&mut admin.clone())
        .await
        .expect("CLIENT PAUSE");

    // Polled (inside the runtime) until its script is held in Redis, however many steps the
    // acquire takes before sending it.
    let mut acquire = Box::pin(async move { lock.acquire().await });
    let polling = Instant::now();
    let mut polls = 0;
    loop {
        let poll = futures_util::poll!(acquire.as_mut());
        polls += 1;
        if let std::task::Poll::Ready(result) = poll {
            panic!("the acquire completed while Redis held every script: {result:?}");
        }
        if blocked_clients(&admin).await >= 1 {
            break;
        }
        assert!(
            polling.elapsed() < Duration::from_secs(5),
            "the acquire script never reached Redis ({polls} polls)"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    println!(
        "acquire script held in Redis after {polls} polls, {:?}",
        polling.elapsed()
    );
    std::thread::spawn(move || drop(acquire))
        .join()
        .expect("the dropping thread panicked");
    assert!(
        blocked_clients(&admin).await >= 1,
        "the acquire left Redis before the unpause"
    );

    let () = dlock::redis::cmd("CLIENT")
        .arg("UNPAUSE")
        .query_async(&mut admin.clone())
        .await
        .expect("CLIENT UNPAUSE");
    // The paused acquire leaves Redis now: it runs (its free -> held transition moves the
    // fencing counter), or it is discarded if the client closed its connection meanwhile.
    common::eventually(
        Duration::from_secs(5),
        "the dropped acquire left Redis after the unpause",
        || async { blocked_clients(&admin).await == 0 },
    )
    .await;
    let counter_after = get(&admin, &fence).await;
    println!(
        "the dropped acquire {} (fencing counter {counter_before:?} -> {counter_after:?})",
        if counter_after != counter_before {
            "ran"
        } else {
            "was discarded"
        }
    );
    let ran = Instant::now();
    let mut raw = admin.clone();
    let state = common::describe_lock(&mut raw, probe.key()).await;
    println!("right after the unpause: {state}");
    let mut freed = None;
    while ran.elapsed() < Duration::from_secs(5) {
        if !probe.is_locked().await.expect("is_locked") {
            freed = Some(ran.elapsed());
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let state = common::describe_lock(&mut raw, probe.key()).await;
    println!("orphan of the dropped acquire freed after {freed:?}; now {state}");
    assert!(
        freed.is_some(),
        "the lock granted to the acquire dropped on a plain thread is still held 5 s later \
         (left to its 30 s lease): {state}"
    );
    let taken = probe
        .try_acquire()
        .await
        .expect("acquire after the clean-up");
    assert!(taken.is_some(), "another client cannot take the freed lock");
}

/// A reconnect must not move a connection onto the runtime that happened to notice the break:
/// the client is built on one runtime, its connections are killed and then used from a second
/// runtime (which reconnects them), which ends; a third runtime must still get answers.
#[test]
fn a_reconnect_made_from_a_runtime_that_ends_leaves_the_client_working() {
    let server = RedisServer::start().expect("redis-server");
    let url = server.url();
    let r1 = current_thread();
    let client = r1
        .block_on(LockClient::connect(&url))
        .expect("connect on the first runtime");
    drop(r1);
    let r2 = current_thread();
    r2.block_on(async {
        server
            .cli(&["CLIENT", "KILL", "TYPE", "normal"])
            .expect("CLIENT KILL");
        // Nothing outside the client can tell when its driver has read the EOF; give it a
        // moment so the next command, sent from this runtime, is the one that reconnects.
        tokio::time::sleep(Duration::from_millis(100)).await;
        let _ = client.lock("trust:runtime:reconnect").try_acquire().await;
        let mut ok = false;
        for _ in 0..100 {
            if let Ok(Some(g)) = client.lock("trust:runtime:reconnect").try_acquire().await {
                g.release().await.expect("release after the reconnect");
                ok = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(ok, "the client did not recover from CLIENT KILL within 2 s");
    });
    drop(r2);
    let r3 = current_thread();
    let got = r3.block_on(async {
        client
            .lock("trust:runtime:after-reconnect")
            .try_acquire()
            .await
            .map(|g| g.is_some())
    });
    assert!(
        matches!(got, Ok(true)),
        "the runtime that reconnected ended and took the connection with it: {got:?}"
    );
}

/// The subscriber of a client built on a multi-thread runtime runs there (a release message
/// wakes a waiter without passing through the client's thread) until that runtime shuts down;
/// then it moves to the client's thread. A waiter of the client on a later runtime must be
/// subscribed in Redis (a subscriber that died with its runtime would leave it to the holder's
/// lease) and get the lock when it is released.
#[test]
fn the_subscriber_moves_to_the_client_thread_when_its_runtime_ends() {
    let server = RedisServer::start().expect("redis-server");
    let url = server.url();
    let r1 = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("multi-thread runtime");
    let client = r1
        .block_on(async {
            let client = LockClient::connect(&url).await?;
            // A wait through the subscriber on the first runtime, so it is in use when it dies.
            let other = LockClient::connect(&url).await?;
            let held = other.lock("trust:runtime:sub-warm").acquire().await?;
            let waiting = client
                .lock("trust:runtime:sub-warm")
                .wait(Duration::from_secs(10));
            let waiter = tokio::spawn(async move { waiting.acquire().await?.release().await });
            held.release().await?;
            waiter.await.expect("waiter task")?;
            Ok::<_, dlock::LockError>(client)
        })
        .expect("connect and wait on the first runtime");
    drop(r1);

    current_thread().block_on(async {
        let other = LockClient::connect(&url).await.expect("connect");
        let name = "trust:runtime:sub-moved";
        let held = other
            .lock(name)
            .ttl(Duration::from_secs(60))
            .acquire()
            .await
            .expect("hold");
        let waiting = client.lock(name).wait(Duration::from_secs(30));
        let channel = waiting.channel().to_owned();
        let waiter = tokio::spawn(async move { waiting.acquire().await });
        // Its subscription reaches Redis (polled, at most 5 s).
        let mut subscribed = false;
        for _ in 0..500 {
            let numsub = server
                .cli(&["PUBSUB", "NUMSUB", &channel])
                .expect("PUBSUB NUMSUB");
            if numsub.lines().nth(1).is_some_and(|n| n.trim() != "0") {
                subscribed = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(
            subscribed,
            "nobody subscribed {channel}: the subscriber died with the runtime it ran on"
        );
        held.release().await.expect("release");
        let guard = waiter
            .await
            .expect("waiter task")
            .expect("the waiter gets the released lock");
        guard.release().await.expect("release");
    });
}
