//! Bad cluster seeds give clear, bounded errors naming the node, never a password.

use std::time::{Duration, Instant};

use dlock::testing::RedisServer;
use dlock::{LockClient, LockError};

use crate::bounded;

/// Far above every timeout in play (connect 1 s here, redis-rs's retries), far below a hang.
const BUILD: Duration = Duration::from_secs(20);

/// A loopback port nobody listens on (bound, then let go).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("bind a free port")
        .port()
}

async fn build(seeds: Vec<String>) -> (Result<LockClient, LockError>, Duration) {
    let started = Instant::now();
    let result = bounded(
        BUILD,
        "build() with bad seeds",
        LockClient::cluster_builder(seeds)
            .connect_timeout(Duration::from_secs(1))
            .response_timeout(Duration::from_secs(1))
            .build(),
    )
    .await;
    (result, started.elapsed())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_reachable_seed_is_a_connect_error_naming_every_seed() {
    let (a, b) = (free_port(), free_port());
    let seeds = vec![
        format!("redis://127.0.0.1:{a}"),
        format!("redis://127.0.0.1:{b}"),
    ];
    let (result, took) = build(seeds).await;
    let err = result.expect_err("nobody listens there");
    println!("no reachable seed: {took:?}: {err}");
    match &err {
        LockError::Connect { url, .. } => {
            assert!(url.contains(&format!("127.0.0.1:{a}")), "{url}");
            assert!(url.contains(&format!("127.0.0.1:{b}")), "{url}");
        }
        other => panic!("expected Connect, got {other:?}"),
    }
    assert!(err.to_string().contains(&format!("127.0.0.1:{a}")), "{err}");
    assert!(took < Duration::from_secs(10), "took {took:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_seed_that_accepts_but_never_answers_fails_within_the_timeouts() {
    // Accepts connections (the kernel does, from the backlog) and never says a word.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = silent.local_addr().unwrap().port();
    let (result, took) = build(vec![format!("redis://127.0.0.1:{port}")]).await;
    let err = result.expect_err("a silent seed cannot be a cluster");
    println!("silent seed: {took:?}: {err}");
    assert!(
        matches!(&err, LockError::Connect { url, .. } if url.contains(&port.to_string())),
        "{err:?}"
    );
    assert!(took < Duration::from_secs(10), "took {took:?}");
    drop(silent);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plain_server_as_a_seed_is_a_clear_error_naming_it() {
    let server = RedisServer::start().expect("redis-server");
    let (result, took) = build(vec![server.url()]).await;
    let err = result.expect_err("a server without cluster support is not a cluster");
    let text = err.to_string();
    println!("plain server as a cluster seed: {took:?}: {text}");
    assert!(
        matches!(&err, LockError::Connect { url, .. } if url.contains(&server.port().to_string())),
        "{err:?}"
    );
    assert!(
        text.contains(&server.url()),
        "the error must name the node: {text}"
    );
    assert!(
        text.to_lowercase().contains("cluster"),
        "the error must say it is not a cluster: {text}"
    );
    assert!(took < Duration::from_secs(10), "took {took:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_empty_seed_list_is_an_invalid_argument() {
    let err = LockClient::cluster_builder(Vec::<String>::new())
        .build()
        .await
        .expect_err("no seeds");
    assert!(
        matches!(&err, LockError::InvalidArgument { reason, .. } if reason.contains("seed")),
        "{err:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_seed_password_never_shows_in_errors_or_debug() {
    // Refused connections; then seeds redis-rs refuses to combine (two user names).
    for seeds in [
        &[
            "redis://user:secret@127.0.0.1:1",
            "redis://user:secret@127.0.0.1:2",
        ][..],
        &[
            "redis://user:secret@127.0.0.1:1",
            "redis://:secret@127.0.0.1:2",
        ],
    ] {
        let builder = LockClient::cluster_builder(seeds.iter().copied())
            .connect_timeout(Duration::from_secs(1));
        let debug = format!("{builder:?}");
        assert!(!debug.contains("secret"), "{debug}");
        assert!(debug.contains("127.0.0.1:1"), "{debug}");
        let err = bounded(BUILD, "build()", builder.build())
            .await
            .expect_err("nothing listens on ports 1 and 2");
        let (text, debug) = (err.to_string(), format!("{err:?}"));
        println!("seeds with passwords: {text}");
        assert!(matches!(err, LockError::Connect { .. }), "{debug}");
        assert!(!text.contains("secret"), "{text}");
        assert!(!debug.contains("secret"), "{debug}");
        assert!(text.contains("127.0.0.1:1"), "{text}");
    }
}
