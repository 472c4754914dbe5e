//! The ZooKeeper store's own faults, beyond the shared tests: a holder process frozen past its
//! session timeout, and the ensemble's leader killed while a waiter waits. Each asserts at the
//! moment another client holds the lock what the old holder believes, and that tokens rise.

use std::time::{Duration, Instant};

use dlock::testing::{zookeeper_available, ZkEnsemble, ZkServer};
use dlock::LockClient;
use rustix::process::{kill_process, Pid, Signal};

use super::both::ZK_SESSION;
use super::common::proxy::Proxy;
use crate::common::child;

const NAME: &str = "stores:zk:frozen-holder";

async fn client(url: &str) -> LockClient {
    LockClient::builder(url)
        .zookeeper_session_timeout(ZK_SESSION)
        .response_timeout(Duration::from_secs(2))
        .build()
        .await
        .expect("connect to ZooKeeper")
}

/// The child side: hold `NAME`, say so with the token, then, on each line from the parent,
/// print whether the hold is lost (the first look after a SIGCONT).
#[test]
fn child_process_entry() {
    let Ok(url) = std::env::var("DLOCK_STORES_ZK_CHILD_URL") else {
        return;
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async move {
        let client = client(&url).await;
        let guard = client.lock(NAME).acquire().await.expect("child acquire");
        println!("HOLDING {}", guard.fencing_token());
        let mut line = String::new();
        loop {
            line.clear();
            if std::io::stdin().read_line(&mut line).unwrap_or(0) == 0 {
                return;
            }
            println!("LOST {}", guard.is_lost());
        }
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_frozen_past_its_session_reads_lost_and_the_next_token_is_higher() {
    if !zookeeper_available() {
        super::common::skipped("ZooKeeper faults", "no ZooKeeper server");
        return;
    }
    let server = ZkServer::start().expect("start ZooKeeper");
    let url = server.url();
    let env = [("DLOCK_STORES_ZK_CHILD_URL", url.as_str())];
    let (mut holder, mut lines) = child::spawn(module_path!(), "child_process_entry", &env);
    let held = child::expect_line(&mut lines, "HOLDING").await;
    let old_token: u64 = held.split(' ').nth(1).unwrap().trim().parse().unwrap();
    let pid = Pid::from_raw(holder.id().expect("pid") as i32).expect("a pid");
    kill_process(pid, Signal::STOP).expect("SIGSTOP the holder");
    let frozen = Instant::now();
    // The ensemble expires the frozen holder's session (3 s), its child goes, and the waiter's
    // watch wakes it.
    let other = client(&url).await;
    let got = (other.lock(NAME))
        .wait(Duration::from_secs(20))
        .acquire()
        .await
        .expect("the lock after the holder's session expired");
    let took = frozen.elapsed();
    assert!(
        took >= Duration::from_secs(2) && took < Duration::from_secs(10),
        "acquired {took:?} into the freeze of a 3 s session"
    );
    assert!(got.fencing_token() > old_token, "tokens went back");
    // At the moment another owner holds it, the old holder, once it runs again, reads lost at
    // its first look.
    kill_process(pid, Signal::CONT).expect("SIGCONT the holder");
    use tokio::io::AsyncWriteExt;
    let stdin = holder.stdin.as_mut().expect("stdin");
    stdin.write_all(b"look\n").await.expect("ask the holder");
    stdin.flush().await.expect("flush");
    assert_eq!(
        child::expect_line(&mut lines, "LOST").await.trim(),
        "LOST true"
    );
    got.release().await.expect("release");
    holder.kill().await.expect("kill the holder");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_gets_the_lock_across_a_leader_kill_with_a_higher_token() {
    if !zookeeper_available() {
        super::common::skipped("ZooKeeper ensemble", "no ZooKeeper server");
        return;
    }
    let mut ensemble = tokio::task::spawn_blocking(ZkEnsemble::start)
        .await
        .expect("spawn_blocking")
        .expect("start a ZooKeeper ensemble");
    let url = ensemble.url();
    let (a, b) = (client(&url).await, client(&url).await);
    let name = "stores:zk:leader";
    let held = a.lock(name).acquire().await.expect("acquire");
    let waiting = tokio::spawn({
        let lock = b.lock(name);
        async move { lock.wait(Duration::from_secs(30)).acquire().await }
    });
    // The waiter is in line before the leader goes: its child made and the child before it
    // watched. Its child alone is not enough: an attempt between its create and its watch
    // meets the leader's death before any refusal, and that failure is the caller's answer
    // (a store that breaks before it has said "held" is not waited out), which is not what
    // this test is about. A watch lives on the server the waiter is connected to, so every
    // server's `wchp` (watches by path) is asked.
    let leader = ensemble.leader().expect("a leader");
    let watched = |ensemble: &ZkEnsemble| {
        (0..ensemble.len())
            .filter_map(|i| ensemble.four_letter(i, "wchp").ok())
            .map(|w| w.matches("/dlock:{stores:zk:leader}/_c_").count())
            .sum::<usize>()
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    while watched(&ensemble) == 0 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        watched(&ensemble),
        1,
        "the waiter never watched the holder's child"
    );
    assert!(!waiting.is_finished(), "the waiter stopped waiting");
    let ensemble = tokio::task::spawn_blocking(move || {
        ensemble.kill(leader);
        let next = ensemble.leader().expect("a new leader");
        assert_ne!(next, leader, "the killed server still leads");
        ensemble
    })
    .await
    .expect("kill the leader");
    // Both sessions survive the election (it takes well under the 3 s session); the holder
    // keeps its hold, then releases it, and the waiter is woken.
    assert!(!held.is_lost(), "a leader change lost the hold");
    let token = held.fencing_token();
    held.release().await.expect("release after the election");
    let got = waiting
        .await
        .expect("waiter task")
        .expect("the lock after a leader kill");
    assert!(
        got.fencing_token() > token,
        "tokens went back across a leader change"
    );
    got.release().await.expect("release");
    drop(ensemble);
}

/// The children of `parent` in the server's own list of ephemeral nodes (`dump`).
fn children_in_dump(server: &ZkServer, parent: &str) -> Vec<String> {
    let dump = server.four_letter("dump").expect("dump");
    dump.lines()
        .map(str::trim)
        .filter(|l| l.starts_with(&format!("{parent}/_c_")))
        .map(str::to_owned)
        .collect()
}

/// A create whose reply is lost to a dropped connection (the server made the child, the
/// client never heard so): the acquire goes on over the session's next connection, finds that
/// child by its protected name and holds the lock with it; no second child is made (it would
/// wait behind the first, an orphan of its own session, until the wait ran out), and the
/// release leaves none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_create_whose_reply_is_lost_to_a_dropped_connection_is_found_again() {
    if !zookeeper_available() {
        super::common::skipped("ZooKeeper lost create", "no ZooKeeper server");
        return;
    }
    let server = tokio::task::spawn_blocking(ZkServer::start)
        .await
        .expect("spawn_blocking")
        .expect("start ZooKeeper");
    let proxy = Proxy::start(server.port());
    // A response timeout far above the few hundred ms from the create to the cut, so that on
    // a loaded machine the cut, not dlock's own bound, is what ends the create's wait.
    let locks = LockClient::builder(format!("zk://127.0.0.1:{}", proxy.port()))
        .zookeeper_session_timeout(ZK_SESSION)
        .response_timeout(Duration::from_secs(10))
        .build()
        .await
        .expect("connect to ZooKeeper through the proxy");
    let name = "stores:zk:lost-create";
    let parent = "/dlock:{stores:zk:lost-create}";
    // The lock's parent node is made first, so the request the test cuts is the child's create.
    let warm = locks.lock(name).acquire().await.expect("acquire");
    warm.release().await.expect("release");
    // The session's one connection: what it sends goes through, what it receives is held.
    proxy.hold_replies(proxy.accepted() - 1);
    let acquiring = tokio::spawn({
        let lock = locks.lock(name);
        async move { lock.wait(Duration::from_secs(20)).acquire().await }
    });
    let deadline = Instant::now() + Duration::from_secs(10);
    while children_in_dump(&server, parent).is_empty() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let made = children_in_dump(&server, parent);
    assert_eq!(
        made.len(),
        1,
        "the create never ran on the server: {made:?}"
    );
    assert!(!acquiring.is_finished(), "the acquire heard a held reply");
    // The reply dies with the connection; the client opens another one for the same session.
    tokio::task::block_in_place(|| proxy.kill_all());
    let guard = acquiring
        .await
        .expect("acquire task")
        .expect("the lock after the create's reply was lost");
    assert_eq!(
        children_in_dump(&server, parent),
        made,
        "the lock is held with another child than the one made before the cut"
    );
    assert!(!guard.is_lost());
    guard.release().await.expect("release");
    let deadline = Instant::now() + Duration::from_secs(10);
    while !children_in_dump(&server, parent).is_empty() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(children_in_dump(&server, parent), Vec::<String>::new());
    locks.shutdown().await;
}
