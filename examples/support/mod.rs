//! Shared by the examples: where Redis is, and what one round trip to it costs.

#![allow(dead_code)] // each example uses a different part

pub mod cluster;

use std::time::{Duration, Instant};

use dlock::redis::aio::{ConnectionLike, MultiplexedConnection};
use dlock::redis::cluster_async::ClusterConnection;
use dlock::redis::{Cmd, Pipeline, RedisFuture, Value};
use dlock::testing::RedisServer;

/// A connection for the examples' own keys (stock counters, a shared counter): to the one
/// server, or to a cluster, routing each command to its key's master. One type, so the code
/// that uses it is the same in both modes.
#[derive(Clone)]
pub enum Db {
    Single(MultiplexedConnection),
    Cluster(ClusterConnection),
}

impl ConnectionLike for Db {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Db::Single(c) => c.req_packed_command(cmd),
            Db::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Db::Single(c) => c.req_packed_commands(pipeline, offset, count),
            Db::Cluster(c) => c.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Db::Single(c) => c.get_db(),
            Db::Cluster(c) => c.get_db(),
        }
    }
}

/// `$REDIS_URL`, or a throw-away redis-server started for this run (kept alive by the
/// returned handle, killed when it is dropped).
pub fn redis_url() -> (String, Option<RedisServer>) {
    match std::env::var("REDIS_URL") {
        Ok(url) => (url, None),
        Err(_) => {
            let server = RedisServer::start().unwrap_or_else(|e| {
                eprintln!("REDIS_URL is unset and starting redis-server failed: {e}");
                std::process::exit(2);
            });
            eprintln!(
                "REDIS_URL unset: started a temporary redis-server at {}",
                server.url()
            );
            (server.url(), Some(server))
        }
    }
}

/// Median of `n` sequential PINGs on a multiplexed connection, the unit every figure is
/// divided by (these machines are noisy; ratios travel, absolute times do not).
pub async fn ping_rtt(url: &str, n: usize) -> Duration {
    ping_rtt_after(url, n, Duration::ZERO).await
}

/// Like [`ping_rtt`], but each PING follows `idle` of doing nothing: the right unit for a
/// measurement that itself starts from idle (a handoff, after the waiter parked), since waking
/// parked threads and tasks costs as much as the round trip on a small VM.
pub async fn ping_rtt_after(url: &str, n: usize, idle: Duration) -> Duration {
    let client = dlock::redis::Client::open(url).expect("redis url");
    let mut conn = client
        .get_multiplexed_async_connection()
        .await
        .expect("connect for PING");
    let mut samples = Vec::with_capacity(n);
    for _ in 0..n {
        if !idle.is_zero() {
            tokio::time::sleep(idle).await;
        }
        let t = Instant::now();
        let _: String = dlock::redis::cmd("PING")
            .query_async(&mut conn)
            .await
            .expect("PING");
        samples.push(t.elapsed());
    }
    percentile(&mut samples, 0.5)
}

/// One uncontended `Lock::acquire` + `LockGuard::release`.
pub async fn lock_cycle(lock: dlock::Lock) {
    lock.acquire()
        .await
        .expect("acquire")
        .release()
        .await
        .expect("release");
}

/// The median time of `n` sequential runs of `f` (given the run's number).
pub async fn median_of<F, Fut>(n: usize, mut f: F) -> Duration
where
    F: FnMut(usize) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let mut samples = Vec::with_capacity(n);
    for i in 0..n {
        let t = Instant::now();
        f(i).await;
        samples.push(t.elapsed());
    }
    percentile(&mut samples, 0.5)
}

/// The `p` quantile (0..=1) of the samples (sorts them).
pub fn percentile(samples: &mut [Duration], p: f64) -> Duration {
    samples.sort_unstable();
    if samples.is_empty() {
        return Duration::ZERO;
    }
    let i = ((samples.len() - 1) as f64 * p).round() as usize;
    samples[i]
}

/// `12.3 µs (1.85 RTT)`.
pub fn fmt_rtt(d: Duration, rtt: Duration) -> String {
    format!(
        "{:>9.1?} ({:>6.2} RTT)",
        d,
        d.as_secs_f64() / rtt.as_secs_f64()
    )
}
