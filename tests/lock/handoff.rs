//! Local handoff: a hold released while another task of the same client waits for the key goes
//! to that task without Redis, bounded so other clients (processes) get their turn. Every path
//! of a handoff: the plain case, a cancelled and a panicking receiver, a hold lost on its way,
//! re-entry inside a handed hold, renewals across handoffs, and both bounds.

use crate::common;

use std::task::Poll;
use std::time::{Duration, Instant};

use dlock::redis::aio::MultiplexedConnection;
use dlock::{LockClient, LockError, LockGuard};

use common::proxy::Proxy;
use common::{queued, Acquiring};

/// Tokens a Redis acquire leaves room for (see `LockGuard::fencing_token`).
const LOCAL_TOKENS: u64 = 1024;

async fn client_with(
    server: &dlock::testing::RedisServer,
    handoffs: u32,
    window: Duration,
) -> LockClient {
    LockClient::builder(server.url())
        .local_handoffs(handoffs)
        .local_handoff_window(window)
        .build()
        .await
        .expect("connect")
}

/// A client whose handoffs are bounded by count only (default 32): a slow test machine must
/// not end a run of handoffs by the 10 ms default window.
async fn patient(server: &dlock::testing::RedisServer) -> LockClient {
    client_with(server, 32, Duration::from_secs(60)).await
}

/// The owner fields of the lock hash at `key`.
async fn owners(conn: &mut MultiplexedConnection, key: &str) -> Vec<String> {
    dlock::redis::cmd("HKEYS")
        .arg(key)
        .query_async(conn)
        .await
        .expect("HKEYS")
}

/// The acquire's result if it is ready on the next poll.
async fn ready_now(fut: &mut Acquiring) -> Option<Result<LockGuard, LockError>> {
    match futures_util::poll!(fut.as_mut()) {
        Poll::Ready(r) => Some(r),
        Poll::Pending => None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_hands_the_hold_to_the_queued_task_without_redis() {
    let server = common::server();
    let client = patient(&server).await;
    let mut admin = common::raw(&server.url()).await;
    let lock = client.lock("handoff:plain").ttl(Duration::from_secs(30));
    let first = lock.acquire().await.unwrap();
    let token = first.fencing_token();
    assert_eq!(
        token % LOCAL_TOKENS,
        0,
        "a Redis acquire's token is a multiple of 1024"
    );
    let holders = owners(&mut admin, lock.key()).await;
    let mut next = queued(&lock).await;

    let calls = common::script_calls(&mut admin).await;
    first.release().await.expect("release");
    let second = ready_now(&mut next)
        .await
        .expect("the queued task holds at once")
        .expect("handed over");
    // Nothing went to Redis (INFO itself is not a script), and Redis still shows one owner.
    assert_eq!(
        common::script_calls(&mut admin).await,
        calls,
        "a handoff ran a script"
    );
    assert_eq!(owners(&mut admin, lock.key()).await, holders);
    assert_eq!(second.fencing_token(), token + 1);
    assert_eq!(second.hold_count(), 1);
    assert!(!second.is_lost());
    second.release().await.expect("release in Redis");
    assert!(
        !lock.is_locked().await.unwrap(),
        "the last release left the lock held"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_receiver_cancelled_while_being_handed_the_hold_passes_it_on() {
    let server = common::server();
    let client = patient(&server).await;
    let mut admin = common::raw(&server.url()).await;
    let lock = client
        .lock("handoff:cancelled")
        .ttl(Duration::from_secs(30));
    let first = lock.acquire().await.unwrap();
    let token = first.fencing_token();
    let cancelled = queued(&lock).await;
    let mut last = queued(&lock).await;
    let calls = common::script_calls(&mut admin).await;

    first.release().await.unwrap();
    // The hold is in the first receiver's channel; it is dropped without looking.
    drop(cancelled);
    let got = ready_now(&mut last)
        .await
        .expect("the next task got the hold the cancelled one was handed")
        .unwrap();
    assert_eq!(common::script_calls(&mut admin).await, calls);
    assert_eq!(
        got.fencing_token(),
        token + 2,
        "each local holder has its own token"
    );

    // A cancelled receiver with nobody behind it releases in Redis: another client gets it.
    let mut alone = queued(&lock).await;
    got.release().await.unwrap();
    drop(ready_now(&mut alone).await.expect("handed over"));
    drop(alone);
    let other = common::client(&server).await;
    let theirs = other
        .lock("handoff:cancelled")
        .wait(Duration::from_secs(10))
        .acquire()
        .await
        .expect("the dropped hold was released in Redis");
    assert!(theirs.fencing_token() > token + 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_receiver_hands_the_hold_on_and_the_last_releases_it() {
    let server = common::server();
    let client = patient(&server).await;
    let lock = client.lock("handoff:panic").ttl(Duration::from_secs(30));
    let first = lock.acquire().await.unwrap();
    let token = first.fencing_token();
    let mut tasks = Vec::new();
    for i in 0..3 {
        let lock = lock.clone();
        let mut acquiring = queued(&lock).await;
        tasks.push(tokio::spawn(async move {
            let guard = acquiring.as_mut().await.expect("acquire");
            if i == 1 {
                panic!("the body of the receiver panicked");
            }
            guard.fencing_token()
        }));
    }
    first.release().await.unwrap();
    let mut results = Vec::new();
    for t in tasks {
        results.push(t.await);
    }
    assert_eq!(results[0].as_ref().ok(), Some(&(token + 1)));
    assert!(results[1].as_ref().is_err_and(|e| e.is_panic()));
    // The panicking task's guard was dropped while unwinding: it went on to the third task.
    assert_eq!(results[2].as_ref().ok(), Some(&(token + 3)));
    common::until_unlocked(&lock, Duration::from_secs(5)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hold_whose_lease_ran_out_on_its_way_is_not_believed() {
    let server = common::server();
    let client = patient(&server).await;
    let admin = common::raw(&server.url()).await;
    let ttl = Duration::from_millis(600);
    let lock = client
        .lock("handoff:lost")
        .ttl(ttl)
        .wait(Duration::from_secs(10));
    let first = lock.acquire().await.unwrap();
    let token = first.fencing_token();
    let mut next = queued(&lock).await;
    // No renewal gets through from here on: the lease runs out.
    let () = dlock::redis::cmd("CLIENT")
        .arg("PAUSE")
        .arg(1_500)
        .arg("WRITE")
        .query_async(&mut admin.clone())
        .await
        .expect("CLIENT PAUSE");
    first
        .release()
        .await
        .expect("handed over: no request to Redis");
    // Time is the subject: the handed hold's validity ends within the ttl.
    tokio::time::sleep(ttl + Duration::from_millis(200)).await;
    let started = Instant::now();
    let got = next
        .as_mut()
        .await
        .expect("acquired in Redis after the pause");
    assert!(
        got.fencing_token() > token && got.fencing_token() % LOCAL_TOKENS == 0,
        "the receiver kept the expired hold (token {} after {token})",
        got.fencing_token()
    );
    assert!(!got.is_lost());
    println!(
        "acquired in Redis {:?} after looking at the lost hold",
        started.elapsed()
    );
    got.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handed_hold_is_reentered_by_its_new_owner_only() {
    let server = common::server();
    let client = patient(&server).await;
    let mut admin = common::raw(&server.url()).await;
    let lock = client.lock("handoff:reentry").ttl(Duration::from_secs(30));
    let first = lock.acquire().await.unwrap();
    let mut next = queued(&lock).await;
    // The giver's scope outlives its guard: a re-entry from it must not reach the new hold.
    let (release_tx, release_rx) = tokio::sync::oneshot::channel::<()>();
    let (asked_tx, asked_rx) = tokio::sync::oneshot::channel();
    let giver = {
        let lock = lock.clone();
        let scope = first.scope(async move {
            release_rx.await.unwrap();
            let _ = asked_tx.send(lock.acquire().await.map(|g| g.hold_count()));
        });
        tokio::spawn(async move {
            first.release().await.unwrap();
            scope.await
        })
    };
    let second = next.as_mut().await.unwrap();
    release_tx.send(()).unwrap();
    giver.await.unwrap();
    assert!(
        matches!(asked_rx.await.unwrap(), Err(LockError::NotHeld { .. })),
        "the giver's scope re-entered a hold it gave away"
    );
    // The receiver's own scope re-enters: one more count on the same Redis owner.
    let field = owners(&mut admin, lock.key()).await.remove(0);
    let inner = second
        .scope(async { lock.acquire().await })
        .await
        .expect("re-entry of a handed hold");
    assert_eq!(inner.hold_count(), 2);
    assert_eq!(inner.fencing_token(), second.fencing_token());
    let count: String = dlock::redis::cmd("HGET")
        .arg(lock.key())
        .arg(&field)
        .query_async(&mut admin)
        .await
        .unwrap();
    assert_eq!(count, "2");
    inner.release().await.unwrap();
    second.release().await.unwrap();
    assert!(!lock.is_locked().await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renewals_go_on_across_handoffs_past_many_leases() {
    let server = common::server();
    let client = client_with(&server, 1000, Duration::from_secs(60)).await;
    let ttl = Duration::from_millis(600);
    let lock = client.lock("handoff:renewed").ttl(ttl);
    let mut guard = lock.acquire().await.unwrap();
    let first = guard.fencing_token();
    // Two tasks' worth of handoffs for five leases, each holder keeping it a while.
    let until = Instant::now() + ttl * 5;
    let mut handoffs = 0;
    while Instant::now() < until {
        let mut next = queued(&lock).await;
        tokio::time::sleep(Duration::from_millis(50)).await;
        guard.release().await.unwrap();
        guard = ready_now(&mut next).await.expect("handed over").unwrap();
        assert!(!guard.is_lost(), "lost after {handoffs} handoffs");
        handoffs += 1;
    }
    assert_eq!(
        guard.fencing_token(),
        first + handoffs,
        "every holder came by handoff"
    );
    assert!(lock.is_locked().await.unwrap());
    guard.release().await.expect("still ours after five leases");
}

/// Two tasks of one client hand the lock to each other as fast as they can; a task of another
/// client waits for it. Returns how long that waiter took and the tokens the first client's
/// holders had.
async fn outside_waiter_behind_a_busy_client(limit: u32, window: Duration) -> (Duration, Vec<u64>) {
    let server = common::server();
    let busy = client_with(&server, limit, window).await;
    let other = common::client(&server).await;
    let name = "handoff:bounded";
    let lock = busy.lock(name).wait(Duration::from_secs(30));
    let first = lock.acquire().await.unwrap();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut loops = Vec::new();
    for _ in 0..2 {
        let (lock, stop) = (lock.clone(), stop.clone());
        loops.push(tokio::spawn(async move {
            let mut tokens = Vec::new();
            for _ in 0..200_000 {
                if stop.load(std::sync::atomic::Ordering::Acquire) {
                    break;
                }
                let g = lock.acquire().await.expect("acquire");
                tokens.push(g.fencing_token());
                tokio::task::yield_now().await;
                g.release().await.expect("release");
            }
            tokens
        }));
    }
    // The waiter is queued in Redis (subscribed, refused once) before the holder lets go.
    let waiter = other.lock(name).wait(Duration::from_secs(10));
    let asked = Instant::now();
    let waiting = tokio::spawn(async move { waiter.acquire().await });
    common::eventually(
        Duration::from_secs(5),
        "the other client subscribed",
        || {
            let url = server.url();
            let channel = other.lock(name).channel().to_owned();
            async move {
                let mut c = common::raw(&url).await;
                let n: Vec<(String, i64)> = dlock::redis::cmd("PUBSUB")
                    .arg("NUMSUB")
                    .arg(&channel)
                    .query_async(&mut c)
                    .await
                    .unwrap();
                n[0].1 > 0
            }
        },
    )
    .await;
    first.release().await.unwrap();
    let theirs = waiting.await.unwrap();
    let waited = asked.elapsed();
    stop.store(true, std::sync::atomic::Ordering::Release);
    let guard = theirs.expect("the other client got its turn");
    guard.release().await.unwrap();
    let mut tokens = Vec::new();
    for l in loops {
        tokens.extend(l.await.unwrap());
    }
    (waited, tokens)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_handoff_limit_gives_another_client_its_turn() {
    let (waited, tokens) = outside_waiter_behind_a_busy_client(3, Duration::from_secs(60)).await;
    println!(
        "another client waited {waited:?}; {} local holds",
        tokens.len()
    );
    assert!(
        tokens.iter().any(|t| t % LOCAL_TOKENS > 0),
        "no handoff happened"
    );
    let longest_run = tokens.iter().map(|t| t % LOCAL_TOKENS).max().unwrap();
    assert!(
        longest_run <= 3,
        "{longest_run} consecutive handoffs with a limit of 3"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_handoff_window_gives_another_client_its_turn() {
    let (waited, tokens) =
        outside_waiter_behind_a_busy_client(1000, Duration::from_millis(50)).await;
    println!(
        "another client waited {waited:?}; {} local holds",
        tokens.len()
    );
    assert!(
        tokens.iter().any(|t| t % LOCAL_TOKENS > 0),
        "no handoff happened"
    );
    // The waiter had its turn within the wait (10 s); a run of handoffs lasts 50 ms.
}

#[tokio::test]
async fn handoff_settings_out_of_range_are_invalid_arguments() {
    let server = common::server();
    let err = LockClient::builder(server.url())
        .local_handoffs(1024)
        .build()
        .await
        .expect_err("1024 handoffs accepted");
    assert!(matches!(err, LockError::InvalidArgument { .. }), "{err}");
    assert!(err.to_string().contains("local_handoffs"), "{err}");
    // 0 turns handoff off: every release goes to Redis.
    let off = client_with(&server, 0, Duration::from_millis(10)).await;
    let lock = off.lock("handoff:off");
    let first = lock.acquire().await.unwrap();
    let mut next = queued(&lock).await;
    first.release().await.unwrap();
    let second = next.as_mut().await.unwrap();
    assert_eq!(
        second.fencing_token() % LOCAL_TOKENS,
        0,
        "handed over with handoff off"
    );
    second.release().await.unwrap();
}

/// Issue 17 item 6: a task queued with a shorter ttl than the holder's is not handed the hold.
/// Handed over, it kept the holder's validity deadline while its renewals set its own, shorter
/// lease in Redis: with its link frozen another client got the lock while it still believed it
/// held. Now it takes the lock in Redis with its own lease, and reads "lost" first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queued_task_with_a_shorter_ttl_takes_the_lock_in_redis_with_its_own_lease() {
    let server = common::server();
    let proxy = Proxy::start(server.port());
    let client = LockClient::builder(proxy.url())
        .local_handoff_window(Duration::from_secs(60))
        .build()
        .await
        .expect("connect through the proxy");
    let other = common::client(&server).await;
    let admin = common::raw(&server.url()).await;
    let long = client.lock("handoff:ttl").ttl(Duration::from_secs(6));
    let short = client.lock("handoff:ttl").ttl(Duration::from_millis(300));

    let first = long.acquire().await.unwrap();
    let next = queued(&short).await;
    first.release().await.unwrap();
    let second = next.await.expect("the short-ttl task gets the lock");
    // Its renewals (every 100 ms) have set its own 300 ms lease in Redis by now.
    common::eventually(
        Duration::from_secs(10),
        "a lease of 300 ms in Redis",
        || {
            let mut admin = admin.clone();
            let key = short.key().to_owned();
            async move {
                let pttl: i64 = dlock::redis::cmd("PTTL")
                    .arg(&key)
                    .query_async(&mut admin)
                    .await
                    .unwrap();
                (0..=300).contains(&pttl)
            }
        },
    )
    .await;

    proxy.freeze();
    let taken = other
        .lock("handoff:ttl")
        .wait(Duration::from_secs(10))
        .acquire()
        .await
        .expect("the other client gets the lock once the lease runs out");
    assert!(
        second.is_lost(),
        "another client holds the lock while the short-ttl holder still believes it holds"
    );
    assert_eq!(
        second.fencing_token() % LOCAL_TOKENS,
        0,
        "taken in Redis, not handed over"
    );
    taken.release().await.unwrap();
    proxy.thaw();
}
