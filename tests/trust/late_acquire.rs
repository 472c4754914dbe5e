//! An acquire that timed out on a frozen connection (a proxy that stops forwarding without
//! closing anything) is undone; when the frozen request reaches Redis after that undo, it must
//! not leave a lock held by an owner nobody has, for its whole lease.

use crate::common;

use std::time::Duration;

use common::proxy::Proxy;
use dlock::redis::aio::MultiplexedConnection;
use dlock::LockClient;

const NAME: &str = "trust:late-acquire";
const KEY: &str = "dlock:{trust:late-acquire}";
/// Bound on what happens at once on loopback once nothing is frozen.
const PROMPT: Duration = Duration::from_secs(10);

/// Script runs Redis has finished (FCALL, or EVALSHA / EVAL where FUNCTION is unavailable):
/// commandstats counts a command once it has run.
async fn script_runs(raw: &mut MultiplexedConnection) -> u64 {
    let info: String = dlock::redis::cmd("INFO")
        .arg("commandstats")
        .query_async(raw)
        .await
        .expect("INFO commandstats");
    info.lines()
        .filter(|l| {
            ["cmdstat_fcall:", "cmdstat_evalsha:", "cmdstat_eval:"]
                .iter()
                .any(|p| l.starts_with(p))
        })
        .filter_map(|l| {
            l.split("calls=")
                .nth(1)?
                .split(',')
                .next()?
                .parse::<u64>()
                .ok()
        })
        .sum()
}

/// The release latches of the lock left in Redis.
async fn latches(raw: &mut MultiplexedConnection) -> Vec<String> {
    dlock::redis::cmd("KEYS")
        .arg(format!("{KEY}:latch:*"))
        .query_async(raw)
        .await
        .expect("KEYS")
}

/// On a multi-thread runtime the client's commands go out on a connection that runtime drives,
/// and its clean-ups fall back to one its own thread drives: the undo of an acquire whose
/// connection froze runs there first, finds nothing, and must still not let the acquire that
/// lands afterwards keep the lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acquire_landing_after_its_undo_on_another_connection_leaves_the_lock_free() {
    let server = common::server();
    let proxy = Proxy::start(server.port());
    let a = LockClient::builder(proxy.url())
        .response_timeout(Duration::from_millis(500))
        .build()
        .await
        .expect("connect through the proxy");
    // Opened in this order (`Topology::open_pool`, then the subscriber): the command connection
    // this runtime drives, the client thread's one for background work, the subscriber.
    assert_eq!(proxy.accepted(), 3, "connections of a multi-thread client");
    let mut raw = common::raw(&server.url()).await;
    let runs_before = script_runs(&mut raw).await;

    proxy.freeze_connection(0);
    let failed = (a.lock(NAME))
        .ttl(Duration::from_secs(30))
        .wait(Duration::ZERO)
        .acquire()
        .await;
    assert!(failed.is_err(), "acquired through a frozen connection");
    // The undo timed out behind the acquire on connection 0, then ran on connection 1, found
    // nothing to release and left its latch.
    common::eventually(PROMPT, "the undo ran on the other connection", || {
        let mut raw = raw.clone();
        async move { !latches(&mut raw).await.is_empty() }
    })
    .await;
    // The undo's retry, or retries (each is bounded by the 500 ms response timeout, which a
    // busy machine can overrun): none of the frozen requests.
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

    let b = common::client(&server).await;
    let got = (b.lock(NAME)).try_acquire().await.expect("try");
    let fields: Vec<String> = dlock::redis::cmd("HGETALL")
        .arg(KEY)
        .query_async(&mut raw)
        .await
        .expect("HGETALL");
    let pttl: i64 = dlock::redis::cmd("PTTL")
        .arg(KEY)
        .query_async(&mut raw)
        .await
        .expect("PTTL");
    let got = got.unwrap_or_else(|| {
        panic!(
            "a late acquire of an owner that gave up holds the lock: {KEY} = {fields:?}, \
             PTTL {pttl} ms"
        )
    });
    got.release().await.expect("release");
}
