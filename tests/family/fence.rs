//! `dlock::fence`: the store keeps the highest fencing token per key and refuses lower ones.
//!
//! The fault test runs the old holder as another OS process: the test binary re-executes
//! itself with `--exact child_process_entry` and `DLOCK_CHILD_URL` set (that test does nothing
//! in a normal run). The child reports over stdout ("HELD <token> ...", "LATE ..."), and waits
//! for the parent's "WRITE" line on stdin before its late write.

use crate::common;
use crate::common::child::{self, ChildLines};

use std::time::Duration;

use dlock::fence::{self, Fenced, Outcome};
use dlock::redis::aio::MultiplexedConnection;
use dlock::{LockClient, LockError};
use tokio::io::AsyncWriteExt;
use tokio::process::Child;

/// The lock that guards the resource, and the resource's key, in the fault test.
const LOCK: &str = "report";
const RESOURCE: &str = "report:value";

async fn stored(conn: &mut MultiplexedConnection, key: &str) -> Option<Fenced<String>> {
    fence::get(conn, key).await.expect("fence::get")
}

async fn set(conn: &mut MultiplexedConnection, key: &str, token: u64, value: &str) -> Outcome {
    fence::set_if_newer(conn, key, token, value)
        .await
        .expect("fence::set_if_newer")
}

async fn raw_cmd<T: dlock::redis::FromRedisValue>(
    conn: &mut MultiplexedConnection,
    args: &[&str],
) -> T {
    let mut cmd = dlock::redis::cmd(args[0]);
    for a in &args[1..] {
        cmd.arg(*a);
    }
    cmd.query_async(conn).await.expect("raw redis command")
}

#[tokio::test]
async fn a_higher_token_writes_and_a_lower_one_is_refused_and_changes_nothing() {
    let server = common::server();
    let mut conn = common::raw(&server.url()).await;
    assert_eq!(stored(&mut conn, "k").await, None);

    assert_eq!(set(&mut conn, "k", 5, "five").await, Outcome::Written);
    assert_eq!(set(&mut conn, "k", 7, "seven").await, Outcome::Written);
    let refused = set(&mut conn, "k", 6, "six").await;
    assert_eq!(refused, Outcome::Stale { highest: 7 });
    assert!(!refused.is_written());

    let read = stored(&mut conn, "k").await.expect("a value");
    assert_eq!((read.value.as_str(), read.token), ("seven", 7));
    // One key per resource (a hash), nothing beside it: one slot on a cluster.
    let keys: Vec<String> = raw_cmd(&mut conn, &["KEYS", "*"]).await;
    assert_eq!(keys, ["k"]);
}

#[tokio::test]
async fn an_equal_token_writes_again_because_it_is_the_same_hold() {
    let server = common::server();
    let mut conn = common::raw(&server.url()).await;
    assert_eq!(set(&mut conn, "k", 9, "first").await, Outcome::Written);
    assert_eq!(set(&mut conn, "k", 9, "second").await, Outcome::Written);
    let read = stored(&mut conn, "k").await.expect("a value");
    assert_eq!((read.value.as_str(), read.token), ("second", 9));
}

#[tokio::test]
async fn tokens_past_two_to_the_53_compare_exactly() {
    let server = common::server();
    let mut conn = common::raw(&server.url()).await;
    // As Lua doubles both are 2^53: a numeric compare would let the lower one write.
    let big = 1u64 << 53;
    assert_eq!(set(&mut conn, "k", big + 1, "a").await, Outcome::Written);
    assert_eq!(
        set(&mut conn, "k", big, "b").await,
        Outcome::Stale { highest: big + 1 }
    );
    assert_eq!(set(&mut conn, "k", u64::MAX, "c").await, Outcome::Written);
    assert_eq!(
        set(&mut conn, "k", u64::MAX - 1, "d").await,
        Outcome::Stale { highest: u64::MAX }
    );
    // A shorter number is lower, whatever its digits.
    assert_eq!(
        set(&mut conn, "k", 99, "e").await,
        Outcome::Stale { highest: u64::MAX }
    );
    let read = stored(&mut conn, "k").await.expect("a value");
    assert_eq!((read.value.as_str(), read.token), ("c", u64::MAX));
}

#[tokio::test]
async fn values_are_bytes_and_a_flushed_script_cache_is_reloaded() {
    let server = common::server();
    let mut conn = common::raw(&server.url()).await;
    let bytes = vec![0u8, 0xff, b'{', 0xfe];
    let out = fence::set_if_newer(&mut conn, "bin", 1, &bytes)
        .await
        .unwrap();
    assert_eq!(out, Outcome::Written);
    let () = raw_cmd(&mut conn, &["SCRIPT", "FLUSH"]).await;
    let out = fence::set_if_newer(&mut conn, "bin", 2, &bytes[1..]).await;
    assert_eq!(
        out.unwrap(),
        Outcome::Written,
        "NOSCRIPT is answered with EVAL"
    );
    let read: Fenced<Vec<u8>> = fence::get(&mut conn, "bin").await.unwrap().unwrap();
    assert_eq!((read.value, read.token), (bytes[1..].to_vec(), 2));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_writers_leave_the_highest_token_and_its_value() {
    const WRITERS: u64 = 8;
    const TOKENS: u64 = 400;
    let server = common::server();
    let conn = common::raw(&server.url()).await;
    // Each writer sends its share of 1..=TOKENS in a shuffled order.
    let mut rng = common::Rng::from_clock();
    let mut tokens: Vec<u64> = (1..=TOKENS).collect();
    for i in (1..tokens.len()).rev() {
        tokens.swap(i, rng.below(i as u64 + 1) as usize);
    }
    let writers = tokens
        .chunks(TOKENS.div_ceil(WRITERS) as usize)
        .map(|mine| {
            let (mine, mut conn) = (mine.to_vec(), conn.clone());
            tokio::spawn(async move {
                for token in mine {
                    match set(&mut conn, "hot", token, &format!("v{token}")).await {
                        Outcome::Written => {}
                        Outcome::Stale { highest } => assert!(highest > token, "{token} {highest}"),
                        other => panic!("{other:?}"),
                    }
                }
            })
        });
    futures_util::future::try_join_all(writers).await.unwrap();
    let read = stored(&mut conn.clone(), "hot").await.expect("a value");
    assert_eq!((read.value, read.token), (format!("v{TOKENS}"), TOKENS));
}

#[tokio::test]
async fn another_type_at_the_key_is_a_wrongtype_error_naming_it_and_is_left_alone() {
    let server = common::server();
    let mut conn = common::raw(&server.url()).await;
    let () = raw_cmd(&mut conn, &["SET", "str", "theirs"]).await;
    let _: i64 = raw_cmd(&mut conn, &["RPUSH", "list", "theirs"]).await;
    // A hash that set_if_newer did not write: no `fence` field, or a malformed one.
    let _: i64 = raw_cmd(&mut conn, &["HSET", "hash", "value", "theirs"]).await;
    let _: i64 = raw_cmd(&mut conn, &["HSET", "bad", "value", "v", "fence", "07"]).await;

    for key in ["str", "list", "hash", "bad"] {
        let err = fence::set_if_newer(&mut conn, key, 1_000, "mine")
            .await
            .unwrap_err();
        assert_wrong_type(&err, key);
        let err = fence::get::<String, _>(&mut conn, key).await.unwrap_err();
        assert_wrong_type(&err, key);
    }
    // The script checked before it wrote: every key is as it was.
    let s: String = raw_cmd(&mut conn, &["GET", "str"]).await;
    assert_eq!(s, "theirs");
    let l: Vec<String> = raw_cmd(&mut conn, &["LRANGE", "list", "0", "-1"]).await;
    assert_eq!(l, ["theirs"]);
    let h: Vec<String> = raw_cmd(&mut conn, &["HGETALL", "hash"]).await;
    assert_eq!(h, ["value", "theirs"]);
    let b: Vec<String> = raw_cmd(&mut conn, &["HGETALL", "bad"]).await;
    assert_eq!(b, ["value", "v", "fence", "07"]);
}

fn assert_wrong_type(err: &LockError, key: &str) {
    match err {
        LockError::WrongType { key: named, .. } => assert_eq!(named, key),
        other => panic!("expected WrongType for `{key}`, got {other:?}"),
    }
    let msg = err.to_string();
    assert!(msg.contains(&format!("`{key}`")), "{msg}");
    assert!(msg.contains("fenced value"), "{msg}");
}

#[tokio::test]
async fn an_empty_key_and_token_zero_are_refused_before_redis_is_asked() {
    let server = common::server();
    let mut conn = common::raw(&server.url()).await;
    let err = fence::set_if_newer(&mut conn, "", 1, "v")
        .await
        .unwrap_err();
    assert!(matches!(err, LockError::InvalidArgument { .. }), "{err:?}");
    assert!(err.to_string().contains("key is empty"), "{err}");
    let err = fence::get::<String, _>(&mut conn, "").await.unwrap_err();
    assert!(matches!(err, LockError::InvalidArgument { .. }), "{err:?}");

    let err = fence::set_if_newer(&mut conn, "k", 0, "v")
        .await
        .unwrap_err();
    assert!(matches!(err, LockError::InvalidArgument { .. }), "{err:?}");
    let msg = err.to_string();
    assert!(msg.contains("`k`") && msg.contains("token 0"), "{msg}");
    let keys: i64 = raw_cmd(&mut conn, &["DBSIZE"]).await;
    assert_eq!(keys, 0, "nothing was written");
}

/// The child side of the fault test. Only acts when started by `spawn_child`.
#[test]
fn child_process_entry() {
    let Ok(url) = std::env::var("DLOCK_CHILD_URL") else {
        return;
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(stale_writer(&url));
}

/// Takes the lock with a 1 s lease, writes under it, then (told to by the parent, which has
/// SIGSTOPped us past the lease and SIGCONTed us meanwhile) writes again with the same token.
async fn stale_writer(url: &str) {
    let client = LockClient::connect(url).await.unwrap();
    let mut store = common::raw(url).await;
    let guard = client
        .lock(LOCK)
        .ttl(Duration::from_secs(1))
        .acquire()
        .await
        .unwrap();
    let token = guard.fencing_token();
    let first = set(&mut store, RESOURCE, token, "old holder, in time").await;
    println!("HELD {token} {}", describe(first));

    let go = tokio::task::spawn_blocking(|| {
        let mut line = String::new();
        std::io::stdin().read_line(&mut line).map(|_| line)
    });
    let line = go.await.unwrap().unwrap();
    assert_eq!(line.trim(), "WRITE", "the parent closed stdin early");
    // The paused holder goes on as if nothing happened: no look at `is_lost()` first. The
    // store alone must refuse it.
    let late = set(&mut store, RESOURCE, token, "old holder, late").await;
    println!("LATE {}", describe(late));
}

fn describe(out: Outcome) -> String {
    match out {
        Outcome::Written => "written".to_owned(),
        Outcome::Stale { highest } => format!("stale {highest}"),
        other => format!("{other:?}"),
    }
}

/// Starts this test binary as the stale writer, killed if the test fails.
fn spawn_child(url: &str) -> (Child, ChildLines) {
    child::spawn(
        module_path!(),
        "child_process_entry",
        &[("DLOCK_CHILD_URL", url)],
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_stopped_past_its_lease_is_refused_by_the_store_after_the_next_holder_wrote() {
    let server = common::server();
    let client = common::client(&server).await;
    let mut store = common::raw(&server.url()).await;
    let (mut child, mut lines) = spawn_child(&server.url());
    let held = child::expect_line(&mut lines, "HELD").await;
    let words: Vec<&str> = held.split_whitespace().collect();
    let old_token: u64 = words[1].parse().unwrap();
    assert_eq!(
        words[2..],
        ["written"],
        "the holder's write in time: {held}"
    );

    let stopped = common::Stopped::stop(child.id().unwrap());
    // The stopped child cannot renew: its 1 s lease runs out and we get the lock.
    let new = client
        .lock(LOCK)
        .wait(Duration::from_secs(10))
        .acquire()
        .await
        .expect("the stopped holder's lease ran out");
    let new_token = new.fencing_token();
    assert!(new_token > old_token, "{new_token} <= {old_token}");
    let ours = set(&mut store, RESOURCE, new_token, "new holder").await;
    assert_eq!(ours, Outcome::Written);

    // The child reads this when it resumes, and writes at once with its old token.
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(b"WRITE\n").await.unwrap();
    stdin.flush().await.unwrap();
    drop(stopped);

    assert_eq!(
        child::expect_line(&mut lines, "LATE").await,
        format!("LATE stale {new_token}"),
        "the old holder's late write was not refused"
    );
    let read = stored(&mut store, RESOURCE).await.expect("a value");
    assert_eq!((read.value.as_str(), read.token), ("new holder", new_token));

    let status = tokio::time::timeout(Duration::from_secs(30), child.wait())
        .await
        .expect("child did not exit")
        .unwrap();
    assert!(status.success(), "child failed: {status}");
    new.release().await.unwrap();
}
