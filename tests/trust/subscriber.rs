//! Issue 7 item 4: a pub/sub connection that goes silent without closing (a NAT or load balancer
//! idle timeout dropping its state) must not hang waiters. The waiting client talks to Redis
//! through `common::proxy`, which freezes only its subscriber connection: commands keep
//! working, SUBSCRIBEs and release messages are held forever, and nothing is closed.
//!
//! Every acquire here has a wait shorter than the holder's lease, so a waiter that neither got
//! a release message nor a bounded subscribe could only end by `Timeout` (or at its deadline),
//! and the bounds below tell those apart from the fix with seconds of margin.

use crate::common;

use std::time::{Duration, Instant};

use common::proxy::Proxy;
use dlock::{LockClient, LockError, LockGuard};
use tokio::task::JoinHandle;

/// The waiting client's subscriber. Built on a multi-thread runtime (these tests), a client
/// opens its command connection, then the one its own thread drives for background work, then
/// the subscriber (`tests/support/proxy.rs` checks the order on a current_thread runtime).
const SUBSCRIBER: usize = 2;
/// Connections a client opens on a multi-thread runtime.
const OPENED: usize = 3;
/// The client's default bound on a subscribe acknowledgement: min(response timeout, 1 s).
const ACK_TIMEOUT: Duration = Duration::from_secs(1);
/// Every call must come back within this, error or not.
const NO_HANG: Duration = Duration::from_secs(30);

/// A client whose every connection goes through `proxy`.
async fn client_through(proxy: &Proxy) -> LockClient {
    let client = LockClient::connect(&proxy.url())
        .await
        .expect("connect through the proxy");
    assert_eq!(
        proxy.accepted(),
        OPENED,
        "a command connection, a background one and a subscriber"
    );
    client
}

/// Starts `client` acquiring `name` with `wait`; reports when it got the guard.
fn spawn_acquire(
    client: &LockClient,
    name: &str,
    wait: Duration,
) -> JoinHandle<Result<(Instant, LockGuard), LockError>> {
    let lock = client.lock(name).wait(wait);
    tokio::spawn(async move { lock.acquire().await.map(|g| (Instant::now(), g)) })
}

async fn bounded<T>(what: &str, fut: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(NO_HANG, fut)
        .await
        .unwrap_or_else(|_| panic!("{what} hung for {NO_HANG:?}"))
}

/// Waits until the frozen subscriber connection holds bytes from the client: its SUBSCRIBE,
/// which the waiter sends only after its first attempt found the lock held.
async fn until_subscribe_is_held(proxy: &Proxy) {
    common::eventually(
        Duration::from_secs(5),
        "SUBSCRIBE held by the proxy",
        || {
            let held = proxy.held_bytes(SUBSCRIBER) > 0;
            async move { held }
        },
    )
    .await;
}

/// Waits until the waiter started after `scripts_before` script calls is parked: subscribed in
/// Redis and refused twice, by its first try and by the retry it makes once subscribed (two
/// more script calls). A release before that retry would simply let the retry win, and the
/// test would prove nothing about waking a parked waiter (a CI run hit that with one).
async fn until_parked(server: &dlock::testing::RedisServer, channel: &str, scripts_before: u64) {
    let conn = common::raw(&server.url()).await;
    common::eventually(
        Duration::from_secs(10),
        "waiter subscribed in Redis and refused once",
        || {
            let mut conn = conn.clone();
            async move {
                let (_, subs): (String, i64) = dlock::redis::cmd("PUBSUB")
                    .arg("NUMSUB")
                    .arg(channel)
                    .query_async(&mut conn)
                    .await
                    .unwrap();
                subs >= 1 && common::script_calls(&mut conn).await >= scripts_before + 2
            }
        },
    )
    .await;
}

/// Script calls Redis has run so far, read before starting a waiter (see `until_parked`).
async fn scripts_so_far(server: &dlock::testing::RedisServer) -> u64 {
    common::script_calls(&mut common::raw(&server.url()).await).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_whose_subscriber_is_frozen_acquires_and_the_client_recovers() {
    let server = common::server();
    let proxy = Proxy::start(server.port());
    let holder = common::client(&server).await;
    let waiting = client_through(&proxy).await;
    proxy.freeze_connection(SUBSCRIBER);

    // Round 1: the waiter's subscription can never be confirmed. It must still get the lock.
    let guard = holder
        .lock("nat")
        .ttl(Duration::from_secs(2))
        .acquire()
        .await
        .unwrap();
    let waiter = spawn_acquire(&waiting, "nat", Duration::from_secs(10));
    until_subscribe_is_held(&proxy).await;
    let released_at = Instant::now();
    guard.release().await.unwrap();
    let (acquired_at, g) = bounded("round 1", waiter)
        .await
        .unwrap()
        .expect("round 1: the waiter behind a frozen subscriber must acquire");
    println!(
        "round 1: acquired {:?} after the release",
        acquired_at - released_at
    );
    g.release().await.unwrap();

    // Round 2: the client replaced its silent subscriber, so a release wakes the waiter by
    // message, long before the 20 s lease (and the 15 s wait) could.
    let lock = holder.lock("nat").lease(Duration::from_secs(20));
    let guard = lock.acquire().await.unwrap();
    let before = scripts_so_far(&server).await;
    let waiter = spawn_acquire(&waiting, "nat", Duration::from_secs(15));
    until_parked(&server, lock.channel(), before).await;
    assert!(
        proxy.accepted() > OPENED,
        "the subscriber was not replaced: {} connections accepted",
        proxy.accepted()
    );
    let released_at = Instant::now();
    guard.release().await.unwrap();
    let (acquired_at, g) = bounded("round 2", waiter)
        .await
        .unwrap()
        .expect("round 2: acquire after recovery");
    let handoff = acquired_at - released_at;
    println!("round 2: acquired {handoff:?} after the release");
    assert!(
        handoff < Duration::from_secs(5),
        "round 2: woken {handoff:?} after the release; not by a message"
    );
    g.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscribe_that_is_never_acknowledged_returns_within_its_bound() {
    let server = common::server();
    let proxy = Proxy::start(server.port());
    let holder = common::client(&server).await;
    let waiting = client_through(&proxy).await;
    proxy.freeze_connection(SUBSCRIBER);

    // A 20 s lease and a 15 s wait: only a subscribe that gives up by itself lets the waiter
    // retry (and find the lock free) within seconds of the release.
    let guard = holder
        .lock("unacked")
        .lease(Duration::from_secs(20))
        .acquire()
        .await
        .unwrap();
    let started = Instant::now();
    let waiter = spawn_acquire(&waiting, "unacked", Duration::from_secs(15));
    until_subscribe_is_held(&proxy).await;
    guard.release().await.unwrap();
    let (acquired_at, g) = bounded("waiter", waiter)
        .await
        .unwrap()
        .expect("acquire behind an unacknowledged subscribe");
    let took = acquired_at - started;
    println!("acquired {took:?} after the acquire started");
    assert!(
        took < ACK_TIMEOUT + Duration::from_secs(3),
        "acquired after {took:?}: the subscribe was not bounded by its ack timeout"
    );
    g.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acquire_of_a_held_lock_times_out_on_time_while_the_subscriber_is_frozen() {
    let server = common::server();
    let proxy = Proxy::start(server.port());
    let holder = common::client(&server).await;
    let waiting = client_through(&proxy).await;
    proxy.freeze_connection(SUBSCRIBER);
    let _held = holder
        .lock("busy")
        .lease(Duration::from_secs(20))
        .acquire()
        .await
        .unwrap();

    // Twice: once on the frozen subscriber, once while it is being replaced.
    for round in 0..2 {
        let wait = Duration::from_secs(1);
        let start = Instant::now();
        let r = bounded("acquire", waiting.lock("busy").wait(wait).acquire()).await;
        let took = start.elapsed();
        println!("round {round}: {took:?}");
        assert!(
            matches!(r, Err(LockError::Timeout { .. })),
            "round {round}: {r:?}"
        );
        assert!(took >= wait, "round {round}: gave up early, {took:?}");
        assert!(
            took < wait + ACK_TIMEOUT + Duration::from_secs(1),
            "round {round}: returned {took:?} after start, wait {wait:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parked_waiter_is_woken_when_its_subscriber_goes_silent() {
    let server = common::server();
    let proxy = Proxy::start(server.port());
    let holder = common::client(&server).await;
    let waiting = client_through(&proxy).await;
    let lock = holder.lock("quiet").lease(Duration::from_secs(20));
    let guard = lock.acquire().await.unwrap();
    let before = scripts_so_far(&server).await;
    let waiter = spawn_acquire(&waiting, "quiet", Duration::from_secs(15));
    until_parked(&server, lock.channel(), before).await;

    // The subscription is live in Redis; now the path goes silent and the release message is
    // swallowed. Only the health check can notice: it replaces the connection and wakes the
    // waiter, well before the 15 s wait or the 20 s lease.
    proxy.freeze_connection(SUBSCRIBER);
    let released_at = Instant::now();
    guard.release().await.unwrap();
    let (acquired_at, g) = bounded("waiter", waiter)
        .await
        .unwrap()
        .expect("acquire after the subscriber went silent");
    let took = acquired_at - released_at;
    println!("acquired {took:?} after the release");
    assert!(
        took < Duration::from_secs(8),
        "woken {took:?} after the release: the silent subscriber was not detected"
    );
    assert!(
        proxy.accepted() > OPENED,
        "no replacement connection was opened"
    );
    g.release().await.unwrap();
}
