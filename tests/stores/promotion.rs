//! Fencing tokens never go back across a promoted PostgreSQL standby, also one that missed the
//! last writes of its primary (asynchronous replication cut before them): the first token the
//! new primary hands out is greater than every token the old one did.
//! (Redis's counterpart is `tests/deployments`' replica promotion.)

use std::time::{Duration, Instant};

use dlock::testing::{postgres_available, PgServer};
use dlock::LockClient;

/// How long the standby may take to catch up, or to notice replication was cut.
const REPLICATION_WITHIN: Duration = Duration::from_secs(20);

/// Polls `sql` on `server` until it prints `want` (the state changes inside PostgreSQL, with no
/// event a test can await).
fn wait_for(server: &PgServer, sql: &str, want: &str) {
    let started = Instant::now();
    loop {
        let got = server.psql(sql).expect("psql");
        if got == want {
            return;
        }
        assert!(
            started.elapsed() < REPLICATION_WITHIN,
            "{sql} printed {got:?}, not {want:?}, for {REPLICATION_WITHIN:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Acquires and releases each of `keys` `times` times (plain locks and write locks), returning
/// every token handed out.
async fn take_turns(client: &LockClient, keys: &[&str], times: usize) -> Vec<u64> {
    let mut tokens = Vec::new();
    for _ in 0..times {
        for key in keys {
            let guard = client.lock(*key).acquire().await.expect("acquire");
            tokens.push(guard.fencing_token());
            guard.release().await.expect("release");
            let rw = client.read_write_lock(format!("{key}:rw"));
            let write = rw.write().acquire().await.expect("write");
            tokens.push(write.fencing_token());
            write.release().await.expect("release write");
        }
    }
    tokens
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_rise_across_a_promoted_standby_that_missed_the_last_writes() {
    if !postgres_available() {
        super::common::skipped("standby promotion", "no PostgreSQL server binaries");
        return;
    }
    let keys = ["stores:promoted:a", "stores:promoted:b"];
    let mut primary = PgServer::start().expect("start the primary");
    let standby = primary.standby().expect("start a standby");
    let old = LockClient::connect(&primary.url()).await.expect("connect");
    // Replicated: dlock's schema and these tokens reach the standby.
    let mut before = take_turns(&old, &keys, 3).await;
    let lsn = primary
        .psql("SELECT pg_current_wal_lsn()")
        .expect("primary's LSN");
    tokio::task::block_in_place(|| {
        wait_for(
            &standby,
            &format!("SELECT pg_last_wal_replay_lsn() >= '{lsn}'::pg_lsn"),
            "t",
        );
        // Cut replication: the standby keeps what it has and hears nothing more.
        standby
            .psql("ALTER SYSTEM SET primary_conninfo = ''")
            .expect("alter system");
        standby.psql("SELECT pg_reload_conf()").expect("reload");
        wait_for(&standby, "SELECT count(*) FROM pg_stat_wal_receiver", "0");
    });
    // Not replicated: the standby's counters stay behind these.
    before.extend(take_turns(&old, &keys, 3).await);
    // One still held when the primary dies.
    let held = (old.lock(keys[0]))
        .ttl(Duration::from_secs(3))
        .acquire()
        .await
        .expect("acquire");
    before.push(held.fencing_token());
    let missed = standby
        .psql(&format!(
            "SELECT pg_last_wal_receive_lsn() < '{}'::pg_lsn",
            primary
                .psql("SELECT pg_current_wal_lsn()")
                .expect("primary's LSN")
        ))
        .expect("standby's LSN");
    assert_eq!(
        missed, "t",
        "the standby received the last writes after all"
    );

    tokio::task::block_in_place(|| {
        standby.promote().expect("promote");
        primary.kill();
    });
    let highest = *before.iter().max().expect("tokens");
    let new = LockClient::connect(&standby.url())
        .await
        .expect("connect to the promoted standby");
    for key in keys {
        let guard = (new.lock(key))
            .wait(Duration::from_secs(10))
            .acquire()
            .await
            .expect("acquire on the new primary");
        assert!(
            guard.fencing_token() > highest,
            "{key}: token {} on the promoted standby, {highest} handed out before",
            guard.fencing_token()
        );
        guard.release().await.expect("release");
        let write = (new.read_write_lock(format!("{key}:rw")).write())
            .acquire()
            .await
            .expect("write on the new primary");
        assert!(
            write.fencing_token() > highest,
            "{key}:rw: token {} on the promoted standby, {highest} handed out before",
            write.fencing_token()
        );
        write.release().await.expect("release write");
    }
    // The old holder's primary is gone: its hold reads lost within its lease.
    tokio::time::timeout(Duration::from_secs(10), held.lost())
        .await
        .expect("the old holder never read lost");
}
