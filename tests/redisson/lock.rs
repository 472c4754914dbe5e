//! `client.redisson_lock` against the Java side on one server: layout, exclusion, wake-ups,
//! renewals, crashed holders, fencing tokens.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use dlock::redis::aio::MultiplexedConnection;
use dlock::LockClient;
use tokio::time::Instant;

use crate::common::{self, child};
use crate::java::{java_woken_by_release, prefix_name, JavaClient, Side};

/// Far below any lease in these tests (30 s by default), far above a round trip: a waiter
/// woken by the release message gets the lock well within it, one that slept until the
/// holder's PTTL would not.
pub const WOKEN_WITHIN: Duration = Duration::from_millis(1000);

pub async fn hgetall(conn: &mut MultiplexedConnection, key: &str) -> Vec<(String, String)> {
    let mut pairs: Vec<(String, String)> = dlock::redis::cmd("HGETALL")
        .arg(key)
        .query_async(conn)
        .await
        .unwrap();
    pairs.sort();
    pairs
}

pub async fn pttl(conn: &mut MultiplexedConnection, key: &str) -> i64 {
    dlock::redis::cmd("PTTL")
        .arg(key)
        .query_async(conn)
        .await
        .unwrap()
}

pub async fn all_keys(conn: &mut MultiplexedConnection) -> Vec<String> {
    let mut keys: Vec<String> = dlock::redis::cmd("KEYS")
        .arg("*")
        .query_async(conn)
        .await
        .unwrap();
    keys.sort();
    keys
}

/// Every key in the server is one Redisson names for one of the locks `names`: the hash, its
/// token counter, unlock latches, read-hold timeouts; none of dlock's own.
pub async fn only_redisson_keys(conn: &mut MultiplexedConnection, names: &[&str]) {
    for key in all_keys(conn).await {
        let redisson = names.iter().any(|name| {
            let latches = format!("{}:", prefix_name("redisson_unlock_latch", name));
            let timeouts = format!("{{{name}}}:");
            key == *name
                || key == prefix_name("redisson_lock_token", name)
                || key.starts_with(&latches)
                || (key.starts_with(&timeouts) && key.contains(":rwlock_timeout:"))
        });
        assert!(redisson, "a key Redisson does not have: {key}");
        assert!(!key.starts_with("dlock"), "{key}");
    }
}

/// The keys of the server that never expire (PTTL -1): what a lock would leave behind for
/// good.
pub async fn keys_kept_forever(conn: &mut MultiplexedConnection) -> Vec<String> {
    let mut forever = Vec::new();
    for key in all_keys(conn).await {
        if pttl(conn, &key).await == -1 {
            forever.push(key);
        }
    }
    forever
}

/// `<36-char uuid>:<number>`.
pub fn assert_redisson_field(field: &str) -> (String, u64) {
    let (uuid, tid) = field.rsplit_once(':').expect(field);
    assert_eq!(uuid.len(), 36, "{field}");
    assert_eq!(uuid.matches('-').count(), 4, "{field}");
    (uuid.to_owned(), tid.parse().expect(field))
}

#[tokio::test]
async fn the_layout_is_redissons_at_every_step_reentry_included() {
    let server = common::server();
    let client = common::client(&server).await;
    let mut conn = common::raw(&server.url()).await;
    let lock = client.redisson_lock("order:42");
    assert_eq!(lock.key(), "order:42");
    assert_eq!(lock.channel(), "redisson_lock__channel:{order:42}");

    let outer = lock.acquire().await.unwrap();
    let fields = hgetall(&mut conn, "order:42").await;
    assert_eq!(fields.len(), 1, "{fields:?}");
    let (uuid, chain) = assert_redisson_field(&fields[0].0);
    assert_eq!(fields[0].1, "1");
    let ttl = pttl(&mut conn, "order:42").await;
    assert!(
        (29_000..=30_000).contains(&ttl),
        "Redisson's 30 s lease: {ttl}"
    );
    only_redisson_keys(&mut conn, &["order:42"]).await;

    // Re-entry along the call chain: the same field counts 2, the lease is set again.
    let (inner_lock, url, want) = (lock.clone(), server.url(), format!("{uuid}:{chain}"));
    outer
        .scope(async move {
            let inner = inner_lock.acquire().await.unwrap();
            let mut conn = common::raw(&url).await;
            assert_eq!(
                hgetall(&mut conn, "order:42").await,
                vec![(want, "2".to_owned())]
            );
            let ttl = pttl(&mut conn, "order:42").await;
            assert!(ttl > 29_000, "a re-entry sets the lease again: {ttl}");
            inner.release().await.unwrap();
        })
        .await;
    let fields = hgetall(&mut conn, "order:42").await;
    assert_eq!(fields, vec![(format!("{uuid}:{chain}"), "1".to_owned())]);

    // Held: the Java side is refused and answered with the PTTL.
    let java = JavaClient::single(&server.url(), Duration::from_secs(30)).await;
    assert!(
        !java
            .try_lock("order:42", 1, Side::Plain, Duration::ZERO, None)
            .await
    );
    outer.release().await.unwrap();
    assert!(hgetall(&mut conn, "order:42").await.is_empty());
    only_redisson_keys(&mut conn, &["order:42"]).await;

    // A second top-level acquire: same client uuid, another chain number.
    let again = lock.acquire().await.unwrap();
    let fields = hgetall(&mut conn, "order:42").await;
    let (uuid2, chain2) = assert_redisson_field(&fields[0].0);
    assert_eq!(uuid2, uuid);
    assert_ne!(chain2, chain);
    again.release().await.unwrap();

    // The Java side's hold looks the same, and dlock is refused.
    assert!(
        java.try_lock("order:42", 7, Side::Plain, Duration::ZERO, None)
            .await
    );
    assert!(
        java.try_lock("order:42", 7, Side::Plain, Duration::ZERO, None)
            .await
    );
    let fields = hgetall(&mut conn, "order:42").await;
    assert_eq!(fields, vec![(format!("{}:7", java.uuid), "2".to_owned())]);
    assert!(lock.try_acquire().await.unwrap().is_none());
    assert_eq!(java.unlock("order:42", 7, Side::Plain).await, Ok(false));
    assert_eq!(java.unlock("order:42", 7, Side::Plain).await, Ok(true));
    only_redisson_keys(&mut conn, &["order:42"]).await;
}

/// Issue 28, defect 6: a service locking `order:<id>` must not grow Redis by one key per id.
/// Java's `RLock` writes the hash (gone on unlock) and unlock latches (which expire); nothing
/// else, so a plain Redisson lock of dlock must not either.
#[tokio::test]
async fn released_redisson_locks_leave_no_key_that_never_expires() {
    let server = common::server();
    let client = common::client(&server).await;
    let mut conn = common::raw(&server.url()).await;
    for id in 0..50 {
        let lock = client.redisson_lock(format!("order:{id}"));
        let guard = lock.acquire().await.unwrap();
        if id % 10 == 0 {
            // A re-entry along the chain too.
            let inner = lock.clone();
            guard
                .scope(async move { inner.acquire().await.unwrap().release().await.unwrap() })
                .await;
        }
        guard.release().await.unwrap();
    }
    let forever = keys_kept_forever(&mut conn).await;
    assert!(forever.is_empty(), "keys that never expire: {forever:?}");
    let counters: Vec<String> = dlock::redis::cmd("KEYS")
        .arg("redisson_lock_token:*")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert!(counters.is_empty(), "RLock writes no counter: {counters:?}");
}

#[tokio::test]
async fn dlocks_release_writes_redissons_unlock_latch_and_message() {
    let server = common::server();
    let client = common::client(&server).await;
    let mut conn = common::raw(&server.url()).await;
    let lock = client.redisson_lock("invoice");
    let mut pubsub = dlock::redis::Client::open(server.url())
        .unwrap()
        .get_async_pubsub()
        .await
        .unwrap();
    pubsub
        .subscribe("redisson_lock__channel:{invoice}")
        .await
        .unwrap();
    let guard = lock.acquire().await.unwrap();
    guard.release().await.unwrap();
    let msg = tokio::time::timeout(Duration::from_secs(5), {
        use futures_util::StreamExt;
        pubsub.on_message().next()
    })
    .await
    .expect("the unlock message")
    .unwrap();
    assert_eq!(msg.get_payload::<String>().unwrap(), "0");
    let latches: Vec<String> = dlock::redis::cmd("KEYS")
        .arg("redisson_unlock_latch:{invoice}:*")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(latches.len(), 1, "{latches:?}");
    let value: String = dlock::redis::cmd("GET")
        .arg(&latches[0])
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(
        value, "1",
        "Redisson's latch value for a release that freed the lock"
    );
}

/// Both sides increment a counter with GET + SET (not atomic), each under the lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_java_side_and_dlock_exclude_each_other_on_a_non_atomic_counter() {
    const ROUNDS: usize = 25;
    let server = common::server();
    let client = common::client(&server).await;
    let java = Arc::new(JavaClient::single(&server.url(), Duration::from_secs(30)).await);
    let inside = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for t in 0..3u64 {
        let (java, inside, url) = (java.clone(), inside.clone(), server.url());
        tasks.push(tokio::spawn(async move {
            let mut conn = common::raw(&url).await;
            for _ in 0..ROUNDS {
                assert!(
                    java.try_lock("counter", t, Side::Plain, Duration::from_secs(30), None)
                        .await
                );
                bump(&mut conn, &inside).await;
                assert_eq!(java.unlock("counter", t, Side::Plain).await, Ok(true));
            }
        }));
    }
    for _ in 0..3 {
        let (lock, inside, url) = (
            client
                .redisson_lock("counter")
                .wait(Duration::from_secs(30)),
            inside.clone(),
            server.url(),
        );
        tasks.push(tokio::spawn(async move {
            let mut conn = common::raw(&url).await;
            for _ in 0..ROUNDS {
                let g = lock.acquire().await.unwrap();
                bump(&mut conn, &inside).await;
                g.release().await.unwrap();
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let mut conn = common::raw(&server.url()).await;
    let n: usize = dlock::redis::cmd("GET")
        .arg("counter:value")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(n, 6 * ROUNDS, "lost updates: the two sides overlapped");
}

/// One non-atomic increment; panics if another holder is inside at the same time.
pub async fn bump(conn: &mut MultiplexedConnection, inside: &AtomicUsize) {
    assert_eq!(
        inside.fetch_add(1, Ordering::SeqCst),
        0,
        "two holders at once"
    );
    let n: Option<usize> = dlock::redis::cmd("GET")
        .arg("counter:value")
        .query_async(conn)
        .await
        .unwrap();
    tokio::task::yield_now().await;
    let _: () = dlock::redis::cmd("SET")
        .arg("counter:value")
        .arg(n.unwrap_or(0) + 1)
        .query_async(conn)
        .await
        .unwrap();
    inside.fetch_sub(1, Ordering::SeqCst);
}

/// A Java unlock wakes a dlock waiter, and a dlock release a Java waiter, long before the
/// holder's lease would have run out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_side_wakes_the_other_within_a_round_trip_or_two_of_the_release() {
    let server = common::server();
    let client = common::client(&server).await;
    let java = Arc::new(JavaClient::single(&server.url(), Duration::from_secs(30)).await);
    wakes_both_ways(&client, &java, "wake").await;
}

/// Java holds, dlock waits; then dlock holds, Java waits. Returns the two wake-up times.
pub async fn wakes_both_ways(
    client: &LockClient,
    java: &Arc<JavaClient>,
    name: &str,
) -> (Duration, Duration) {
    let lock = client.redisson_lock(name).wait(Duration::from_secs(20));
    assert!(
        java.try_lock(name, 1, Side::Plain, Duration::ZERO, None)
            .await
    );
    let waiter = tokio::spawn({
        let lock = lock.clone();
        async move {
            let g = lock.acquire().await.unwrap();
            (Instant::now(), g)
        }
    });
    // The waiter subscribed (it retries once more, then parks until a message or the PTTL).
    wait_subscribed(&JavaClient::channel(name, Side::Plain), java).await;
    let released = Instant::now();
    assert_eq!(java.unlock(name, 1, Side::Plain).await, Ok(true));
    let (got, guard) = waiter.await.unwrap();
    let dlock_woken = got - released;
    assert!(
        dlock_woken < WOKEN_WITHIN,
        "dlock woke {dlock_woken:?} after the Java unlock"
    );

    let java_woken = java_woken_by_release(java, name, 2, guard).await;
    assert!(
        java_woken < WOKEN_WITHIN,
        "the Java side woke {java_woken:?} after dlock's release"
    );
    assert_eq!(java.unlock(name, 2, Side::Plain).await, Ok(true));
    (dlock_woken, java_woken)
}

/// Waits until some client subscribes `channel` (classic or sharded; on a cluster redis-rs
/// asks every node and combines the answers).
pub async fn wait_subscribed(channel: &str, java: &JavaClient) {
    let conn = java.conn();
    let channel = channel.to_owned();
    common::eventually(Duration::from_secs(10), "a subscriber", || {
        let (mut conn, channel) = (conn.clone(), channel.clone());
        async move {
            for sub in ["NUMSUB", "SHARDNUMSUB"] {
                let reply: dlock::redis::Value = dlock::redis::cmd("PUBSUB")
                    .arg(sub)
                    .arg(&channel)
                    .query_async(&mut conn)
                    .await
                    .unwrap_or(dlock::redis::Value::Nil);
                if subscribers(reply) > 0 {
                    return true;
                }
            }
            false
        }
    })
    .await;
}

/// The count in a `PUBSUB NUMSUB ch` reply: `[ch, n]`, or `{ch: n}` when combined.
fn subscribers(reply: dlock::redis::Value) -> i64 {
    use dlock::redis::Value;
    let count = match reply {
        Value::Array(items) => items.into_iter().nth(1),
        Value::Map(pairs) => pairs.into_iter().next().map(|(_, n)| n),
        _ => None,
    };
    count
        .and_then(|n| dlock::redis::from_redis_value::<i64>(n).ok())
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn both_watchdogs_renew_the_same_key() {
    let server = common::server();
    let client = common::client(&server).await;
    let mut conn = common::raw(&server.url()).await;
    let java = JavaClient::single(&server.url(), Duration::from_millis(1500)).await;

    // The Java side's watchdog keeps its 1.5 s lease alive past several leases...
    assert!(
        java.try_lock("renewed", 1, Side::Plain, Duration::ZERO, None)
            .await
    );
    let lock = client
        .redisson_lock("renewed")
        .ttl(Duration::from_millis(1500));
    tokio::time::sleep(Duration::from_millis(4000)).await;
    assert!(lock.try_acquire().await.unwrap().is_none());
    let ttl = pttl(&mut conn, "renewed").await;
    assert!(ttl > 0 && ttl <= 1500, "{ttl}");
    // ...and once it stops (a crashed JVM), the lease runs out and dlock gets the lock.
    java.crash();
    let stopped = Instant::now();
    let g = lock.wait(Duration::from_secs(10)).acquire().await.unwrap();
    assert!(
        stopped.elapsed() < Duration::from_millis(2500),
        "{:?}",
        stopped.elapsed()
    );

    // dlock's watchdog renews the same key the same way: still held after several leases.
    tokio::time::sleep(Duration::from_millis(4000)).await;
    assert!(!g.is_lost());
    let fields = hgetall(&mut conn, "renewed").await;
    assert_eq!(fields.len(), 1);
    assert_redisson_field(&fields[0].0);
    let ttl = pttl(&mut conn, "renewed").await;
    assert!(ttl > 0 && ttl <= 1500, "{ttl}");
    assert!(
        !java
            .try_lock("renewed", 2, Side::Plain, Duration::ZERO, None)
            .await
    );
    g.release().await.unwrap();
}

#[tokio::test]
async fn fencing_tokens_are_one_sequence_with_redissons_fenced_lock() {
    let server = common::server();
    let client = common::client(&server).await;
    let other = common::client(&server).await;
    let java = JavaClient::single(&server.url(), Duration::from_secs(30)).await;
    let lock = client.redisson_fenced_lock("fenced");

    let t1 = java
        .try_lock_fenced("fenced", 1, Duration::ZERO)
        .await
        .unwrap();
    assert_eq!(java.unlock("fenced", 1, Side::Plain).await, Ok(true));
    let g = lock.acquire().await.unwrap();
    assert_eq!(g.fencing_token(), t1 as u64 + 1);
    // The fenced lock is RLock's hash: a plain Java RLock is refused while it holds.
    assert!(
        !java
            .try_lock("fenced", 2, Side::Plain, Duration::ZERO, None)
            .await
    );
    g.release().await.unwrap();
    // Another dlock client draws the next token.
    let g = other
        .redisson_fenced_lock("fenced")
        .acquire()
        .await
        .unwrap();
    assert_eq!(g.fencing_token(), t1 as u64 + 2);
    g.release().await.unwrap();
    let t4 = java
        .try_lock_fenced("fenced", 1, Duration::ZERO)
        .await
        .unwrap();
    assert_eq!(t4, t1 + 3);
    assert_eq!(java.unlock("fenced", 1, Side::Plain).await, Ok(true));
    let mut conn = common::raw(&server.url()).await;
    let stored: i64 = dlock::redis::cmd("GET")
        .arg("redisson_lock_token:{fenced}")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(stored, t4);
    // Kept for good, as Java keeps it: Java's next token counts on from it.
    assert_eq!(pttl(&mut conn, "redisson_lock_token:{fenced}").await, -1);
}

#[tokio::test]
async fn a_plain_redisson_locks_tokens_rise_across_holders_without_a_counter() {
    let server = common::server();
    let client = common::client(&server).await;
    let other = common::client(&server).await;
    let java = JavaClient::single(&server.url(), Duration::from_secs(30)).await;
    let mut conn = common::raw(&server.url()).await;
    let mut last = 0;
    for round in 0..3 {
        for c in [&client, &other] {
            let g = c.redisson_lock("plain").acquire().await.unwrap();
            assert!(
                g.fencing_token() > last,
                "{} after {last}",
                g.fencing_token()
            );
            last = g.fencing_token();
            g.release().await.unwrap();
        }
        // A Java RLock holder in between: no counter appears either way.
        assert!(
            java.try_lock("plain", round, Side::Plain, Duration::ZERO, None)
                .await
        );
        assert_eq!(java.unlock("plain", round, Side::Plain).await, Ok(true));
    }
    assert!(keys_kept_forever(&mut conn).await.is_empty());

    // Plain and fenced handles share the hash but not a hold: no re-entry across them.
    let g = client
        .redisson_fenced_lock("plain")
        .acquire()
        .await
        .unwrap();
    let plain = client.redisson_lock("plain");
    let nested = g
        .scope(async move { plain.acquire().await.map(|_| ()) })
        .await;
    assert!(
        matches!(nested, Err(dlock::LockError::WouldDeadlock { .. })),
        "{nested:?}"
    );
    g.release().await.unwrap();
}

#[tokio::test]
async fn a_java_unlock_by_another_thread_is_refused_and_force_unlock_wakes_dlock() {
    let server = common::server();
    let client = common::client(&server).await;
    let java = JavaClient::single(&server.url(), Duration::from_secs(30)).await;
    let lock = client.redisson_lock("owned");
    let g = lock.acquire().await.unwrap();
    assert_eq!(java.unlock("owned", 1, Side::Plain).await, Err(()));
    assert!(!g.is_lost());
    g.release().await.unwrap();

    assert!(
        java.try_lock("owned", 1, Side::Plain, Duration::ZERO, None)
            .await
    );
    let waiter = tokio::spawn({
        let lock = lock.clone().wait(Duration::from_secs(20));
        async move {
            let g = lock.acquire().await.unwrap();
            (Instant::now(), g)
        }
    });
    wait_subscribed("redisson_lock__channel:{owned}", &java).await;
    let forced = Instant::now();
    // Redisson's forceUnlock, sent by dlock's handle: DEL and message 0.
    assert!(lock.force_unlock().await.unwrap());
    let (got, g) = waiter.await.unwrap();
    assert!(got - forced < WOKEN_WITHIN, "{:?}", got - forced);
    g.release().await.unwrap();
}

/// A holder SIGKILLed on either side frees the lock when its lease runs out, not before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sigkilled_holder_on_either_side_frees_the_lock_after_its_lease() {
    let server = common::server();
    let client = common::client(&server).await;
    let java = JavaClient::single(&server.url(), Duration::from_secs(30)).await;
    for side in ["dlock", "java"] {
        let name = format!("crash-{side}");
        let env = [
            ("DLOCK_CHILD_URL", server.url()),
            ("DLOCK_CHILD_SIDE", side.to_owned()),
            ("DLOCK_CHILD_NAME", name.clone()),
        ];
        let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let (mut child, mut lines) = child::spawn(module_path!(), "child_holder_entry", &env);
        child::expect_line(&mut lines, "HELD").await;
        // Past the child's 1.5 s lease its watchdog still keeps the lock.
        tokio::time::sleep(Duration::from_millis(3000)).await;
        assert!(client
            .redisson_lock(&name)
            .try_acquire()
            .await
            .unwrap()
            .is_none());
        child.start_kill().unwrap();
        child.wait().await.unwrap();
        let killed = Instant::now();
        let ok = if side == "dlock" {
            java.try_lock(&name, 1, Side::Plain, Duration::from_secs(10), None)
                .await
        } else {
            let g = client
                .redisson_lock(&name)
                .wait(Duration::from_secs(10))
                .acquire()
                .await;
            g.is_ok()
        };
        let took = killed.elapsed();
        assert!(ok, "{side}: not freed");
        // Freed by the lease (at most 1.5 s after the last renewal), not by anything sooner.
        assert!(took < Duration::from_millis(2500), "{side}: {took:?}");
        assert!(
            took > Duration::from_millis(200),
            "{side}: freed at once ({took:?})"
        );
    }
}

/// The child side of the test above: holds `DLOCK_CHILD_NAME` with a 1.5 s lease renewed by
/// its watchdog until killed. Does nothing in a normal run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn child_holder_entry() {
    let (Ok(url), Ok(side), Ok(name)) = (
        std::env::var("DLOCK_CHILD_URL"),
        std::env::var("DLOCK_CHILD_SIDE"),
        std::env::var("DLOCK_CHILD_NAME"),
    ) else {
        return;
    };
    let lease = Duration::from_millis(1500);
    let _held: Box<dyn std::any::Any + Send> = if side == "java" {
        let java = JavaClient::single(&url, lease).await;
        assert!(
            java.try_lock(&name, 1, Side::Plain, Duration::ZERO, None)
                .await
        );
        Box::new(java)
    } else {
        let client = LockClient::connect(&url).await.unwrap();
        let g = client
            .redisson_lock(&name)
            .ttl(lease)
            .acquire()
            .await
            .unwrap();
        Box::new((client, g))
    };
    println!("HELD");
    tokio::time::sleep(Duration::from_secs(120)).await;
}
