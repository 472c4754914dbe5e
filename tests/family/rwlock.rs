//! The read-write lock (`client.read_write_lock(name)`): sharing, exclusion, writer preference,
//! downgrade and upgrade, reentrancy, each reader's own lease, who wakes whom, tokens, bad
//! input and cancellation, against a real redis-server per test.
//!
//! Redis side (see `dlock-runtime/lua/rw/`): the hash `dlock:{name}:rw` (`mode`,
//! `w:<owner>` / `r:<owner>` hold counts), the zset `dlock:{name}:rw:readers` (reader ->
//! deadline in server ms), `dlock:{name}:rw:wwait` (a waiting writer's claim, 2 s, refreshed at
//! least every 1 s while it waits) and the channel `dlock:{name}:rw:chan`.
//!
//! Child processes (a reader killed mid-hold, a waiting writer stopped mid-wait): the test
//! binary re-executes itself with `--exact child_process_entry` and `DLOCK_CHILD_*` set, like
//! tests/lock/processes.rs.

use crate::common;
use crate::common::child::{self, ChildLines};

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::proxy::Proxy;
use dlock::redis::aio::MultiplexedConnection;
use dlock::{LockClient, LockError};
use futures_util::StreamExt;
use tokio::process::Child;
use tokio::sync::Barrier;

// ---------------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------------

/// The Redis names of the read-write lock `name` under the default prefix.
struct RwKeys {
    hash: String,
    readers: String,
    wwait: String,
    chan: String,
}

fn rw_keys(name: &str) -> RwKeys {
    let hash = format!("dlock:{{{name}}}:rw");
    RwKeys {
        readers: format!("{hash}:readers"),
        wwait: format!("{hash}:wwait"),
        chan: format!("{hash}:chan"),
        hash,
    }
}

/// `fut`, or a panic naming `what` after `limit`: no await in these tests may hang the binary.
async fn bounded<T>(limit: Duration, what: &str, fut: impl Future<Output = T>) -> T {
    match tokio::time::timeout(limit, fut).await {
        Ok(v) => v,
        Err(_) => panic!("{what}: not done within {limit:?}"),
    }
}

async fn exists(conn: &mut MultiplexedConnection, key: &str) -> bool {
    dlock::redis::cmd("EXISTS")
        .arg(key)
        .query_async::<i64>(conn)
        .await
        .expect("EXISTS")
        == 1
}

async fn pttl(conn: &mut MultiplexedConnection, key: &str) -> i64 {
    dlock::redis::cmd("PTTL")
        .arg(key)
        .query_async(conn)
        .await
        .expect("PTTL")
}

async fn hash_fields(conn: &mut MultiplexedConnection, key: &str) -> HashMap<String, String> {
    dlock::redis::cmd("HGETALL")
        .arg(key)
        .query_async(conn)
        .await
        .expect("HGETALL")
}

/// The hold count Redis keeps for `side` ("r" / "w") of owners of `client` (none: 0).
async fn redis_holds(
    conn: &mut MultiplexedConnection,
    key: &str,
    side: &str,
    client: &LockClient,
) -> Vec<u32> {
    let prefix = format!("{side}:{}:", client.client_id());
    hash_fields(conn, key)
        .await
        .into_iter()
        .filter(|(f, _)| f.starts_with(&prefix))
        .map(|(_, v)| v.parse().expect("hold count"))
        .collect()
}

/// The reader leases (owner, deadline in server ms), earliest deadline first.
async fn reader_leases(conn: &mut MultiplexedConnection, key: &str) -> Vec<(String, f64)> {
    dlock::redis::cmd("ZRANGE")
        .arg(key)
        .arg(0)
        .arg(-1)
        .arg("WITHSCORES")
        .query_async(conn)
        .await
        .expect("ZRANGE")
}

/// The server's clock in ms (the clock reader deadlines are kept in).
async fn server_ms(conn: &mut MultiplexedConnection) -> i64 {
    let (s, us): (i64, i64) = dlock::redis::cmd("TIME")
        .query_async(conn)
        .await
        .expect("TIME");
    s * 1000 + us / 1000
}

/// Waits until `n` connections are subscribed to `channel`: the waiters found the lock held
/// and now listen for its release.
async fn until_subscribers(conn: &MultiplexedConnection, channel: &str, n: i64) {
    common::eventually(
        Duration::from_secs(10),
        &format!("{n} subscribers on {channel}"),
        || {
            let mut conn = conn.clone();
            async move {
                let (_, count): (String, i64) = dlock::redis::cmd("PUBSUB")
                    .arg("NUMSUB")
                    .arg(channel)
                    .query_async(&mut conn)
                    .await
                    .expect("PUBSUB NUMSUB");
                count >= n
            }
        },
    )
    .await;
}

/// Waits until a writer's claim on `name` exists (a writer is refused and waiting).
async fn until_claimed(conn: &MultiplexedConnection, name: &str) {
    let wwait = rw_keys(name).wwait;
    common::eventually(
        Duration::from_secs(10),
        &format!("a writer's claim {wwait}"),
        || {
            let mut conn = conn.clone();
            let wwait = wwait.clone();
            async move { exists(&mut conn, &wwait).await }
        },
    )
    .await;
}

// ---------------------------------------------------------------------------------------------
// Child processes
// ---------------------------------------------------------------------------------------------

/// The child side; does nothing in a normal run (only when started by `spawn_child`).
#[test]
fn child_process_entry() {
    let (Ok(url), Ok(mode), Ok(name)) = (
        std::env::var("DLOCK_CHILD_URL"),
        std::env::var("DLOCK_CHILD_MODE"),
        std::env::var("DLOCK_CHILD_NAME"),
    ) else {
        return;
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async move {
        let client = LockClient::connect(&url).await.unwrap();
        let rw = client.read_write_lock(name);
        match mode.as_str() {
            // A reader with a 1 s lease, renewed by its watchdog until the process is killed.
            "read" => {
                let g = rw
                    .read()
                    .ttl(Duration::from_secs(1))
                    .acquire()
                    .await
                    .unwrap();
                println!("HELD {}", g.fencing_token());
                std::future::pending::<()>().await;
            }
            // A writer that waits (the parent stops it while it waits).
            "write" => {
                println!("ASKING");
                let g = rw
                    .write()
                    .wait(Duration::from_secs(60))
                    .acquire()
                    .await
                    .unwrap();
                println!("HELD {}", g.fencing_token());
                std::future::pending::<()>().await;
            }
            m => panic!("unknown DLOCK_CHILD_MODE {m}"),
        }
    });
}

/// Starts this test binary as a child in `mode` on the lock `name`; killed if the test fails.
fn spawn_child(url: &str, mode: &str, name: &str) -> (Child, ChildLines) {
    let env = [
        ("DLOCK_CHILD_URL", url),
        ("DLOCK_CHILD_MODE", mode),
        ("DLOCK_CHILD_NAME", name),
    ];
    child::spawn(module_path!(), "child_process_entry", &env)
}

// ---------------------------------------------------------------------------------------------
// 1. Readers overlap
// ---------------------------------------------------------------------------------------------

/// 8 readers over two clients are all inside at once: a barrier reached inside the read
/// section (by them and this task) only opens when all 8 hold; Redis lists 8 reader holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eight_readers_over_two_clients_hold_at_once() {
    const READERS: usize = 8;
    let server = common::server();
    let a = common::client(&server).await;
    let b = common::client(&server).await;
    let mut raw = common::raw(&server.url()).await;
    let keys = rw_keys("overlap");
    let inside = Arc::new(Barrier::new(READERS + 1));
    let leave = Arc::new(Barrier::new(READERS + 1));
    let tasks: Vec<_> = (0..READERS)
        .map(|i| {
            let client = if i % 2 == 0 { &a } else { &b };
            let read = client
                .read_write_lock("overlap")
                .read()
                .wait(Duration::from_secs(10));
            let (inside, leave) = (inside.clone(), leave.clone());
            tokio::spawn(async move {
                let g = read.acquire().await.expect("a reader gets in");
                inside.wait().await;
                leave.wait().await;
                g.release().await.expect("reader release");
            })
        })
        .collect();
    bounded(
        Duration::from_secs(10),
        "all 8 readers inside at once",
        inside.wait(),
    )
    .await;
    // While all 8 hold: 8 reader fields (+ mode) and 8 reader leases; no writer gets in.
    let fields = hash_fields(&mut raw, &keys.hash).await;
    assert_eq!(fields.get("mode").map(String::as_str), Some("read"));
    assert_eq!(
        fields.keys().filter(|f| f.starts_with("r:")).count(),
        READERS,
        "{fields:?}"
    );
    let leases: i64 = dlock::redis::cmd("ZCARD")
        .arg(&keys.readers)
        .query_async(&mut raw)
        .await
        .unwrap();
    assert_eq!(leases, READERS as i64);
    assert!(a
        .read_write_lock("overlap")
        .write()
        .try_acquire()
        .await
        .unwrap()
        .is_none());
    leave.wait().await;
    for t in tasks {
        bounded(Duration::from_secs(10), "reader task", t)
            .await
            .unwrap();
    }
    assert!(
        !exists(&mut raw, &keys.hash).await,
        "the last reader frees the lock"
    );
    assert!(!exists(&mut raw, &keys.readers).await);
}

// ---------------------------------------------------------------------------------------------
// 2. A writer excludes readers and writers
// ---------------------------------------------------------------------------------------------

/// 2 clients x (2 writers + 2 readers) x 25 rounds. Writers do a non-atomic read-modify-write
/// of a counter and of its copy (with yields in between); gauges sampled inside each section:
/// a writer sees itself alone (1 writer, 0 readers) at its start and end, a reader sees 0
/// writers and a counter equal to its copy (no half-done write). The final count is exact.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writer_excludes_readers_and_other_writers() {
    const ROUNDS: usize = 25;
    const WRITERS: usize = 2;
    const READERS: usize = 2;
    let server = common::server();
    let clients = [common::client(&server).await, common::client(&server).await];
    let raw = common::raw(&server.url()).await;
    let readers = Arc::new(AtomicI64::new(0));
    let writers = Arc::new(AtomicI64::new(0));
    let max_readers = Arc::new(AtomicI64::new(0));
    let violations = Arc::new(Mutex::new(Vec::<String>::new()));
    let mut tasks = Vec::new();
    for client in &clients {
        for _ in 0..WRITERS {
            let write = client
                .read_write_lock("exclusion")
                .write()
                .wait(Duration::from_secs(60));
            let (readers, writers, violations) =
                (readers.clone(), writers.clone(), violations.clone());
            let mut conn = raw.clone();
            tasks.push(tokio::spawn(async move {
                for _ in 0..ROUNDS {
                    let g = write.acquire().await.expect("writer acquire");
                    let w = writers.fetch_add(1, Ordering::SeqCst) + 1;
                    let r = readers.load(Ordering::SeqCst);
                    if w != 1 || r != 0 {
                        violations
                            .lock()
                            .unwrap()
                            .push(format!("writer entered beside {w} writers, {r} readers"));
                    }
                    let n: Option<u64> = dlock::redis::cmd("GET")
                        .arg("n")
                        .query_async(&mut conn)
                        .await
                        .unwrap();
                    tokio::task::yield_now().await;
                    let n = n.unwrap_or(0) + 1;
                    let () = dlock::redis::cmd("SET")
                        .arg("n")
                        .arg(n)
                        .query_async(&mut conn)
                        .await
                        .unwrap();
                    tokio::task::yield_now().await;
                    let () = dlock::redis::cmd("SET")
                        .arg("copy")
                        .arg(n)
                        .query_async(&mut conn)
                        .await
                        .unwrap();
                    let w = writers.load(Ordering::SeqCst);
                    let r = readers.load(Ordering::SeqCst);
                    if w != 1 || r != 0 {
                        violations
                            .lock()
                            .unwrap()
                            .push(format!("writer left beside {w} writers, {r} readers"));
                    }
                    writers.fetch_sub(1, Ordering::SeqCst);
                    g.release().await.expect("writer release");
                }
            }));
        }
        for _ in 0..READERS {
            let read = client
                .read_write_lock("exclusion")
                .read()
                .wait(Duration::from_secs(60));
            let (readers, writers, violations, max_readers) = (
                readers.clone(),
                writers.clone(),
                violations.clone(),
                max_readers.clone(),
            );
            let mut conn = raw.clone();
            tasks.push(tokio::spawn(async move {
                for _ in 0..ROUNDS {
                    let g = read.acquire().await.expect("reader acquire");
                    let r = readers.fetch_add(1, Ordering::SeqCst) + 1;
                    max_readers.fetch_max(r, Ordering::SeqCst);
                    tokio::task::yield_now().await;
                    let (n, copy): (Option<u64>, Option<u64>) = dlock::redis::cmd("MGET")
                        .arg("n")
                        .arg("copy")
                        .query_async(&mut conn)
                        .await
                        .unwrap();
                    let w = writers.load(Ordering::SeqCst);
                    if w != 0 || n != copy {
                        violations.lock().unwrap().push(format!(
                            "reader saw {w} writers, counter {n:?} beside its copy {copy:?}"
                        ));
                    }
                    readers.fetch_sub(1, Ordering::SeqCst);
                    g.release().await.expect("reader release");
                }
            }));
        }
    }
    bounded(
        Duration::from_secs(120),
        "all writers and readers",
        futures_util::future::try_join_all(tasks),
    )
    .await
    .unwrap();
    let violations = violations.lock().unwrap().clone();
    assert!(violations.is_empty(), "{violations:?}");
    let mut conn = raw.clone();
    let n: u64 = dlock::redis::cmd("GET")
        .arg("n")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(n, (2 * WRITERS * ROUNDS) as u64, "lost or doubled updates");
    println!(
        "most readers inside at once: {}",
        max_readers.load(Ordering::SeqCst)
    );
}

// ---------------------------------------------------------------------------------------------
// 3. A waiting writer is not starved
// ---------------------------------------------------------------------------------------------

/// 16 reader tasks over two clients loop (each holds 20-50 ms, then asks again at once), so
/// the read side is never free for long; a writer of a third client asks with a 10 s wait.
///
/// The bound: the writer's claim keeps readers that do not hold yet out, so it waits for the
/// readers inside when its claim lands (<= 50 ms more each), plus, if it misses the wake-up,
/// its own retries (at least every 1 s): asserted under 3 s, generous for a loaded 2-core
/// machine. Without the claim it would only get in at a moment when all 16 readers happen to
/// be out, which this load practically never leaves: its 10 s wait would run out.
///
/// Also asserted: the readers were looping around it (each had done 20 rounds before it asked,
/// some were inside when it asked, and they go on after it), and none was inside with it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixteen_looping_readers_do_not_starve_a_waiting_writer() {
    const READERS: usize = 16;
    const MAX_ROUNDS: u64 = 2000;
    const BOUND: Duration = Duration::from_secs(3);
    let server = common::server();
    let a = common::client(&server).await;
    let b = common::client(&server).await;
    let c = common::client(&server).await;
    let active = Arc::new(AtomicI64::new(0));
    let rounds: Arc<Vec<AtomicU64>> = Arc::new((0..READERS).map(|_| AtomicU64::new(0)).collect());
    let stop = Arc::new(AtomicBool::new(false));
    let mut rng = common::Rng::from_clock();
    let readers: Vec<_> = (0..READERS)
        .map(|i| {
            let client = if i % 2 == 0 { &a } else { &b };
            let read = client
                .read_write_lock("starve")
                .read()
                .wait(Duration::from_secs(20));
            let (active, rounds, stop) = (active.clone(), rounds.clone(), stop.clone());
            let seed = rng.next();
            tokio::spawn(async move {
                let mut rng = common::Rng::new(seed);
                let started = Instant::now();
                for _ in 0..MAX_ROUNDS {
                    if stop.load(Ordering::SeqCst) || started.elapsed() > Duration::from_secs(30) {
                        break;
                    }
                    let g = read.acquire().await.expect("reader acquire");
                    active.fetch_add(1, Ordering::SeqCst);
                    // The reader's work (the subject of the test, not a synchronisation).
                    tokio::time::sleep(Duration::from_millis(20 + rng.below(31))).await;
                    active.fetch_sub(1, Ordering::SeqCst);
                    g.release().await.expect("reader release");
                    rounds[i].fetch_add(1, Ordering::SeqCst);
                }
            })
        })
        .collect();
    // Warm-up: every reader has looped 20 times (about a second).
    common::eventually(Duration::from_secs(20), "every reader looping", || {
        let rounds = rounds.clone();
        async move { rounds.iter().all(|r| r.load(Ordering::SeqCst) >= 20) }
    })
    .await;
    let inside_when_asked = active.load(Ordering::SeqCst);
    let before: u64 = total(&rounds);
    let asked = Instant::now();
    let got = c
        .read_write_lock("starve")
        .write()
        .wait(Duration::from_secs(10))
        .acquire()
        .await;
    let took = asked.elapsed();
    let readers_beside_writer = active.load(Ordering::SeqCst);
    let during: u64 = total(&rounds) - before;
    let w = got.unwrap_or_else(|e| {
        panic!("the writer was starved by looping readers: {e} (after {took:?})")
    });
    println!(
        "writer in after {took:?}; {inside_when_asked} readers inside when it asked, \
         {before} read rounds before, {during} ended while it waited"
    );
    assert_eq!(readers_beside_writer, 0, "readers inside beside the writer");
    assert!(took < BOUND, "the writer waited {took:?}, bound {BOUND:?}");
    assert!(
        inside_when_asked > 0,
        "no reader was inside when the writer asked: the test did not contend"
    );
    w.release().await.unwrap();
    // The readers go on once the writer has left.
    let after_writer = total(&rounds);
    common::eventually(Duration::from_secs(10), "readers looping again", || {
        let rounds = rounds.clone();
        async move { total(&rounds) >= after_writer + 5 * READERS as u64 }
    })
    .await;
    stop.store(true, Ordering::SeqCst);
    for r in readers {
        bounded(Duration::from_secs(30), "reader task", r)
            .await
            .unwrap();
    }
}

/// Read rounds completed by all readers so far.
fn total(rounds: &[AtomicU64]) -> u64 {
    rounds.iter().map(|r| r.load(Ordering::SeqCst)).sum()
}

// ---------------------------------------------------------------------------------------------
// 4. Downgrade
// ---------------------------------------------------------------------------------------------

/// A writer takes the read side inside its write scope at once (wait zero), with its token;
/// after the write release the lock is read-held: other clients' readers join, writers wait
/// (a waiting writer gets in only when the last reader, the downgraded one, leaves); with no
/// other reader, the downgraded read's release frees the lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writer_downgrades_to_a_read_that_outlives_its_write() {
    let server = common::server();
    let a = common::client(&server).await;
    let b = common::client(&server).await;
    let c = common::client(&server).await;
    let mut raw = common::raw(&server.url()).await;
    let keys = rw_keys("downgrade");
    let rw_a = a.read_write_lock("downgrade");
    let rw_b = b.read_write_lock("downgrade");

    // Alone: write -> read -> release write -> release read frees the lock.
    let w = rw_a.write().acquire().await.unwrap();
    let read = bounded(
        Duration::from_secs(2),
        "downgrade",
        w.scope(async { rw_a.read().wait(Duration::ZERO).acquire().await }),
    )
    .await
    .expect("a writer reads inside its write scope");
    assert_eq!(read.fencing_token(), w.fencing_token());
    assert_eq!(read.hold_count(), 1);
    w.release().await.unwrap();
    assert_eq!(
        hash_fields(&mut raw, &keys.hash)
            .await
            .get("mode")
            .map(String::as_str),
        Some("read")
    );
    read.release().await.unwrap();
    assert!(!rw_a.write().is_locked().await.unwrap(), "left held");
    assert!(!exists(&mut raw, &keys.readers).await);

    // With others: they read beside the downgraded read, a writer waits for both.
    let w = rw_a.write().acquire().await.unwrap();
    let token = w.fencing_token();
    let read = w
        .scope(async { rw_a.read().wait(Duration::ZERO).acquire().await })
        .await
        .expect("downgrade");
    assert_eq!(read.fencing_token(), token);
    // Still writing: nobody else gets in.
    assert!(rw_b.read().try_acquire().await.unwrap().is_none());
    assert!(rw_b.write().try_acquire().await.unwrap().is_none());
    w.release().await.unwrap();
    let other = rw_b
        .read()
        .wait(Duration::ZERO)
        .acquire()
        .await
        .expect("another client reads beside the downgraded read");
    assert!(rw_b.write().try_acquire().await.unwrap().is_none());
    let writer = tokio::spawn({
        let write = c
            .read_write_lock("downgrade")
            .write()
            .wait(Duration::from_secs(20));
        async move { write.acquire().await.map(|g| (g.fencing_token(), g)) }
    });
    until_claimed(&raw, "downgrade").await;
    other.release().await.unwrap();
    // The downgraded read still holds: the writer is still out.
    assert_eq!(redis_holds(&mut raw, &keys.hash, "r", &a).await, vec![1]);
    assert!(!writer.is_finished(), "a writer got in beside a reader");
    let released = Instant::now();
    read.release().await.unwrap();
    let (t2, g2) = bounded(Duration::from_secs(5), "the waiting writer", writer)
        .await
        .unwrap()
        .expect("the writer gets in after the last read");
    println!("writer in {:?} after the last read", released.elapsed());
    assert!(t2 > token);
    g2.release().await.unwrap();
    assert!(!rw_a.write().is_locked().await.unwrap());
}

/// A downgrade is granted at once even while another client's writer waits (its claim keeps
/// only readers that are not the holder out); after the write release that claim keeps new
/// readers out, and the waiting writer gets in when the downgraded read ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_downgrade_is_not_held_back_by_another_writers_claim() {
    let server = common::server();
    let a = common::client(&server).await;
    let b = common::client(&server).await;
    let c = common::client(&server).await;
    let raw = common::raw(&server.url()).await;
    let rw_a = a.read_write_lock("downgrade:claimed");
    let w = rw_a.write().acquire().await.unwrap();
    let writer = tokio::spawn({
        let write = c
            .read_write_lock("downgrade:claimed")
            .write()
            .wait(Duration::from_secs(20));
        async move { write.acquire().await.map(|g| (g.fencing_token(), g)) }
    });
    until_claimed(&raw, "downgrade:claimed").await;
    let started = Instant::now();
    let read = w
        .scope(async { rw_a.read().wait(Duration::ZERO).acquire().await })
        .await
        .expect("downgrade beside a waiting writer's claim");
    assert!(started.elapsed() < Duration::from_secs(1));
    w.release().await.unwrap();
    assert!(
        b.read_write_lock("downgrade:claimed")
            .read()
            .try_acquire()
            .await
            .unwrap()
            .is_none(),
        "a new reader passed a waiting writer"
    );
    assert!(!writer.is_finished());
    read.release().await.unwrap();
    let (token, g) = bounded(Duration::from_secs(5), "the waiting writer", writer)
        .await
        .unwrap()
        .unwrap();
    assert!(token > 0);
    g.release().await.unwrap();
}

/// A writer may take the read side twice in its write scope (two downgraded read guards, e.g.
/// two calls that each read): each is a hold of its own, so releasing one leaves the other
/// holding, and after the write release the lock stays read-held until the second goes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_downgraded_reads_in_one_write_scope_are_two_holds() {
    let server = common::server();
    let a = common::client(&server).await;
    let b = common::client(&server).await;
    let rw_a = a.read_write_lock("downgrade:twice");
    let rw_b = b.read_write_lock("downgrade:twice");
    let w = rw_a.write().acquire().await.unwrap();
    let (r1, r2) = w
        .scope(async {
            let r1 = rw_a.read().wait(Duration::ZERO).acquire().await?;
            let r2 = rw_a.read().wait(Duration::ZERO).acquire().await?;
            Ok::<_, LockError>((r1, r2))
        })
        .await
        .expect("two downgrades");
    r1.release().await.unwrap();
    w.release().await.unwrap();
    // r2 still reads: no writer may get in.
    assert!(!r2.is_lost());
    assert!(
        rw_b.write().try_acquire().await.unwrap().is_none(),
        "a writer got in while a downgraded read guard still held"
    );
    r2.release().await.expect("the second read's release");
    assert!(!rw_a.write().is_locked().await.unwrap());
}

// ---------------------------------------------------------------------------------------------
// 5. Upgrade
// ---------------------------------------------------------------------------------------------

/// Inside a read scope, asking for the write side fails at once with `WouldDeadlock` naming
/// the lock (not after its 5 s wait), and leaves the read hold as it was: count 1, another
/// client's writer still refused, no writer's claim left behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upgrade_fails_at_once_and_leaves_the_read_intact() {
    let server = common::server();
    let a = common::client(&server).await;
    let b = common::client(&server).await;
    let mut raw = common::raw(&server.url()).await;
    let rw_a = a.read_write_lock("upgrade");
    let read = rw_a.read().acquire().await.unwrap();
    let started = Instant::now();
    let up = bounded(
        Duration::from_secs(10),
        "the upgrade",
        read.scope(async { rw_a.write().wait(Duration::from_secs(5)).acquire().await }),
    )
    .await;
    let took = started.elapsed();
    match &up {
        Err(e @ LockError::WouldDeadlock { name, reason }) => {
            assert_eq!(name, "upgrade");
            assert!(e.to_string().contains("upgrade"), "{e}");
            println!("upgrade refused in {took:?}: {e} ({reason})");
        }
        other => panic!("expected WouldDeadlock, got {other:?}"),
    }
    assert!(took < Duration::from_millis(500), "refused after {took:?}");
    assert_eq!(read.hold_count(), 1);
    assert!(!read.is_lost());
    assert_eq!(
        redis_holds(&mut raw, &rw_keys("upgrade").hash, "r", &a).await,
        vec![1]
    );
    assert!(!exists(&mut raw, &rw_keys("upgrade").wwait).await);
    assert!(b
        .read_write_lock("upgrade")
        .write()
        .try_acquire()
        .await
        .unwrap()
        .is_none());
    read.release().await.unwrap();
    assert!(!rw_a.read().is_locked().await.unwrap());
}

// ---------------------------------------------------------------------------------------------
// 6. Reentrancy
// ---------------------------------------------------------------------------------------------

/// A read inside one's read scope re-enters (hold count 2, Redis count 2); one release keeps
/// it held (another client's writer still refused); the second frees it. Same for the write
/// side, with another client's reader refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn both_sides_are_reentrant_within_their_scope() {
    let server = common::server();
    let a = common::client(&server).await;
    let b = common::client(&server).await;
    let mut raw = common::raw(&server.url()).await;
    let key = rw_keys("reentry").hash;
    let rw_a = a.read_write_lock("reentry");
    let rw_b = b.read_write_lock("reentry");

    for side in ["r", "w"] {
        let (mine, theirs) = if side == "r" {
            (rw_a.read(), rw_b.write())
        } else {
            (rw_a.write(), rw_b.read())
        };
        let outer = mine.acquire().await.unwrap();
        let inner = bounded(
            Duration::from_secs(2),
            "re-entry",
            outer.scope(async { mine.clone().wait(Duration::ZERO).acquire().await }),
        )
        .await
        .unwrap_or_else(|e| panic!("{side}: re-entry: {e}"));
        assert_eq!(inner.hold_count(), 2, "{side}");
        assert_eq!(inner.fencing_token(), outer.fencing_token(), "{side}");
        assert_eq!(
            redis_holds(&mut raw, &key, side, &a).await,
            vec![2],
            "{side}"
        );
        inner.release().await.unwrap();
        assert_eq!(outer.hold_count(), 1, "{side}");
        assert_eq!(
            redis_holds(&mut raw, &key, side, &a).await,
            vec![1],
            "{side}"
        );
        assert!(mine.is_locked().await.unwrap(), "{side}: freed too early");
        assert!(
            theirs.try_acquire().await.unwrap().is_none(),
            "{side}: the other side got in after one of two releases"
        );
        outer.release().await.unwrap();
        assert!(!mine.is_locked().await.unwrap(), "{side}: left held");
    }
}

// ---------------------------------------------------------------------------------------------
// 7. Each reader's own lease
// ---------------------------------------------------------------------------------------------

/// A reader with a 300 ms ttl held for 1.5 s stays held: the watchdog renews its own lease
/// (another client's writer is refused at every try, the guard is never lost).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_short_ttl_reader_is_renewed_by_the_watchdog() {
    let server = common::server();
    let a = common::client(&server).await;
    let b = common::client(&server).await;
    let mut raw = common::raw(&server.url()).await;
    let keys = rw_keys("lease:short");
    let read = a
        .read_write_lock("lease:short")
        .read()
        .ttl(Duration::from_millis(300))
        .acquire()
        .await
        .unwrap();
    let write = b.read_write_lock("lease:short").write();
    let started = Instant::now();
    let mut tries = 0;
    while started.elapsed() < Duration::from_millis(1500) && tries < 100 {
        assert!(
            write.try_acquire().await.unwrap().is_none(),
            "a writer got in {:?} into a 300 ms reader's hold",
            started.elapsed()
        );
        assert!(!read.is_lost(), "lost after {:?}", started.elapsed());
        tries += 1;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(tries >= 10, "only {tries} tries");
    // The reader's deadline is still ahead (renewed), at most one lease ahead.
    let now = server_ms(&mut raw).await;
    let leases = reader_leases(&mut raw, &keys.readers).await;
    assert_eq!(leases.len(), 1, "{leases:?}");
    let deadline = leases[0].1;
    let ahead = deadline as i64 - now;
    assert!((1..=300).contains(&ahead), "deadline {ahead} ms ahead");
    read.release().await.unwrap();
    assert!(!exists(&mut raw, &keys.hash).await);
}

/// A reader whose process is SIGKILLed frees its share when its own 1 s lease ends, while
/// another reader of this process (10 s lease) held beside it and left: a writer that waits
/// gets in after the killed reader's lease is up (not before: more than what was left of it at
/// the kill), within that lease + 3 s (its retries come at least every 1 s), i.e. not after
/// the other reader's 10 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_readers_share_ends_with_its_own_lease_not_the_longest() {
    const NAME: &str = "lease:killed";
    let server = common::server();
    let a = common::client(&server).await;
    let b = common::client(&server).await;
    let mut raw = common::raw(&server.url()).await;
    let keys = rw_keys(NAME);
    let mine = a
        .read_write_lock(NAME)
        .read()
        .ttl(Duration::from_secs(10))
        .acquire()
        .await
        .unwrap();
    let (mut child, mut lines) = spawn_child(&server.url(), "read", NAME);
    child::expect_line(&mut lines, "HELD").await;
    let leases = reader_leases(&mut raw, &keys.readers).await;
    assert_eq!(leases.len(), 2, "{leases:?}");
    // The child's is the shorter one.
    let child_owner = leases[0].0.clone();
    assert!(!child_owner.starts_with(&format!("{}:", a.client_id())));

    // Past its 1 s ttl the child's watchdog keeps it.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let now = server_ms(&mut raw).await;
    let deadline: f64 = dlock::redis::cmd("ZSCORE")
        .arg(&keys.readers)
        .arg(&child_owner)
        .query_async(&mut raw)
        .await
        .unwrap();
    assert!(deadline as i64 > now, "the child's read was not renewed");

    child.kill().await.unwrap();
    let killed = Instant::now();
    let now = server_ms(&mut raw).await;
    let deadline: f64 = dlock::redis::cmd("ZSCORE")
        .arg(&keys.readers)
        .arg(&child_owner)
        .query_async(&mut raw)
        .await
        .unwrap();
    let left = Duration::from_millis((deadline as i64 - now).max(0) as u64);
    assert!(
        left > Duration::from_millis(300),
        "the lease had only {left:?} left"
    );
    mine.release().await.unwrap();
    // The hash outlives our reader's release (the dead child is still inside, as far as Redis
    // knows), with an expiry set by our 10 s lease: only the child's own lease can end it soon.
    assert!(pttl(&mut raw, &keys.hash).await > 5000);
    let got = b
        .read_write_lock(NAME)
        .write()
        .wait(Duration::from_secs(15))
        .acquire()
        .await
        .expect("the writer gets in once the dead reader's lease is up");
    let took = killed.elapsed();
    println!("writer in {took:?} after the kill; the child's lease had {left:?} left");
    assert!(
        took + Duration::from_millis(100) >= left,
        "in after {took:?}, before the dead reader's lease ({left:?} left) was up"
    );
    assert!(
        took < Duration::from_secs(1) + Duration::from_secs(3),
        "in after {took:?}: the dead reader's share was stretched"
    );
    got.release().await.unwrap();
}

// ---------------------------------------------------------------------------------------------
// 8. Wake-ups
// ---------------------------------------------------------------------------------------------

/// A write release wakes the waiting readers together: 6 reader tasks of two other clients,
/// waiting behind a writer with a 30 s ttl, all hold at once within 2 s of the release (so it
/// was the release that woke them, not the end of a lease).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_release_wakes_the_waiting_readers_together() {
    const PER_CLIENT: usize = 3;
    let server = common::server();
    let a = common::client(&server).await;
    let b = common::client(&server).await;
    let c = common::client(&server).await;
    let raw = common::raw(&server.url()).await;
    let keys = rw_keys("wake:write");
    let w = a
        .read_write_lock("wake:write")
        .write()
        .ttl(Duration::from_secs(30))
        .acquire()
        .await
        .unwrap();
    let together = Arc::new(Barrier::new(2 * PER_CLIENT + 1));
    let mut readers = Vec::new();
    for client in [&b, &c] {
        for _ in 0..PER_CLIENT {
            let read = client
                .read_write_lock("wake:write")
                .read()
                .wait(Duration::from_secs(25));
            let together = together.clone();
            readers.push(tokio::spawn(async move {
                let g = read.acquire().await.expect("a waiting reader gets in");
                let at = Instant::now();
                together.wait().await;
                g.release().await.unwrap();
                at
            }));
        }
    }
    // Both clients' waiters found it held and listen for the release.
    until_subscribers(&raw, &keys.chan, 2).await;
    let released = Instant::now();
    w.release().await.unwrap();
    bounded(
        Duration::from_secs(2),
        "all 6 readers holding at once after the write release",
        together.wait(),
    )
    .await;
    for r in readers {
        let at = bounded(Duration::from_secs(5), "reader task", r)
            .await
            .unwrap();
        let after = at.saturating_duration_since(released);
        assert!(
            after < Duration::from_secs(2),
            "a reader held {after:?} after the release"
        );
    }
    println!(
        "6 readers in within {:?} of the release",
        released.elapsed()
    );
}

/// The next message on `stream` within `within`, if any.
async fn next_message(
    stream: &mut (impl futures_util::Stream<Item = dlock::redis::Msg> + Unpin),
    within: Duration,
) -> Option<String> {
    tokio::time::timeout(within, stream.next())
        .await
        .ok()
        .map(|m| m.expect("pub/sub stream ended").get_payload().unwrap())
}

/// Release messages on the lock's channel (a raw subscriber): a reader leaving while another
/// reads publishes nothing, the last reader publishes once; a downgraded read leaving while its
/// writer holds publishes nothing, the write release publishes once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_release_publishes_only_when_the_last_reader_leaves() {
    const QUIET: Duration = Duration::from_millis(300);
    let server = common::server();
    let a = common::client(&server).await;
    let b = common::client(&server).await;
    let keys = rw_keys("wake:read");
    let mut pubsub = dlock::redis::Client::open(server.url())
        .unwrap()
        .get_async_pubsub()
        .await
        .expect("pub/sub connection");
    pubsub.subscribe(&keys.chan).await.unwrap();
    let mut messages = pubsub.into_on_message();

    let r1 = a
        .read_write_lock("wake:read")
        .read()
        .acquire()
        .await
        .unwrap();
    let r2 = b
        .read_write_lock("wake:read")
        .read()
        .acquire()
        .await
        .unwrap();
    r1.release().await.unwrap();
    assert_eq!(
        next_message(&mut messages, QUIET).await,
        None,
        "published while a reader was still inside"
    );
    r2.release().await.unwrap();
    assert!(
        next_message(&mut messages, Duration::from_secs(2))
            .await
            .is_some(),
        "the last reader's release published nothing"
    );
    assert_eq!(
        next_message(&mut messages, QUIET).await,
        None,
        "published twice"
    );

    // A writer's own (downgraded) read leaving wakes nobody; the write release does, once.
    let rw_a = a.read_write_lock("wake:read");
    let w = rw_a.write().acquire().await.unwrap();
    let read = w
        .scope(async { rw_a.read().wait(Duration::ZERO).acquire().await })
        .await
        .unwrap();
    read.release().await.unwrap();
    assert_eq!(next_message(&mut messages, QUIET).await, None);
    w.release().await.unwrap();
    assert!(next_message(&mut messages, Duration::from_secs(2))
        .await
        .is_some());
    assert_eq!(next_message(&mut messages, QUIET).await, None);
}

// ---------------------------------------------------------------------------------------------
// 9. Tokens
// ---------------------------------------------------------------------------------------------

/// A writer's token is greater than every earlier reader's, and a reader's after a writer is
/// greater than the writer's; each reader of one read period gets a token of its own, rising
/// in the order they joined (a fence can tell them apart, and a reader joining after a
/// failover that lost a writer is still above that writer).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_rise_from_readers_to_writers_and_back() {
    let server = common::server();
    let a = common::client(&server).await;
    let b = common::client(&server).await;
    let rw_a = a.read_write_lock("tokens");
    let rw_b = b.read_write_lock("tokens");
    let mut last = 0;
    for round in 0..3 {
        let r1 = rw_a.read().acquire().await.unwrap();
        let r2 = rw_b.read().acquire().await.unwrap();
        let r3 = rw_a.read().acquire().await.unwrap();
        let readers = [r1.fencing_token(), r2.fencing_token(), r3.fencing_token()];
        assert!(readers[0] > last, "round {round}: {readers:?} after {last}");
        assert!(
            readers[0] < readers[1] && readers[1] < readers[2],
            "round {round}: readers of one read period in joining order: {readers:?}"
        );
        for g in [r1, r2, r3] {
            g.release().await.unwrap();
        }
        let w = rw_b.write().acquire().await.unwrap();
        assert!(
            w.fencing_token() > readers[2],
            "round {round}: writer {} after readers {readers:?}",
            w.fencing_token()
        );
        last = w.fencing_token();
        w.release().await.unwrap();
    }
}

// ---------------------------------------------------------------------------------------------
// 10. Bad input
// ---------------------------------------------------------------------------------------------

/// An empty name is an `InvalidArgument` on both sides (acquire and try_acquire).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_empty_name_is_an_invalid_argument() {
    let server = common::server();
    let a = common::client(&server).await;
    let rw = a.read_write_lock("");
    for lock in [rw.read(), rw.write()] {
        assert!(matches!(
            lock.acquire().await,
            Err(LockError::InvalidArgument { .. })
        ));
        assert!(matches!(
            lock.try_acquire().await,
            Err(LockError::InvalidArgument { .. })
        ));
    }
}

/// A plain lock and a read-write lock of one name are different keys and do not exclude each
/// other, either way round.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plain_lock_and_a_rw_lock_of_one_name_are_independent() {
    let server = common::server();
    let a = common::client(&server).await;
    let b = common::client(&server).await;
    let plain = a.lock("same");
    let rw = b.read_write_lock("same");
    assert_ne!(plain.key(), rw.write().key());
    assert_eq!(rw.write().key(), rw.read().key());
    assert_eq!(rw.write().key(), "dlock:{same}:rw");

    let p = plain.acquire().await.unwrap();
    let w = rw
        .write()
        .try_acquire()
        .await
        .unwrap()
        .expect("a rw writer beside a plain holder");
    w.release().await.unwrap();
    let r = rw
        .read()
        .try_acquire()
        .await
        .unwrap()
        .expect("a rw reader beside a plain holder");
    r.release().await.unwrap();
    p.release().await.unwrap();

    let w = rw.write().acquire().await.unwrap();
    let p = plain
        .try_acquire()
        .await
        .unwrap()
        .expect("a plain lock beside a rw writer");
    p.release().await.unwrap();
    w.release().await.unwrap();
}

/// Foreign data at the lock hash, the reader leases or the writer's claim key gives
/// `LockError::WrongType` naming that key, on both sides, and is left untouched (force_unlock
/// refuses too).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn foreign_data_at_a_rw_key_is_wrong_type_naming_the_key() {
    let server = common::server();
    let a = common::client(&server).await;
    let mut raw = common::raw(&server.url()).await;
    let cases = [
        ("wt:hash", rw_keys("wt:hash").hash),
        ("wt:readers", rw_keys("wt:readers").readers),
        ("wt:wwait", rw_keys("wt:wwait").wwait),
    ];
    for (name, key) in &cases {
        let _: i64 = dlock::redis::cmd("RPUSH")
            .arg(key)
            .arg("foreign")
            .query_async(&mut raw)
            .await
            .unwrap();
        let rw = a.read_write_lock(*name);
        for (side, lock) in [("read", rw.read()), ("write", rw.write())] {
            match lock.acquire().await {
                Err(LockError::WrongType {
                    name: n, key: k, ..
                }) => {
                    assert_eq!(&n, name, "{side}");
                    assert_eq!(&k, key, "{side}");
                }
                other => panic!("{name} {side}: expected WrongType, got {other:?}"),
            }
        }
        let list: Vec<String> = dlock::redis::cmd("LRANGE")
            .arg(key)
            .arg(0)
            .arg(-1)
            .query_async(&mut raw)
            .await
            .unwrap();
        assert_eq!(list, vec!["foreign".to_owned()], "{name}: data touched");
    }
    // The string case the issue names: SET on the hash key.
    let key = rw_keys("wt:string").hash;
    let () = dlock::redis::cmd("SET")
        .arg(&key)
        .arg("foreign")
        .query_async(&mut raw)
        .await
        .unwrap();
    let rw = a.read_write_lock("wt:string");
    for lock in [rw.read(), rw.write()] {
        match lock.acquire().await {
            Err(e @ LockError::WrongType { .. }) => assert!(e.to_string().contains(&key), "{e}"),
            other => panic!("expected WrongType, got {other:?}"),
        }
    }
    assert!(rw.write().force_unlock().await.is_err());
    let v: String = dlock::redis::cmd("GET")
        .arg(&key)
        .query_async(&mut raw)
        .await
        .unwrap();
    assert_eq!(v, "foreign");
}

// ---------------------------------------------------------------------------------------------
// 11. A writer that gives up leaves no claim
// ---------------------------------------------------------------------------------------------

/// A waiting writer's acquire future dropped while it waits takes its claim back at once (well
/// before the claim would expire), so new readers join at once; a writer whose wait runs out
/// has taken its claim back by the time its `Timeout` returns.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writer_that_gives_up_leaves_no_claim() {
    let server = common::server();
    let a = common::client(&server).await;
    let b = common::client(&server).await;
    let c = common::client(&server).await;
    let mut raw = common::raw(&server.url()).await;
    let keys = rw_keys("cancel");
    let read = a.read_write_lock("cancel").read().acquire().await.unwrap();

    // Cancelled while waiting.
    let writer = tokio::spawn({
        let write = b
            .read_write_lock("cancel")
            .write()
            .wait(Duration::from_secs(10));
        async move { write.acquire().await.map(drop) }
    });
    until_claimed(&raw, "cancel").await;
    assert!(c
        .read_write_lock("cancel")
        .read()
        .try_acquire()
        .await
        .unwrap()
        .is_none());
    let left = pttl(&mut raw, &keys.wwait).await;
    writer.abort();
    assert!(writer.await.unwrap_err().is_cancelled());
    let gone = common::eventually(Duration::from_secs(1), "the claim taken back", || {
        let mut raw = raw.clone();
        let wwait = keys.wwait.clone();
        async move { !exists(&mut raw, &wwait).await }
    })
    .await;
    println!("claim gone {gone:?} after the cancel; it had {left} ms left");
    assert!(
        gone.as_millis() < left.max(0) as u128,
        "the claim expired ({left} ms left) rather than being taken back ({gone:?})"
    );
    let joined = c
        .read_write_lock("cancel")
        .read()
        .try_acquire()
        .await
        .unwrap()
        .expect("a new reader joins at once");
    joined.release().await.unwrap();

    // Timed out while waiting: the claim is gone when the error returns.
    let err = b
        .read_write_lock("cancel")
        .write()
        .wait(Duration::from_millis(300))
        .acquire()
        .await
        .map(drop)
        .unwrap_err();
    assert!(matches!(err, LockError::Timeout { .. }), "{err:?}");
    assert!(
        !exists(&mut raw, &keys.wwait).await,
        "claim left by a timeout"
    );
    let joined = c
        .read_write_lock("cancel")
        .read()
        .try_acquire()
        .await
        .unwrap()
        .expect("a new reader joins after a writer's timeout");
    joined.release().await.unwrap();
    read.release().await.unwrap();
}

/// Readers already waiting behind a writer's claim are woken when that writer gives up
/// (cancelled): they hold within 500 ms, not when the claim would have expired.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_kept_out_by_a_writer_that_gives_up_are_woken_at_once() {
    let server = common::server();
    let a = common::client(&server).await;
    let b = common::client(&server).await;
    let c = common::client(&server).await;
    let mut raw = common::raw(&server.url()).await;
    let keys = rw_keys("cancel:wake");
    let read = a
        .read_write_lock("cancel:wake")
        .read()
        .acquire()
        .await
        .unwrap();
    let writer = tokio::spawn({
        let write = b
            .read_write_lock("cancel:wake")
            .write()
            .wait(Duration::from_secs(10));
        async move { write.acquire().await.map(drop) }
    });
    until_claimed(&raw, "cancel:wake").await;
    let reader = tokio::spawn({
        let read = c
            .read_write_lock("cancel:wake")
            .read()
            .wait(Duration::from_secs(10));
        async move {
            let g = read.acquire().await?;
            let at = Instant::now();
            g.release().await?;
            Ok::<_, LockError>(at)
        }
    });
    // Both the writer's and the queued reader's clients listen on the channel.
    until_subscribers(&raw, &keys.chan, 2).await;
    let left = pttl(&mut raw, &keys.wwait).await;
    writer.abort();
    let gave_up = Instant::now();
    let at = bounded(Duration::from_secs(5), "the queued reader", reader)
        .await
        .unwrap()
        .expect("the queued reader gets in");
    let took = at.saturating_duration_since(gave_up);
    println!("queued reader in {took:?} after the writer gave up; its claim had {left} ms left");
    assert!(
        left > 600,
        "the claim had only {left} ms left: nothing to tell apart"
    );
    assert!(
        took < Duration::from_millis(500),
        "the queued reader waited {took:?}: for the claim to expire, not for the give-up"
    );
    read.release().await.unwrap();
}

// ---------------------------------------------------------------------------------------------
// Writer preference at the moment the lock frees
// ---------------------------------------------------------------------------------------------

/// A waiting writer's claim keeps new readers out even at the moment the last reader left and
/// the lock is free, before the writer's retry lands. Reproduced with a writer in a child
/// process stopped (SIGSTOP) while it waits: after the reader's release the lock is free and
/// only the claim is left; a new reader is refused until the claim expires (within its 2 s,
/// not before what it had left), then gets in.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_writers_claim_keeps_readers_out_when_the_lock_frees() {
    const NAME: &str = "claim:free";
    let server = common::server();
    let a = common::client(&server).await;
    let b = common::client(&server).await;
    let mut raw = common::raw(&server.url()).await;
    let keys = rw_keys(NAME);
    let read = a.read_write_lock(NAME).read().acquire().await.unwrap();
    let (mut child, mut lines) = spawn_child(&server.url(), "write", NAME);
    child::expect_line(&mut lines, "ASKING").await;
    until_claimed(&raw, NAME).await;
    let stopped = common::Stopped::stop(child.id().unwrap());
    read.release().await.unwrap();
    assert!(!exists(&mut raw, &keys.hash).await, "the lock is free");
    let left = pttl(&mut raw, &keys.wwait).await;
    let freed = Instant::now();
    assert!(left > 0, "the stopped writer's claim is gone already");
    let reader = b.read_write_lock(NAME).read();
    assert!(
        reader.try_acquire().await.unwrap().is_none(),
        "a new reader passed a waiting writer's claim on a free lock"
    );
    // The stopped writer never comes back: its claim ends on its own, then readers join.
    let mut joined = None;
    for _ in 0..400 {
        if let Some(g) = reader.try_acquire().await.unwrap() {
            joined = Some(g);
            break;
        }
        assert!(
            freed.elapsed() < Duration::from_secs(4),
            "claim never ended"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let took = freed.elapsed();
    let g = joined.expect("a reader gets in once the claim expired");
    assert!(
        took + Duration::from_millis(100) >= Duration::from_millis(left as u64),
        "in after {took:?}, the claim had {left} ms left"
    );
    g.release().await.unwrap();
    drop(stopped);
    child.kill().await.unwrap();
}

/// Issue 17 item 7: two reads taken one after the other inside one write scope share the
/// owner's one reader entry in Redis. Each read's guard counts its lease from its own request,
/// so the entry must last as long as the longest of them: a writer of another client must not
/// get in while either read still believes it holds. With hard leases (`.lease()`), and with a
/// shorter watchdog ttl after a longer one, which must not shorten the first read's share. The
/// reader's link is frozen once the reads are taken, so renewals stop and the leases run out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_reads_in_one_write_scope_are_both_lost_before_another_writer_gets_in() {
    let server = common::server();
    let proxy = Proxy::start(server.port());
    let a = LockClient::connect(&proxy.url()).await.unwrap();
    let b = common::client(&server).await;
    for (case, first, second) in [
        ("hard leases", ReadLease::Hard(600), ReadLease::Hard(600)),
        (
            "a shorter ttl second",
            ReadLease::Ttl(1500),
            ReadLease::Ttl(300),
        ),
    ] {
        let name = format!("two-reads:{case}");
        let rw_a = a.read_write_lock(name.as_str());
        let w = rw_a.write().acquire().await.unwrap();
        let (r1, r2) = w
            .scope(async {
                let r1 = first.of(rw_a.read()).acquire().await.unwrap();
                // Time is the subject: the second read's lease starts later than the first's.
                tokio::time::sleep(Duration::from_millis(300)).await;
                let r2 = second.of(rw_a.read()).acquire().await.unwrap();
                (r1, r2)
            })
            .await;
        w.release().await.unwrap();
        proxy.freeze();
        let writer = b
            .read_write_lock(name.as_str())
            .write()
            .wait(Duration::from_secs(10))
            .acquire()
            .await
            .expect("the writer gets in once the reads' leases ran out");
        for (which, r) in [("first", &r1), ("second", &r2)] {
            assert!(
                r.is_lost(),
                "{case}: another client writes while the {which} read believes it holds"
            );
        }
        writer.release().await.unwrap();
        proxy.thaw();
    }
}

/// How a read in [`two_reads_in_one_write_scope_are_both_lost_before_another_writer_gets_in`]
/// is taken: a hard lease or a watchdog ttl, in ms.
#[derive(Clone, Copy)]
enum ReadLease {
    Hard(u64),
    Ttl(u64),
}

impl ReadLease {
    fn of(self, lock: dlock::Lock) -> dlock::Lock {
        match self {
            ReadLease::Hard(ms) => lock.lease(Duration::from_millis(ms)),
            ReadLease::Ttl(ms) => lock.ttl(Duration::from_millis(ms)),
        }
    }
}
