//! Multi-locks (issue 9, item 4): several plain locks all or none, in one canonical order.
//! Transfers racing in opposite orders all finish with exact totals; a timeout, a cancelled
//! acquire, a release, a drop and a panic leave every lock free; duplicates are taken once;
//! the locks are the plain locks of their names; bad input is refused before anything is taken.

use crate::common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use dlock::redis;
use dlock::{LockClient, LockError};

const LONG_TTL: Duration = Duration::from_secs(60);
const SMALL_BOUND: Duration = Duration::from_secs(2);

const CLIENTS: usize = 2;
const TASKS: usize = 16;
const TRANSFERS: usize = 50;
const OPENING: i64 = 100_000;
const RUN_BOUND: Duration = Duration::from_secs(60);

/// Moves `amount` from `from` to `to` under the multi-lock of both accounts, listed in the
/// caller's order. Non-atomic read-modify-write with a yield in the middle: only the lock keeps
/// the balances exact.
async fn transfer(
    client: &LockClient,
    conn: &mut redis::aio::MultiplexedConnection,
    inside: &AtomicUsize,
    from: &str,
    to: &str,
    amount: i64,
) {
    let guard = client
        .multi_lock([from, to])
        .wait(Duration::from_secs(120))
        .acquire()
        .await
        .expect("multi-lock acquire");
    // Every transfer needs both accounts: nobody else may be inside meanwhile.
    assert_eq!(
        inside.fetch_add(1, Ordering::SeqCst),
        0,
        "two transfers at once"
    );
    let (a, b): (i64, i64) = redis::cmd("MGET")
        .arg(balance(from))
        .arg(balance(to))
        .query_async(conn)
        .await
        .unwrap();
    tokio::task::yield_now().await;
    let () = redis::cmd("SET")
        .arg(balance(from))
        .arg(a - amount)
        .query_async(conn)
        .await
        .unwrap();
    tokio::task::yield_now().await;
    let () = redis::cmd("SET")
        .arg(balance(to))
        .arg(b + amount)
        .query_async(conn)
        .await
        .unwrap();
    inside.fetch_sub(1, Ordering::SeqCst);
    guard.release().await.expect("multi-lock release");
}

fn balance(account: &str) -> String {
    format!("test:balance:{account}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transfers_in_opposite_orders_all_finish_with_exact_totals() {
    let server = common::server();
    let mut conn = common::raw(&server.url()).await;
    for account in ["a", "b"] {
        let () = redis::cmd("SET")
            .arg(balance(account))
            .arg(OPENING)
            .query_async(&mut conn)
            .await
            .unwrap();
    }
    let inside = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    let (mut a_to_b, mut b_to_a) = (0, 0);
    for c in 0..CLIENTS {
        let client = common::client(&server).await;
        for t in 0..TASKS {
            // Half of each client's tasks list the accounts one way, half the other way, so
            // opposite orders race inside one client and across clients.
            let forward = (c + t) % 2 == 0;
            if forward {
                a_to_b += TRANSFERS;
            } else {
                b_to_a += TRANSFERS;
            }
            let (client, mut conn, inside) = (client.clone(), conn.clone(), inside.clone());
            tasks.push(tokio::spawn(async move {
                for _ in 0..TRANSFERS {
                    if forward {
                        transfer(&client, &mut conn, &inside, "a", "b", 3).await;
                    } else {
                        transfer(&client, &mut conn, &inside, "b", "a", 2).await;
                    }
                }
            }));
        }
    }
    let started = Instant::now();
    match tokio::time::timeout(RUN_BOUND, futures_util::future::try_join_all(tasks)).await {
        Ok(done) => {
            done.expect("a transfer task failed");
        }
        Err(_) => panic!(
            "transfers did not finish within {RUN_BOUND:?} (a deadlock?); {}; {}",
            common::describe_lock(&mut conn, "dlock:{a}").await,
            common::describe_lock(&mut conn, "dlock:{b}").await,
        ),
    }
    println!(
        "{} transfers in {:?}",
        CLIENTS * TASKS * TRANSFERS,
        started.elapsed()
    );
    let (a, b): (i64, i64) = redis::cmd("MGET")
        .arg(balance("a"))
        .arg(balance("b"))
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(a + b, 2 * OPENING, "money created or destroyed");
    let moved = 3 * a_to_b as i64 - 2 * b_to_a as i64;
    assert_eq!(a, OPENING - moved, "account a lost or doubled a transfer");
    assert_eq!(b, OPENING + moved, "account b lost or doubled a transfer");
    assert!(common::lock_keys(&mut conn).await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timeout_on_the_second_lock_gives_the_first_back_and_names_the_second() {
    let server = common::server();
    let holder = common::client(&server).await;
    let client = common::client(&server).await;
    let other = common::client(&server).await;
    let b = holder.lock("b").ttl(LONG_TTL).acquire().await.unwrap();

    let wait = Duration::from_millis(300);
    let multi = client.multi_lock(["a", "b"]).ttl(LONG_TTL).wait(wait);
    let started = Instant::now();
    let err = multi.acquire().await.expect_err("b is held elsewhere");
    let took = started.elapsed();
    let LockError::Timeout { name, waited, .. } = &err else {
        panic!("expected Timeout, got {err:?}");
    };
    assert_eq!(name, "b", "{err}");
    assert!(err.to_string().contains("`b`"), "{err}");
    assert!(*waited >= wait && took >= wait, "gave up early: {took:?}");
    assert!(took < Duration::from_secs(5), "took {took:?}");
    // "a" was released before the error came back: free in Redis, at once, for anybody.
    assert!(!other.lock("a").is_locked().await.unwrap());
    let g = other.lock("a").try_acquire().await.unwrap();
    g.expect("a is free right after the error")
        .release()
        .await
        .unwrap();
    // Also for the failed caller's own client (its local turn at "a" was given back).
    let g = client.lock("a").try_acquire().await.unwrap();
    g.expect("a is free for the same client")
        .release()
        .await
        .unwrap();

    // try_acquire: None, and nothing held either.
    assert!(multi.try_acquire().await.unwrap().is_none());
    assert!(!other.lock("a").is_locked().await.unwrap());
    assert!(!b.is_lost());
    b.release().await.unwrap();
    let both = multi.try_acquire().await.unwrap().expect("both free now");
    both.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_wait_is_one_budget_for_the_whole_acquire() {
    // "a" frees after 2.5 s, "b" never: with one 3 s budget the acquire gives up about 3 s
    // after it started; a budget per lock would wait until 5.5 s.
    let server = common::server();
    let holder = common::client(&server).await;
    let client = common::client(&server).await;
    let a = holder.lock("a").ttl(LONG_TTL).acquire().await.unwrap();
    let b = holder.lock("b").ttl(LONG_TTL).acquire().await.unwrap();
    let started = Instant::now();
    let freeing = tokio::spawn(async move {
        // Time is the subject here: the release must come part-way through the wait.
        tokio::time::sleep(Duration::from_millis(2500)).await;
        a.release().await.unwrap();
    });
    let wait = Duration::from_secs(3);
    let err = client
        .multi_lock(["b", "a"])
        .wait(wait)
        .acquire()
        .await
        .expect_err("b stays held");
    let took = started.elapsed();
    assert!(
        matches!(&err, LockError::Timeout { name, .. } if name == "b"),
        "{err:?}"
    );
    freeing.await.unwrap();
    assert!(took >= wait, "gave up before the wait: {took:?}");
    assert!(
        took < Duration::from_millis(4500),
        "waited {took:?}: the wait was spent per lock, not once"
    );
    // It had "a" in between, and gave it back.
    assert!(!holder.lock("a").is_locked().await.unwrap());
    b.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acquire_dropped_while_waiting_for_the_second_lock_frees_the_first() {
    let server = common::server();
    let holder = common::client(&server).await;
    let client = common::client(&server).await;
    let other = common::client(&server).await;
    let b = holder.lock("b").ttl(LONG_TTL).acquire().await.unwrap();
    let mut conn = common::raw(&server.url()).await;
    let b_channel = holder.lock("b").channel().to_owned();

    let multi = client
        .multi_lock(["b", "a"])
        .ttl(LONG_TTL)
        .wait(Duration::from_secs(60));
    let waiting = tokio::spawn(async move { multi.acquire().await.map(drop) });
    // Half-way: it holds "a" and waits for "b" (subscribed to b's release channel).
    common::eventually(SMALL_BOUND * 5, "multi-lock waiting on b", || {
        let (a, mut conn, chan) = (other.lock("a"), conn.clone(), b_channel.clone());
        async move {
            let subs: (String, i64) = redis::cmd("PUBSUB")
                .arg("NUMSUB")
                .arg(&chan)
                .query_async(&mut conn)
                .await
                .unwrap();
            subs.1 > 0 && a.is_locked().await.unwrap()
        }
    })
    .await;
    assert!(!waiting.is_finished());
    waiting.abort();
    assert!(waiting.await.expect_err("aborted").is_cancelled());

    // The guard of "a" it already had was dropped, so released in the background: another
    // client gets it well before its 60 s TTL.
    let started = Instant::now();
    let g = other
        .lock("a")
        .wait(SMALL_BOUND)
        .acquire()
        .await
        .expect("a freed after the cancelled acquire");
    assert!(started.elapsed() < SMALL_BOUND);
    g.release().await.unwrap();
    // The holder of "b" was not disturbed, and nothing is left behind once it releases.
    assert!(!b.is_lost());
    b.release().await.unwrap();
    common::until_unlocked(&other.lock("b"), SMALL_BOUND).await;
    assert!(common::lock_keys(&mut conn).await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn release_and_drop_each_free_every_lock() {
    let server = common::server();
    let client = common::client(&server).await;
    let other = common::client(&server).await;
    let names = ["x", "y", "z"];
    let multi = client.multi_lock(names).ttl(LONG_TTL);
    let locked = |name: &str| {
        let lock = other.lock(name);
        async move { lock.is_locked().await.unwrap() }
    };

    let guard = multi.acquire().await.unwrap();
    for name in names {
        assert!(locked(name).await, "{name} held");
    }
    assert!(other
        .multi_lock(["z"])
        .try_acquire()
        .await
        .unwrap()
        .is_none());
    guard.release().await.unwrap();
    // Awaited: free as soon as release returns.
    for name in names {
        assert!(!locked(name).await, "{name} free after release");
    }

    let guard = multi.acquire().await.unwrap();
    drop(guard);
    for name in names {
        common::until_unlocked(&other.lock(name), SMALL_BOUND).await;
    }
    let again = other.multi_lock(names).try_acquire().await.unwrap();
    again
        .expect("every lock free after the drop")
        .release()
        .await
        .unwrap();
    // The dropping client is not stuck on its own local queue either.
    let mine = multi.clone().wait(SMALL_BOUND).acquire().await;
    mine.expect("free for the dropping client")
        .release()
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panic_while_holding_frees_every_lock() {
    let server = common::server();
    let client = common::client(&server).await;
    let other = common::client(&server).await;
    let multi = client.multi_lock(["p", "q"]).ttl(LONG_TTL);
    let m = multi.clone();
    let task = tokio::spawn(async move {
        let _guard = m.acquire().await.unwrap();
        assert!(m.locks()[0].is_locked().await.unwrap());
        panic!("the body failed while holding both locks");
    });
    assert!(task.await.expect_err("the task panicked").is_panic());
    for name in ["p", "q"] {
        common::until_unlocked(&other.lock(name), SMALL_BOUND).await;
    }
    let mine = multi.wait(SMALL_BOUND).acquire().await;
    mine.expect("free for the panicking task's client")
        .release()
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn duplicates_are_taken_once_and_any_listing_order_gives_one_order() {
    let server = common::server();
    let client = common::client(&server).await;
    let other = common::client(&server).await;

    let guard = client
        .multi_lock(["b", "a", "a"])
        .ttl(LONG_TTL)
        .acquire()
        .await
        .unwrap();
    assert_eq!(guard.names().collect::<Vec<_>>(), ["a", "b"]);
    for g in guard.guards() {
        assert_eq!(g.hold_count(), 1, "{} taken once", g.name());
        assert!(g.fencing_token() > 0);
        assert_eq!(guard.fencing_token(g.name()), Some(g.fencing_token()));
    }
    assert_eq!(guard.fencing_token("c"), None);
    for name in ["a", "b"] {
        assert!(other.lock(name).try_acquire().await.unwrap().is_none());
    }
    assert!(!guard.is_lost());
    guard.release().await.unwrap();
    for name in ["a", "b"] {
        assert!(!other.lock(name).is_locked().await.unwrap());
    }

    // Canonical order = Redis key order, the same for every listing of the names. Key order
    // is not name order: "dlock:{ab}" < "dlock:{a}" ('b' < '}'), and "a{" < "a&" once escaped
    // ("dlock:{a%7B}").
    let listings = [
        vec!["a", "ab", "a{", "a&", "b"],
        vec!["b", "a&", "a{", "ab", "a"],
        vec!["a{", "b", "a", "a&", "ab", "a"],
    ];
    let orders: Vec<Vec<String>> = listings
        .iter()
        .map(|l| {
            client
                .multi_lock(l.iter().copied())
                .names()
                .map(str::to_owned)
                .collect()
        })
        .collect();
    assert_eq!(orders[0], ["a{", "a&", "ab", "a", "b"]);
    assert!(orders.iter().all(|o| *o == orders[0]), "{orders:?}");
    let reversed = client.multi_lock(["b", "a"]);
    let keys: Vec<&str> = reversed.locks().iter().map(|l| l.key()).collect();
    assert_eq!(keys, ["dlock:{a}", "dlock:{b}"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_multi_lock_and_a_plain_lock_of_one_name_exclude_each_other() {
    let server = common::server();
    let plain_client = common::client(&server).await;
    let multi_client = common::client(&server).await;
    let multi = multi_client.multi_lock(["a", "b"]).ttl(LONG_TTL);

    let a = plain_client
        .lock("a")
        .ttl(LONG_TTL)
        .acquire()
        .await
        .unwrap();
    assert!(multi.try_acquire().await.unwrap().is_none());
    assert!(
        !plain_client.lock("b").is_locked().await.unwrap(),
        "none taken"
    );
    a.release().await.unwrap();

    let both = multi.acquire().await.unwrap();
    for name in ["a", "b"] {
        assert!(plain_client
            .lock(name)
            .try_acquire()
            .await
            .unwrap()
            .is_none());
    }
    both.release().await.unwrap();

    // Under contention: a counter guarded by "a", incremented by tasks holding the plain lock
    // and by tasks holding the multi-lock, stays exact.
    const ROUNDS: usize = 20;
    let counter = "test:counter:a";
    let inside = Arc::new(AtomicUsize::new(0));
    let conn = common::raw(&server.url()).await;
    let mut tasks = Vec::new();
    for t in 0..8 {
        let (plain, multi) = (plain_client.clone(), multi_client.clone());
        let (mut conn, inside) = (conn.clone(), inside.clone());
        tasks.push(tokio::spawn(async move {
            for _ in 0..ROUNDS {
                let wait = Duration::from_secs(60);
                let guard: Box<dyn std::any::Any + Send> = if t % 2 == 0 {
                    Box::new(plain.lock("a").wait(wait).acquire().await.unwrap())
                } else {
                    Box::new(
                        multi
                            .multi_lock(["b", "a"])
                            .wait(wait)
                            .acquire()
                            .await
                            .unwrap(),
                    )
                };
                assert_eq!(inside.fetch_add(1, Ordering::SeqCst), 0, "overlap");
                let n: Option<u64> = redis::cmd("GET")
                    .arg(counter)
                    .query_async(&mut conn)
                    .await
                    .unwrap();
                tokio::task::yield_now().await;
                let () = redis::cmd("SET")
                    .arg(counter)
                    .arg(n.unwrap_or(0) + 1)
                    .query_async(&mut conn)
                    .await
                    .unwrap();
                inside.fetch_sub(1, Ordering::SeqCst);
                drop(guard);
            }
        }));
    }
    let all = futures_util::future::try_join_all(tasks);
    tokio::time::timeout(Duration::from_secs(60), all)
        .await
        .expect("contention run finished in time")
        .expect("a task failed");
    let mut conn = conn;
    let n: u64 = redis::cmd("GET")
        .arg(counter)
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(n, 8 * ROUNDS as u64, "lost updates");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_empty_list_or_an_empty_name_is_refused_before_anything_is_taken() {
    let server = common::server();
    let client = common::client(&server).await;

    let empty = client.multi_lock(Vec::<String>::new());
    for result in [
        empty.acquire().await.map(drop),
        empty.try_acquire().await.map(drop),
    ] {
        match result {
            Err(LockError::InvalidArgument { reason, .. }) => {
                assert!(reason.contains("at least one"), "{reason}")
            }
            other => panic!("expected InvalidArgument, got {other:?}"),
        }
    }

    // "" sorts after "a" by key ("dlock:{a}" < "dlock:{}"), so "a" would be taken first if the
    // names were not checked up front.
    let with_empty = client.multi_lock(["a", "", "b"]);
    match with_empty.acquire().await {
        Err(LockError::InvalidArgument { reason, .. }) => {
            assert!(
                reason.contains("#2") && reason.contains("empty"),
                "{reason}"
            )
        }
        other => panic!("expected InvalidArgument, got {other:?}"),
    }
    // Settings are checked before the first lock is taken, too.
    let zero_ttl = client.multi_lock(["a", "b"]).ttl(Duration::ZERO);
    assert!(matches!(
        zero_ttl.acquire().await,
        Err(LockError::InvalidArgument { .. })
    ));
    for name in ["a", "b"] {
        assert!(
            !client.lock(name).is_locked().await.unwrap(),
            "{name} taken"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inside_a_multi_guard_scope_every_lock_re_enters() {
    let server = common::server();
    let client = common::client(&server).await;
    let guard = client
        .multi_lock(["a", "b"])
        .ttl(LONG_TTL)
        .acquire()
        .await
        .unwrap();
    let short = Duration::from_millis(200);
    guard
        .scope(async {
            // One lock alone, and the multi-lock again in the other order: re-entries, at once.
            let a = client
                .lock("a")
                .wait(short)
                .acquire()
                .await
                .expect("re-enter a");
            assert_eq!(a.hold_count(), 2);
            let again = client.multi_lock(["b", "a"]).wait(short).acquire().await;
            let again = again.expect("re-enter both");
            let counts: Vec<(&str, u32)> = again
                .guards()
                .iter()
                .map(|g| (g.name(), g.hold_count()))
                .collect();
            assert_eq!(counts, [("a", 3), ("b", 2)]);
            // The tokens of re-entries are the holds' tokens.
            assert_eq!(again.fencing_token("a"), guard.fencing_token("a"));
            again.release().await.unwrap();
            a.release().await.unwrap();
            // A spawned task is another owner.
            let c = client.clone();
            let spawned = tokio::spawn(async move { c.multi_lock(["a"]).try_acquire().await });
            assert!(spawned.await.unwrap().unwrap().is_none());
        })
        .await;
    // Outside the scope it is another owner again (and the holds are back to one each).
    assert!(client.lock("b").try_acquire().await.unwrap().is_none());
    assert!(guard.guards().iter().all(|g| g.hold_count() == 1));
    guard.release().await.unwrap();
    assert!(!client.lock("a").is_locked().await.unwrap());
    assert!(!client.lock("b").is_locked().await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_single_name_multi_lock_is_the_plain_lock() {
    let server = common::server();
    let client = common::client(&server).await;
    let other = common::client(&server).await;
    let one = client.multi_lock(["solo"]).ttl(LONG_TTL);
    assert_eq!(one.locks()[0].key(), client.lock("solo").key());
    let guard = one.acquire().await.unwrap();
    assert!(other.lock("solo").try_acquire().await.unwrap().is_none());
    // Inside the plain lock's scope... (and the other way round)
    let plain = guard.guards()[0]
        .scope(async { client.lock("solo").try_acquire().await })
        .await
        .unwrap()
        .expect("re-enters");
    assert_eq!(plain.hold_count(), 2);
    plain.release().await.unwrap();
    guard.release().await.unwrap();
    let plain = client.lock("solo").acquire().await.unwrap();
    let multi = plain
        .scope(one.try_acquire())
        .await
        .unwrap()
        .expect("re-enters");
    assert_eq!(multi.guards()[0].hold_count(), 2);
    multi.release().await.unwrap();
    plain.release().await.unwrap();
    assert!(!other.lock("solo").is_locked().await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_completes_when_any_lock_is_lost() {
    let server = common::server();
    let client = common::client(&server).await;
    // A short lease: the watchdog renews every second and so finds a deleted key soon.
    let ttl = Duration::from_secs(3);
    let guard = client
        .multi_lock(["m", "n"])
        .ttl(ttl)
        .acquire()
        .await
        .unwrap();
    assert!(!guard.is_lost());
    let lost = guard.lost();
    assert!(client.lock("n").force_unlock().await.unwrap());
    tokio::time::timeout(Duration::from_secs(10), lost)
        .await
        .expect("lost() completes once n is gone");
    assert!(guard.is_lost());
    let which: Vec<&str> = guard
        .guards()
        .iter()
        .filter(|g| g.is_lost())
        .map(|g| g.name())
        .collect();
    assert_eq!(which, ["n"]);
    match guard.release().await {
        Err(LockError::NotHeld { name }) => assert_eq!(name, "n"),
        other => panic!("expected NotHeld for n, got {other:?}"),
    }
    // "m" was released all the same.
    assert!(!client.lock("m").is_locked().await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_acquire_the_guard_and_its_scope_are_send() {
    // Compiles only if they can live across `.await` in a spawned task or an axum handler.
    fn send<T: Send>(t: T) -> T {
        t
    }
    let server = common::server();
    let client = common::client(&server).await;
    let multi = client.multi_lock(["s", "t"]);
    let guard = send(multi.acquire()).await.unwrap();
    let guard = send(guard);
    let scoped = send(guard.scope(async { client.lock("s").acquire().await.map(drop) }));
    scoped.await.expect("re-entry inside a Send scope");
    let lost = send(guard.lost());
    drop(lost);
    send(guard.release()).await.unwrap();
}
