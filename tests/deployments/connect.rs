//! `connect` / `build` prove the client can work, or say what to change: a server that wants
//! a password, a wrong password, a database the server lacks, a URL of another scheme. Each
//! message is checked word for word, on a single server, a cluster and Sentinel.

use std::time::Duration;

use dlock::testing::{RedisCluster, RedisSentinel, RedisServer};
use dlock::{LockClient, LockError};

/// The message of a build that must fail with an invalid-argument error.
async fn refused(result: Result<LockClient, LockError>) -> String {
    match result {
        Ok(_) => panic!("the client was built"),
        Err(e @ LockError::InvalidArgument { .. }) => {
            assert!(!e.is_transient(), "{e}");
            e.to_string()
        }
        Err(other) => panic!("not an invalid argument: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_single_server_that_wants_a_password_wrong_passwords_and_missing_databases_are_named() {
    let server = RedisServer::start().expect("start redis-server");
    let url = server.url();

    let e = refused(LockClient::connect(&format!("{url}/99")).await).await;
    assert_eq!(
        e,
        format!("invalid argument: cannot use redis at {url}/99: database 99 does not exist on the server (its `databases` setting is lower; Redis Cluster has only database 0): change the number after the port in the URL")
    );

    let e = refused(LockClient::connect(&server.url_as("nobody", "secret")).await).await;
    let shown = format!("redis://nobody:***@127.0.0.1:{}", server.port());
    assert_eq!(
        e,
        format!("invalid argument: cannot use redis at {shown}: wrong password for user `nobody` (or the user does not exist or is disabled): check user:password@ in the URL")
    );
    assert!(!e.contains("secret"), "{e}");

    server
        .cli(&["CONFIG", "SET", "requirepass", "s3cret"])
        .expect("CONFIG SET requirepass");
    let e = refused(LockClient::connect(&url).await).await;
    assert_eq!(
        e,
        format!("invalid argument: cannot use redis at {url}: the server requires a password: put user:password@ in the URL (redis://:password@host:port for the default user)")
    );
    // With it, the client works.
    let port = server.port();
    let locks = LockClient::connect(&format!("redis://:s3cret@127.0.0.1:{port}"))
        .await
        .expect("connect with the password");
    let guard = locks.lock("connect:ok").acquire().await.expect("acquire");
    guard.release().await.expect("release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_url_of_another_scheme_lists_the_accepted_ones() {
    let e = refused(LockClient::connect("http://user:secret@127.0.0.1:6379").await).await;
    assert_eq!(
        e,
        "invalid argument: the URL `http://user:***@127.0.0.1:6379/` has the scheme `http`; dlock takes redis://, rediss://, redis+unix://, unix://, valkey://, valkeys://, valkey+unix://, postgres://, postgresql://, zk://, zk+tls://"
    );
    let e = refused(LockClient::connect("127.0.0.1:6379").await).await;
    assert!(e.contains("is not a URL (no scheme://)"), "{e}");
    let e = refused(
        LockClient::cluster_builder(["redis://127.0.0.1:1", "tcp://127.0.0.1:2"])
            .build()
            .await,
    )
    .await;
    assert!(
        e.contains("scheme `tcp`") && !e.contains("postgres://"),
        "{e}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_that_wants_a_password_is_named() {
    let cluster = RedisCluster::start(3, 0).expect("start a cluster");
    for node in cluster.masters().expect("masters") {
        cluster
            .server(node.port)
            .expect("node")
            .cli(&["CONFIG", "SET", "requirepass", "s3cret"])
            .expect("CONFIG SET requirepass");
    }
    let result = LockClient::cluster_builder(cluster.urls())
        .connect_timeout(Duration::from_secs(2))
        .build()
        .await;
    let e = refused(result).await;
    assert!(
        e.ends_with("the server requires a password: put user:password@ in the URL (redis://:password@host:port for the default user)"),
        "{e}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sentinel_primary_with_a_wrong_password_is_named() {
    let sentinel = RedisSentinel::start().expect("start sentinel");
    let result = LockClient::sentinel_builder(sentinel.sentinel_urls(), sentinel.master_name())
        .master_auth(Some("nobody"), "secret")
        .connect_timeout(Duration::from_secs(2))
        .build()
        .await;
    let e = refused(result).await;
    assert!(
        e.ends_with("wrong password for user `nobody` (or the user does not exist or is disabled): check user:password@ in the URL"),
        "{e}"
    );
    assert!(!e.contains("secret"), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_who_may_not_run_scripts_is_told_what_to_grant() {
    let server = RedisServer::start().expect("start redis-server");
    server
        .cli(&[
            "ACL",
            "SETUSER",
            "noscripts",
            "on",
            ">pw",
            "~*",
            "&*",
            "+@all",
            "-@scripting",
        ])
        .expect("ACL SETUSER");
    let e = refused(LockClient::connect(&server.url_as("noscripts", "pw")).await).await;
    assert!(
        e.contains("the ACL user `noscripts` may not run scripts")
            && e.ends_with("dlock's locks are scripts: grant it `+@scripting` (or at least `+evalsha +eval +fcall +function|load`)"),
        "{e}"
    );
}
