//! What a replica-synced lock costs: `Lock::acquire` + `LockGuard::release` with and without
//! `synced_replicas(1, ..)`, on a primary with one replica, each as a ratio to a PING round
//! trip of the same round; rounds interleave the two.
//!
//! `cargo run --release --example synced` (starts its own primary and replica).

#[path = "support/mod.rs"]
mod support;

use std::time::Duration;

use dlock::testing::RedisServer;
use dlock::LockClient;
use support::{fmt_rtt, lock_cycle, median_of, ping_rtt};

const SAMPLES: usize = 2000;
const ROUNDS: usize = 5;

/// A replica of `primary`, once it confirms writes (WAIT answers 1).
async fn replica_of(primary: &RedisServer) -> RedisServer {
    let port = primary.port().to_string();
    let replica = RedisServer::start_with_args(&["--replicaof", "127.0.0.1", &port])
        .expect("start the replica");
    let client = dlock::redis::Client::open(primary.url()).expect("url");
    let mut conn = client
        .get_multiplexed_async_connection()
        .await
        .expect("connect");
    for _ in 0..200 {
        let _: () = dlock::redis::cmd("SET")
            .arg("probe")
            .arg(1)
            .query_async(&mut conn)
            .await
            .expect("SET");
        let acked: i64 = dlock::redis::cmd("WAIT")
            .arg(1)
            .arg(50)
            .query_async(&mut conn)
            .await
            .expect("WAIT");
        if acked == 1 {
            return replica;
        }
    }
    panic!("the replica never confirmed a write");
}

#[tokio::main]
async fn main() {
    let primary = RedisServer::start().expect("start redis-server");
    let _replica = replica_of(&primary).await;
    let url = primary.url();
    let plain = LockClient::connect(&url).await.expect("connect");
    let synced = LockClient::builder(url.as_str())
        .synced_replicas(1, Duration::from_secs(1))
        .build()
        .await
        .expect("connect");
    let (plain_lock, synced_lock) = (plain.lock("synced:plain"), synced.lock("synced:synced"));
    println!(
        "Lock::acquire + LockGuard::release, median of {SAMPLES}, primary + 1 replica on loopback"
    );
    for round in 0..ROUNDS {
        let rtt = ping_rtt(&url, 2000).await;
        let unsynced = median_of(SAMPLES, |_| lock_cycle(plain_lock.clone())).await;
        let with_wait = median_of(SAMPLES, |_| lock_cycle(synced_lock.clone())).await;
        println!(
            "round {round}: PING {rtt:>7.1?} | unsynced {} | synced_replicas(1) {} | extra {}",
            fmt_rtt(unsynced, rtt),
            fmt_rtt(with_wait, rtt),
            fmt_rtt(with_wait.saturating_sub(unsynced), rtt),
        );
    }
}
