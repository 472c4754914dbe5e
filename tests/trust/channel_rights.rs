//! ACL users and dlock's pub/sub channels (issue 17 item 1). Since Redis 7 a new ACL user gets
//! no channels; such a user could take and free locks, but releases woke nobody and the
//! release itself returned an error for a lock it had freed. Now `build()` refuses the user
//! and names the rule to add, a release whose PUBLISH is refused (rights revoked later) still
//! reports the release, and a waiter that may not subscribe retries at the holder's PTTL.

use crate::common;

use std::time::{Duration, Instant};

use dlock::redis::aio::MultiplexedConnection;
use dlock::testing::RedisServer;
use dlock::{LockClient, LockError};

/// Creates (or changes) ACL user `locks` with password `pw`, all keys and commands, and the
/// channel rule `channels` (`resetchannels`: none) in place of any it had. (A new user gets no
/// channels from Redis 7 on, all of them on 6.2, where a pattern added to those is refused.)
async fn set_user(admin: &mut MultiplexedConnection, channels: &str) {
    let _: () = dlock::redis::cmd("ACL")
        .arg(&[
            "SETUSER",
            "locks",
            "on",
            ">pw",
            "~*",
            "+@all",
            "resetchannels",
            channels,
        ])
        .query_async(admin)
        .await
        .expect("ACL SETUSER");
}

fn url_of_locks(server: &RedisServer) -> String {
    format!("redis://locks:pw@127.0.0.1:{}", server.port())
}

#[tokio::test]
async fn build_refuses_a_user_without_channel_rights_and_names_the_rule() {
    let server = common::server();
    let mut admin = common::raw(&server.url()).await;
    set_user(&mut admin, "resetchannels").await;
    let err = LockClient::connect(&url_of_locks(&server))
        .await
        .expect_err("a user without channel rights cannot wake waiters");
    let text = err.to_string();
    assert!(matches!(err, LockError::InvalidArgument { .. }), "{err:?}");
    for part in ["`locks`", "PUBLISH", "ACL SETUSER locks &dlock:*"] {
        assert!(text.contains(part), "the error names {part:?}: {text}");
    }
    // The server's own refusal is quoted. Its wording is the server's: Redis 7 says "this user
    // has no permissions to access one of the channels used as arguments", Valkey 8 "No
    // permissions to access a channel".
    let said = text
        .split_once("Redis said: ")
        .and_then(|(_, rest)| rest.split_once("), so releases"))
        .map(|(said, _)| said.to_lowercase())
        .unwrap_or_default();
    assert!(
        said.contains("no permissions") && said.contains("channel"),
        "the error quotes the server's refusal of the channel: {text}"
    );
    assert!(!text.contains(":pw@"), "the password shows: {text}");

    // The rule it names is enough.
    set_user(&mut admin, "&dlock:*").await;
    let client = LockClient::connect(&url_of_locks(&server))
        .await
        .expect("with the rule, the client builds");
    client
        .lock("rights")
        .acquire()
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
}

#[tokio::test]
async fn a_release_whose_publish_is_refused_still_reports_the_release() {
    let server = common::server();
    let mut admin = common::raw(&server.url()).await;
    set_user(&mut admin, "&dlock:*").await;
    let client = LockClient::connect(&url_of_locks(&server)).await.unwrap();
    let lock = client.lock("revoked");
    let guard = lock.acquire().await.unwrap();
    set_user(&mut admin, "resetchannels").await;
    let _: () = dlock::redis::cmd("ACL")
        .arg("LOG")
        .arg("RESET")
        .query_async(&mut admin)
        .await
        .unwrap();
    guard
        .release()
        .await
        .expect("the lock was freed: the release happened");
    assert!(!lock.is_locked().await.unwrap(), "the lock is free");
    // The release's PUBLISH really was refused (a server that let it through would make this
    // test pass for nothing): Redis logged the denial of the lock's channel.
    let log: Vec<std::collections::HashMap<String, dlock::redis::Value>> = dlock::redis::cmd("ACL")
        .arg("LOG")
        .query_async(&mut admin)
        .await
        .unwrap();
    let denied = |e: &std::collections::HashMap<String, dlock::redis::Value>, field, want: &str| {
        e.get(field).is_some_and(|v| {
            dlock::redis::from_redis_value::<String>(v.clone()).is_ok_and(|s| s == want)
        })
    };
    assert!(
        log.iter()
            .any(|e| denied(e, "reason", "channel") && denied(e, "object", lock.channel())),
        "no ACL denial of `{}` logged: {log:?}",
        lock.channel()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_that_may_not_subscribe_retries_at_the_holders_pttl() {
    let server = common::server();
    let mut admin = common::raw(&server.url()).await;
    set_user(&mut admin, "&dlock:*").await;
    let waiter = LockClient::connect(&url_of_locks(&server)).await.unwrap();
    set_user(&mut admin, "resetchannels").await;
    let holder = common::client(&server).await;
    let lease = Duration::from_secs(2);
    let held = holder.lock("deaf").ttl(lease).acquire().await.unwrap();

    let scripts_before = common::script_calls(&mut admin).await;
    let lock = waiter.lock("deaf").wait(Duration::from_secs(20));
    let waiting = tokio::spawn(async move { lock.acquire().await });
    common::eventually(Duration::from_secs(10), "the waiter tried once", || {
        let mut admin = admin.clone();
        async move { common::script_calls(&mut admin).await > scripts_before }
    })
    .await;
    let released = Instant::now();
    held.release().await.unwrap();
    let guard = waiting
        .await
        .unwrap()
        .expect("the waiter gets the lock without hearing the release");
    let took = released.elapsed();
    println!("waiter without channel rights got the lock {took:?} after the release");
    assert!(
        took < lease + Duration::from_secs(3),
        "it retried at the holder's PTTL at the latest, not at the end of its wait: {took:?}"
    );
    guard.release().await.unwrap();
}
