//! The lock runtime's figures, each also as a ratio to a PING round trip measured in this run.
//!
//! `cargo run --release --example bench` (starts its own redis-server unless REDIS_URL is set).
//! Scenarios: uncontended acquire+release; handoff (release issued -> waiter holding) within one
//! client and across clients; 16 tasks on one key for 5 s; 10,000 waiters over 1,000 keys;
//! 10,000 held locks under the watchdog; renew calls per hold per lease for 1 and for 1,000
//! locks held with a 3 s ttl over 9 s (3 leases).

#[path = "support/mod.rs"]
mod support;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use dlock::redis::{self, aio::MultiplexedConnection};
use dlock::LockClient;
use support::{fmt_rtt, percentile, ping_rtt, ping_rtt_after, redis_url};

#[tokio::main]
async fn main() {
    let (url, _server) = redis_url();
    let rtt = ping_rtt(&url, 2000).await;
    let idle_rtt = ping_rtt_after(&url, 300, Duration::from_millis(3)).await;
    println!("PING RTT (median of 2000): {rtt:?}; after 3 ms idle (median of 300): {idle_rtt:?}\n");
    let client = LockClient::connect(&url).await.expect("connect");
    let admin = redis::Client::open(url.as_str()).unwrap();
    let mut admin = admin.get_multiplexed_async_connection().await.unwrap();

    uncontended(&client, rtt).await;
    handoff(&client, &client, "same client (local queue)", rtt, idle_rtt).await;
    let other = LockClient::connect(&url).await.unwrap();
    handoff(&client, &other, "two clients (pub/sub)", rtt, idle_rtt).await;
    contention(&client, &mut admin, rtt).await;
    many_waiters(&url, &mut admin, rtt).await;
    watchdog(&url, &mut admin, rtt).await;
    renew_rate(&url, &mut admin, 1, "1 held lock, ttl 3 s").await;
    renew_rate(&url, &mut admin, 1000, "1,000 held locks, ttl 3 s").await;
}

async fn uncontended(client: &LockClient, rtt: Duration) {
    let lock = client.lock("bench:uncontended");
    for _ in 0..200 {
        lock.acquire().await.unwrap().release().await.unwrap();
    }
    let mut samples = Vec::new();
    for _ in 0..3000 {
        let t = Instant::now();
        lock.acquire().await.unwrap().release().await.unwrap();
        samples.push(t.elapsed());
    }
    println!(
        "uncontended acquire+release  p50 {}  p99 {}",
        fmt_rtt(percentile(&mut samples, 0.5), rtt),
        fmt_rtt(percentile(&mut samples, 0.99), rtt)
    );
}

/// Holder in `a`, waiter in `b`: time from the holder issuing release to the waiter holding.
async fn handoff(a: &LockClient, b: &LockClient, label: &str, rtt: Duration, idle_rtt: Duration) {
    let mut samples = Vec::new();
    for i in 0..500 {
        let name = format!("bench:handoff:{}", i % 8);
        let guard = a.lock(&name).acquire().await.unwrap();
        let waiter_lock = b.lock(&name);
        let waiter = tokio::spawn(async move {
            let g = waiter_lock.acquire().await.unwrap();
            let at = Instant::now();
            g.release().await.unwrap();
            at
        });
        // Give the waiter time to park (subscribe + retry): this is a benchmark, not a test.
        tokio::time::sleep(Duration::from_millis(3)).await;
        let released_at = Instant::now();
        guard.release().await.unwrap();
        let held_at = waiter.await.unwrap();
        samples.push(held_at.saturating_duration_since(released_at));
    }
    let p50 = percentile(&mut samples, 0.5);
    println!(
        "handoff, {label:<26} p50 {}  p99 {}  (p50 = {:.2} idle-PING RTT)",
        fmt_rtt(p50, rtt),
        fmt_rtt(percentile(&mut samples, 0.99), rtt),
        p50.as_secs_f64() / idle_rtt.as_secs_f64()
    );
}

async fn contention(client: &LockClient, admin: &mut MultiplexedConnection, rtt: Duration) {
    let tasks = 16;
    let run_for = Duration::from_secs(5);
    let _: () = redis::cmd("SET")
        .arg("bench:counter")
        .arg(0)
        .query_async(admin)
        .await
        .unwrap();
    let done = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let handles: Vec<_> = (0..tasks)
        .map(|_| {
            let client = client.clone();
            let done = done.clone();
            tokio::spawn(async move {
                let lock = client.lock("bench:contended").wait(Duration::from_secs(30));
                let mut conn = client_conn(&client).await;
                let mut mine = 0u64;
                while start.elapsed() < run_for {
                    let g = lock.acquire().await.unwrap();
                    let n: u64 = redis::cmd("GET")
                        .arg("bench:counter")
                        .query_async(&mut conn)
                        .await
                        .unwrap();
                    let _: () = redis::cmd("SET")
                        .arg("bench:counter")
                        .arg(n + 1)
                        .query_async(&mut conn)
                        .await
                        .unwrap();
                    g.release().await.unwrap();
                    mine += 1;
                }
                done.fetch_add(mine, Ordering::Relaxed);
                mine
            })
        })
        .collect();
    let mut per_task = Vec::new();
    for h in handles {
        per_task.push(h.await.unwrap());
    }
    let elapsed = start.elapsed();
    let total = done.load(Ordering::Relaxed);
    let counter: u64 = redis::cmd("GET")
        .arg("bench:counter")
        .query_async(admin)
        .await
        .unwrap();
    let mean = total as f64 / tasks as f64;
    let per_op = elapsed / total.max(1) as u32;
    println!(
        "16 tasks, one key, 5 s       {:.0} ops/s, {} per op, lost updates {}, share min {:.2} / max {:.2} of mean",
        total as f64 / elapsed.as_secs_f64(),
        fmt_rtt(per_op, rtt),
        total - counter,
        *per_task.iter().min().unwrap() as f64 / mean,
        *per_task.iter().max().unwrap() as f64 / mean,
    );
}

async fn client_conn(client: &LockClient) -> MultiplexedConnection {
    let url = client.url().to_owned();
    redis::Client::open(url.as_str())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap()
}

async fn connected_clients(admin: &mut MultiplexedConnection) -> usize {
    let list: String = redis::cmd("CLIENT")
        .arg("LIST")
        .query_async(admin)
        .await
        .unwrap();
    list.lines().count()
}

async fn many_waiters(url: &str, admin: &mut MultiplexedConnection, rtt: Duration) {
    let holder = LockClient::connect(url).await.unwrap();
    let mut held = Vec::new();
    for k in 0..1000 {
        held.push(
            holder
                .lock(format!("bench:many:{k}"))
                .acquire()
                .await
                .unwrap(),
        );
    }
    let before = connected_clients(admin).await;
    let waiters = LockClient::connect(url).await.unwrap();
    let (parked_tx, mut parked_rx) = tokio::sync::mpsc::unbounded_channel::<()>();
    let tasks: Vec<_> = (0..10_000)
        .map(|i| {
            let lock = waiters
                .lock(format!("bench:many:{}", i % 1000))
                .wait(Duration::from_secs(120));
            let parked_tx = parked_tx.clone();
            tokio::spawn(async move {
                let _ = parked_tx.send(());
                lock.acquire().await.unwrap().release().await.unwrap();
            })
        })
        .collect();
    for _ in 0..10_000 {
        parked_rx.recv().await;
    }
    // Let the heads of the local queues subscribe and park on Redis.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let during = connected_clients(admin).await;
    let start = Instant::now();
    for g in held {
        g.release().await.unwrap();
    }
    for t in tasks {
        t.await.unwrap();
    }
    let all_held = start.elapsed();
    println!(
        "10,000 waiters / 1,000 keys  connections of the waiting client {} (pool 1 + subscriber 1), all held in {:?} ({:.0} RTT, {:.2} RTT per waiter)",
        during - before,
        all_held,
        all_held.as_secs_f64() / rtt.as_secs_f64(),
        all_held.as_secs_f64() / rtt.as_secs_f64() / 10_000.0
    );
}

async fn watchdog(url: &str, admin: &mut MultiplexedConnection, rtt: Duration) {
    let client = LockClient::connect(url).await.unwrap();
    let ttl = Duration::from_secs(3);
    let mut held = Vec::new();
    for k in 0..10_000 {
        held.push(
            client
                .lock(format!("bench:wd:{k}"))
                .ttl(ttl)
                .acquire()
                .await
                .unwrap(),
        );
    }
    let _: () = redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query_async(admin)
        .await
        .unwrap();
    let window = Duration::from_secs(4);
    tokio::time::sleep(window).await;
    let stats = commandstats(admin).await;
    let scripts = script_calls(&stats);
    let renewed = calls(&stats, "pexpire");
    let ticks = renewed as f64 / 10_000.0;
    let lost = held.iter().filter(|g| g.is_lost()).count();
    println!(
        "10,000 held locks, ttl 3 s   {} renewals in {:?} = {:.1} ticks; {} script calls ({:.1} per tick, sent together: 1 round trip per tick = {:.3} per 100 locks); lost {}",
        renewed,
        window,
        ticks,
        scripts,
        scripts as f64 / ticks.max(1.0),
        100.0 / 10_000.0,
        lost
    );
    let _ = rtt;
    for g in held {
        g.release().await.unwrap();
    }
}

/// `INFO commandstats`, for [`calls`].
async fn commandstats(admin: &mut MultiplexedConnection) -> String {
    redis::cmd("INFO")
        .arg("commandstats")
        .query_async(admin)
        .await
        .unwrap()
}

/// How many times Redis ran `cmd` (lower case) since its stats were reset, commands called by
/// scripts included.
fn calls(stats: &str, cmd: &str) -> u64 {
    stats
        .lines()
        .find(|l| l.starts_with(&format!("cmdstat_{cmd}:")))
        .and_then(|l| l.split("calls=").nth(1))
        .and_then(|s| s.split(',').next())
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

/// Script calls (EVALSHA, and EVAL after a NOSCRIPT) Redis ran.
fn script_calls(stats: &str) -> u64 {
    calls(stats, "evalsha") + calls(stats, "eval")
}

/// `n` locks held with a 3 s ttl: renew script calls and renewals counted over 3 leases.
///
/// Two figures, because the watchdog batches: every hold is renewed at a third of its lease, so
/// *renewals per hold per lease* (PEXPIREs run by the renew script, per hold) is ~3 whatever `n`
/// is; the holds due within a twelfth of their lease share one tick, sent as one script call per
/// 500 keys, so *script calls* per lease is ~3 per 500 holds, and per hold it is ~3 for a lone
/// lock but far below 3 for 1,000 (~0.006). The first is the renewal rate the lease relies on,
/// the second what it costs Redis.
async fn renew_rate(url: &str, admin: &mut MultiplexedConnection, n: usize, label: &str) {
    // Its own client, so its watchdog renews these holds and nothing else.
    let client = LockClient::connect(url).await.unwrap();
    let ttl = Duration::from_secs(3);
    let leases = 3;
    let mut held = Vec::with_capacity(n);
    for k in 0..n {
        held.push(
            client
                .lock(format!("bench:renew:{n}:{k}"))
                .ttl(ttl)
                .acquire()
                .await
                .unwrap(),
        );
    }
    // The window opens half a renewal period after the acquires and lasts whole leases, so its
    // edges fall between the watchdog's ticks, and it holds none of our acquires or releases:
    // every script call in it is a renewal (nothing else runs meanwhile).
    tokio::time::sleep(ttl / 6).await;
    let before = commandstats(admin).await;
    let window = ttl * leases;
    tokio::time::sleep(window).await;
    let after = commandstats(admin).await;
    let scripts = script_calls(&after) - script_calls(&before);
    let renewals = calls(&after, "pexpire") - calls(&before, "pexpire");
    let lost = held.iter().filter(|g| g.is_lost()).count();
    for g in held {
        g.release().await.unwrap();
    }
    let per_lease = scripts as f64 / f64::from(leases);
    println!(
        "{label:<29}{scripts} renew script calls in {window:?}: {per_lease:.2} per lease, {:.3} per hold per lease; {renewals} renewals: {:.2} per hold per lease; lost {lost}",
        per_lease / n as f64,
        renewals as f64 / f64::from(leases) / n as f64,
    );
}
