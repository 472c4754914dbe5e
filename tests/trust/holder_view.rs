//! Issue 7, "trust under faults": the holder's view of its lock is never stale (DESIGN §4).
//!
//! Each hold keeps a local validity deadline, the instant its last successful acquire or
//! renewal was *sent* plus the lease minus a small drift margin (lease/100 + 2 ms). Redis cannot
//! expire the key before that instant, so a hold that turns lost at it (a clock check and a
//! timer, not a renewal reply) is lost before anybody else can acquire the lock, however the
//! holder was cut off: a frozen network path, a stopped process, a blocked runtime. Only data
//! loss in Redis beats the deadline; then the holder learns at the first round trip after the
//! reconnect. An acquire also keeps its own promises under a slow Redis: `wait` bounds it, and a
//! reply that arrives after the lease it granted has run out does not hand out a live hold.
//!
//! Every test prints what it measured (`cargo test --test trust holder_view -- --nocapture`).
//! Timing is the subject here, so the bounds are generous and both sides are asserted where
//! both matter.

use crate::common;
use crate::common::child;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::proxy::Proxy;
use dlock::{LockClient, LockError, LockGuard};
use tokio::process::Child;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

/// Every call must come back within this, error or not.
const NO_HANG: Duration = Duration::from_secs(30);

async fn bounded<T>(what: &str, within: Duration, fut: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(within, fut)
        .await
        .unwrap_or_else(|_| panic!("{what}: not done within {within:?}"))
}

/// Milliseconds of `later - earlier`, negative when `later` came first.
fn signed_ms(later: Instant, earlier: Instant) -> f64 {
    if later >= earlier {
        (later - earlier).as_secs_f64() * 1e3
    } else {
        -((earlier - later).as_secs_f64() * 1e3)
    }
}

/// Wall clock in µs since the epoch: the one clock a parent and its child process share.
fn wall_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970")
        .as_micros() as u64
}

/// Records the instant `guard.lost()` completes (a spawned task, so it runs while the test
/// does other things).
fn watch_lost(guard: &LockGuard) -> JoinHandle<Instant> {
    let lost = guard.lost();
    tokio::spawn(async move {
        lost.await;
        Instant::now()
    })
}

/// The fields of the lock hash at `key`, owner id -> hold count.
async fn lock_fields(
    conn: &mut dlock::redis::aio::MultiplexedConnection,
    key: &str,
) -> Vec<String> {
    dlock::redis::cmd("HGETALL")
        .arg(key)
        .query_async(conn)
        .await
        .expect("HGETALL")
}

// ---------------------------------------------------------------------------------------------
// 1. A frozen network path: the holder is lost before the lock can be taken by anybody else.
// ---------------------------------------------------------------------------------------------

/// Holder H talks to Redis through a proxy that freezes every connection right after H
/// acquired; another client O waits for the lock directly. When O gets it (the key expired in
/// Redis), H's `is_lost()` must already be true, and H's `lost()` must have completed first.
async fn frozen_holder_is_lost_before_anyone_else_acquires(name: &str, ttl: Duration) {
    let server = common::server();
    let proxy = Proxy::start(server.port());
    let holder = LockClient::connect(&proxy.url())
        .await
        .expect("connect through the proxy");
    let other = common::client(&server).await;

    let started = Instant::now();
    let h = holder.lock(name).ttl(ttl).acquire().await.unwrap();
    let acquired = Instant::now();
    // Cut off before the first renewal (due at ttl/3): the acquire's lease is the last one.
    proxy.freeze();
    let frozen = Instant::now();
    let lost_at = watch_lost(&h);

    let o = bounded(
        "O's acquire",
        NO_HANG,
        other.lock(name).wait(Duration::from_secs(20)).acquire(),
    )
    .await
    .expect("O gets the lock once H's lease ran out in Redis");
    let o_at = Instant::now();
    let h_lost_at_grant = h.is_lost();

    let lost_at = bounded("H's lost()", Duration::from_secs(10), lost_at)
        .await
        .unwrap();
    println!(
        "{name} (ttl {ttl:?}): H's acquire took {:?}; after the freeze: H lost() at +{:.1} ms, \
         O acquired at +{:.1} ms; lost -> O acquired = {:.1} ms (positive: lost first); \
         H.is_lost() when O got it: {h_lost_at_grant}",
        acquired - started,
        signed_ms(lost_at, frozen),
        signed_ms(o_at, frozen),
        signed_ms(o_at, lost_at),
    );

    assert!(
        h_lost_at_grant,
        "O acquired the lock while the frozen holder H still believed it held it (is_lost() false)"
    );
    assert!(
        lost_at < o_at,
        "H's lost() completed {:.1} ms after O acquired",
        signed_ms(lost_at, o_at)
    );
    // Not lost absurdly early either: the acquire's lease was valid until about `ttl` after it
    // was sent (the deadline is only the drift margin, lease/100 + 2 ms, earlier).
    assert!(
        lost_at >= started + ttl.mul_f64(0.9),
        "H was marked lost {:?} after its acquire started, long before its {ttl:?} lease ran out",
        lost_at - started
    );
    // And O got it about when the lease ran out in Redis, not much later.
    assert!(
        o_at < acquired + ttl + Duration::from_secs(2),
        "O acquired {:?} after H's acquire",
        o_at - acquired
    );
    o.release().await.unwrap();
    drop(h);
    drop(proxy);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn frozen_holder_with_3s_ttl_is_lost_before_another_client_acquires() {
    frozen_holder_is_lost_before_anyone_else_acquires("frozen-3s", Duration::from_secs(3)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn frozen_holder_with_1s_ttl_is_lost_before_another_client_acquires() {
    frozen_holder_is_lost_before_anyone_else_acquires("frozen-1s", Duration::from_secs(1)).await;
}

// ---------------------------------------------------------------------------------------------
// 2. A stopped holder process: after SIGCONT its very first look at the guard says "lost".
// ---------------------------------------------------------------------------------------------
//
// The child reaches Redis through the proxy with 50 ms reply latency; the parent directly.

const CHILD_URL: &str = "DLOCK_TRUST_CHILD_URL";
const CHILD_LOCK: &str = "stopped-holder";
/// How long the child reports at most, whatever happens.
const CHILD_REPORT_FOR: Duration = Duration::from_secs(60);

/// The child side: only acts when re-executed by `a_sigstopped_holder_...` with `CHILD_URL`
/// set. Holds `CHILD_LOCK` (ttl 1 s), prints "HELD", then every ~5 ms `STATE <is_lost> <wall
/// µs>`, until 20 reports in a row said lost or `CHILD_REPORT_FOR` passed; then "DONE".
#[test]
fn child_holder_entry() {
    let Ok(url) = std::env::var(CHILD_URL) else {
        return;
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async move {
        let client = LockClient::connect(&url).await.unwrap();
        let g = client
            .lock(CHILD_LOCK)
            .ttl(Duration::from_secs(1))
            .acquire()
            .await
            .unwrap();
        println!("HELD {}", g.fencing_token());
        let start = Instant::now();
        let mut lost_in_a_row = 0;
        while start.elapsed() < CHILD_REPORT_FOR {
            // The time first: a stop between the two reads can only make a report look older
            // than it is, never make an early "false" look recent.
            let t = wall_us();
            let lost = g.is_lost();
            println!("STATE {lost} {t}");
            lost_in_a_row = if lost { lost_in_a_row + 1 } else { 0 };
            if lost_in_a_row >= 20 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        println!("DONE");
    });
}

/// Starts the child; its stdout lines arrive on the returned channel (the text from the first
/// known marker on: libtest prints its own text before our first line).
fn spawn_child(url: &str) -> (Child, mpsc::UnboundedReceiver<String>) {
    let (child, mut lines) =
        child::spawn(module_path!(), "child_holder_entry", &[(CHILD_URL, url)]);
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Ok(Some(line)) = lines.next_line().await {
            for marker in ["HELD", "STATE", "DONE"] {
                if let Some(at) = line.find(marker) {
                    let _ = tx.send(line[at..].to_owned());
                    break;
                }
            }
        }
    });
    (child, rx)
}

/// The next line starting with `prefix` (lines before it are dropped into `skipped`).
async fn next_line(
    rx: &mut mpsc::UnboundedReceiver<String>,
    prefix: &str,
    skipped: &mut Vec<String>,
) -> String {
    let read = async {
        while let Some(line) = rx.recv().await {
            if line.starts_with(prefix) {
                return line;
            }
            skipped.push(line);
        }
        panic!("child exited without printing {prefix:?}");
    };
    bounded(&format!("child line {prefix:?}"), NO_HANG, read).await
}

/// `STATE <bool> <µs>` -> (is_lost, µs).
fn parse_state(line: &str) -> (bool, u64) {
    let mut parts = line.split_whitespace().skip(1);
    let lost = parts.next().unwrap().parse().unwrap();
    let t = parts.next().unwrap().parse().unwrap();
    (lost, t)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sigstopped_holder_reads_lost_from_its_first_look_after_sigcont() {
    let server = common::server();
    let client = common::client(&server).await;
    // The child talks to Redis over a path with a 50 ms reply latency (a remote Redis): a
    // holder that only learns from a renewal reply is then stale for a whole round trip after
    // SIGCONT, not for a race-dependent few microseconds. The deadline does not depend on it.
    let proxy = Proxy::start(server.port());
    proxy.delay_replies(Duration::from_millis(50));
    let (mut child, mut rx) = spawn_child(&proxy.url());
    let mut before = Vec::new();
    next_line(&mut rx, "HELD", &mut before).await;
    // Its report loop runs: one report while it surely holds the lock.
    let first = next_line(&mut rx, "STATE", &mut before).await;
    assert!(!parse_state(&first).0, "lost before the stop: {first}");
    before.push(first);

    let stopped = common::Stopped::stop(child.id().unwrap());
    let sent_us = wall_us();
    let g = bounded(
        "parent's acquire",
        NO_HANG,
        client
            .lock(CHILD_LOCK)
            .wait(Duration::from_secs(10))
            .acquire(),
    )
    .await
    .expect("the stopped holder's 1 s lease runs out");
    let acquired_us = wall_us();
    drop(stopped); // SIGCONT

    let mut after = Vec::new();
    next_line(&mut rx, "DONE", &mut after).await;
    let status = bounded("child exit", NO_HANG, child.wait()).await.unwrap();
    assert!(status.success(), "child failed: {status}");

    let states: Vec<(bool, u64)> = before
        .iter()
        .chain(&after)
        .filter(|l| l.starts_with("STATE"))
        .map(|l| parse_state(l))
        .collect();
    // Reports made after the parent's acquire was sent were all made after SIGCONT (the child
    // was stopped before), so after the parent held the lock.
    let stale: Vec<u64> = states
        .iter()
        .filter(|(lost, t)| !lost && *t > sent_us)
        .map(|(_, t)| *t)
        .collect();
    let last_before = states.iter().rfind(|(_, t)| *t <= sent_us);
    let first_after = states.iter().find(|(_, t)| *t > sent_us);
    let first_lost = states.iter().find(|(lost, _)| *lost);
    let rel = |t: u64| t as f64 / 1e3 - acquired_us as f64 / 1e3;
    println!(
        "stopped holder: parent's acquire sent at {:.1} ms, returned at 0 (relative to it); \
         child's last report before the stop at {:.1} ms ({:?}); first after SIGCONT at {:.1} ms \
         ({:?}); first report saying lost at {:.1} ms; {} reports after the parent's acquire \
         still said \"not lost\" (first at {:?} ms)",
        rel(sent_us),
        last_before.map_or(f64::NAN, |s| rel(s.1)),
        last_before.map(|s| s.0),
        first_after.map_or(f64::NAN, |s| rel(s.1)),
        first_after.map(|s| s.0),
        first_lost.map_or(f64::NAN, |s| rel(s.1)),
        stale.len(),
        stale.first().map(|&t| rel(t)),
    );
    assert!(
        first_after.is_some(),
        "the child reported nothing after SIGCONT"
    );
    assert!(
        stale.is_empty(),
        "after SIGCONT the child still believed it held the lock the parent had taken: {} \
         reports said not lost, the last {:.1} ms after the parent's acquire returned",
        stale.len(),
        rel(*stale.last().unwrap())
    );
    assert!(!g.is_lost());
    g.release().await.unwrap();
}

// ---------------------------------------------------------------------------------------------
// 3. A blocked caller runtime: before the fix the client's watchdog ran on it and stopped, the
//    lease ran out in Redis, and the guard still said "held". Now the client renews on its own
//    thread; a pause of the whole process is the SIGSTOP test above.
// ---------------------------------------------------------------------------------------------

#[tokio::test] // current_thread: blocking it stops every task on it
async fn a_blocked_caller_runtime_neither_stops_renewals_nor_leaves_a_stale_view() {
    let server = common::server();
    let client = common::client(&server).await;
    let lock = client.lock("paused-runtime").ttl(Duration::from_secs(1));
    let g = lock.acquire().await.unwrap();
    assert!(!g.is_lost());

    // Blocks the caller runtime's only thread past the 1 s lease. The client renews on its own
    // thread, so the lock must still be held, and the guard's view must agree with Redis.
    std::thread::sleep(Duration::from_millis(2500));
    // No await since the pause: whatever the guard says now comes from the guard alone.
    let lost_right_after = g.is_lost();
    let mut conn = common::raw(&server.url()).await;
    let fields = lock_fields(&mut conn, lock.key()).await;
    println!(
        "caller runtime blocked 2.5 s with a 1 s lease: is_lost() right after = \
         {lost_right_after}; lock hash in Redis now {fields:?}"
    );
    assert_eq!(
        fields.len(),
        2,
        "the lease ran out in Redis while the caller's runtime was blocked: {fields:?}"
    );
    assert!(
        !lost_right_after,
        "the lock is held in Redis but the guard says lost"
    );
    g.release().await.expect("release after the pause");
}

// ---------------------------------------------------------------------------------------------
// 4. Redis restarted without persistence: the holder learns at the reconnect, not at a renewal.
// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_restart_that_lost_the_lock_is_noticed_within_a_reconnect_and_a_round_trip() {
    /// Well under a renewal period (10 s) or the lease (30 s).
    const BOUND: Duration = Duration::from_secs(3);
    /// How long the test waits to report how late it comes, if it is late.
    const OBSERVE: Duration = Duration::from_secs(15);
    let mut server = common::server();
    let client = common::client(&server).await;
    let lock = client.lock("restarted").ttl(Duration::from_secs(30));
    let g = lock.acquire().await.unwrap();
    let lost_at = watch_lost(&g);

    let killed = Instant::now();
    let restarted = tokio::task::block_in_place(|| {
        server.kill();
        server.restart().expect("restart redis");
        Instant::now()
    });
    let took = tokio::time::timeout(OBSERVE, lost_at)
        .await
        .map(|at| at.unwrap() - restarted);
    println!(
        "redis restarted without persistence under a 30 s hold (kill + restart took {:?}): \
         lost() completed {} after the restart",
        restarted - killed,
        match &took {
            Ok(d) => format!("{d:?}"),
            Err(_) => format!("not within {OBSERVE:?}"),
        }
    );
    let took = took.unwrap_or(OBSERVE);
    assert!(
        took < BOUND,
        "the holder learned {took:?} after the restart that its lock was gone (bound {BOUND:?})"
    );
    assert!(g.is_lost());
    // The lock really is free: another client takes it at once.
    let other = common::client(&server).await;
    let o = other.lock("restarted").try_acquire().await.unwrap();
    assert!(o.is_some(), "the lock was not free after the restart");
}

// ---------------------------------------------------------------------------------------------
// 5. Item 6: `wait` bounds an acquire when Redis is slow, and the cut-short attempt cleans up.
// ---------------------------------------------------------------------------------------------

/// Sends `DEBUG SLEEP <secs>` on a connection of its own and waits for the reply (the whole
/// sleep); a std thread, so the test's runtime stays free.
fn debug_sleep(port: u16, secs: u32) -> std::thread::JoinHandle<Instant> {
    std::thread::spawn(move || {
        let mut s = TcpStream::connect(("127.0.0.1", port)).expect("connect for DEBUG SLEEP");
        let secs = secs.to_string();
        let cmd = format!(
            "*3\r\n$5\r\nDEBUG\r\n$5\r\nSLEEP\r\n${}\r\n{secs}\r\n",
            secs.len()
        );
        s.write_all(cmd.as_bytes()).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        let mut buf = [0u8; 5];
        s.read_exact(&mut buf).expect("DEBUG SLEEP reply");
        assert_eq!(&buf, b"+OK\r\n", "DEBUG SLEEP refused");
        Instant::now()
    })
}

/// Whether Redis on `port` answers a PING within 50 ms (false: it is busy).
fn answers_ping(port: u16) -> bool {
    let mut s = TcpStream::connect(("127.0.0.1", port)).expect("connect for PING");
    s.write_all(b"PING\r\n").unwrap();
    s.set_read_timeout(Some(Duration::from_millis(50))).unwrap();
    let mut buf = [0u8; 7];
    s.read_exact(&mut buf).is_ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acquire_against_a_busy_redis_gives_up_at_its_wait_and_leaves_the_lock_free() {
    const WAIT: Duration = Duration::from_millis(300);
    const BOUND: Duration = Duration::from_millis(1200);
    let server = common::server();
    let port = server.port();
    let client = common::client(&server).await;
    let other = common::client(&server).await;
    let lock = client.lock("busy").ttl(Duration::from_secs(30)).wait(WAIT);

    let sleeper = debug_sleep(port, 2);
    // Busy once a PING goes unanswered (each probe is its own connection; its reply comes
    // after the sleep and is never read).
    let probe_start = Instant::now();
    tokio::task::block_in_place(|| {
        while answers_ping(port) {
            assert!(
                probe_start.elapsed() < Duration::from_secs(5),
                "DEBUG SLEEP never made Redis busy"
            );
            std::thread::sleep(Duration::from_millis(2));
        }
    });
    let started = Instant::now();
    let result = bounded("acquire against a busy redis", NO_HANG, lock.acquire()).await;
    let took = started.elapsed();
    let woke = tokio::task::block_in_place(|| sleeper.join().expect("DEBUG SLEEP thread"));
    println!(
        "acquire with wait {WAIT:?} while redis sleeps 2 s: returned after {took:?} with {}; \
         redis woke {:?} after the acquire started",
        match &result {
            Ok(g) => format!("Ok(guard, lost: {})", g.is_lost()),
            Err(e) => format!("Err({e:?})"),
        },
        woke - started,
    );
    assert!(
        matches!(
            &result,
            Err(LockError::Timeout { .. }) | Err(LockError::Redis { op: "acquire", .. })
        ),
        "expected Timeout or Redis(acquire) from a 300 ms wait against a sleeping Redis"
    );
    assert!(
        took < BOUND,
        "the acquire with a {WAIT:?} wait took {took:?} (bound {BOUND:?})"
    );
    assert!(
        took >= WAIT,
        "the acquire gave up after {took:?}, before its {WAIT:?} wait"
    );

    // Redis awake: what the cut-short attempt may have been granted is given back at once,
    // not held by nobody until its 30 s TTL.
    // Polled: the clean-up lands inside Redis, nothing here can await it.
    let lock_b = other.lock("busy");
    let mut freed_guard = None;
    while freed_guard.is_none() {
        assert!(
            woke.elapsed() < Duration::from_secs(3),
            "the cut-short acquire's lock still held 3 s after redis woke up (its TTL is 30 s)"
        );
        freed_guard = lock_b.try_acquire().await.expect("try_acquire");
        if freed_guard.is_none() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
    let freed = woke.elapsed();
    println!("another client took the lock {freed:?} after redis woke up");
    freed_guard.unwrap().release().await.unwrap();
}

// ---------------------------------------------------------------------------------------------
// 6. Item 7: a reply that comes after the lease it granted ran out hands out no live hold.
// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_acquire_reply_hands_out_no_live_hold_and_its_cleanup_spares_the_next_holder() {
    const NAME: &str = "late-reply";
    const LEASE: Duration = Duration::from_secs(1);
    const DELAY: Duration = Duration::from_millis(1500);
    let server = common::server();
    let proxy = Proxy::start(server.port());
    let b = LockClient::connect(&proxy.url())
        .await
        .expect("connect through the proxy");
    let a = common::client(&server).await;
    let mut admin = common::raw(&server.url()).await;
    // Scripts cached in Redis first: B's one EVALSHA is then the whole acquire, not a NOSCRIPT
    // reply (itself delayed) and a second call.
    a.lock("warm-up")
        .acquire()
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    proxy.delay_replies(DELAY);

    // B: granted at once in Redis, told 1.5 s later, after its 1 s lease has run out.
    let b_lock = b.lock(NAME).ttl(LEASE).wait(Duration::from_secs(3));
    let b_sent = Instant::now();
    let b_task = tokio::spawn(async move {
        let r = b_lock.acquire().await;
        let at = Instant::now();
        let lost = r.as_ref().map(|g| g.is_lost()).ok();
        (r, at, lost)
    });
    let key = a.lock(NAME).key().to_owned();
    let b_prefix = format!("{}:", b.client_id());
    let a_prefix = format!("{}:", a.client_id());
    common::eventually(Duration::from_secs(2), "B's grant in redis", || {
        let mut conn = admin.clone();
        let (key, b_prefix) = (key.clone(), b_prefix.clone());
        async move {
            let f = lock_fields(&mut conn, &key).await;
            f.first().is_some_and(|o| o.starts_with(&b_prefix))
        }
    })
    .await;

    // A: takes the lock when B's grant expires in Redis.
    let a_guard = bounded(
        "A's acquire",
        NO_HANG,
        a.lock(NAME)
            .ttl(Duration::from_secs(10))
            .wait(Duration::from_secs(5))
            .acquire(),
    )
    .await
    .expect("A gets the lock after B's lease ran out");
    let a_at = Instant::now();

    let (b_result, b_at, b_lost_at_return) = bounded("B's acquire", NO_HANG, b_task).await.unwrap();
    let b_outcome = match &b_result {
        Ok(_) => format!("Ok(guard) with is_lost() = {b_lost_at_return:?} at return"),
        Err(e) => format!("Err({e:?})"),
    };
    // B gives back what it got (a guard: release; an error: the client's own clean-up).
    let b_release = match b_result {
        Ok(g) => Some(bounded("B's release", NO_HANG, g.release()).await),
        Err(_) => None,
    };
    // Whatever B sent before this went through its connection first (replies are delayed,
    // requests are not): after this reply, B's clean-up has run in Redis.
    let _ = bounded("B's barrier", NO_HANG, b.lock(NAME).is_locked()).await;
    let fields = lock_fields(&mut admin, &key).await;
    let a_lost = a_guard.is_lost();
    println!(
        "late reply ({DELAY:?} delay, {LEASE:?} lease): B's acquire returned after {:?}: \
         {b_outcome}; A acquired {:?} after B's request was sent; B's release: {b_release:?}; \
         lock hash after B's clean-up: {fields:?}; A lost: {a_lost}",
        b_at - b_sent,
        a_at - b_sent,
    );

    assert!(
        a_at >= b_sent + LEASE.mul_f64(0.9),
        "A acquired {:?} after B's request: B's grant did not last its lease",
        a_at - b_sent
    );
    assert!(
        b_lost_at_return != Some(false),
        "B's acquire returned a guard that was not lost, {:?} after its request was sent, although \
         its {LEASE:?} lease had run out and A held the lock",
        b_at - b_sent
    );
    assert!(!a_lost, "A's guard is lost after B's clean-up");
    assert!(
        fields.len() == 2 && fields[0].starts_with(&a_prefix) && fields[1] == "1",
        "the lock hash should hold only A's owner ({a_prefix}...) once: {fields:?}"
    );
    a_guard
        .release()
        .await
        .expect("A's release after B's clean-up");
}

/// `cancellation_token()` (issue 19 item 3): cancelled when the hold is lost, whichever way:
/// the watchdog finding the key gone, or a hard lease running out with nothing sent. A token
/// its holder cancels stops only its own listeners.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cancellation_token_is_cancelled_when_the_hold_is_lost() {
    let server = common::server();
    let client = common::client(&server).await;
    let mut admin = common::raw(&server.url()).await;
    let lock = client.lock("token:renewed").ttl(Duration::from_millis(600));
    let guard = lock.acquire().await.unwrap();
    let token = guard.cancellation_token();
    let from_body = guard
        .scope(async { dlock::current_lock().unwrap().cancellation_token() })
        .await;
    let mine = guard.cancellation_token();
    mine.cancel();
    assert!(
        !token.is_cancelled() && !from_body.is_cancelled(),
        "one child cancelled the others"
    );
    let worker = tokio::spawn({
        let token = token.clone();
        async move {
            token
                .run_until_cancelled(tokio::time::sleep(Duration::from_secs(30)))
                .await
        }
    });
    // Time is the subject: the hold is kept by renewals (every 200 ms) for three leases.
    tokio::time::sleep(Duration::from_millis(1800)).await;
    assert!(!token.is_cancelled(), "cancelled while the hold is kept");
    let _: i64 = dlock::redis::cmd("DEL")
        .arg(lock.key())
        .query_async(&mut admin)
        .await
        .unwrap();
    let stopped = tokio::time::timeout(Duration::from_secs(5), worker)
        .await
        .expect("the work was not stopped when the hold was lost")
        .unwrap();
    assert!(stopped.is_none(), "the work ran to its end");
    assert!(guard.is_lost() && from_body.is_cancelled());

    // Released: its work must not outlive it, so the token is cancelled by the release.
    let released = client.lock("token:released").acquire().await.unwrap();
    let token = released.cancellation_token();
    released.release().await.unwrap();
    assert!(token.is_cancelled(), "still running work after the release");

    // A hard lease: nothing is sent when it ends, the timer alone cancels.
    let hard = client
        .lock("token:hard")
        .lease(Duration::from_millis(300))
        .acquire()
        .await
        .unwrap();
    let token = hard.cancellation_token();
    let started = std::time::Instant::now();
    tokio::time::timeout(Duration::from_secs(5), token.cancelled())
        .await
        .expect("a hard lease's token is cancelled at its end");
    assert!(started.elapsed() < Duration::from_millis(300) + Duration::from_secs(1));
    assert!(hard.is_lost());
}
