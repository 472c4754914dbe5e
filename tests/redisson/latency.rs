//! Wake-up latency across sides, for the record (not a timed assert): run with
//! `cargo test --release --test redisson latency -- --ignored --nocapture`.
//!
//! One sample: the holder on one side releases after the waiter on the other side has parked
//! and the lock sat idle for `IDLE`; measured from just before the release is sent until the
//! waiter's acquire returns (the release's round trip, the message, the waiter's retry). The
//! yardstick is a PING on a connection that sat idle for the same time, measured in the same
//! run; figures are printed as p50/p99 in those PING round trips.

use std::sync::Arc;
use std::time::Duration;

use dlock::testing::RedisCluster;
use dlock::LockClient;
use tokio::time::Instant;

use crate::common;
use crate::java::{parked_java_waiter, JavaClient, Side};

/// Samples per direction (`DLOCK_LATENCY_SAMPLES` overrides).
fn samples() -> usize {
    std::env::var("DLOCK_LATENCY_SAMPLES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200)
}
const IDLE: Duration = Duration::from_millis(20);

fn pct(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

fn report(what: &str, mut wake: Vec<Duration>, mut ping: Vec<Duration>) {
    wake.sort();
    ping.sort();
    let (p50, p99) = (pct(&wake, 0.5), pct(&wake, 0.99));
    let (q50, q99) = (pct(&ping, 0.5), pct(&ping, 0.99));
    let ratio = |a: Duration, b: Duration| a.as_secs_f64() / b.as_secs_f64();
    println!(
        "{what}: wake p50 {p50:?} p99 {p99:?}; idle PING p50 {q50:?} p99 {q99:?}; \
         wake in PING p50s: p50 {:.1}, p99 {:.1}; p99 wake / p99 PING {:.1}",
        ratio(p50, q50),
        ratio(p99, q50),
        ratio(p99, q99),
    );
}

async fn idle_ping(conn: &mut java_conn::Conn) -> Duration {
    tokio::time::sleep(IDLE).await;
    let t = Instant::now();
    let _: String = dlock::redis::cmd("PING").query_async(conn).await.unwrap();
    t.elapsed()
}

mod java_conn {
    pub type Conn = crate::java::JConn;
}

async fn measure(client: &LockClient, java: &Arc<JavaClient>, name: &str, label: &str) {
    let lock = client.redisson_lock(name).wait(Duration::from_secs(20));
    let mut ping_conn = java.conn();
    let (mut to_dlock, mut to_java, mut pings) = (vec![], vec![], vec![]);
    for i in 0..samples() {
        // Java releases, dlock wakes.
        assert!(
            java.try_lock(name, 1, Side::Plain, Duration::ZERO, None)
                .await
        );
        let waiter = tokio::spawn({
            let lock = lock.clone();
            async move {
                let g = lock.acquire().await.unwrap();
                (Instant::now(), g)
            }
        });
        crate::lock::wait_subscribed(&JavaClient::channel(name, Side::Plain), java).await;
        tokio::time::sleep(IDLE).await;
        let released = Instant::now();
        assert_eq!(java.unlock(name, 1, Side::Plain).await, Ok(true));
        let (got, g) = waiter.await.unwrap();
        to_dlock.push(got - released);

        // dlock releases, Java wakes.
        let tid = 100 + i as u64;
        let java_waiter = parked_java_waiter(java, name, tid, Side::Plain).await;
        tokio::time::sleep(IDLE).await;
        let released = Instant::now();
        g.release().await.unwrap();
        let (got, ok) = java_waiter.await.unwrap();
        assert!(ok);
        to_java.push(got - released);
        assert_eq!(java.unlock(name, tid, Side::Plain).await, Ok(true));
        pings.push(idle_ping(&mut ping_conn).await);
    }
    report(
        &format!("{label}, Java unlock -> dlock waiter"),
        to_dlock,
        pings.clone(),
    );
    report(
        &format!("{label}, dlock release -> Java waiter"),
        to_java,
        pings,
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement: run in release with --ignored --nocapture"]
async fn latency_wake_ups_across_sides() {
    let server = common::server();
    let client = common::client(&server).await;
    let java = Arc::new(JavaClient::single(&server.url(), Duration::from_secs(30)).await);
    measure(&client, &java, "latency", "one server (PUBLISH)").await;

    let cluster = RedisCluster::start(3, 0).expect("start a cluster");
    let client = LockClient::cluster_builder(cluster.urls())
        .build()
        .await
        .unwrap();
    let java = Arc::new(JavaClient::cluster(&cluster.urls(), Duration::from_secs(30)).await);
    measure(&client, &java, "latency", "cluster (SPUBLISH)").await;
}
