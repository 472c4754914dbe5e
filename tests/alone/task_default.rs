//! A default client per future (`LockClient::with_default`): parallel tests of one binary, each
//! with its own redis-server, never lock on each other's server, and the task default wins over
//! the process-wide `install()`. Its own binary: one test installs a process-wide client.

use std::time::Duration;

use dlock::testing::RedisServer;
use dlock::{current_lock, distributed_lock, LockClient, LockError};
use tokio::sync::Barrier;

/// Uses whatever default client the caller has: no `client = ...`.
#[distributed_lock(key = "shared-name")]
async fn job(expected: &LockClient) -> Result<(), LockError> {
    // Held through the expected client's server, whoever else runs this meanwhile.
    assert!(expected.lock("shared-name").is_locked().await?);
    assert_eq!(LockClient::global()?.client_id(), expected.client_id());
    assert!(current_lock().is_some());
    Ok(())
}

/// Many calls of `job` under `client` as the default, each checking it locked on `client`.
async fn many_calls(client: LockClient) {
    let check = client.clone();
    client
        .with_default(async move {
            for _ in 0..50 {
                job(&check).await.unwrap();
                tokio::task::yield_now().await;
            }
        })
        .await;
}

// Two tests, run in parallel by the harness, each with its own server and client. With a
// process-wide default they would take turns on one server and fail at random.
#[tokio::test]
async fn first_test_uses_its_own_client() {
    let server = RedisServer::start().unwrap();
    many_calls(LockClient::connect(&server.url()).await.unwrap()).await;
}

#[tokio::test]
async fn second_test_uses_its_own_client() {
    let server = RedisServer::start().unwrap();
    many_calls(LockClient::connect(&server.url()).await.unwrap()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn task_defaults_of_concurrent_tasks_do_not_mix() {
    let (a, b) = (RedisServer::start().unwrap(), RedisServer::start().unwrap());
    let a = LockClient::connect(&a.url()).await.unwrap();
    let b = LockClient::connect(&b.url()).await.unwrap();
    // Both inside `job` at once: each holds `shared-name` on its own server.
    let barrier = std::sync::Arc::new(Barrier::new(2));
    #[distributed_lock(key = "meet")]
    async fn meet(expected: &LockClient, barrier: &Barrier) -> Result<(), LockError> {
        barrier.wait().await;
        assert!(expected.lock("meet").is_locked().await?);
        Ok(())
    }
    let run = |client: LockClient| {
        let barrier = barrier.clone();
        tokio::spawn(
            client
                .clone()
                .with_default(async move { meet(&client, &barrier).await }),
        )
    };
    let (ra, rb) = (run(a), run(b));
    let both = async { (ra.await.unwrap(), rb.await.unwrap()) };
    let (ra, rb) = tokio::time::timeout(Duration::from_secs(20), both)
        .await
        .expect("both calls locked on one server: one waited for the other at the barrier");
    ra.unwrap();
    rb.unwrap();
}

#[tokio::test]
async fn task_default_wins_over_the_installed_client() {
    let installed = RedisServer::start().unwrap();
    let mine = RedisServer::start().unwrap();
    let installed = LockClient::connect(&installed.url()).await.unwrap();
    let mine = LockClient::connect(&mine.url()).await.unwrap();
    installed.clone().install();

    let id = mine
        .clone()
        .with_default(async { LockClient::global().map(|c| c.client_id().to_owned()) })
        .await
        .unwrap();
    assert_eq!(id, mine.client_id());
    mine.clone().with_default(job(&mine)).await.unwrap();
    // Nested defaults: the innermost wins, and the outer one is back after it.
    let outer = mine.clone();
    let ids = mine
        .clone()
        .with_default(async move {
            let inner = installed
                .clone()
                .with_default(async { LockClient::global().unwrap().client_id().to_owned() });
            let inner = inner.await;
            (inner, LockClient::global().unwrap().client_id().to_owned())
        })
        .await;
    assert_eq!(ids.1, outer.client_id());
    assert_ne!(ids.0, ids.1);

    // Outside: the installed client. Spawned tasks do not inherit a task default.
    assert_ne!(LockClient::global().unwrap().client_id(), mine.client_id());
    let spawned = mine
        .clone()
        .with_default(async {
            tokio::spawn(async { LockClient::global().unwrap().client_id().to_owned() })
                .await
                .unwrap()
        })
        .await;
    assert_ne!(spawned, mine.client_id());
}
