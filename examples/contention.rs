//! Workers in two clients (think: two machines) increment a plain Redis counter with a
//! non-atomic GET then SET, inside one lock. Without the lock updates get lost; with it the
//! final count is exact. Also prints how fast the lock changes hands.
//!
//! `cargo run --release --example contention` (starts its own redis-server unless REDIS_URL
//! is set).

#[path = "support/mod.rs"]
mod support;

use std::time::{Duration, Instant};

use dlock::redis;
use dlock::LockClient;
use support::{fmt_rtt, percentile, ping_rtt, redis_url};

const CLIENTS: usize = 2;
const TASKS_PER_CLIENT: usize = 8;
const ITERATIONS: u64 = 250;

#[tokio::main]
async fn main() {
    let (url, _server) = redis_url();
    let rtt = ping_rtt(&url, 1000).await;
    let mut admin = redis::Client::open(url.as_str())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .expect("connect");
    let _: () = redis::cmd("SET")
        .arg("demo:counter")
        .arg(0)
        .query_async(&mut admin)
        .await
        .unwrap();

    let start = Instant::now();
    let mut workers = Vec::new();
    for _ in 0..CLIENTS {
        let client = LockClient::connect(&url).await.expect("connect");
        for _ in 0..TASKS_PER_CLIENT {
            workers.push(tokio::spawn(worker(client.clone(), url.clone())));
        }
    }
    let mut hold_to_hold = Vec::new();
    for w in workers {
        hold_to_hold.extend(w.await.expect("worker panicked"));
    }
    let elapsed = start.elapsed();
    let count: u64 = redis::cmd("GET")
        .arg("demo:counter")
        .query_async(&mut admin)
        .await
        .unwrap();
    let expected = (CLIENTS * TASKS_PER_CLIENT) as u64 * ITERATIONS;
    println!("final count   {count}");
    println!("expected      {expected}");
    println!("lost updates  {}", expected - count);
    println!(
        "{} locked increments in {:?} ({:.0}/s); PING RTT {:?}",
        expected,
        elapsed,
        expected as f64 / elapsed.as_secs_f64(),
        rtt
    );
    // Saturated: the lock is always wanted, so this is one increment (acquire, GET, SET,
    // release: 4 round trips of work) plus one handoff to the next holder.
    println!(
        "one locked increment + handoff, saturated: {}",
        fmt_rtt(elapsed / expected as u32, rtt)
    );
    println!(
        "one worker's wait+increment (queued behind {} others): p50 {}  p99 {}",
        CLIENTS * TASKS_PER_CLIENT - 1,
        fmt_rtt(percentile(&mut hold_to_hold, 0.5), rtt),
        fmt_rtt(percentile(&mut hold_to_hold, 0.99), rtt)
    );
    if count != expected {
        std::process::exit(1);
    }
}

/// Returns the time each locked increment took end to end.
async fn worker(client: LockClient, url: String) -> Vec<Duration> {
    let mut conn = redis::Client::open(url.as_str())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let lock = client
        .lock("demo:counter-lock")
        .wait(Duration::from_secs(60));
    let mut took = Vec::with_capacity(ITERATIONS as usize);
    for _ in 0..ITERATIONS {
        let t = Instant::now();
        let guard = lock.acquire().await.expect("acquire");
        let n: u64 = redis::cmd("GET")
            .arg("demo:counter")
            .query_async(&mut conn)
            .await
            .unwrap();
        let _: () = redis::cmd("SET")
            .arg("demo:counter")
            .arg(n + 1)
            .query_async(&mut conn)
            .await
            .unwrap();
        guard.release().await.expect("release");
        took.push(t.elapsed());
    }
    took
}
