//! Leaving nothing held at exit (issue 19 item 1). A release queued on the client's own thread
//! used to die with the process: a guard dropped just before `main` returned left its lock held
//! for the whole lease. Now the drop of a client's last handle waits for queued releases, and
//! `shutdown()` (the client's, or `dlock::shutdown()` for the installed one) also releases
//! what is still held. An installed client whose program forgot `dlock::shutdown()` still
//! sends the releases queued at exit (issue 28 item 8: a lock stayed held in 1 run of 5).

use crate::common::{self, child};

use std::time::Duration;

use dlock::{LockClient, LockError};

const URL: &str = "DLOCK_EXIT_URL";
const MODE: &str = "DLOCK_EXIT_MODE";
const LEASE: Duration = Duration::from_secs(30);
/// Locks the "forgot" program holds and drops just before it exits.
const FORGOT_LOCKS: usize = 50;

/// The child process: a `#[tokio::main]` program in one of three shapes, which exits the way
/// returning from `main` does (the runtime dropped, then `exit`, whatever threads still run).
/// Does nothing in a normal test run.
#[test]
fn exiting_program() {
    let (Ok(url), Ok(mode)) = (std::env::var(URL), std::env::var(MODE)) else {
        return;
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    // Guards the program drops after its runtime is gone, right before it exits (a guard
    // dropped on any thread is released: this is the tightest race with the exit).
    let mut kept = Vec::new();
    rt.block_on(async {
        match mode.as_str() {
            // The client a local variable of `main`: the guard dropped, then the client.
            "local" => {
                let client = LockClient::connect(&url).await.unwrap();
                let guard = client
                    .lock("exit:local")
                    .ttl(LEASE)
                    .acquire()
                    .await
                    .unwrap();
                drop(guard);
            }
            // The installed client, shut down with `dlock::shutdown()`.
            "installed" => {
                LockClient::connect(&url).await.unwrap().install();
                let client = LockClient::global().unwrap();
                let guard = client
                    .lock("exit:installed")
                    .ttl(LEASE)
                    .acquire()
                    .await
                    .unwrap();
                drop(guard);
                drop(client);
                dlock::shutdown().await;
            }
            // The installed client, and no `dlock::shutdown()`: guards dropped, then `main`
            // returns. Several locks, so that a release lost to the exit shows every run.
            "forgot" => {
                LockClient::connect(&url).await.unwrap().install();
                let client = LockClient::global().unwrap();
                for i in 0..FORGOT_LOCKS {
                    let lock = client.lock(format!("exit:forgot:{i}")).ttl(LEASE);
                    kept.push(lock.acquire().await.unwrap());
                }
            }
            // A guard still alive at shutdown.
            "held" => {
                let client = LockClient::connect(&url).await.unwrap();
                let _guard = client.lock("exit:held").ttl(LEASE).acquire().await.unwrap();
                client.shutdown().await;
            }
            other => panic!("unknown mode {other}"),
        }
        println!("MAIN RETURNS");
    });
    drop(rt);
    drop(kept);
    std::process::exit(0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_program_that_returns_from_main_leaves_its_locks_free() {
    let server = common::server();
    let mut admin = common::raw(&server.url()).await;
    let checker = common::client(&server).await;
    for mode in ["local", "installed", "forgot", "held"] {
        let env = [(URL, server.url()), (MODE, mode.to_owned())];
        let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let (mut process, mut lines) = child::spawn(module_path!(), "exiting_program", &env);
        child::expect_line(&mut lines, "MAIN RETURNS").await;
        let status = tokio::time::timeout(Duration::from_secs(30), process.wait())
            .await
            .expect("the program exits")
            .unwrap();
        assert!(status.success(), "{mode}: {status}");
        // At once, not eventually: nothing of the program is left to send anything.
        let names: Vec<String> = match mode {
            "forgot" => (0..FORGOT_LOCKS)
                .map(|i| format!("exit:forgot:{i}"))
                .collect(),
            _ => vec![format!("exit:{mode}")],
        };
        for name in names {
            let lock = checker.lock(name);
            let left = lock.remaining_ttl().await.unwrap();
            assert_eq!(
                left,
                None,
                "{mode}: the lock outlived its program: {}",
                common::describe_lock(&mut admin, lock.key()).await
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_releases_held_locks_wakes_other_clients_and_closes_the_client() {
    let server = common::server();
    let client = common::client(&server).await;
    let other = common::client(&server).await;
    let lock = client.lock("shutdown:held").ttl(LEASE);
    let outer = lock.acquire().await.unwrap();
    let inner = outer.scope(lock.acquire()).await.unwrap();
    // A hard lease is not the watchdog's: shutdown leaves it, and its own release still goes
    // to Redis afterwards.
    let hard_lock = client.lock("shutdown:hard").lease(LEASE);
    let hard = hard_lock.acquire().await.unwrap();
    let waiter = {
        let l = other.lock("shutdown:held").wait(Duration::from_secs(10));
        tokio::spawn(async move { l.acquire().await })
    };
    let channel = lock.channel().to_owned();
    let mut admin = common::raw(&server.url()).await;
    common::eventually(Duration::from_secs(5), "the waiter subscribed", || {
        let (mut admin, channel) = (admin.clone(), channel.clone());
        async move {
            let reply: (String, i64) = dlock::redis::cmd("PUBSUB")
                .arg("NUMSUB")
                .arg(&channel)
                .query_async(&mut admin)
                .await
                .unwrap();
            reply.1 >= 1
        }
    })
    .await;

    client.clone().shutdown().await;
    let got = tokio::time::timeout(Duration::from_secs(5), waiter)
        .await
        .expect("the other client's waiter was not woken by the shutdown's release")
        .unwrap()
        .expect("the other client gets the lock");
    assert!(
        outer.is_lost() && inner.is_lost(),
        "guards of a shut-down client"
    );
    // Their release sends nothing: the lock is the other client's now.
    inner.release().await.expect("release after shutdown");
    outer.release().await.expect("release after shutdown");
    assert!(
        lock.is_locked().await.unwrap(),
        "the other client's hold was released"
    );
    got.release().await.unwrap();
    assert!(
        hard_lock.is_locked().await.unwrap(),
        "shutdown released a hard lease"
    );
    hard.release()
        .await
        .expect("a hard lease's release after shutdown");
    assert!(common::lock_keys(&mut admin).await.is_empty());
    match client.lock("shutdown:new").acquire().await {
        Err(e @ LockError::Closed { .. }) => assert!(e.to_string().contains("shutdown:new")),
        other => panic!("acquire after shutdown: {other:?}"),
    }
}
