//! The pause after a run of local handoffs ended by a bound: taken only when another client
//! was listening for the release. Its own test binary: it reads the client's debug log, and
//! tracing caches whether a log line is enabled per call site, from whichever thread reaches it
//! first (tokio-rs/tracing#3611); other tests' threads without a subscriber must not get there
//! first.

#[path = "../common/mod.rs"]
mod common;

use std::future::Future;
use std::time::Duration;

use common::logs::Logs;
use common::queued;
use dlock::{LockClient, LockGuard};

/// Tokens a Redis acquire leaves room for (see `LockGuard::fencing_token`).
const LOCAL_TOKENS: u64 = 1024;

/// What the client logs when the next local contender pauses for another process.
const PAUSE: &str = "letting another process go first";

/// Debug lines logged on this thread from now until the returned guard is dropped.
fn capture_logs() -> (Logs, tracing::subscriber::DefaultGuard) {
    let logs = Logs::default();
    let guard = tracing::subscriber::set_default(logs.subscriber(tracing::Level::DEBUG));
    (logs, guard)
}

fn pauses(logs: &Logs) -> usize {
    logs.text().matches(PAUSE).count()
}

/// A run of handoffs ended by the limit (1 here): the holder hands to `second`, whose release
/// goes to Redis after `before_the_end` ran; returns the next local contender's guard (it
/// contends in Redis) and what `before_the_end` returned.
async fn run_to_the_limit<T>(
    lock: &dlock::Lock,
    before_the_end: impl Future<Output = T>,
) -> (LockGuard, T) {
    let first = lock.acquire().await.unwrap();
    let mut second = queued(lock).await;
    let mut third = queued(lock).await;
    first.release().await.unwrap();
    let second = second.as_mut().await.unwrap();
    assert_eq!(second.fencing_token() % LOCAL_TOKENS, 1, "not handed over");
    let before = before_the_end.await;
    second.release().await.unwrap();
    (third.as_mut().await.unwrap(), before)
}

// Current-thread runtime: the log capture is per thread, and the contender runs on this one.
#[tokio::test]
async fn a_run_ended_with_nobody_else_listening_goes_on_without_a_pause() {
    let server = common::server();
    let busy = LockClient::builder(server.url())
        .local_handoffs(1)
        .local_handoff_window(Duration::from_secs(60))
        .build()
        .await
        .expect("connect");
    let lock = busy.lock("handoff:alone").wait(Duration::from_secs(30));
    let (logs, _capture) = capture_logs();
    let (third, ()) = run_to_the_limit(&lock, async {}).await;
    assert_eq!(
        third.fencing_token() % LOCAL_TOKENS,
        0,
        "the run did not end in Redis"
    );
    assert_eq!(pauses(&logs), 0, "paused although nobody else was waiting");
    third.release().await.unwrap();

    // The same run with another client waiting (subscribed) when it ends: the next local
    // contender pauses so that client can go first.
    let other = common::client(&server).await;
    let waiter = other.lock("handoff:alone").wait(Duration::from_secs(30));
    // Yields the waiter's task handle, awaited once the run has ended.
    #[allow(clippy::async_yields_async)]
    let subscribed = async {
        let waiting = tokio::spawn(async move { waiter.acquire().await?.release().await });
        common::eventually(
            Duration::from_secs(5),
            "the other client subscribed",
            || {
                let url = server.url();
                let channel = lock.channel().to_owned();
                async move {
                    let n: Vec<(String, i64)> = dlock::redis::cmd("PUBSUB")
                        .arg("NUMSUB")
                        .arg(&channel)
                        .query_async(&mut common::raw(&url).await)
                        .await
                        .unwrap();
                    n[0].1 > 0
                }
            },
        )
        .await;
        waiting
    };
    let (third, waiting) = run_to_the_limit(&lock, subscribed).await;
    assert_eq!(pauses(&logs), 1, "no pause for the waiting client");
    third.release().await.unwrap();
    waiting
        .await
        .unwrap()
        .expect("the other client got its turn");
}

/// A release that goes to Redis because the next local task asked with another lease (so it
/// cannot be handed the hold, issue 17 item 6) lets a waiting process ask first, as the end of
/// a run of handoffs does: otherwise a process whose call sites use two ttls would hand the
/// lock back and forth between its own tasks through Redis, ahead of everyone else.
#[tokio::test]
async fn a_local_task_with_another_lease_lets_a_waiting_process_go_first() {
    let server = common::server();
    let busy = LockClient::builder(server.url())
        .local_handoff_window(Duration::from_secs(60))
        .build()
        .await
        .expect("connect");
    let long = busy
        .lock("handoff:mixed")
        .ttl(Duration::from_secs(30))
        .wait(Duration::from_secs(30));
    let short = busy
        .lock("handoff:mixed")
        .ttl(Duration::from_secs(10))
        .wait(Duration::from_secs(30));
    let (logs, _capture) = capture_logs();
    let first = long.acquire().await.unwrap();
    let other = common::client(&server).await;
    let waiter = other.lock("handoff:mixed").wait(Duration::from_secs(30));
    let waiting = tokio::spawn(async move { waiter.acquire().await?.release().await });
    common::eventually(
        Duration::from_secs(5),
        "the other client subscribed",
        || {
            let url = server.url();
            let channel = long.channel().to_owned();
            async move {
                let n: Vec<(String, i64)> = dlock::redis::cmd("PUBSUB")
                    .arg("NUMSUB")
                    .arg(&channel)
                    .query_async(&mut common::raw(&url).await)
                    .await
                    .unwrap();
                n[0].1 > 0
            }
        },
    )
    .await;
    let mut next = queued(&short).await;
    first.release().await.unwrap();
    let next = next.as_mut().await.unwrap();
    assert_eq!(
        next.fencing_token() % LOCAL_TOKENS,
        0,
        "handed over across leases"
    );
    assert_eq!(pauses(&logs), 1, "no pause for the waiting client");
    next.release().await.unwrap();
    waiting
        .await
        .unwrap()
        .expect("the other client got its turn");
}
