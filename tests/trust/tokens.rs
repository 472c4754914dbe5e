//! Fencing tokens never go backwards (issue 7, item 2; DESIGN §4): every free -> held
//! transition hands out a token strictly above every token handed out before, also when Redis
//! comes back with older data than the tokens it already gave out: a restart from an older RDB
//! snapshot, a restart from an older AOF, or the promotion of a replica that missed the last
//! acquires. Each test records every token it saw, rolls Redis back, and checks the next token
//! is above all of them and that no token went to two holders.

use crate::common;

use std::path::Path;
use std::time::Duration;

use dlock::testing::{Persistence, RedisServer};
use dlock::LockClient;

const NAME: &str = "trust:token";

/// `n` acquire/release cycles of `NAME`; appends each token, checking each is above the last.
async fn cycles(client: &LockClient, n: usize, tokens: &mut Vec<u64>) {
    for _ in 0..n {
        let guard = client
            .lock(NAME)
            .wait(Duration::from_secs(5))
            .acquire()
            .await
            .expect("acquire");
        let token = guard.fencing_token();
        if let Some(&last) = tokens.last() {
            assert!(
                token > last,
                "token {token} after {last} on the same server"
            );
        }
        tokens.push(token);
        guard.release().await.expect("release");
    }
}

/// Takes the lock once more after the roll-back and checks its token against all earlier ones.
async fn check_next_token(client: &LockClient, tokens: &[u64], what: &str) {
    let max = *tokens.iter().max().expect("tokens were recorded");
    let guard = client
        .lock(NAME)
        .wait(Duration::from_secs(5))
        .acquire()
        .await
        .unwrap_or_else(|e| panic!("{what}: acquire after the roll-back: {e}"));
    let token = guard.fencing_token();
    println!(
        "{what}: {} tokens before ({} .. {max}), next token {token} ({:+} against the max)",
        tokens.len(),
        tokens[0],
        token as i128 - max as i128
    );
    let reused = tokens.contains(&token);
    guard.release().await.expect("release");
    assert!(
        !reused,
        "{what}: token {token} was handed to two holders (tokens before: {tokens:?})"
    );
    assert!(
        token > max,
        "{what}: token went backwards: {token} after a max of {max} (tokens before: {tokens:?})"
    );
}

async fn cmd_ok(url: &str, args: &[&str]) {
    let mut conn = common::raw(url).await;
    let mut cmd = dlock::redis::cmd(args[0]);
    for a in &args[1..] {
        cmd.arg(*a);
    }
    let reply: dlock::redis::Value = cmd
        .query_async(&mut conn)
        .await
        .unwrap_or_else(|e| panic!("{args:?}: {e}"));
    println!("{args:?} -> {reply:?}");
}

async fn info(url: &str, section: &str) -> String {
    let mut conn = common::raw(url).await;
    dlock::redis::cmd("INFO")
        .arg(section)
        .query_async(&mut conn)
        .await
        .expect("INFO")
}

async fn fence_value(url: &str, fence: &str) -> Option<u64> {
    let mut conn = common::raw(url).await;
    dlock::redis::cmd("GET")
        .arg(fence)
        .query_async(&mut conn)
        .await
        .expect("GET fence")
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("create copy dir");
    for entry in std::fs::read_dir(from).expect("read dir") {
        let entry = entry.expect("dir entry");
        assert!(
            entry.file_type().expect("file type").is_file(),
            "unexpected sub-directory {:?}",
            entry.path()
        );
        std::fs::copy(entry.path(), to.join(entry.file_name())).expect("copy file");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_rise_after_a_restart_from_an_older_rdb_snapshot() {
    let mut server = RedisServer::start_persistent(Persistence::Rdb).expect("redis-server");
    let client = common::client(&server).await;
    let mut tokens = Vec::new();
    cycles(&client, 3, &mut tokens).await;
    cmd_ok(&server.url(), &["SAVE"]).await;
    // Handed out after the snapshot: lost with the SIGKILL, but the holders had them.
    cycles(&client, 5, &mut tokens).await;
    drop(client);

    server.kill();
    server.restart().expect("restart from the snapshot");
    let client = common::client(&server).await;
    let fence = dlock::inspect::fence_counter(dlock::DEFAULT_PREFIX, client.lock(NAME).key());
    println!(
        "rdb: counter after the restart {:?} (the snapshot's)",
        fence_value(&server.url(), &fence).await
    );

    check_next_token(&client, &tokens, "rdb").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_rise_after_a_restart_from_an_older_aof() {
    let mut server = RedisServer::start_persistent(Persistence::Aof).expect("redis-server");
    let client = common::client(&server).await;
    let mut tokens = Vec::new();
    cycles(&client, 3, &mut tokens).await;

    // The AOF as it is now (`appendfsync always`: every acknowledged write is in it): the
    // "older AOF" that is put back later, as a restore from a backup would.
    let (aof, old) = {
        let dir = server.dir();
        let multi_part = dir.join("appendonlydir");
        if multi_part.is_dir() {
            (multi_part, dir.join("aof-older"))
        } else {
            (dir.join("appendonly.aof"), dir.join("appendonly.aof.older"))
        }
    };
    println!("aof: keeping {} as the older AOF", aof.display());
    if aof.is_dir() {
        copy_dir(&aof, &old);
    } else {
        std::fs::copy(&aof, &old).expect("copy the AOF");
    }
    cycles(&client, 5, &mut tokens).await;
    drop(client);

    server.kill();
    if aof.is_dir() {
        std::fs::remove_dir_all(&aof).expect("remove the newer AOF");
        copy_dir(&old, &aof);
    } else {
        std::fs::copy(&old, &aof).expect("put the older AOF back");
    }
    server.restart().expect("restart from the older AOF");
    let client = common::client(&server).await;
    let fence = dlock::inspect::fence_counter(dlock::DEFAULT_PREFIX, client.lock(NAME).key());
    println!(
        "aof: counter after the restart {:?} (the older AOF's)",
        fence_value(&server.url(), &fence).await
    );

    check_next_token(&client, &tokens, "aof").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_rise_after_promoting_a_replica_that_missed_the_last_acquires() {
    let mut primary = common::server();
    let port = primary.port().to_string();
    let replica = RedisServer::start_with_args(&["--replicaof", "127.0.0.1", &port])
        .expect("replica redis-server");
    common::eventually(Duration::from_secs(10), "replica linked", || async {
        info(&replica.url(), "replication")
            .await
            .contains("master_link_status:up")
    })
    .await;

    let client = common::client(&primary).await;
    let fence = dlock::inspect::fence_counter(dlock::DEFAULT_PREFIX, client.lock(NAME).key());
    let mut tokens = Vec::new();
    cycles(&client, 3, &mut tokens).await;
    // The replica has everything up to here...
    let mut admin = common::raw(&primary.url()).await;
    let acked: i64 = dlock::redis::cmd("WAIT")
        .arg(1)
        .arg(5000)
        .query_async(&mut admin)
        .await
        .expect("WAIT");
    assert_eq!(acked, 1, "the replica did not acknowledge the first cycles");
    // WAIT only waits for the writes of the connection that sends it, not the client's: wait
    // until the replica serves the counter as the primary has it.
    let primary_has = fence_value(&primary.url(), &fence).await;
    assert!(primary_has.is_some(), "the primary has no fencing counter");
    common::eventually(Duration::from_secs(10), "replica has the counter", || {
        let (url, fence) = (replica.url(), fence.clone());
        async move { fence_value(&url, &fence).await == primary_has }
    })
    .await;

    // ...and then loses its link: it is pointed at a port nobody listens on, so it stays a
    // replica with the data it has (a replica cut off by a partition), and misses the rest.
    let dead_port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        listener.local_addr().expect("addr").port().to_string()
    };
    cmd_ok(&replica.url(), &["REPLICAOF", "127.0.0.1", &dead_port]).await;
    common::eventually(Duration::from_secs(10), "replica unlinked", || async {
        !info(&replica.url(), "replication")
            .await
            .contains("master_link_status:up")
    })
    .await;
    cycles(&client, 5, &mut tokens).await;
    let on_replica = fence_value(&replica.url(), &fence).await;
    println!(
        "replica: counter {on_replica:?}, primary handed out up to {}",
        tokens.last().unwrap()
    );
    assert!(
        on_replica.is_some_and(|c| c < *tokens.last().unwrap()),
        "set-up: the replica did not miss the last acquires (its counter: {on_replica:?})"
    );
    drop(client);

    primary.kill();
    cmd_ok(&replica.url(), &["REPLICAOF", "NO", "ONE"]).await;

    let client = common::client(&replica).await;
    check_next_token(&client, &tokens, "lagging replica").await;
}

/// A read period restored from an older snapshot, after a writer held the lock on the lost
/// data: a reader joining it gets a token above that writer's, not the period's old one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_joining_a_read_period_restored_from_an_older_snapshot_is_above_the_lost_writer() {
    const RW: &str = "trust:rw-token";
    let mut server = RedisServer::start_persistent(Persistence::Rdb).expect("redis-server");
    let client = common::client(&server).await;
    let rw = client.read_write_lock(RW);
    let first = rw
        .read()
        .ttl(Duration::from_secs(60))
        .acquire()
        .await
        .unwrap();
    let period = first.fencing_token();
    cmd_ok(&server.url(), &["SAVE"]).await;
    first.release().await.unwrap();
    // Granted after the snapshot: lost with the SIGKILL, but its holder had the token.
    let w = rw.write().acquire().await.unwrap();
    let writer = w.fencing_token();
    w.release().await.unwrap();
    drop(client);

    server.kill();
    server.restart().expect("restart from the snapshot");
    let client = common::client(&server).await;
    let joined = client
        .read_write_lock(RW)
        .read()
        .wait(Duration::from_secs(5))
        .acquire()
        .await
        .unwrap();
    println!(
        "rw: read period {period}, lost writer {writer}, reader joining the restored period {}",
        joined.fencing_token()
    );
    assert!(
        joined.fencing_token() > writer,
        "a reader joining the restored read period (token {period}) got {} after the lost \
         writer's {writer}",
        joined.fencing_token()
    );
    joined.release().await.unwrap();
}

/// The larger of the slot's counter and the server's clock gives the next token: a counter
/// behind the clock (shorter, or as long and smaller) gives way to the clock, and one ahead of
/// it (the clock stepped back, or grants came faster than one per µs) is counted on from. The
/// acquire script compares the two as text, not as numbers (issue 39: number conversions cost
/// more server time than the clock read), so each order is checked: "99999" is above the
/// clock's text but below its number, and only the length tells.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_counter_or_the_clock_whichever_is_ahead_gives_the_next_token() {
    let server = common::server();
    let client = common::client(&server).await;
    let fence = dlock::inspect::fence_counter(dlock::DEFAULT_PREFIX, client.lock(NAME).key());
    let mut tokens = Vec::new();
    cycles(&client, 1, &mut tokens).await;
    let first = fence_value(&server.url(), &fence)
        .await
        .expect("the first grant wrote the counter");
    assert_eq!(tokens[0], first * 1024, "a token is the counter times 1024");

    let behind_same_length = (first - 1_000_000_000).to_string();
    // The last: a value set by hand, longer than the clock only by its leading zeros.
    for behind in [
        "99999",
        behind_same_length.as_str(),
        "000000000000000000099",
    ] {
        cmd_ok(&server.url(), &["SET", &fence, behind]).await;
        cycles(&client, 1, &mut tokens).await;
        let counter = fence_value(&server.url(), &fence).await.expect("counter");
        let token = *tokens.last().expect("a token");
        assert_eq!(token, counter * 1024, "counter {behind} behind the clock");
        assert!(
            counter > first,
            "counter {behind} behind the clock: the next is {counter}, not the clock (above {first})"
        );
    }

    // About 1.4 hours ahead of the clock, with as many digits.
    let ahead = first + 5_000_000_000;
    cmd_ok(&server.url(), &["SET", &fence, &ahead.to_string()]).await;
    cycles(&client, 2, &mut tokens).await;
    let n = tokens.len();
    assert_eq!(
        tokens[n - 2..],
        [(ahead + 1) * 1024, (ahead + 2) * 1024],
        "a counter ahead of the clock is counted on from"
    );
    assert_eq!(
        fence_value(&server.url(), &fence).await,
        Some(ahead + 2),
        "and written back"
    );
}
