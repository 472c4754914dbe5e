//! Mutual exclusion inside one process: two clients (two owners' worth of connections,
//! subscribers and watchdogs) with 16 tasks each increment a plain Redis counter with a
//! non-atomic GET / SET under the lock. Any overlap loses an update, so the final count is exact
//! only if the lock excluded every pair. (The two-process variant is in processes.rs.)

use crate::common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use dlock::redis;

const CLIENTS: usize = 2;
const TASKS: usize = 16;
const ITERATIONS: usize = 200;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_clients_of_sixteen_tasks_never_lose_an_update() {
    let server = common::server();
    let counter = "exclusion:counter";
    // Tasks of both clients share this process, so a second check is possible: how many are
    // inside the critical section at once (must never exceed one).
    let inside = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    let mut key = String::new();
    for _ in 0..CLIENTS {
        let client = common::client(&server).await;
        key = client.lock("exclusion").key().to_owned();
        let conn = common::raw(&server.url()).await;
        for _ in 0..TASKS {
            let lock = client.lock("exclusion").wait(Duration::from_secs(60));
            let mut conn = conn.clone();
            let inside = inside.clone();
            tasks.push(tokio::spawn(async move {
                for _ in 0..ITERATIONS {
                    let guard = lock.acquire().await.expect("acquire");
                    let others = inside.fetch_add(1, Ordering::SeqCst);
                    assert_eq!(others, 0, "two tasks inside the critical section");
                    let n: Option<u64> = redis::cmd("GET")
                        .arg(counter)
                        .query_async(&mut conn)
                        .await
                        .unwrap();
                    let () = redis::cmd("SET")
                        .arg(counter)
                        .arg(n.unwrap_or(0) + 1)
                        .query_async(&mut conn)
                        .await
                        .unwrap();
                    inside.fetch_sub(1, Ordering::SeqCst);
                    guard.release().await.expect("release");
                }
            }));
        }
    }
    let mut conn = common::raw(&server.url()).await;
    let all = futures_util::future::try_join_all(tasks);
    match tokio::time::timeout(Duration::from_secs(120), all).await {
        Ok(done) => {
            done.expect("a worker failed");
        }
        Err(_) => panic!(
            "contention run did not finish within 120 s; {}",
            common::describe_lock(&mut conn, &key).await
        ),
    }

    let n: u64 = redis::cmd("GET")
        .arg(counter)
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(n, (CLIENTS * TASKS * ITERATIONS) as u64, "lost updates");
    assert!(common::lock_keys(&mut conn).await.is_empty());
}
