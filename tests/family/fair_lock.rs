//! The fair lock on Redis: what its scripts do with the key's expiry. The behaviours every
//! store gives (first come, first served across clients and processes, the handoff and its
//! message, a dead waiter skipped, a waiter that gives up leaving the queue, re-entry) are in
//! `tests/stores/fair.rs`, one body run on Redis and PostgreSQL.

use crate::common;

use std::time::Duration;

use tokio::time::Instant;

const QUEUE: &str = "dlock:{line}:fair:queue";
const LOCK: &str = "dlock:{line}:fair";

async fn queue_len(raw: &mut dlock::redis::aio::MultiplexedConnection) -> usize {
    dlock::redis::cmd("ZCARD")
        .arg(QUEUE)
        .query_async(raw)
        .await
        .unwrap()
}

/// Scripts the server has run so far, whichever way they were called.
async fn scripts_run(raw: &mut dlock::redis::aio::MultiplexedConnection) -> u64 {
    let calls = common::command_calls(raw).await;
    ["fcall", "evalsha", "eval"]
        .iter()
        .filter_map(|c| calls.get(*c))
        .sum()
}

async fn pttl_ms(raw: &mut dlock::redis::aio::MultiplexedConnection) -> i64 {
    dlock::redis::cmd("PTTL")
        .arg(LOCK)
        .query_async(raw)
        .await
        .unwrap()
}

/// A holder told of its grant by the release's message holds a key whose expiry is the grant's
/// life (2 s), not its lease, until its first renewal: that renewal comes at a third of the
/// grant's life, by half of it at the latest, not at once (at once, it woke the watchdog's
/// thread in the middle of every handoff), and the hold outlives the grant's 2 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_heard_as_a_message_is_renewed_to_the_lease_within_its_life() {
    let server = common::server();
    let holder = common::client(&server).await;
    let waiter = common::client(&server).await;
    let mut raw = common::raw(&server.url()).await;
    let held = holder.fair_lock("line").acquire().await.unwrap();
    let waiting = tokio::spawn({
        let lock = waiter
            .fair_lock("line")
            .ttl(Duration::from_secs(30))
            .wait(Duration::from_secs(10));
        async move { lock.acquire().await.map(|g| (Instant::now(), g)) }
    });
    common::eventually(Duration::from_secs(5), "queued", || {
        let mut raw = raw.clone();
        async move { queue_len(&mut raw).await == 1 }
    })
    .await;
    // Parked: its attempt after subscribing ran too (any later one is a keep-alive, also
    // made while subscribed), so the release's grant reaches it as a message, not as the
    // reply to an attempt, which would set the lease itself.
    let before = scripts_run(&mut raw).await;
    common::eventually(
        Duration::from_secs(5),
        "the retry after subscribing",
        || {
            let mut raw = raw.clone();
            async move { scripts_run(&mut raw).await > before }
        },
    )
    .await;
    held.release().await.unwrap();
    let (granted, guard) = waiting.await.unwrap().unwrap();
    let at_grant = pttl_ms(&mut raw).await;
    assert!(
        (1..=2_000).contains(&at_grant),
        "held from the grant's message, whose life is 2 s: PTTL {at_grant} ms"
    );
    common::eventually(Duration::from_secs(3), "renewed to the 30 s lease", || {
        let mut raw = raw.clone();
        async move { pttl_ms(&mut raw).await > 2_000 }
    })
    .await;
    // Seen within a poll of the renewal, which is due 667 ms and at the latest 1 s after the
    // waiter's last request (sent just before the grant).
    let seen = Instant::now() - granted;
    assert!(
        seen >= Duration::from_millis(450) && seen <= Duration::from_millis(1_500),
        "first renewal seen {seen:?} after the grant: not between a third and a half of its 2 s"
    );
    // Past the grant's own life: still this holder's, and nobody else's.
    tokio::time::sleep_until(granted + Duration::from_millis(2_500)).await;
    assert!(!guard.is_lost());
    assert!(holder
        .fair_lock("line")
        .try_acquire()
        .await
        .unwrap()
        .is_none());
    assert!(pttl_ms(&mut raw).await > 25_000);
    guard.release().await.unwrap();
}
