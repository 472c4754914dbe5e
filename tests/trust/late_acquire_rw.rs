//! The read-write lock's sides under `late_acquire.rs`'s fault: an acquire times out on a
//! frozen connection (a proxy that stops forwarding without closing anything), the client undoes
//! it over another connection (where it finds nothing), and then the frozen request reaches
//! Redis. It must leave no trace of an owner nobody has: not a hold (of either side, on a free
//! lock or beside other readers), and not a writer's claim that keeps new readers out.

use crate::common;
use crate::late_acquire::{script_runs, PROMPT};

use std::time::Duration;

use common::proxy::Proxy;
use dlock::redis::aio::MultiplexedConnection;
use dlock::{Lock, LockClient};

async fn keys(raw: &mut MultiplexedConnection, pattern: &str) -> Vec<String> {
    dlock::redis::cmd("KEYS")
        .arg(pattern)
        .query_async(raw)
        .await
        .expect("KEYS")
}

/// What the lock's keys hold, for a failure message.
async fn describe(raw: &mut MultiplexedConnection, key: &str) -> String {
    let hash: Vec<String> = dlock::redis::cmd("HGETALL")
        .arg(key)
        .query_async(raw)
        .await
        .expect("HGETALL");
    let pttl: i64 = dlock::redis::cmd("PTTL")
        .arg(key)
        .query_async(raw)
        .await
        .expect("PTTL");
    let waiting: Option<String> = dlock::redis::cmd("GET")
        .arg(format!("{key}:wwait"))
        .query_async(raw)
        .await
        .expect("GET");
    format!("{key} = {hash:?} (PTTL {pttl} ms), writer waiting: {waiting:?}")
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Side {
    Read,
    Write,
}

fn side(client: &LockClient, name: &str, side: Side) -> Lock {
    let rw = client.read_write_lock(name);
    match side {
        Side::Read => rw.read(),
        Side::Write => rw.write(),
    }
}

/// Client `a` asks for `asked` through a proxy whose command connection freezes; `beside`, if
/// any, is a reader of another client holding the lock throughout the fault. Once the frozen
/// request has run (after its undo), the reader beside (if any) leaves, and the function returns
/// what remains: `Some(description)` when the late request left a trace.
async fn late(name: &str, asked: Side, reader_beside: bool) -> Option<String> {
    let key = format!("dlock:{{{name}}}:rw");
    let server = common::server();
    let proxy = Proxy::start(server.port());
    let a = LockClient::builder(proxy.url())
        .response_timeout(Duration::from_millis(500))
        .build()
        .await
        .expect("connect through the proxy");
    assert_eq!(proxy.accepted(), 3, "connections of a multi-thread client");
    let b = common::client(&server).await;
    let mut raw = common::raw(&server.url()).await;
    let beside = if reader_beside {
        Some(side(&b, name, Side::Read).acquire().await.expect("reader"))
    } else {
        None
    };
    let runs_before = script_runs(&mut raw).await;

    proxy.freeze_connection(0);
    let failed = side(&a, name, asked)
        .ttl(Duration::from_secs(30))
        .wait(Duration::ZERO)
        .acquire()
        .await;
    assert!(failed.is_err(), "acquired through a frozen connection");
    // The undo timed out behind the acquire on connection 0, then ran on connection 1, found
    // nothing to release and left its latch.
    common::eventually(PROMPT, "the undo ran on the other connection", || {
        let mut raw = raw.clone();
        let pattern = format!("{key}:latch:*");
        async move { !keys(&mut raw, &pattern).await.is_empty() }
    })
    .await;
    let after_undo = script_runs(&mut raw).await;
    assert!(after_undo > runs_before, "the undo reached Redis");
    assert!(proxy.held_bytes(0) > 0, "the frozen requests are held");

    // The frozen acquire, and the first try of its undo behind it, land now.
    proxy.thaw_connection(0);
    common::eventually(PROMPT, "the frozen requests ran", || {
        let mut raw = raw.clone();
        async move { script_runs(&mut raw).await >= after_undo + 2 }
    })
    .await;
    if let Some(r) = beside {
        r.release().await.expect("release the reader beside");
    }

    // Nobody holds the lock now, so a writer gets in at once and a reader too.
    let state = describe(&mut raw, &key).await;
    let reader = side(&b, name, Side::Read).try_acquire().await.expect("try");
    let Some(reader) = reader else {
        return Some(format!("a new reader is refused: {state}"));
    };
    reader.release().await.expect("release");
    let writer = side(&b, name, Side::Write)
        .try_acquire()
        .await
        .expect("try");
    let Some(writer) = writer else {
        return Some(format!("a new writer is refused: {state}"));
    };
    writer.release().await.expect("release");
    None
}

/// On a multi-thread runtime the client's commands go out on a connection that runtime drives,
/// and its clean-ups fall back to one its own thread drives (see `late_acquire.rs`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_write_acquire_after_its_undo_leaves_the_lock_free() {
    let trace = late("trust:late-rw:write", Side::Write, false).await;
    println!("late write on a free lock: {trace:?}");
    assert!(trace.is_none(), "a late write acquire left {trace:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_read_acquire_after_its_undo_leaves_the_lock_free() {
    let trace = late("trust:late-rw:read", Side::Read, false).await;
    println!("late read on a free lock: {trace:?}");
    assert!(trace.is_none(), "a late read acquire left {trace:?}");
}

/// A late reader must not join the readers inside either: it would keep writers out for its
/// whole lease after they leave.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_read_acquire_after_its_undo_does_not_join_readers() {
    let trace = late("trust:late-rw:read-beside", Side::Read, true).await;
    println!("late read beside a reader: {trace:?}");
    assert!(trace.is_none(), "a late read acquire left {trace:?}");
}

/// A late writer that finds readers inside must not stake a claim to go next: nobody would
/// come back for it, and new readers would queue behind it until it expired.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_write_acquire_after_its_undo_leaves_no_claim() {
    let trace = late("trust:late-rw:write-beside", Side::Write, true).await;
    println!("late write beside a reader: {trace:?}");
    assert!(trace.is_none(), "a late write acquire left {trace:?}");
}
