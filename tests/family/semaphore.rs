//! Issue 9 item 2: the semaphore with expiring permits, against a real redis-server.
//!
//! The SIGKILL test runs a child process: the test binary re-executes itself with `--exact
//! child_process_entry` and `DLOCK_CHILD_URL` / `DLOCK_CHILD_MODE` set (that test does nothing
//! in a normal run); the child reports over stdout. Where time is the subject the bounds are
//! generous and both sides are asserted; every loop is bounded in count and time.

use crate::common;
use crate::common::child::{self, ChildLines};

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use dlock::redis::aio::MultiplexedConnection;
use dlock::{LockClient, LockError, Permit, Semaphore};
use tokio::process::Child;
use tokio::sync::mpsc;

/// Every await that must come back does so within this.
const NO_HANG: Duration = Duration::from_secs(30);

async fn bounded<T>(what: &str, within: Duration, fut: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(within, fut)
        .await
        .unwrap_or_else(|_| panic!("{what}: not done within {within:?}"))
}

/// The documented keys of semaphore `name` under the default prefix.
fn holders_key(name: &str) -> String {
    format!("dlock:{{{name}}}:sem")
}

fn count_key(name: &str) -> String {
    format!("dlock:{{{name}}}:sem:permits")
}

fn channel(name: &str) -> String {
    format!("dlock:{{{name}}}:sem:chan")
}

/// Waits until `n` clients subscribed to the release channel of semaphore `name`.
async fn until_subscribed(conn: &MultiplexedConnection, name: &str, n: usize) {
    common::eventually(NO_HANG, &format!("{n} waiters subscribed"), || {
        let mut conn = conn.clone();
        async move {
            let (_, subscribed): (String, i64) = dlock::redis::cmd("PUBSUB")
                .arg("NUMSUB")
                .arg(channel(name))
                .query_async(&mut conn)
                .await
                .unwrap();
            subscribed == n as i64
        }
    })
    .await;
}

async fn exists(conn: &mut MultiplexedConnection, key: &str) -> bool {
    dlock::redis::cmd("EXISTS")
        .arg(key)
        .query_async::<i64>(conn)
        .await
        .unwrap()
        == 1
}

/// The child side. Only acts when started by `spawn_child`.
#[test]
fn child_process_entry() {
    let (Ok(url), Ok(mode)) = (
        std::env::var("DLOCK_CHILD_URL"),
        std::env::var("DLOCK_CHILD_MODE"),
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
        match mode.as_str() {
            "hold" => {
                let permit = client
                    .semaphore("sem:crash", 2)
                    .ttl(Duration::from_secs(2))
                    .acquire()
                    .await
                    .unwrap();
                println!("HELD");
                // Hold until killed; the watchdog keeps renewing meanwhile.
                std::future::pending::<()>().await;
                drop(permit);
            }
            m => panic!("unknown DLOCK_CHILD_MODE {m}"),
        }
    });
}

/// Starts this test binary as a child in `mode`, killed if the test fails.
fn spawn_child(url: &str, mode: &str) -> (Child, ChildLines) {
    let env = [("DLOCK_CHILD_URL", url), ("DLOCK_CHILD_MODE", mode)];
    child::spawn(module_path!(), "child_process_entry", &env)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn never_more_than_n_holders_across_tasks_and_two_clients() {
    const PERMITS: u32 = 3;
    const TASKS_PER_CLIENT: usize = 8;
    const ROUNDS: usize = 25;
    let server = common::server();
    let clients = [common::client(&server).await, common::client(&server).await];
    let inside = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for client in &clients {
        for _ in 0..TASKS_PER_CLIENT {
            let sem = client
                .semaphore("sem:gauge", PERMITS)
                .wait(Duration::from_secs(60));
            let (inside, most) = (inside.clone(), most.clone());
            tasks.push(tokio::spawn(async move {
                for _ in 0..ROUNDS {
                    let permit = sem.acquire().await.expect("acquire a permit");
                    let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                    most.fetch_max(now, Ordering::SeqCst);
                    // Stay inside across a few polls so holders overlap.
                    tokio::time::sleep(Duration::from_millis(2)).await;
                    inside.fetch_sub(1, Ordering::SeqCst);
                    permit.release().await.expect("release a permit");
                }
            }));
        }
    }
    bounded(
        "every task's rounds",
        Duration::from_secs(120),
        futures_util::future::try_join_all(tasks),
    )
    .await
    .unwrap();
    let most = most.load(Ordering::SeqCst);
    println!("most holders at once: {most}");
    assert!(
        most <= PERMITS as usize,
        "{most} holders at once, {PERMITS} permits"
    );
    assert_eq!(
        most, PERMITS as usize,
        "16 contending tasks never filled all permits"
    );
    let sem = clients[0].semaphore("sem:gauge", PERMITS);
    assert_eq!(sem.available().await.unwrap(), PERMITS);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn available_counts_down_and_back_up_and_an_idle_semaphore_leaves_no_keys() {
    let server = common::server();
    let client = common::client(&server).await;
    let mut conn = common::raw(&server.url()).await;
    let sem = client.semaphore("sem:count", 3);
    assert_eq!(sem.permits(), 3);
    assert_eq!(sem.name(), "sem:count");
    assert_eq!(sem.available().await.unwrap(), 3);
    let a = sem.acquire().await.unwrap();
    assert_eq!(sem.available().await.unwrap(), 2);
    let b = sem.acquire().await.unwrap();
    assert_eq!(sem.available().await.unwrap(), 1);
    let c = sem.acquire().await.unwrap();
    assert_eq!(sem.available().await.unwrap(), 0);
    assert_eq!(a.name(), "sem:count");
    assert!(!a.is_lost());

    // The documented keys: holders and count, both expiring (the latest deadline).
    let stored: String = dlock::redis::cmd("GET")
        .arg(count_key("sem:count"))
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(stored, "3");
    for key in [holders_key("sem:count"), count_key("sem:count")] {
        let pttl: i64 = dlock::redis::cmd("PTTL")
            .arg(&key)
            .query_async(&mut conn)
            .await
            .unwrap();
        assert!(pttl > 0 && pttl <= 30_000, "{key}: PTTL {pttl}");
    }

    c.release().await.unwrap();
    assert_eq!(sem.available().await.unwrap(), 1);
    b.release().await.unwrap();
    assert_eq!(sem.available().await.unwrap(), 2);
    a.release().await.unwrap();
    assert_eq!(sem.available().await.unwrap(), 3);
    assert!(!exists(&mut conn, &holders_key("sem:count")).await);
    assert!(!exists(&mut conn, &count_key("sem:count")).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn try_acquire_is_none_while_every_permit_is_taken_and_some_after_a_release() {
    let server = common::server();
    let holder = common::client(&server).await;
    let other = common::client(&server).await;
    let mine = holder.semaphore("sem:try", 2);
    let theirs = other.semaphore("sem:try", 2);
    let first = mine.try_acquire().await.unwrap().expect("a free permit");
    let _second = mine.try_acquire().await.unwrap().expect("a free permit");
    assert!(theirs.try_acquire().await.unwrap().is_none());
    // Waiting a little does not help either while nobody gives one back.
    let waited = Instant::now();
    match theirs
        .clone()
        .wait(Duration::from_millis(200))
        .acquire()
        .await
    {
        Err(LockError::Timeout { name, .. }) => assert_eq!(name, "sem:try"),
        other => panic!("expected a timeout, got {other:?}"),
    }
    assert!(waited.elapsed() >= Duration::from_millis(200));
    first.release().await.unwrap();
    let got = theirs.try_acquire().await.unwrap();
    assert!(
        got.is_some(),
        "a released permit is free for another client"
    );
    assert!(theirs.try_acquire().await.unwrap().is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sigkilled_holders_permit_comes_back_after_its_lease_and_not_before() {
    let server = common::server();
    let client = common::client(&server).await;
    let waiter_client = common::client(&server).await;
    let onlooker = common::client(&server).await;
    let mut conn = common::raw(&server.url()).await;
    let (mut child, mut lines) = spawn_child(&server.url(), "hold");
    child::expect_line(&mut lines, "HELD").await;
    // The child holds one permit (2 s ttl, renewed), we take the other: none left.
    let sem = client.semaphore("sem:crash", 2);
    let _ours = sem.acquire().await.unwrap();
    assert_eq!(sem.available().await.unwrap(), 0);
    // Past the child's first 2 s lease its watchdog still keeps its permit.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert_eq!(
        sem.available().await.unwrap(),
        0,
        "the child's watchdog did not renew"
    );

    child.kill().await.unwrap();
    // What the child's permit has left, by the server's clock: the earliest deadline is the
    // child's (ours is 30 s out).
    let (holders, time): (Vec<(String, f64)>, (u64, u64)) = dlock::redis::pipe()
        .cmd("ZRANGE")
        .arg(holders_key("sem:crash"))
        .arg(0)
        .arg(-1)
        .arg("WITHSCORES")
        .cmd("TIME")
        .query_async(&mut conn)
        .await
        .unwrap();
    let measured = Instant::now();
    assert_eq!(holders.len(), 2, "{holders:?}");
    let server_now_ms = time.0 * 1000 + time.1 / 1000;
    let left = Duration::from_millis(holders[0].1 as u64 - server_now_ms);
    println!("the killed child's permit had {left:?} left");
    assert!(
        left > Duration::from_millis(500) && left <= Duration::from_secs(2),
        "a 2 s ttl renewed at a third of it: {left:?}"
    );

    let waiter = tokio::spawn({
        let sem = waiter_client
            .semaphore("sem:crash", 2)
            .wait(Duration::from_secs(10));
        async move {
            let permit = sem.acquire().await;
            (permit, Instant::now())
        }
    });
    // Half-way through the dead holder's lease its permit is still taken.
    tokio::time::sleep_until((measured + left / 2).into()).await;
    let watching = onlooker.semaphore("sem:crash", 2);
    assert_eq!(watching.available().await.unwrap(), 0);
    assert!(watching.try_acquire().await.unwrap().is_none());
    assert!(
        !waiter.is_finished(),
        "the waiter got a permit before the lease ran out"
    );

    let (permit, at) = bounded("the waiter", left + Duration::from_secs(5), waiter)
        .await
        .unwrap();
    let _permit = permit.expect("the dead holder's permit came back within the wait");
    let took = at.saturating_duration_since(measured);
    println!("the waiter got it {took:?} after the measurement (lease left {left:?})");
    // By the server's clock the waiter cannot get it before the deadline; 50 ms covers the
    // measurement's own round trip.
    assert!(
        took + Duration::from_millis(50) >= left,
        "granted after {took:?}, the lease had {left:?} left"
    );
    // Woken by its PTTL-timed retry at the deadline, not by some later event.
    assert!(
        took <= left + Duration::from_millis(1500),
        "granted after {took:?}, the lease had {left:?} left"
    );
    assert_eq!(watching.available().await.unwrap(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_permit_is_given_back_at_once() {
    let server = common::server();
    let holder = common::client(&server).await;
    let other = common::client(&server).await;
    let permit = holder.semaphore("sem:drop", 1).acquire().await.unwrap();
    let sem = other.semaphore("sem:drop", 1).wait(Duration::from_secs(10));
    let waiter = tokio::spawn(async move {
        let started = Instant::now();
        let permit = sem.acquire().await;
        (permit, started.elapsed())
    });
    // The waiter waits on the release message (its lease-timed retry is 30 s away).
    until_subscribed(&common::raw(&server.url()).await, "sem:drop", 1).await;
    drop(permit);
    let (got, took) = bounded("the waiter", NO_HANG, waiter).await.unwrap();
    let _permit = got.expect("the dropped permit was given back");
    // The lease is 30 s: only the background release can have freed it this soon.
    assert!(took < Duration::from_secs(2), "took {took:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_different_permit_count_zero_permits_and_an_empty_name_are_refused() {
    let server = common::server();
    let a = common::client(&server).await;
    let b = common::client(&server).await;
    let held = a.semaphore("sem:counts", 3).acquire().await.unwrap();

    let five = b.semaphore("sem:counts", 5);
    let check = |e: LockError| match e {
        LockError::InvalidArgument { name, reason } => {
            assert_eq!(name, "sem:counts");
            assert!(reason.contains("sem:counts"), "{reason}");
            assert!(reason.contains("in use with 3 permits"), "{reason}");
            assert!(reason.contains("made with 5"), "{reason}");
        }
        other => panic!("expected InvalidArgument, got {other:?}"),
    };
    check(five.acquire().await.unwrap_err());
    check(five.try_acquire().await.unwrap_err());
    check(five.available().await.unwrap_err());
    let message = five.acquire().await.unwrap_err().to_string();
    println!("{message}");
    // Nothing was taken by the refused calls.
    assert_eq!(a.semaphore("sem:counts", 3).available().await.unwrap(), 2);

    // The count lives as long as the permits: once all are back, another count is accepted.
    held.release().await.unwrap();
    let five_held = five
        .acquire()
        .await
        .expect("an idle semaphore takes a new count");
    assert_eq!(five.available().await.unwrap(), 4);
    match a.semaphore("sem:counts", 3).acquire().await {
        Err(LockError::InvalidArgument { reason, .. }) => {
            assert!(reason.contains("in use with 5 permits"), "{reason}")
        }
        other => panic!("expected InvalidArgument, got {other:?}"),
    }
    five_held.release().await.unwrap();

    let zero = a.semaphore("sem:zero", 0);
    for e in [
        zero.acquire().await.unwrap_err(),
        zero.try_acquire().await.unwrap_err(),
        zero.available().await.unwrap_err(),
    ] {
        match e {
            LockError::InvalidArgument { name, reason } => {
                assert_eq!(name, "sem:zero");
                assert!(reason.contains("at least 1 permit"), "{reason}");
            }
            other => panic!("expected InvalidArgument, got {other:?}"),
        }
    }
    let empty = a.semaphore("", 2);
    for e in [
        empty.acquire().await.unwrap_err(),
        empty.try_acquire().await.unwrap_err(),
        empty.available().await.unwrap_err(),
    ] {
        match e {
            LockError::InvalidArgument { reason, .. } => {
                assert!(reason.contains("name is empty"), "{reason}")
            }
            other => panic!("expected InvalidArgument, got {other:?}"),
        }
    }
    assert!(matches!(
        a.semaphore("sem:both", 1)
            .ttl(Duration::from_secs(1))
            .lease(Duration::from_secs(1))
            .acquire()
            .await,
        Err(LockError::InvalidArgument { .. })
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_semaphore_and_a_lock_of_one_name_do_not_collide() {
    let server = common::server();
    let client = common::client(&server).await;
    let guard = client.lock("shared-name").acquire().await.unwrap();
    let sem = client.semaphore("shared-name", 1);
    let permit = sem
        .try_acquire()
        .await
        .unwrap()
        .expect("a lock of the same name takes no permit");
    // And a semaphore permit inside a lock's scope is a new permit, not a re-entry.
    let inside = guard.scope(sem.try_acquire()).await.unwrap();
    assert!(inside.is_none(), "the only permit is taken");
    permit.release().await.unwrap();
    let inside = guard.scope(sem.try_acquire()).await.unwrap();
    assert!(inside.is_some());
    guard.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_watchdog_keeps_permits_past_several_leases() {
    let server = common::server();
    let holder = common::client(&server).await;
    let other = common::client(&server).await;
    let sem = holder
        .semaphore("sem:watchdog", 2)
        .ttl(Duration::from_millis(300));
    let a = sem.acquire().await.unwrap();
    let b = sem.acquire().await.unwrap();
    let theirs = other.semaphore("sem:watchdog", 2);
    let started = Instant::now();
    let mut checks = 0;
    // Five leases; bounded in count (at most 30 checks) and time.
    while started.elapsed() < Duration::from_millis(1500) && checks < 30 {
        assert!(
            theirs.try_acquire().await.unwrap().is_none(),
            "a permit was free after {:?}",
            started.elapsed()
        );
        assert!(!a.is_lost() && !b.is_lost());
        checks += 1;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(checks >= 5, "only {checks} checks");
    a.release().await.expect("still ours after five leases");
    b.release().await.expect("still ours after five leases");
    assert_eq!(theirs.available().await.unwrap(), 2);
}

/// Script calls once no more arrive for 300 ms (bounded: 10 s).
async fn settled_script_calls(conn: &mut MultiplexedConnection) -> u64 {
    let started = Instant::now();
    let mut last = common::script_calls(conn).await;
    loop {
        tokio::time::sleep(Duration::from_millis(300)).await;
        let now = common::script_calls(conn).await;
        if now == last {
            return now;
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "script calls never settled"
        );
        last = now;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_release_lets_exactly_one_waiter_in() {
    const WAITERS: usize = 3;
    let server = common::server();
    let mut conn = common::raw(&server.url()).await;
    let holder = common::client(&server).await;
    // Long leases: no renewal and no PTTL-timed retry falls inside the test.
    let ttl = Duration::from_secs(120);
    // Every script in the server's cache first, so each call below is one EVALSHA.
    let warm = holder.semaphore("sem:warm", 1);
    warm.acquire().await.unwrap().release().await.unwrap();
    warm.available().await.unwrap();

    let sem = holder.semaphore("sem:wake", 2).ttl(ttl);
    let first = sem.acquire().await.unwrap();
    let second = sem.acquire().await.unwrap();

    let (got_tx, mut got_rx) = mpsc::unbounded_channel::<(usize, Permit)>();
    let mut clients = Vec::new();
    let mut waiters = Vec::new();
    for i in 0..WAITERS {
        let client = common::client(&server).await;
        let sem: Semaphore = client
            .semaphore("sem:wake", 2)
            .ttl(ttl)
            .wait(Duration::from_secs(60));
        let tx = got_tx.clone();
        waiters.push(tokio::spawn(async move {
            let permit = sem.acquire().await.expect("a waiter's acquire");
            let _ = tx.send((i, permit));
        }));
        clients.push(client);
    }
    // Every waiting process subscribed, then parked after its post-subscribe retry.
    until_subscribed(&conn, "sem:wake", WAITERS).await;
    let before = settled_script_calls(&mut conn).await;

    first.release().await.unwrap();
    let (one, permit_one) = bounded("the first waiter in", NO_HANG, got_rx.recv())
        .await
        .unwrap();
    let after = settled_script_calls(&mut conn).await;
    // The others are still waiting: nobody else got in, nothing failed.
    assert!(got_rx.try_recv().is_err(), "a second waiter got in");
    assert_eq!(waiters.iter().filter(|w| w.is_finished()).count(), 1);
    assert_eq!(sem.available().await.unwrap(), 0);
    // The release, then one attempt per waiting process (each process's head is woken).
    let calls = after - before;
    println!("script calls for one release with {WAITERS} waiting processes: {calls}");
    assert!(
        (2..=1 + WAITERS as u64).contains(&calls),
        "{calls} script calls: more than one attempt per waiting process"
    );

    second.release().await.unwrap();
    let (two, permit_two) = bounded("the second waiter in", NO_HANG, got_rx.recv())
        .await
        .unwrap();
    assert_ne!(one, two);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(got_rx.try_recv().is_err(), "a third waiter got in");
    assert_eq!(waiters.iter().filter(|w| w.is_finished()).count(), 2);

    // The last one gets in as soon as one more permit is given back.
    permit_one.release().await.unwrap();
    let (three, permit_three) = bounded("the third waiter in", NO_HANG, got_rx.recv())
        .await
        .unwrap();
    assert!(three != one && three != two);
    permit_two.release().await.unwrap();
    permit_three.release().await.unwrap();
    assert_eq!(sem.available().await.unwrap(), 2);
}
