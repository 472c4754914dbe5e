//! A replica promoted to master (DESIGN §8): the lock, its lease and its fencing counter were
//! replicated, so the new master keeps excluding until the old lease runs out, and the next
//! holder's token is still larger. The old holder cannot renew on the dead master and is told.

use crate::common;

use std::time::{Duration, Instant};

use dlock::testing::RedisServer;

async fn info_replication(url: &str) -> String {
    let mut conn = common::raw(url).await;
    dlock::redis::cmd("INFO")
        .arg("replication")
        .query_async(&mut conn)
        .await
        .expect("INFO replication")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_promoted_replica_keeps_the_lock_until_its_lease_ends() {
    let mut master = common::server();
    let port = master.port().to_string();
    let replica = RedisServer::start_with_args(&["--replicaof", "127.0.0.1", &port]).unwrap();
    common::eventually(Duration::from_secs(10), "replica linked", || async {
        info_replication(&replica.url())
            .await
            .contains("master_link_status:up")
    })
    .await;

    let old = common::client(&master).await;
    let ttl = Duration::from_secs(2);
    let guard = old.lock("failover").ttl(ttl).acquire().await.unwrap();
    let old_token = guard.fencing_token();
    // Make sure the replica has the lock before the master dies (WAIT 1 replica, 5 s).
    let mut admin = common::raw(&master.url()).await;
    let acked: i64 = dlock::redis::cmd("WAIT")
        .arg(1)
        .arg(5000)
        .query_async(&mut admin)
        .await
        .unwrap();
    assert_eq!(acked, 1, "replica did not acknowledge the lock write");
    // WAIT only waits for the writes of the connection that sends it, not the client's: wait
    // until the replica really serves the lock key.
    let key = old.lock("failover").key().to_owned();
    common::eventually(Duration::from_secs(10), "replica has the lock key", || {
        let (url, key) = (replica.url(), key.clone());
        async move {
            let mut r = common::raw(&url).await;
            dlock::redis::cmd("EXISTS")
                .arg(&key)
                .query_async::<i64>(&mut r)
                .await
                .is_ok_and(|n| n == 1)
        }
    })
    .await;

    master.kill();
    let mut promote = common::raw(&replica.url()).await;
    let () = dlock::redis::cmd("REPLICAOF")
        .arg("NO")
        .arg("ONE")
        .query_async(&mut promote)
        .await
        .unwrap();
    let promoted_at = Instant::now();

    let new = common::client(&replica).await;
    let lock = new.lock("failover").wait(Duration::from_secs(10));
    assert!(
        lock.is_locked().await.unwrap(),
        "the replicated lock vanished on promotion"
    );
    let taken = lock
        .acquire()
        .await
        .expect("acquire on the promoted replica");
    let waited = promoted_at.elapsed();
    // The watchdog renewed at most ttl/3 before the kill, so at least ~2/3 of the lease was
    // left at promotion: the new holder waits for it, but not much past a whole lease.
    assert!(
        waited >= ttl / 3,
        "got the lock after {waited:?}: the replicated lease did not exclude"
    );
    assert!(
        waited <= ttl + Duration::from_secs(2),
        "waited {waited:?}, far past the {ttl:?} lease"
    );
    assert!(
        taken.fencing_token() > old_token,
        "token went backwards across failover: {} after {old_token}",
        taken.fencing_token()
    );

    // The old holder's watchdog cannot reach its (dead) master: it must report the loss.
    tokio::time::timeout(ttl + Duration::from_secs(3), guard.lost())
        .await
        .expect("old holder never learned it lost the lock");
    assert!(guard.is_lost());
    assert!(guard.release().await.is_err());
    assert!(
        lock.is_locked().await.unwrap(),
        "new holder's lock survived"
    );
    taken.release().await.unwrap();
}
