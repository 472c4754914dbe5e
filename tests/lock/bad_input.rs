//! Bad and awkward input (DESIGN §3, §7): any name works and keeps one cluster slot; invalid
//! settings, unreachable or malformed URLs, and foreign data at the lock key give clear errors,
//! never a panic and never damage to the foreign data.

use crate::common;

use std::collections::HashSet;
use std::time::Duration;

use dlock::stock::cluster_slot;
use dlock::{LockClient, LockError};

fn awkward_names() -> Vec<String> {
    vec![
        "a{b}c".into(),
        "{".into(),
        "}".into(),
        "}{".into(),
        "{}".into(),
        "order:{42}:line:7".into(),
        "a:b:c".into(),
        "%7B".into(),
        "ünïcødé 🔒 名前".into(),
        "x".repeat(10 * 1024),
        "{:}".repeat(10 * 1024 / 3),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn awkward_names_work_and_keep_key_and_channel_in_one_slot() {
    let server = common::server();
    let client = common::client(&server).await;
    let other = common::client(&server).await;
    for name in awkward_names() {
        let short: String = name.chars().take(20).collect();
        let lock = client.lock(name.clone());
        assert_eq!(lock.name(), name);
        assert_eq!(
            cluster_slot(lock.key()),
            cluster_slot(lock.channel()),
            "{short}: key and channel in different slots"
        );
        // The hash tag is the whole escaped name: the first `}` closes it at the very end.
        let open = lock.key().find('{').unwrap();
        let close = lock.key()[open..].find('}').unwrap() + open;
        assert_eq!(
            close,
            lock.key().len() - 1,
            "{short}: the name broke out of the tag"
        );

        let g = lock
            .acquire()
            .await
            .unwrap_or_else(|e| panic!("{short}: {e}"));
        assert!(lock.is_locked().await.unwrap());
        assert!(other
            .lock(name.clone())
            .try_acquire()
            .await
            .unwrap()
            .is_none());
        // A waiter of the awkward name is woken through its channel.
        let waiter = {
            let l = other.lock(name.clone()).wait(Duration::from_secs(10));
            tokio::spawn(async move { l.acquire().await.map(|g| g.fencing_token()) })
        };
        let token = g.fencing_token();
        g.release().await.unwrap();
        let next = tokio::time::timeout(Duration::from_secs(5), waiter)
            .await
            .unwrap_or_else(|_| panic!("{short}: waiter not woken"))
            .unwrap()
            .unwrap();
        assert!(next > token);
        common::until_unlocked(&lock, Duration::from_secs(2)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn different_names_never_share_a_key() {
    let server = common::server();
    let client = common::client(&server).await;
    // Pairs that a naive `prefix{name}` or unescaped percent-encoding would merge.
    let names = [
        "a{b}", "a%7Bb%7D", "a%7Bb}", "a{b%7D", "a}b{", "ab", "{ab}", "%", "%25", "x:y", "x%3Ay",
    ];
    let keys: HashSet<String> = names
        .iter()
        .map(|n| client.lock(*n).key().to_owned())
        .collect();
    assert_eq!(
        keys.len(),
        names.len(),
        "two names mapped to one key: {keys:?}"
    );

    // And in Redis: all of them held at once, each by its own guard.
    let mut guards = Vec::new();
    for n in names {
        let g = client.lock(n).wait(Duration::ZERO).acquire().await;
        guards.push(g.unwrap_or_else(|e| panic!("{n}: {e}")));
    }
    let mut conn = common::raw(&server.url()).await;
    assert_eq!(common::lock_keys(&mut conn).await.len(), names.len());
    for g in guards {
        g.release().await.unwrap();
    }
    assert!(common::lock_keys(&mut conn).await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zero_ttl_zero_lease_both_and_empty_name_are_rejected_naming_the_lock() {
    let server = common::server();
    let client = common::client(&server).await;
    let cases = [
        ("zero-ttl", client.lock("zero-ttl").ttl(Duration::ZERO)),
        (
            "zero-lease",
            client.lock("zero-lease").lease(Duration::ZERO),
        ),
        // Redis leases are whole milliseconds: this would be a zero PEXPIRE.
        (
            "sub-ms",
            client.lock("sub-ms").ttl(Duration::from_micros(500)),
        ),
        (
            "both",
            client
                .lock("both")
                .ttl(Duration::from_secs(5))
                .lease(Duration::from_secs(5)),
        ),
        ("", client.lock("")),
    ];
    for (name, lock) in cases {
        for result in [
            lock.acquire().await.map(|_| ()),
            lock.try_acquire().await.map(|_| ()),
        ] {
            match result {
                Err(LockError::InvalidArgument { name: n, reason }) => {
                    assert_eq!(n, name);
                    assert!(!reason.is_empty());
                }
                other => panic!("{name:?}: expected InvalidArgument, got {other:?}"),
            }
        }
        let msg = lock.acquire().await.unwrap_err().to_string();
        if name.is_empty() {
            // No "for lock ``": the reason says the name is empty.
            assert!(
                !msg.contains("``") && msg.contains("name is empty"),
                "{msg}"
            );
        } else {
            assert!(msg.contains(&format!("`{name}`")), "{msg}");
        }
    }
    assert!(matches!(
        client.lock("").force_unlock().await,
        Err(LockError::InvalidArgument { .. })
    ));
    // Rejected before anything reached Redis.
    let mut conn = common::raw(&server.url()).await;
    let keys: Vec<String> = dlock::redis::cmd("KEYS")
        .arg("*")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert!(keys.is_empty(), "{keys:?}");
}

#[tokio::test]
async fn invalid_client_settings_are_rejected_before_connecting() {
    // Nothing listens here; the settings are checked first.
    let url = format!("redis://127.0.0.1:{}", free_port());
    let builds = [
        LockClient::builder(url.clone()).connections(0),
        LockClient::builder(url.clone()).key_prefix("app{x}:"),
        LockClient::builder(url.clone()).default_ttl(Duration::ZERO),
        LockClient::builder(url.clone()).response_timeout(Duration::ZERO),
    ];
    for b in builds {
        match b.build().await {
            Err(LockError::InvalidArgument { reason, .. }) => assert!(!reason.is_empty()),
            other => panic!("expected InvalidArgument, got {other:?}"),
        }
    }
}

#[tokio::test]
async fn an_unreachable_url_is_a_connect_error_naming_it() {
    let url = format!("redis://127.0.0.1:{}", free_port());
    let result = tokio::time::timeout(Duration::from_secs(30), LockClient::connect(&url))
        .await
        .expect("connect to a closed port hung");
    match result {
        Err(e @ LockError::Connect { .. }) => {
            assert!(e.to_string().contains(&url), "{e}");
            assert_eq!(e.lock_name(), None);
        }
        other => panic!("expected Connect, got {other:?}"),
    }
}

#[tokio::test]
async fn malformed_urls_are_errors_not_panics() {
    for url in [
        "",
        "not a url",
        "http://127.0.0.1:6379",
        "redis://",
        "redis://127.0.0.1:notaport",
        "redis://127.0.0.1:99999",
    ] {
        let result = tokio::time::timeout(Duration::from_secs(30), LockClient::connect(url))
            .await
            .unwrap_or_else(|_| panic!("connect({url:?}) hung"));
        let err = result.expect_err(url);
        assert!(
            matches!(
                err,
                LockError::Connect { .. } | LockError::InvalidArgument { .. }
            ),
            "{url:?}: {err:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_non_hash_value_at_the_lock_key_is_wrong_type_and_is_left_alone() {
    let server = common::server();
    let client = common::client(&server).await;
    let lock = client
        .lock("taken-by-a-string")
        .wait(Duration::from_millis(200));
    let mut conn = common::raw(&server.url()).await;
    let () = dlock::redis::cmd("SET")
        .arg(lock.key())
        .arg("someone's data")
        .query_async(&mut conn)
        .await
        .unwrap();

    let wrong_type = |r: Result<(), LockError>| match r {
        Err(e @ LockError::WrongType { .. }) => {
            assert!(e.to_string().contains("taken-by-a-string"), "{e}");
            assert!(e.to_string().contains(lock.key()), "{e}");
        }
        other => panic!("expected WrongType, got {other:?}"),
    };
    wrong_type(lock.acquire().await.map(drop));
    wrong_type(lock.try_acquire().await.map(drop));
    wrong_type(lock.force_unlock().await.map(drop));
    // Asking whether it is locked says the same, not "yes" (it answered Ok(true) before).
    wrong_type(lock.is_locked().await.map(drop));

    let value: String = dlock::redis::cmd("GET")
        .arg(lock.key())
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(value, "someone's data");
    // No orphan clean-up touched it either, a moment later.
    tokio::task::yield_now().await;
    let ttl: i64 = dlock::redis::cmd("PTTL")
        .arg(lock.key())
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(ttl, -1, "the foreign key got an expiry");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_overwritten_with_a_string_while_held_is_lost_and_the_string_survives() {
    let server = common::server();
    let client = common::client(&server).await;
    let lock = client.lock("overwritten").ttl(Duration::from_secs(1));
    let g = lock.acquire().await.unwrap();
    let mut conn = common::raw(&server.url()).await;
    let () = dlock::redis::cmd("SET")
        .arg(lock.key())
        .arg("clobbered")
        .query_async(&mut conn)
        .await
        .unwrap();
    tokio::time::timeout(Duration::from_secs(5), g.lost())
        .await
        .expect("the watchdog did not notice the lock was overwritten");
    let r = g.release().await;
    assert!(
        matches!(
            r,
            Err(LockError::NotHeld { .. } | LockError::WrongType { .. })
        ),
        "{r:?}"
    );
    let value: String = dlock::redis::cmd("GET")
        .arg(lock.key())
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(value, "clobbered");
}

/// A loopback port nothing listens on (bound once by us, then closed).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}
