//! Where the uncontended acquire+release cycle's time goes, each figure as a ratio to a PING
//! round trip of the same run.
//!
//! `cargo run --release --example cycle` (starts its own redis-server unless REDIS_URL is set).
//!
//! Rows, from the floor up:
//! * two EVALSHA of a script that does nothing: what any two-script cycle costs at least;
//! * a minimal lock's scripts (EXISTS + HSET + PEXPIRE, then HGET + DEL + PUBLISH), without
//!   fencing tokens or a retry latch;
//! * dlock's own acquire.lua and release.lua sent on a plain connection;
//! * `Lock::acquire` + `LockGuard::release` (the scripts plus the client's bookkeeping), with
//!   the scripts called as functions of dlock's library (FCALL, the default on Redis 7+) and
//!   from the script cache (EVALSHA, `functions(false)`).
//!
//! * the attribute's call, one after another on fresh keys: its floor (dlock's acquire.lua with
//!   the previous call's release.lua pipelined ahead of it: one round trip, both scripts' Redis
//!   time) and `#[distributed_lock]` itself, which returns once its release is written.
//!
//! Redis's own time per call is printed from INFO commandstats.

#[path = "support/mod.rs"]
mod support;

use std::future::Future;
use std::time::Duration;

use dlock::redis::{self, aio::MultiplexedConnection, Script};
use dlock::{distributed_lock, LockClient, LockError};
use support::{lock_cycle, median_of, ping_rtt, redis_url};

const ACQUIRE: &str = include_str!("../dlock-runtime/lua/lock/acquire.lua");
const RELEASE: &str = include_str!("../dlock-runtime/lua/lock/release.lua");

/// A lock with nothing but an owner and an expiry.
const MINIMAL_ACQUIRE: &str = "if redis.call('EXISTS', KEYS[1]) == 0 then \
     redis.call('HSET', KEYS[1], ARGV[1], 1) redis.call('PEXPIRE', KEYS[1], ARGV[2]) \
     return 1 end return 0";
const MINIMAL_RELEASE: &str = "if redis.call('HGET', KEYS[1], ARGV[1]) then \
     redis.call('DEL', KEYS[1]) redis.call('PUBLISH', KEYS[2], 'released') return 0 end \
     return -1";

const SAMPLES: usize = 3000;

/// Median time of `SAMPLES` sequential runs of `f` (given the run's number).
async fn median<F, Fut>(f: F) -> Duration
where
    F: FnMut(usize) -> Fut,
    Fut: Future<Output = ()>,
{
    median_of(SAMPLES, f).await
}

/// Microseconds Redis spent per script call (EVALSHA or FCALL) since the last reset, and resets
/// the counters.
async fn script_usec(admin: &mut MultiplexedConnection) -> f64 {
    let stats: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(admin)
        .await
        .expect("INFO");
    let _: () = redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query_async(admin)
        .await
        .expect("CONFIG RESETSTAT");
    stats
        .lines()
        .find(|l| l.starts_with("cmdstat_evalsha:") || l.starts_with("cmdstat_fcall:"))
        .and_then(|l| {
            l.split("usec_per_call=")
                .nth(1)?
                .split(',')
                .next()?
                .parse()
                .ok()
        })
        .unwrap_or(0.0)
}

#[distributed_lock(key = "cycle:call:{round}:{i}", client = locks)]
async fn attributed(locks: &LockClient, round: usize, i: usize) -> Result<(), LockError> {
    Ok(())
}

/// dlock's acquire.lua for owner `i` of a fresh key, with the release of the previous call's
/// lock (owner `i - 1`) pipelined ahead of it: what a call whose release is written costs at
/// least, run back to back.
async fn call_floor(
    c: &mut MultiplexedConnection,
    acquire: &Script,
    release: &Script,
    round: usize,
    i: usize,
) {
    let key = |i: usize| format!("cycle:floor:{round}:{i}");
    let owner = |i: usize| format!("o:{round}:{i}");
    let mut pipe = redis::pipe();
    if i > 0 {
        let prev = i - 1;
        pipe.cmd("EVALSHA")
            .arg(release.get_hash())
            .arg(4)
            .arg(key(prev))
            .arg(format!("{}:chan", key(prev)))
            .arg(format!("{}:latch", key(prev)))
            .arg(format!("{}:latch:done:{}", key(prev), owner(prev)))
            .arg(owner(prev))
            .arg(30_000)
            .arg(5_000)
            .ignore();
    }
    pipe.cmd("EVALSHA")
        .arg(acquire.get_hash())
        .arg(3)
        .arg(key(i))
        .arg(dlock::inspect::fence_counter("cycle:", &key(i)))
        .arg(format!("{}:latch:done:{}", key(i), owner(i)))
        .arg(30_000)
        .arg(owner(i))
        .arg(600_000);
    let ((count, _token),): ((i64, i64),) = pipe.query_async(c).await.expect("floor");
    assert_eq!(count, 1);
}

#[tokio::main]
async fn main() {
    let (url, _server) = redis_url();
    let client = redis::Client::open(url.as_str()).expect("redis url");
    let conn = client
        .get_multiplexed_async_connection()
        .await
        .expect("connect");
    let mut admin = client
        .get_multiplexed_async_connection()
        .await
        .expect("connect");
    let locks = LockClient::builder(url.as_str())
        .build()
        .await
        .expect("connect");
    let lock = locks.lock("cycle:lock");
    let cached = LockClient::builder(url.as_str())
        .functions(false)
        .build()
        .await
        .expect("connect");
    let cached_lock = cached.lock("cycle:cached");
    let (nop, acquire, release) = (
        Script::new("return 1"),
        Script::new(ACQUIRE),
        Script::new(RELEASE),
    );
    let (min_acquire, min_release) = (Script::new(MINIMAL_ACQUIRE), Script::new(MINIMAL_RELEASE));
    for round in 0..5 {
        let rtt = ping_rtt(&url, 2000).await;
        let row = |label: &str, d: Duration, usec: f64| {
            println!(
                "  {label:<44} {:>8.1?} ({:.2} RTT), Redis {usec:.1} µs per script",
                d,
                d.as_secs_f64() / rtt.as_secs_f64()
            );
        };
        println!("round {round}: PING RTT {rtt:?}");
        script_usec(&mut admin).await;
        let d = median(|_| {
            let (mut c, s) = (conn.clone(), nop.clone());
            async move {
                for _ in 0..2 {
                    let _: i64 = s.key("a").arg(1).invoke_async(&mut c).await.expect("nop");
                }
            }
        })
        .await;
        row("two no-op scripts", d, script_usec(&mut admin).await);
        let d = median(|i| {
            let (mut c, a, r) = (conn.clone(), min_acquire.clone(), min_release.clone());
            async move {
                let owner = format!("o:{round}:{i}");
                let got: i64 = a
                    .key("cycle:min")
                    .arg(&owner)
                    .arg(30_000)
                    .invoke_async(&mut c)
                    .await
                    .expect("acquire");
                assert_eq!(got, 1);
                let left: i64 = r
                    .key("cycle:min")
                    .key("cycle:min:chan")
                    .arg(&owner)
                    .invoke_async(&mut c)
                    .await
                    .expect("release");
                assert_eq!(left, 0);
            }
        })
        .await;
        row("minimal lock scripts", d, script_usec(&mut admin).await);
        let d = median(|i| {
            let (mut c, a, r) = (conn.clone(), acquire.clone(), release.clone());
            async move {
                let owner = format!("o:{round}:{i}");
                let (count, _token): (i64, i64) = a
                    .key("cycle:raw")
                    .key(dlock::inspect::fence_counter("cycle:", "cycle:raw"))
                    .key(format!("cycle:raw:latch:done:{owner}"))
                    .arg(30_000)
                    .arg(&owner)
                    .arg(600_000)
                    .invoke_async(&mut c)
                    .await
                    .expect("acquire.lua");
                assert_eq!(count, 1);
                let freed: redis::Value = r
                    .key("cycle:raw")
                    .key("cycle:raw:chan")
                    .key(format!("cycle:raw:latch:{owner}"))
                    .key(format!("cycle:raw:latch:done:{owner}"))
                    .arg(&owner)
                    .arg(30_000)
                    .arg(5_000)
                    .invoke_async(&mut c)
                    .await
                    .expect("release.lua");
                // `{0, listeners}` when it freed the lock; a bare -1 would mean it did not.
                assert!(matches!(freed, redis::Value::Array(_)), "{freed:?}");
            }
        })
        .await;
        row(
            "dlock's scripts on a plain connection",
            d,
            script_usec(&mut admin).await,
        );
        let d = median(|_| lock_cycle(lock.clone())).await;
        row(
            "Lock::acquire + LockGuard::release (FCALL)",
            d,
            script_usec(&mut admin).await,
        );
        let d = median(|_| lock_cycle(cached_lock.clone())).await;
        row(
            "the same with EVALSHA (functions(false))",
            d,
            script_usec(&mut admin).await,
        );
        // Loads both scripts (EVALSHA in a pipeline does not fall back to EVAL).
        let _: () = redis::cmd("SCRIPT")
            .arg("LOAD")
            .arg(ACQUIRE)
            .query_async(&mut admin)
            .await
            .expect("SCRIPT LOAD");
        let _: () = redis::cmd("SCRIPT")
            .arg("LOAD")
            .arg(RELEASE)
            .query_async(&mut admin)
            .await
            .expect("SCRIPT LOAD");
        script_usec(&mut admin).await;
        let d = median(|i| {
            let (mut c, a, r) = (conn.clone(), acquire.clone(), release.clone());
            async move { call_floor(&mut c, &a, &r, round, i).await }
        })
        .await;
        row(
            "call floor: acquire, previous release ahead",
            d,
            script_usec(&mut admin).await,
        );
        let d = median(|i| {
            let locks = locks.clone();
            async move { attributed(&locks, round, i).await.expect("call") }
        })
        .await;
        row(
            "#[distributed_lock] call, fresh key",
            d,
            script_usec(&mut admin).await,
        );
    }
}
