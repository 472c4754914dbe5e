//! Several OS processes: the test binary re-executes itself with `--exact child_process_entry`
//! and `DLOCK_CHILD_URL` / `DLOCK_CHILD_MODE` set; that test does nothing in a normal run.
//! The child reports over stdout ("HELD <token>", "LOST true", ...), the parent reads it.

use crate::common;
use crate::common::child::{self, ChildLines};

use std::time::Duration;

use dlock::{LockClient, LockError};
use tokio::process::Child;

const TASKS: usize = 16;
const ITERATIONS: usize = 200;
const COUNTER: &str = "processes:counter";

/// The child side. Only acts when started by `spawn_child`.
#[test]
fn child_process_entry() {
    let (Ok(url), Ok(mode)) = (
        std::env::var("DLOCK_CHILD_URL"),
        std::env::var("DLOCK_CHILD_MODE"),
    ) else {
        return;
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async move {
        let client = LockClient::connect(&url).await.unwrap();
        match mode.as_str() {
            "counter" => child_counter(client, &url).await,
            "hold" => {
                let g = client
                    .lock("crash")
                    .ttl(Duration::from_secs(2))
                    .acquire()
                    .await
                    .unwrap();
                println!("HELD {}", g.fencing_token());
                // Hold until killed; the watchdog keeps renewing meanwhile.
                std::future::pending::<()>().await;
            }
            "pause" => {
                let g = client
                    .lock("paused")
                    .ttl(Duration::from_secs(1))
                    .acquire()
                    .await
                    .unwrap();
                println!("HELD {}", g.fencing_token());
                // The parent SIGSTOPs us past the TTL; after SIGCONT the watchdog must notice.
                let lost = tokio::time::timeout(Duration::from_secs(30), g.lost()).await;
                println!("LOST {}", lost.is_ok());
                match g.release().await {
                    Err(LockError::NotHeld { .. }) => println!("RELEASE NotHeld"),
                    other => println!("RELEASE {other:?}"),
                }
            }
            m => panic!("unknown DLOCK_CHILD_MODE {m}"),
        }
    });
}

/// 16 tasks x 200 non-atomic increments under the lock "processes".
async fn child_counter(client: LockClient, url: &str) {
    let conn = common::raw(url).await;
    let workers = (0..TASKS).map(|_| {
        let lock = client.lock("processes").wait(Duration::from_secs(60));
        let mut conn = conn.clone();
        tokio::spawn(async move {
            for _ in 0..ITERATIONS {
                let g = lock.acquire().await.unwrap();
                let n: Option<u64> = dlock::redis::cmd("GET")
                    .arg(COUNTER)
                    .query_async(&mut conn)
                    .await
                    .unwrap();
                let () = dlock::redis::cmd("SET")
                    .arg(COUNTER)
                    .arg(n.unwrap_or(0) + 1)
                    .query_async(&mut conn)
                    .await
                    .unwrap();
                g.release().await.unwrap();
            }
        })
    });
    futures_util::future::try_join_all(workers).await.unwrap();
    println!("DONE");
}

/// Starts this test binary as a child in `mode`, killed if the test fails.
fn spawn_child(url: &str, mode: &str) -> (Child, ChildLines) {
    let env = [("DLOCK_CHILD_URL", url), ("DLOCK_CHILD_MODE", mode)];
    child::spawn(module_path!(), "child_process_entry", &env)
}

fn token_of(line: &str) -> u64 {
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_processes_of_sixteen_tasks_never_lose_an_update() {
    let server = common::server();
    let mut children = vec![
        spawn_child(&server.url(), "counter"),
        spawn_child(&server.url(), "counter"),
    ];
    for (child, lines) in &mut children {
        child::expect_line(lines, "DONE").await;
        let status = tokio::time::timeout(Duration::from_secs(120), child.wait())
            .await
            .expect("child did not exit")
            .unwrap();
        assert!(status.success());
    }
    let mut conn = common::raw(&server.url()).await;
    let n: u64 = dlock::redis::cmd("GET")
        .arg(COUNTER)
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(n, (2 * TASKS * ITERATIONS) as u64, "lost updates");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sigkilled_holder_frees_the_lock_after_its_ttl_and_not_before() {
    let server = common::server();
    let client = common::client(&server).await;
    let lock = client.lock("crash");
    let (mut child, mut lines) = spawn_child(&server.url(), "hold");
    child::expect_line(&mut lines, "HELD").await;

    // Past the 2 s TTL the child's watchdog still keeps it.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(
        lock.is_locked().await.unwrap(),
        "the watchdog did not renew"
    );

    child.kill().await.unwrap();
    let lease_left = lock
        .remaining_ttl()
        .await
        .unwrap()
        .expect("a SIGKILLed holder's lock is not freed at once");
    let took = common::until_unlocked(&lock, Duration::from_secs(4)).await;
    // Freed by expiry, exactly when the last renewed lease ran out.
    assert!(
        took + Duration::from_millis(150) >= lease_left,
        "freed after {took:?}, the lease had {lease_left:?} left"
    );
    assert!(lock.try_acquire().await.unwrap().is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_stopped_past_its_ttl_loses_the_lock_and_cannot_free_the_new_holders() {
    let server = common::server();
    let client = common::client(&server).await;
    let (mut child, mut lines) = spawn_child(&server.url(), "pause");
    let old_token = token_of(&child::expect_line(&mut lines, "HELD").await);

    let stopped = common::Stopped::stop(child.id().unwrap());
    // The stopped child cannot renew: its 1 s lease runs out and we get the lock.
    let lock = client.lock("paused").wait(Duration::from_secs(10));
    let new = lock
        .acquire()
        .await
        .expect("the paused holder's lease ran out");
    assert!(new.fencing_token() > old_token);
    drop(stopped);

    // Resumed, the child learns it lost the lock, and its release leaves ours alone.
    assert_eq!(child::expect_line(&mut lines, "LOST").await, "LOST true");
    assert_eq!(
        child::expect_line(&mut lines, "RELEASE").await,
        "RELEASE NotHeld"
    );
    let status = tokio::time::timeout(Duration::from_secs(30), child.wait())
        .await
        .unwrap()
        .unwrap();
    assert!(status.success());
    assert!(lock.is_locked().await.unwrap());
    assert!(!new.is_lost());
    new.release().await.unwrap();
}
