//! An acquire granted in Redis whose reply was lost with the server (SIGKILL, restart from the
//! AOF): its caller adopts or undoes the grant instead of waiting for it.

use std::collections::BTreeSet;
use std::future::Future;
use std::time::{Duration, Instant};

use super::{bounded, script_calls};
use crate::common;
use common::proxy::Proxy;
use dlock::redis::aio::MultiplexedConnection;
use dlock::testing::{Persistence, RedisServer};
use dlock::LockClient;

/// The lease of the waiter's grant that is orphaned: its reply never arrives.
const ORPHAN_TTL: Duration = Duration::from_secs(10);
/// How long Redis stays down: longer than the orphan clean-up kept trying before issue 28
/// (one retry after 100 ms).
const DOWN_FOR: Duration = Duration::from_millis(1500);
/// "A few seconds" after the restart: the waiter must hold by then.
const RECOVERED_WITHIN: Duration = Duration::from_secs(4);

/// What a test observed of the orphaned grant.
struct Orphaned {
    /// When the grant was first seen in Redis (it was made no later).
    granted_seen: Instant,
    restarted: Instant,
}

/// Brings a waiter (its client behind `proxy`, command connection #0, already parked: its last
/// refusal delivered) to the point where its retry is granted in Redis with the reply held by
/// the proxy; then SIGKILLs Redis, cuts every proxied connection, and restarts Redis from its
/// AOF `DOWN_FOR` later.
///
/// `granted` says, from the set of members/fields of the lock's key, whether a new owner (the
/// waiter) holds. The holder's hard lease ending is what makes the waiter retry.
async fn orphan_the_waiters_grant<F, Fut>(
    server: &mut RedisServer,
    proxy: &Proxy,
    granted: F,
) -> Orphaned
where
    F: Fn() -> Fut,
    Fut: Future<Output = bool>,
{
    proxy.hold_replies(0);
    common::eventually(
        Duration::from_secs(10),
        "the waiter's retry granted",
        &granted,
    )
    .await;
    let granted_seen = Instant::now();
    // Its reply (sent after the AOF was fsynced) sits in the proxy.
    common::eventually(Duration::from_secs(5), "the grant's reply held", || {
        let held = proxy.held_bytes(0);
        async move { held > 0 }
    })
    .await;
    server.kill();
    proxy.kill_all();
    // Time is the subject: Redis down for this long.
    tokio::time::sleep(DOWN_FOR).await;
    server.restart().expect("restart from the AOF");
    let restarted = Instant::now();
    println!(
        "grant seen, Redis killed; restarted {:?} later",
        restarted - granted_seen
    );
    Orphaned {
        granted_seen,
        restarted,
    }
}

/// Waits until the waiter behind `proxy` is parked: its two attempts (before and after it
/// subscribed) ran in Redis at least `SETTLE` ago and nothing is held in the proxy, so their
/// replies were delivered (the proxy forwards a reply within microseconds of Redis sending
/// it). Panics if it sent more.
pub(super) async fn until_parked(admin: &MultiplexedConnection, proxy: &Proxy, base: u64) {
    const SETTLE: Duration = Duration::from_millis(20);
    let mut admin = admin.clone();
    let start = Instant::now();
    let mut second_seen = None::<Instant>;
    loop {
        let calls = script_calls(&mut admin).await - base;
        assert!(calls <= 2, "the waiter sent {calls} attempts, not 2");
        if calls == 2 {
            let seen = *second_seen.get_or_insert_with(Instant::now);
            if seen.elapsed() >= SETTLE && proxy.held_bytes(0) == 0 {
                return;
            }
        }
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "the waiter did not park within 5 s ({calls} attempts)"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// The waiter's outcome against the orphaned grant's lease: it must hold within a few seconds
/// of the restart, well before that lease could end.
fn assert_recovered_soon(what: &str, orphan: &Orphaned, acquired: Instant) {
    let orphan_end = orphan.granted_seen + ORPHAN_TTL;
    let after_restart = acquired.saturating_duration_since(orphan.restarted);
    println!(
        "{what}: acquired {after_restart:?} after the restart ({:?} after the orphaned grant; \
         its lease ends {:?} after it)",
        acquired - orphan.granted_seen,
        ORPHAN_TTL
    );
    assert!(
        after_restart < RECOVERED_WITHIN && acquired + Duration::from_secs(3) < orphan_end,
        "{what}: the waiter got it {after_restart:?} after the restart, {:?} after its own \
         orphaned grant (lease {ORPHAN_TTL:?}): it waited behind the grant it never heard of",
        acquired - orphan.granted_seen
    );
}

/// A waiter whose retry was granted while its reply was lost (Redis SIGKILLed, restarted from
/// its AOF) gets the lock within a few seconds of the restart, not when that orphaned grant's
/// lease ends; then the lock hash has exactly one owner.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_is_not_kept_waiting_by_its_own_orphaned_grant() {
    let mut server = RedisServer::start_persistent(Persistence::Aof).unwrap();
    let proxy = Proxy::start(server.port());
    let admin = common::raw(&server.url()).await;
    let holder = common::client(&server).await;
    let waiting = LockClient::connect(&proxy.url()).await.unwrap();
    let lock = holder.lock("orphan:lock");
    let key = lock.key().to_owned();
    let held = lock
        .clone()
        .lease(Duration::from_secs(2))
        .acquire()
        .await
        .unwrap();
    let fields = |admin: &MultiplexedConnection| {
        let (mut admin, key) = (admin.clone(), key.clone());
        async move {
            let f: BTreeSet<String> = dlock::redis::cmd("HKEYS")
                .arg(&key)
                .query_async(&mut admin)
                .await
                .unwrap_or_default();
            f
        }
    };
    let holder_fields = fields(&admin).await;
    let base = script_calls(&mut admin.clone()).await;

    let waiter_lock = waiting
        .lock("orphan:lock")
        .ttl(ORPHAN_TTL)
        .wait(Duration::from_secs(40));
    let waiter = tokio::spawn(async move {
        let r = waiter_lock.acquire().await;
        (r, Instant::now())
    });
    until_parked(&admin, &proxy, base).await;

    let orphan = orphan_the_waiters_grant(&mut server, &proxy, || {
        let (fields, holder_fields) = (fields(&admin), holder_fields.clone());
        async move { fields.await.iter().any(|f| !holder_fields.contains(f)) }
    })
    .await;

    let admin = common::raw(&server.url()).await;
    let (outcome, acquired) = bounded("waiter", waiter).await.expect("waiter panicked");
    let guard = outcome.expect("the waiter gets the lock within its 40 s wait");
    let now_fields = fields(&admin).await;
    assert_recovered_soon("lock", &orphan, acquired);
    assert_eq!(
        now_fields.len(),
        1,
        "the lock hash once the waiter holds: {now_fields:?}"
    );
    guard.release().await.unwrap();
    drop(held);
}

/// Permits whose deadline is ahead, by the server's clock.
async fn live_permits(conn: &mut MultiplexedConnection, key: &str) -> i64 {
    dlock::redis::cmd("EVAL")
        .arg(
            "local t = redis.call('TIME') \
             local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) \
             return redis.call('ZCOUNT', KEYS[1], '(' .. now, '+inf')",
        )
        .arg(1)
        .arg(key)
        .query_async(conn)
        .await
        .unwrap()
}

/// The semaphore version, 2 permits: one held for the whole test, one with a 2 s lease whose
/// end lets the waiter in. After the restart the waiter holds within a few seconds, and the
/// permits alive in Redis never exceed 2 (its orphaned permit and a new one never coexist).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_semaphore_waiter_is_not_kept_waiting_by_its_own_orphaned_permit() {
    const PERMITS: u32 = 2;
    let mut server = RedisServer::start_persistent(Persistence::Aof).unwrap();
    let proxy = Proxy::start(server.port());
    let admin = common::raw(&server.url()).await;
    let holders = common::client(&server).await;
    let waiting = LockClient::connect(&proxy.url()).await.unwrap();
    let key = format!("{}{{orphan:sem}}:sem", dlock::DEFAULT_PREFIX);
    let sem = holders.semaphore("orphan:sem", PERMITS);
    let long = sem
        .clone()
        .lease(Duration::from_secs(60))
        .acquire()
        .await
        .unwrap();
    let short = sem
        .clone()
        .lease(Duration::from_secs(2))
        .acquire()
        .await
        .unwrap();
    let members = |admin: &MultiplexedConnection| {
        let (mut admin, key) = (admin.clone(), key.clone());
        async move {
            let m: BTreeSet<String> = dlock::redis::cmd("ZRANGE")
                .arg(&key)
                .arg(0)
                .arg(-1)
                .query_async(&mut admin)
                .await
                .unwrap_or_default();
            m
        }
    };
    let holder_members = members(&admin).await;
    assert_eq!(holder_members.len(), 2, "{holder_members:?}");
    let base = script_calls(&mut admin.clone()).await;

    let waiter_sem = waiting
        .semaphore("orphan:sem", PERMITS)
        .ttl(ORPHAN_TTL)
        .wait(Duration::from_secs(40));
    let waiter = tokio::spawn(async move {
        let r = waiter_sem.acquire().await;
        (r, Instant::now())
    });
    until_parked(&admin, &proxy, base).await;

    let orphan = orphan_the_waiters_grant(&mut server, &proxy, || {
        let (members, holder_members) = (members(&admin), holder_members.clone());
        async move { members.await.iter().any(|m| !holder_members.contains(m)) }
    })
    .await;

    // From the restart on, sample the live permits until the waiter holds.
    let mut conn = common::raw(&server.url()).await;
    let mut most = 0;
    let mut samples = 0u32;
    let (outcome, acquired) = {
        let waiting_for = bounded("waiter", async {
            let mut waiter = waiter;
            loop {
                tokio::select! {
                    r = &mut waiter => break r.expect("waiter panicked"),
                    () = tokio::time::sleep(Duration::from_millis(5)) => {
                        most = most.max(live_permits(&mut conn, &key).await);
                        samples += 1;
                    }
                }
            }
        });
        waiting_for.await
    };
    let permit = outcome.expect("the waiter gets a permit within its 40 s wait");
    let now_live = live_permits(&mut conn, &key).await;
    let now_members = members(&conn).await;
    println!(
        "permits alive: at most {most} in {samples} samples while the waiter waited; \
         {now_live} once it holds ({now_members:?})"
    );
    assert!(
        most <= i64::from(PERMITS) && now_live <= i64::from(PERMITS),
        "more than {PERMITS} permits alive: {most} while waiting, {now_live} once the waiter \
         holds ({now_members:?})"
    );
    assert_recovered_soon("semaphore", &orphan, acquired);
    permit.release().await.unwrap();
    drop((long, short));
}

// ---- replica-synced acquires after the same client's written release -----------------------
