//! Transient Redis states a caller must not see (issue 28): a restart that stays LOADING for
//! seconds, an acquire granted in Redis whose reply was lost with the server, and a
//! replica-synced acquire racing the same client's written release.
//!
//! * A waiter whose retry meets LOADING waits on and gets the lock within its wait.
//! * A release (dropped guard, `release_written`, `release`) that meets LOADING still frees
//!   the lock once the load ends, not at the end of its lease.
//! * A waiter whose retry was granted in Redis while its reply was lost (SIGKILL, restart from
//!   the AOF) is not kept waiting by that orphaned grant until the grant's lease ends; a
//!   semaphore never shows more than its permits meanwhile.
//! * With `synced_replicas`, the same client sees a lock free right after `release_written`
//!   (what `#[distributed_lock]` does), so a skipping job is never skipped by its own release.
//!
//! The slow load is Redis's own `key-load-delay` (µs slept per key loaded) over filler keys,
//! with `loading-process-events-interval-bytes` at its minimum so the server answers (LOADING)
//! while it loads. Every such test asserts it saw `loading:1` in `INFO persistence`.

mod down;
mod loading;
mod orphaned_grant;
mod synced_release;

use std::future::Future;
use std::time::Duration;

use dlock::redis::aio::MultiplexedConnection;

use crate::common;

/// Every call in these tests must come back within this, error or not.
pub(crate) const NO_HANG: Duration = Duration::from_secs(20);

pub(crate) async fn bounded<T>(what: &str, fut: impl Future<Output = T>) -> T {
    tokio::time::timeout(NO_HANG, fut)
        .await
        .unwrap_or_else(|_| panic!("{what} hung for {NO_HANG:?}"))
}

/// Script calls (FCALL, EVALSHA, EVAL) the server counted, refused ones included: while it
/// loads, every one of them was refused with LOADING.
pub(crate) async fn script_calls(conn: &mut MultiplexedConnection) -> u64 {
    let stats: String = match dlock::redis::cmd("INFO")
        .arg("commandstats")
        .query_async(conn)
        .await
    {
        Ok(s) => s,
        Err(_) => return 0,
    };
    stats
        .lines()
        .filter_map(|l| l.strip_prefix("cmdstat_")?.split_once(':'))
        .filter(|(cmd, _)| cmd.starts_with("fcall") || cmd.starts_with("eval"))
        .flat_map(|(_, fields)| fields.split(','))
        .filter_map(|f| f.split_once('='))
        .filter(|(k, _)| matches!(*k, "calls" | "rejected_calls"))
        .filter_map(|(_, v)| v.parse::<u64>().ok())
        .sum()
}

/// Waits until at least `n` connections subscribe to `channel`.
pub(crate) async fn until_subscribers(conn: &MultiplexedConnection, channel: &str, n: i64) {
    common::eventually(Duration::from_secs(5), "subscribers", || {
        let mut conn = conn.clone();
        async move {
            let (_, subs): (String, i64) = dlock::redis::cmd("PUBSUB")
                .arg("NUMSUB")
                .arg(channel)
                .query_async(&mut conn)
                .await
                .unwrap();
            subs >= n
        }
    })
    .await;
}
