//! dlock's PostgreSQL store and `distributed-lock`'s PostgreSQL backend (session advisory locks)
//! on one throw-away PostgreSQL server (or `PG_URL`), interleaved in rounds: the uncontended
//! acquire + release cycle as a ratio to a `SELECT 1` round trip of this run, and the handoff
//! (release -> the waiting client holds) as a ratio to a `SELECT 1` sent after the same idle time,
//! also for dlock's fair lock, whose release grants the waiter and tells it on its own channel.
//! dlock's plain lock runs twice in each round: its calls sent as their text (the default) and
//! as named statements prepared once per connection (`postgres_prepared_statements`).
//! Where the server runs on this machine, also the server's CPU time per cycle (every server
//! process's time on a CPU, from `/proc/<pid>/schedstat`, summed over the cycles), beside the
//! same for one `SELECT 1`.
//!
//! Beside the handoffs, their floors with nothing of dlock in them (plain tokio-postgres, the
//! same idle time first): **NOTIFY floor**, a bare `SELECT pg_notify(..)` in autocommit until a
//! task woken by the notification on another connection runs, the least any release that
//! wakes its waiter by NOTIFY can take; **NOTIFY + round trip**, that task then sending a
//! `SELECT 1` on a connection of its own, the least for a waiter that must ask again after the
//! wake-up (dlock's plain lock). A server-side waiter (an advisory lock the waiting session
//! blocks on, as the peer does) is woken inside the server, with no message to a client first.

use std::time::{Duration, Instant};

use futures_util::StreamExt;
use tokio::sync::mpsc;
use tokio_postgres::AsyncMessage;

use distributed_lock_core::traits::{DistributedLock, LockHandle, LockProvider};
use distributed_lock_postgres::PostgresLockProvider;
use dlock::LockClient;

const ROUNDS: usize = 4;
const CYCLES: usize = 500;
const HANDOFFS: usize = 60;
/// How long the next holder is left waiting before the release: enough to be parked.
const PARKED: Duration = Duration::from_millis(10);

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn p99(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() * 99 / 100]
}

/// The CPU time every process of the server has used so far (backends, the WAL writer, ...),
/// `None` where the server is not on this machine (its processes' `/proc` entries unreadable).
async fn server_cpu(admin: &tokio_postgres::Client) -> Option<Duration> {
    let rows = admin
        .query("SELECT pid FROM pg_stat_activity", &[])
        .await
        .ok()?;
    let mut ns = 0u64;
    for row in rows {
        let pid: i32 = row.get(0);
        // The first field: ns spent on a CPU.
        let stat = std::fs::read_to_string(format!("/proc/{pid}/schedstat")).ok()?;
        ns += stat.split_whitespace().next()?.parse::<u64>().ok()?;
    }
    Some(Duration::from_nanos(ns))
}

/// Server CPU per call over a stretch of `calls` calls, from readings before and after.
fn per_call(before: Option<Duration>, after: Option<Duration>, calls: usize) -> Option<Duration> {
    Some(after?.checked_sub(before?)? / u32::try_from(calls).ok()?)
}

/// The median `SELECT 1` round trip of `n`, each after `idle`, and the server's CPU per one
/// (read while its connection is open: a backend's time goes with its process).
async fn select1(
    admin: &tokio_postgres::Client,
    url: &str,
    n: usize,
    idle: Duration,
) -> (Duration, Option<Duration>) {
    let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .expect("connect");
    tokio::spawn(conn);
    let mut v = Vec::with_capacity(n);
    let before = server_cpu(admin).await;
    for _ in 0..n {
        if !idle.is_zero() {
            tokio::time::sleep(idle).await;
        }
        let t = Instant::now();
        client.simple_query("SELECT 1").await.expect("SELECT 1");
        v.push(t.elapsed());
    }
    let cpu = per_call(before, server_cpu(admin).await, n);
    (median(v), cpu)
}

/// The floor rows' parts: a connection that LISTENs, whose notifications reach a waiting task
/// through a channel (as dlock's listener hands them to waiters), one that notifies, and the
/// waiter's own connection for its round trip.
struct Floor {
    notifier: tokio_postgres::Client,
    waiter: tokio_postgres::Client,
    heard: mpsc::UnboundedReceiver<()>,
    _listener: tokio_postgres::Client,
}

impl Floor {
    async fn open(url: &str) -> Floor {
        let (listener, mut conn) = tokio_postgres::connect(url, tokio_postgres::NoTls)
            .await
            .expect("connect");
        let (tx, heard) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            let mut messages = futures_util::stream::poll_fn(move |cx| conn.poll_message(cx));
            while let Some(Ok(message)) = messages.next().await {
                if let AsyncMessage::Notification(_) = message {
                    let _ = tx.send(());
                }
            }
        });
        listener
            .simple_query("LISTEN dlock_floor")
            .await
            .expect("LISTEN");
        let connect = || async {
            let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls)
                .await
                .expect("connect");
            tokio::spawn(conn);
            client
        };
        Floor {
            notifier: connect().await,
            waiter: connect().await,
            heard,
            _listener: listener,
        }
    }

    /// One sample after `idle`: (until the woken task runs, until its `SELECT 1` is answered).
    async fn sample(&mut self, idle: Duration) -> (Duration, Duration) {
        tokio::time::sleep(idle).await;
        let Floor {
            notifier,
            waiter,
            heard,
            ..
        } = self;
        let started = Instant::now();
        let (woken, answered) = tokio::join!(
            async {
                tokio::time::timeout(Duration::from_secs(10), heard.recv())
                    .await
                    .expect("no notification within 10 s")
                    .expect("listener gone");
                let woken = Instant::now();
                waiter.simple_query("SELECT 1").await.expect("SELECT 1");
                (woken, Instant::now())
            },
            async {
                notifier
                    .simple_query("SELECT pg_notify('dlock_floor', 'released')")
                    .await
                    .expect("NOTIFY");
            }
        )
        .0;
        (woken - started, answered - started)
    }
}

/// dlock's uncontended cycle on `client`, `CYCLES` times: each cycle's time into `out`, the
/// server's CPU per cycle into `cpu`.
async fn dlock_cycles(
    client: &LockClient,
    admin: &tokio_postgres::Client,
    out: &mut Vec<Duration>,
    cpu: &mut Vec<Duration>,
) {
    let lock = client.lock("peers:cycle");
    let before = server_cpu(admin).await;
    for _ in 0..CYCLES {
        let t = Instant::now();
        let g = lock.acquire().await.expect("acquire");
        g.release().await.expect("release");
        out.push(t.elapsed());
    }
    cpu.extend(per_call(before, server_cpu(admin).await, CYCLES));
}

/// dlock's handoff of the lock `lock` names on a client (a plain or a fair one) from `a` to a
/// task of `b` parked on it, `HANDOFFS` times: the handoff into `out`, the holder's release
/// call into `release_calls`.
async fn dlock_handoffs(
    a: &LockClient,
    b: &LockClient,
    lock: fn(&LockClient) -> dlock::Lock,
    out: &mut Vec<Duration>,
    release_calls: &mut Vec<Duration>,
) {
    for _ in 0..HANDOFFS {
        let g = lock(a).acquire().await.expect("acquire");
        let waiting = lock(b).wait(Duration::from_secs(10));
        let next = tokio::spawn(async move {
            let g = waiting.acquire().await.expect("next");
            let at = Instant::now();
            g.release().await.expect("release");
            at
        });
        tokio::time::sleep(PARKED).await;
        let released = Instant::now();
        g.release().await.expect("release");
        release_calls.push(released.elapsed());
        out.push(next.await.expect("task").duration_since(released));
    }
}

#[tokio::main]
async fn main() {
    let server;
    let url = match std::env::var("PG_URL") {
        Ok(url) => url,
        Err(_) => {
            server = dlock::testing::PgServer::start().expect("start PostgreSQL");
            println!(
                "PG_URL unset: started a temporary PostgreSQL at {}",
                server.url()
            );
            server.url()
        }
    };
    let (admin, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
        .await
        .expect("connect");
    tokio::spawn(conn);
    let (rtt, select1_cpu) = select1(&admin, &url, 2000, Duration::ZERO).await;
    let (idle_rtt, _) = select1(&admin, &url, 200, PARKED).await;
    println!("SELECT 1 RTT (median of 2000): {rtt:?}; after {PARKED:?} idle (median of 200): {idle_rtt:?}\n");

    let dlock_client = |prepared: bool| {
        let url = url.clone();
        async move {
            LockClient::builder(url)
                .postgres_prepared_statements(prepared)
                .build()
                .await
                .expect("dlock")
        }
    };
    let (a, b) = (dlock_client(false).await, dlock_client(false).await);
    let (pa, pb) = (dlock_client(true).await, dlock_client(true).await);
    let provider = PostgresLockProvider::new(url.clone())
        .await
        .expect("distributed-lock");
    let provider_b = PostgresLockProvider::new(url.clone())
        .await
        .expect("distributed-lock");

    let (mut ours, mut theirs) = (Vec::new(), Vec::new());
    let mut ours_prepared = Vec::new();
    // Server CPU per cycle, one reading per round.
    let (mut our_cpu, mut their_cpu) = (Vec::new(), Vec::new());
    let mut our_prepared_cpu = Vec::new();
    let (mut our_handoffs, mut their_handoffs) = (Vec::new(), Vec::new());
    let (mut prepared_handoffs, mut prepared_release_calls) = (Vec::new(), Vec::new());
    let mut fair_handoffs = Vec::new();
    let mut floor = Floor::open(&url).await;
    let (mut notify_floor, mut ask_floor) = (Vec::new(), Vec::new());
    // How long the holder's release call takes in the plain handoff (its reply comes after
    // the commit that sends the NOTIFY).
    let mut release_calls = Vec::new();
    for round in 0..ROUNDS {
        // The floors, first in each round as the peers are interleaved.
        for _ in 0..HANDOFFS {
            let (woken, answered) = floor.sample(PARKED).await;
            notify_floor.push(woken);
            ask_floor.push(answered);
        }
        // dlock: the uncontended cycle, sent as text, then prepared.
        dlock_cycles(&a, &admin, &mut ours, &mut our_cpu).await;
        dlock_cycles(&pa, &admin, &mut ours_prepared, &mut our_prepared_cpu).await;
        // distributed-lock: the same.
        let lock = provider.create_lock("peers:cycle");
        let before = server_cpu(&admin).await;
        for _ in 0..CYCLES {
            let t = Instant::now();
            let h = lock
                .acquire(Some(Duration::from_secs(5)))
                .await
                .expect("acquire");
            h.release().await.expect("release");
            theirs.push(t.elapsed());
        }
        their_cpu.extend(per_call(before, server_cpu(&admin).await, CYCLES));
        // dlock: handoff between two clients, sent as text, then prepared.
        let plain = |c: &LockClient| c.lock("peers:handoff");
        dlock_handoffs(&a, &b, plain, &mut our_handoffs, &mut release_calls).await;
        dlock_handoffs(
            &pa,
            &pb,
            plain,
            &mut prepared_handoffs,
            &mut prepared_release_calls,
        )
        .await;
        // dlock's fair lock: the release grants the parked waiter and NOTIFYs it.
        let fair = |c: &LockClient| c.fair_lock("peers:fair");
        dlock_handoffs(&a, &b, fair, &mut fair_handoffs, &mut Vec::new()).await;
        // distributed-lock: the same.
        for _ in 0..HANDOFFS {
            let h = provider
                .create_lock("peers:handoff")
                .acquire(Some(Duration::from_secs(5)))
                .await
                .expect("acquire");
            let waiting = provider_b.create_lock("peers:handoff");
            let next = tokio::spawn(async move {
                let h = waiting
                    .acquire(Some(Duration::from_secs(10)))
                    .await
                    .expect("next");
                let at = Instant::now();
                h.release().await.expect("release");
                at
            });
            tokio::time::sleep(PARKED).await;
            let released = Instant::now();
            h.release().await.expect("release");
            their_handoffs.push(next.await.expect("task").duration_since(released));
        }
        println!("round {} of {ROUNDS} done", round + 1);
    }
    let ratio = |d: Duration, base: Duration| d.as_secs_f64() / base.as_secs_f64();
    println!();
    match select1_cpu {
        Some(cpu) => println!("server CPU per SELECT 1: {cpu:.1?}"),
        None => {
            println!("server CPU: not measured (the server's processes are not on this machine)")
        }
    }
    for (name, v) in [
        ("dlock", our_cpu),
        ("dlock prepared", our_prepared_cpu),
        ("distributed-lock-postgres", their_cpu),
    ] {
        if !v.is_empty() {
            let (m, lo, hi) = (
                median(v.clone()),
                v.iter().min().unwrap(),
                v.iter().max().unwrap(),
            );
            println!("server CPU per uncontended cycle  {name:26} median {m:.1?} (rounds {lo:.1?}-{hi:.1?})");
        }
    }
    for (name, v) in [
        ("dlock (lease rows)", ours),
        ("dlock prepared", ours_prepared),
        ("distributed-lock-postgres (advisory)", theirs),
    ] {
        let (m, p) = (median(v.clone()), p99(v));
        println!(
            "uncontended cycle  {name:38} p50 {m:>10.1?} ({:5.2} RTT)  p99 {p:>10.1?} ({:5.2} RTT)",
            ratio(m, rtt),
            ratio(p, rtt)
        );
    }
    for (name, v) in [
        ("dlock (NOTIFY)", our_handoffs),
        ("dlock prepared", prepared_handoffs),
        ("dlock fair (grant + NOTIFY)", fair_handoffs),
        ("distributed-lock-postgres", their_handoffs),
        ("NOTIFY floor", notify_floor),
        ("NOTIFY + round trip floor", ask_floor),
        ("dlock plain: the holder's release call", release_calls),
        ("dlock prepared: the release call", prepared_release_calls),
    ] {
        let (m, p) = (median(v.clone()), p99(v));
        println!(
            "handoff            {name:38} p50 {m:>10.1?} ({:5.2} idle RTT)  p99 {p:>10.1?} ({:5.2} idle RTT)",
            ratio(m, idle_rtt),
            ratio(p, idle_rtt)
        );
    }
}
