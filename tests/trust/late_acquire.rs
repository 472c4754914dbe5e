//! An acquire that timed out on a frozen connection (a proxy that stops forwarding without
//! closing anything) is undone; when the frozen request reaches Redis after that undo, it must
//! not leave a lock held by an owner nobody has, for its whole lease.

use crate::common;

use std::time::Duration;

use common::proxy::Proxy;
use dlock::redis::aio::MultiplexedConnection;
use dlock::LockClient;

/// Bound on what happens at once on loopback once nothing is frozen.
pub(crate) const PROMPT: Duration = Duration::from_secs(10);

/// Script runs Redis has finished (FCALL, or EVALSHA / EVAL where FUNCTION is unavailable):
/// commandstats counts a command once it has run.
pub(crate) async fn script_runs(raw: &mut MultiplexedConnection) -> u64 {
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

/// The release latches of the lock `key` left in Redis.
async fn latches(raw: &mut MultiplexedConnection, key: &str) -> Vec<String> {
    dlock::redis::cmd("KEYS")
        .arg(format!("{key}:latch:*"))
        .query_async(raw)
        .await
        .expect("KEYS")
}

/// The kinds whose acquire can land late: each tried on its own name.
#[derive(Clone, Copy, Debug)]
enum Kind {
    Plain,
    Fair,
    Semaphore,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Plain => "trust:late-acquire",
            Kind::Fair => "trust:late-acquire:fair",
            Kind::Semaphore => "trust:late-acquire:semaphore",
        }
    }

    /// The key that says who holds it (the documented layout, default prefix).
    fn key(self) -> String {
        let suffix = match self {
            Kind::Plain => "",
            Kind::Fair => ":fair",
            Kind::Semaphore => ":sem",
        };
        format!("dlock:{{{}}}{suffix}", self.name())
    }

    /// One acquire of a 30 s lease, asked once (no waiting): whether it was granted.
    async fn acquire_once(self, client: &LockClient) -> Result<Option<Held>, dlock::LockError> {
        let ttl = Duration::from_secs(30);
        Ok(match self {
            Kind::Plain => {
                (client.lock(self.name()).ttl(ttl).try_acquire().await?).map(Held::Guard)
            }
            Kind::Fair => {
                (client.fair_lock(self.name()).ttl(ttl).try_acquire().await?).map(Held::Guard)
            }
            Kind::Semaphore => (client
                .semaphore(self.name(), 1)
                .ttl(ttl)
                .try_acquire()
                .await?)
                .map(Held::Permit),
        })
    }

    /// What Redis holds at the key, for the failure message.
    async fn holders(self, raw: &mut MultiplexedConnection) -> Vec<String> {
        let cmd = match self {
            Kind::Plain | Kind::Fair => {
                let mut c = dlock::redis::cmd("HGETALL");
                c.arg(self.key());
                c
            }
            Kind::Semaphore => {
                let mut c = dlock::redis::cmd("ZRANGE");
                c.arg(self.key()).arg(0).arg(-1).arg("WITHSCORES");
                c
            }
        };
        cmd.query_async(raw).await.expect("read the holders")
    }
}

/// A granted lock or permit.
enum Held {
    Guard(dlock::LockGuard),
    Permit(dlock::Permit),
}

impl Held {
    async fn release(self) {
        match self {
            Held::Guard(g) => g.release().await.expect("release"),
            Held::Permit(p) => p.release().await.expect("release"),
        }
    }
}

/// On a multi-thread runtime the client's commands go out on a connection that runtime drives,
/// and its clean-ups fall back to one its own thread drives: the undo of an acquire whose
/// connection froze runs there first, finds nothing, and must still not let the acquire that
/// lands afterwards keep the lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acquire_landing_after_its_undo_on_another_connection_leaves_the_lock_free() {
    late_acquire_leaves_it_free(Kind::Plain, false).await;
}

/// The same for a fair lock: the late acquire finds the lock free and nobody queued, and
/// would take it (or, were the lock held, queue a waiter nobody is).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fair_acquire_landing_after_its_undo_on_another_connection_leaves_the_lock_free() {
    late_acquire_leaves_it_free(Kind::Fair, false).await;
}

/// The same for a fair lock held by another client meanwhile: the late acquire must not queue
/// its owner, or the holder's release would grant the lock to it, held by nobody until the
/// grant lapses.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fair_acquire_landing_after_its_undo_while_the_lock_is_held_does_not_queue() {
    late_acquire_leaves_it_free(Kind::Fair, true).await;
}

/// The same for a semaphore of one permit: the late acquire must not take the permit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_semaphore_acquire_landing_after_its_undo_on_another_connection_leaves_the_permit_free() {
    late_acquire_leaves_it_free(Kind::Semaphore, false).await;
}

/// `held`: another client holds it while the frozen acquire is tried, undone and lands, and
/// gives it back afterwards.
async fn late_acquire_leaves_it_free(kind: Kind, held: bool) {
    let server = common::server();
    let b = common::client(&server).await;
    let holder = if held {
        let h = kind.acquire_once(&b).await.expect("hold first");
        Some(h.expect("nobody holds it yet"))
    } else {
        None
    };
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
    let key = kind.key();
    let runs_before = script_runs(&mut raw).await;

    proxy.freeze_connection(0);
    let failed = kind.acquire_once(&a).await;
    assert!(
        failed.is_err(),
        "{kind:?}: acquired through a frozen connection"
    );
    // The undo timed out behind the acquire on connection 0, then ran on connection 1, found
    // nothing to release and left its latch.
    common::eventually(PROMPT, "the undo ran on the other connection", || {
        let mut raw = raw.clone();
        let key = key.clone();
        async move { !latches(&mut raw, &key).await.is_empty() }
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

    let queued: Vec<String> = dlock::redis::cmd("ZRANGE")
        .arg(format!("{key}:queue"))
        .arg(0)
        .arg(-1)
        .query_async(&mut raw)
        .await
        .expect("ZRANGE");
    if let Some(holder) = holder {
        println!("{kind:?}: queued when the holder gives it back: {queued:?}");
        holder.release().await;
    }
    let got = kind.acquire_once(&b).await.expect("try");
    let holders = kind.holders(&mut raw).await;
    let pttl: i64 = dlock::redis::cmd("PTTL")
        .arg(&key)
        .query_async(&mut raw)
        .await
        .expect("PTTL");
    println!(
        "{kind:?}: granted to another client afterwards: {}",
        got.is_some()
    );
    let got = got.unwrap_or_else(|| {
        panic!(
            "{kind:?}: a late acquire of an owner that gave up holds it: {key} = {holders:?}, \
             PTTL {pttl} ms (queued before: {queued:?})"
        )
    });
    got.release().await;
}
