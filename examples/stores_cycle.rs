//! The three stores side by side: the uncontended acquire + release cycle and the handoff to a
//! waiter of another client, each as a ratio to a round trip to the same server in the same
//! run: a PING (Redis), a `SELECT 1` (PostgreSQL), an `exists` (ZooKeeper). Throw-away servers,
//! one client each. On ZooKeeper also the peer on the same server: the lock recipe of
//! `zookeeper-client` (the client dlock's store is built on; `LockPrefix::new_curator`, so the
//! same node names as dlock's and Curator's mutex), whose release is a delete sent in the
//! background when its guard drops (dlock's `release()` waits for the delete's reply).
//!
//! `cargo run --release --features postgres,zookeeper --example stores_cycle [-- --rounds 3]`
//!
//! A handoff is timed from the holder's `release()` to the waiter's `acquire()` returning; its
//! unit is the same round trip sent after the same idle time (20 ms), since waking parked
//! threads costs as much as the round trip on a small VM.

use std::time::{Duration, Instant};

use dlock::testing::{PgServer, RedisServer, ZkServer};
use dlock::LockClient;
use zookeeper_client as zk;

const CYCLES: usize = 400;
const HANDOFFS: usize = 100;
const IDLE: Duration = Duration::from_millis(20);

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

/// One round trip to the store's server, by the store's own cheapest request.
async fn round_trip(store: &str, url: &str, client: &LockClient) -> Duration {
    match store {
        "redis" => {
            let c = dlock::redis::Client::open(url).expect("redis url");
            let mut conn = c.get_multiplexed_async_connection().await.expect("connect");
            let t = Instant::now();
            let _: String = dlock::redis::cmd("PING")
                .query_async(&mut conn)
                .await
                .expect("PING");
            t.elapsed()
        }
        "postgres" => {
            let (pg, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls)
                .await
                .expect("connect");
            let task = tokio::spawn(conn);
            let t = Instant::now();
            pg.simple_query("SELECT 1").await.expect("SELECT 1");
            let took = t.elapsed();
            drop(pg);
            let _ = task.await;
            took
        }
        _ => {
            let _ = client;
            let zk = zk_session(url).await;
            let t = Instant::now();
            zk.check_stat("/").await.expect("exists");
            t.elapsed()
        }
    }
}

/// A session of the peer's own client to the ZooKeeper at `url` (`zk://host:port`).
async fn zk_session(url: &str) -> zk::Client {
    let hosts = url.strip_prefix("zk://").unwrap_or(url);
    zk::Client::connect(hosts)
        .await
        .expect("connect to ZooKeeper")
}

/// Round trips over one connection (opened once), `n` of them, each after `idle`.
async fn rtts(store: &str, url: &str, client: &LockClient, n: usize, idle: Duration) -> Duration {
    let mut samples = Vec::with_capacity(n);
    match store {
        "redis" => {
            let c = dlock::redis::Client::open(url).expect("redis url");
            let mut conn = c.get_multiplexed_async_connection().await.expect("connect");
            for _ in 0..n {
                tokio::time::sleep(idle).await;
                let t = Instant::now();
                let _: String = dlock::redis::cmd("PING")
                    .query_async(&mut conn)
                    .await
                    .expect("PING");
                samples.push(t.elapsed());
            }
        }
        "postgres" => {
            let (pg, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls)
                .await
                .expect("connect");
            let task = tokio::spawn(conn);
            for _ in 0..n {
                tokio::time::sleep(idle).await;
                let t = Instant::now();
                pg.simple_query("SELECT 1").await.expect("SELECT 1");
                samples.push(t.elapsed());
            }
            drop(pg);
            let _ = task.await;
        }
        _ => {
            let _ = round_trip(store, url, client).await;
            let zk = zk_session(url).await;
            for _ in 0..n {
                tokio::time::sleep(idle).await;
                let t = Instant::now();
                zk.check_stat("/").await.expect("exists");
                samples.push(t.elapsed());
            }
        }
    }
    median(samples)
}

async fn cycle(client: &LockClient) -> Duration {
    let lock = client.lock("cycle");
    let mut samples = Vec::with_capacity(CYCLES);
    for _ in 0..CYCLES {
        let t = Instant::now();
        lock.acquire()
            .await
            .expect("acquire")
            .release()
            .await
            .expect("release");
        samples.push(t.elapsed());
    }
    median(samples)
}

async fn handoff(a: &LockClient, b: &LockClient) -> Duration {
    let mut samples = Vec::with_capacity(HANDOFFS);
    for _ in 0..HANDOFFS {
        let held = a.lock("handoff").acquire().await.expect("acquire");
        let waiter = tokio::spawn({
            let lock = b.lock("handoff");
            async move {
                let g = lock
                    .wait(Duration::from_secs(10))
                    .acquire()
                    .await
                    .expect("waiter");
                (Instant::now(), g)
            }
        });
        tokio::time::sleep(IDLE).await; // the waiter parks
        let t = Instant::now();
        held.release().await.expect("release");
        let (got, g) = waiter.await.expect("waiter task");
        samples.push(got - t);
        g.release().await.expect("release");
    }
    median(samples)
}

/// `zookeeper-client`'s lock on `dir` with Curator's node names, parents made as needed.
async fn recipe_lock<'a>(client: &'a zk::Client, dir: &str) -> zk::LockClient<'a> {
    let persistent = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
    let options = zk::LockOptions::new(zk::Acls::anyone_all())
        .with_ancestor_options(persistent)
        .expect("lock options");
    let prefix = zk::LockPrefix::new_curator(dir, "lock-").expect("lock prefix");
    client
        .lock(prefix, b"", options)
        .await
        .expect("recipe lock")
}

/// The peer's cycle: its lock, then its guard dropped (which sends the delete).
async fn recipe_cycle(client: &zk::Client) -> Duration {
    let mut samples = Vec::with_capacity(CYCLES);
    for _ in 0..CYCLES {
        let t = Instant::now();
        drop(recipe_lock(client, "/recipe-cycle").await);
        samples.push(t.elapsed());
    }
    median(samples)
}

/// The peer's handoff: from the holder's guard dropped to the waiter's lock returning.
async fn recipe_handoff(a: &zk::Client, b: &zk::Client) -> Duration {
    let mut samples = Vec::with_capacity(HANDOFFS);
    for _ in 0..HANDOFFS {
        let held = recipe_lock(a, "/recipe-handoff").await;
        let waiter = tokio::spawn({
            let b = b.clone();
            async move {
                let g = recipe_lock(&b, "/recipe-handoff").await.into_owned();
                (Instant::now(), g)
            }
        });
        tokio::time::sleep(IDLE).await; // the waiter parks
        let t = Instant::now();
        drop(held);
        let (got, g) = waiter.await.expect("waiter task");
        samples.push(got - t);
        drop(g);
    }
    median(samples)
}

#[tokio::main]
async fn main() {
    let rounds: usize = std::env::args()
        .skip_while(|a| a != "--rounds")
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap_or(3);
    let redis = RedisServer::start().expect("start redis-server");
    let pg = PgServer::start().expect("start PostgreSQL");
    let zk = ZkServer::start().expect("start ZooKeeper");
    let stores = [
        ("redis", redis.url()),
        ("postgres", pg.url()),
        ("zookeeper", zk.url()),
    ];
    println!(
        "store       round  rtt µs  cycle µs  cycle/rtt  idle rtt µs  handoff µs  handoff/idle rtt"
    );
    for round in 1..=rounds {
        // Stores in turn within each round, so drift on the machine hits all of them.
        for (store, url) in &stores {
            let a = LockClient::connect(url).await.expect("connect");
            let b = LockClient::connect(url).await.expect("connect");
            let _ = cycle(&a).await; // warm up
            let rtt = rtts(store, url, &a, CYCLES, Duration::ZERO).await;
            let c = cycle(&a).await;
            let idle_rtt = rtts(store, url, &a, HANDOFFS, IDLE).await;
            let h = handoff(&a, &b).await;
            println!(
                "{store:<10}  {round:>5}  {:>6.0}  {:>8.0}  {:>9.2}  {:>11.0}  {:>10.0}  {:>16.2}",
                rtt.as_secs_f64() * 1e6,
                c.as_secs_f64() * 1e6,
                c.as_secs_f64() / rtt.as_secs_f64(),
                idle_rtt.as_secs_f64() * 1e6,
                h.as_secs_f64() * 1e6,
                h.as_secs_f64() / idle_rtt.as_secs_f64(),
            );
            a.shutdown().await;
            b.shutdown().await;
            if *store == "zookeeper" {
                // The peer on the same server, right after dlock, with the same units.
                let (a, b) = (zk_session(url).await, zk_session(url).await);
                let _ = recipe_cycle(&a).await; // warm up
                let c = recipe_cycle(&a).await;
                let h = recipe_handoff(&a, &b).await;
                println!(
                    "{:<10}  {round:>5}  {:>6.0}  {:>8.0}  {:>9.2}  {:>11.0}  {:>10.0}  {:>16.2}",
                    "zk recipe",
                    rtt.as_secs_f64() * 1e6,
                    c.as_secs_f64() * 1e6,
                    c.as_secs_f64() / rtt.as_secs_f64(),
                    idle_rtt.as_secs_f64() * 1e6,
                    h.as_secs_f64() * 1e6,
                    h.as_secs_f64() / idle_rtt.as_secs_f64(),
                );
            }
        }
    }
}
