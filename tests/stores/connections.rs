//! A PostgreSQL client keeps a fixed number of connections however many tasks wait: its
//! request connections plus one LISTEN connection, which carries every waiter's wake-up.

use std::time::Duration;

use dlock::testing::{postgres_available, PgServer};
use dlock::LockClient;

/// Client backends connected to `server`, the asking `psql` left out.
fn backends(server: &PgServer) -> usize {
    let n = server
        .psql(
            "SELECT count(*) FROM pg_stat_activity \
             WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()",
        )
        .expect("count backends");
    n.trim().parse().expect("a count")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_waiters_on_fifty_locks_use_the_same_two_connections() {
    if !postgres_available() {
        super::common::skipped("the PostgreSQL store", "no PostgreSQL server binaries");
        return;
    }
    let server = PgServer::start().expect("start PostgreSQL");
    let holder = LockClient::connect(&server.url()).await.expect("holder");
    let mut guards = Vec::new();
    for i in 0..50 {
        let g = holder
            .lock(format!("stores:conns:{i}"))
            .acquire()
            .await
            .expect("acquire");
        guards.push(g);
    }
    let waiting = LockClient::connect(&server.url())
        .await
        .expect("waiting client");
    let before = backends(&server);
    assert_eq!(
        before, 4,
        "two clients of one request and one LISTEN connection each"
    );
    let mut tasks = Vec::new();
    for i in 0..50 {
        let lock = waiting
            .lock(format!("stores:conns:{i}"))
            .wait(Duration::from_secs(30));
        tasks.push(tokio::spawn(async move {
            let g = lock
                .acquire()
                .await
                .unwrap_or_else(|e| panic!("waiter {i}: {e}"));
            g.release().await.expect("release");
        }));
    }
    // Every waiter refused and parked: each has asked PostgreSQL at least once by now, so a
    // connection per waiter would show.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(backends(&server), before, "waiting opened connections");
    for g in guards {
        g.release().await.expect("release");
    }
    let all = async {
        for t in tasks {
            t.await.expect("waiter");
        }
    };
    tokio::time::timeout(Duration::from_secs(10), all)
        .await
        .expect("50 waiters woken by 50 releases within 10 s (their leases are 30 s)");
    assert_eq!(backends(&server), before);
}

/// `connect` to a PostgreSQL database or role that does not exist fails there, with the
/// server's words naming it (not at the first acquire), and says it will not pass by itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_database_or_role_is_named_when_the_client_is_built() {
    if !postgres_available() {
        super::common::skipped("the PostgreSQL store", "no PostgreSQL server binaries");
        return;
    }
    let server = PgServer::start().expect("start PostgreSQL");
    let port = server.port();
    for (url, names) in [
        (
            format!("postgres://postgres@127.0.0.1:{port}/no_such_db"),
            "database \"no_such_db\" does not exist",
        ),
        (
            format!("postgres://no_such_role@127.0.0.1:{port}/postgres"),
            "role \"no_such_role\" does not exist",
        ),
    ] {
        let started = std::time::Instant::now();
        let e = LockClient::connect(&url)
            .await
            .expect_err("connected to what does not exist");
        let text = e.to_string();
        println!("{url}: {text} (after {:?})", started.elapsed());
        assert!(text.contains(names), "{text}");
        assert!(!e.is_transient(), "{text}");
        assert!(started.elapsed() < Duration::from_secs(10), "{text}");
    }
}

/// A ZooKeeper that is not there: `connect` fails at once, naming the store and the URL, and
/// says trying again later may help.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_zookeeper_that_is_not_there_is_named_at_connect() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .expect("a free port")
        .local_addr()
        .expect("its address")
        .port();
    let url = format!("zk://127.0.0.1:{port}/app");
    let started = std::time::Instant::now();
    let Err(e) = dlock::LockClient::builder(url.as_str())
        .connect_timeout(std::time::Duration::from_secs(2))
        .build()
        .await
    else {
        panic!("connected to nothing");
    };
    let text = e.to_string();
    assert!(
        text.starts_with(&format!("zookeeper at {url} failed during connect")) && e.is_transient(),
        "{text}"
    );
    assert!(
        started.elapsed() < std::time::Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
}
