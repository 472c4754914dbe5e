//! A frozen link between the holder and the store (a proxy that stops forwarding without closing
//! anything, as a dead NAT entry or a stuck load balancer does): the holder reads lost before
//! another client, with a working link, acquires the lock.

use std::time::{Duration, Instant};

use super::both::stores;
use super::common::proxy::Proxy;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_behind_a_frozen_link_reads_lost_before_another_client_acquires() {
    for store in stores() {
        let proxy = Proxy::start(store.port());
        let holder = dlock::LockClient::builder(store.url_via(proxy.port()))
            .response_timeout(Duration::from_millis(500))
            // ZooKeeper's lease is the session, not the lock's TTL.
            .zookeeper_session_timeout(super::both::ZK_SESSION)
            .build()
            .await
            .unwrap_or_else(|e| panic!("{}: connect through the proxy: {e}", store.name()));
        let guard = (holder.lock("stores:frozen-link"))
            .ttl(Duration::from_secs(2))
            .acquire()
            .await
            .expect("acquire");
        let token = guard.fencing_token();
        let lost = tokio::spawn({
            let lost = guard.lost();
            async move {
                lost.await;
                Instant::now()
            }
        });
        proxy.freeze();
        let frozen_at = Instant::now();
        let other = store.client().await;
        let got = (other.lock("stores:frozen-link"))
            .wait(Duration::from_secs(15))
            .acquire()
            .await
            .unwrap_or_else(|e| panic!("{}: the other client: {e}", store.name()));
        let got_at = Instant::now();
        assert!(
            guard.is_lost(),
            "{}: another client holds the lock and the holder does not know",
            store.name()
        );
        let lost_at = lost.await.expect("lost task");
        assert!(lost_at <= got_at, "{}", store.name());
        // Its validity, counted from the last renewal it sent, ends within the 2 s lease.
        let lost_after = lost_at.duration_since(frozen_at);
        assert!(
            lost_after <= Duration::from_secs(3),
            "{}: lost {lost_after:?} into the freeze of a 2 s lease",
            store.name()
        );
        assert!(got.fencing_token() > token, "{}", store.name());
        got.release().await.expect("release");
        proxy.thaw();
        let released = tokio::time::timeout(Duration::from_secs(20), guard.release())
            .await
            .unwrap_or_else(|_| panic!("{}: the lost hold's release hung", store.name()));
        assert!(
            released.is_err(),
            "{}: a lost hold released without an error",
            store.name()
        );
    }
}

/// Polls `sql` on `server` until it prints `want`: what is awaited happens inside PostgreSQL.
fn pg_wait_for(server: &dlock::testing::PgServer, sql: &str, want: &str) {
    let started = Instant::now();
    loop {
        let got = server.psql(sql).expect("psql");
        if got == want {
            return;
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "{sql} printed {got:?}, not {want:?}, for 20 s"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// An acquire that timed out on a frozen link is undone on a new connection; when the frozen
/// request reaches the server after that undo, it must not leave a lock held by nobody.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acquire_landing_after_its_undo_leaves_the_lock_free() {
    late_acquire("plain_release(", |c| c.lock("stores:late-acquire")).await;
}

/// The same for the write side of a read-write lock (its rows are per side and owner).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_acquire_landing_after_its_undo_leaves_the_lock_free() {
    late_acquire("rw_release(", |c| {
        c.read_write_lock("stores:late-write").write()
    })
    .await;
}

/// The same for the fair lock: the late request is neither granted nor queued (a place would
/// hold the lock's next grant for nobody until it expired).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fair_acquire_landing_after_its_undo_leaves_the_lock_free() {
    late_acquire("fair_release(", |c| c.fair_lock("stores:late-fair")).await;
}

/// Freezes the command connection of a client, lets its acquire of `lock` time out and be
/// undone (by the SQL function `release_fn`) on a new connection, then lets the frozen acquire
/// land: another client must still get the lock at once.
async fn late_acquire(release_fn: &str, lock: impl Fn(&dlock::LockClient) -> dlock::Lock) {
    for store in stores() {
        let super::both::Store::Postgres(server) = &store else {
            continue;
        };
        let proxy = Proxy::start(store.port());
        let a = dlock::LockClient::builder(store.url_via(proxy.port()))
            .response_timeout(Duration::from_millis(500))
            .build()
            .await
            .expect("connect through the proxy");
        // Connection 0 carries the commands (connection 1 is the listener); the server knows
        // it by the port the proxy connected from.
        let command_pid = server
            .psql(&format!(
                "SELECT pid FROM pg_stat_activity WHERE client_port = {}",
                proxy.upstream_port(0)
            ))
            .expect("pg_stat_activity");
        assert!(!command_pid.is_empty() && !command_pid.contains('\n'));
        proxy.freeze_connection(0);
        let failed = (lock(&a))
            .ttl(Duration::from_secs(30))
            .wait(Duration::ZERO)
            .acquire()
            .await;
        assert!(failed.is_err(), "acquired through a frozen connection");
        tokio::task::block_in_place(|| {
            // The undo ran on a new connection...
            pg_wait_for(
                server,
                &format!(
                    "SELECT count(*) > 0 FROM pg_stat_activity WHERE query LIKE '%{release_fn}%' \
                     AND state = 'idle'"
                ),
                "t",
            );
            // ...then the frozen acquire (and the old connection's close behind it) lands.
            proxy.thaw_connection(0);
            pg_wait_for(
                server,
                &format!("SELECT count(*) FROM pg_stat_activity WHERE pid = {command_pid}"),
                "0",
            );
        });
        let b = store.client().await;
        let got = (lock(&b))
            .try_acquire()
            .await
            .expect("try")
            .unwrap_or_else(|| {
                panic!("a late acquire of an owner that gave up holds the lock for its lease")
            });
        got.release().await.expect("release");
    }
}
