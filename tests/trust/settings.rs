//! Settings, scripts and errors one can trust (issue 7, items 8, 9, 10 and 11):
//!
//! * item 8: every builder setting out of range is refused at `build()` with
//!   `LockError::InvalidArgument` naming the setting; a wrong-typed fencing counter fails the
//!   acquire without leaving half its work (a lock hash) behind;
//! * item 9: a hard lease is not re-armed by a re-entry;
//! * item 10: a WRONGTYPE error names the key that is wrong and what that key is for;
//! * item 11: the watchdog renews at a third of the lease, not more often.

use crate::common;

use std::time::{Duration, Instant};

use dlock::inspect::{Kind, Layout};
use dlock::testing::RedisServer;
use dlock::{LockClient, LockClientBuilder, LockError, SegmentedStock};

const DAY: Duration = Duration::from_secs(24 * 3600);
const YEAR: Duration = Duration::from_secs(365 * 24 * 3600);

type Setting = fn(LockClientBuilder, Duration) -> LockClientBuilder;

/// The duration settings of the builder, with their names as an error must spell them.
fn settings() -> [(&'static str, Setting); 4] {
    [
        ("release_latch", |b, d| b.release_latch(d)),
        ("response_timeout", |b, d| b.response_timeout(d)),
        ("connect_timeout", |b, d| b.connect_timeout(d)),
        ("default_ttl", |b, d| b.default_ttl(d)),
    ]
}

/// The largest value each setting accepts: 24 h for the latch and the timeouts, the per-lock
/// limit of 100 years for the default lease.
fn limit(setting: &str) -> Duration {
    if setting == "default_ttl" {
        100 * YEAR
    } else {
        DAY
    }
}

/// What `build()` made of one setting.
enum Outcome {
    /// `LockError::InvalidArgument` with this reason.
    Refused(String),
    Accepted,
    OtherError(String),
    Panicked,
}

impl std::fmt::Display for Outcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Outcome::Refused(reason) => write!(f, "refused: {reason}"),
            Outcome::Accepted => write!(f, "accepted by build()"),
            Outcome::OtherError(e) => write!(f, "build() failed with another error: {e}"),
            Outcome::Panicked => write!(f, "build() panicked"),
        }
    }
}

/// Builds a client in its own task so that a panic inside `build()` is reported as an outcome
/// (a panic is never an acceptable answer to a setting) rather than ending the test early.
async fn try_build(url: &str, setting: Setting, value: Duration) -> Outcome {
    let builder = setting(LockClient::builder(url), value);
    match tokio::spawn(builder.build()).await {
        Ok(Ok(_client)) => Outcome::Accepted,
        Ok(Err(LockError::InvalidArgument { reason, .. })) => Outcome::Refused(reason),
        Ok(Err(other)) => Outcome::OtherError(other.to_string()),
        Err(join) if join.is_panic() => Outcome::Panicked,
        Err(join) => Outcome::OtherError(join.to_string()),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn out_of_range_settings_are_refused_at_build_naming_the_setting() {
    let server = common::server();
    let url = server.url();
    let mut wrong = Vec::new();
    for (name, setting) in settings() {
        let too_long = limit(name) + Duration::from_millis(1);
        for value in [Duration::MAX, too_long, Duration::ZERO] {
            let outcome = try_build(&url, setting, value).await;
            println!("{name}({value:?}): {outcome}");
            if !matches!(&outcome, Outcome::Refused(reason) if reason.contains(name)) {
                wrong.push(format!("{name}({value:?}): {outcome}"));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "settings not refused with InvalidArgument naming them:\n{}",
        wrong.join("\n")
    );
}

/// Guard test (passes on the old code too): the limits themselves are accepted, and so is
/// `default_wait(Duration::MAX)` ("as long as it takes").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn settings_at_their_limits_and_an_endless_default_wait_are_accepted() {
    let server = common::server();
    let url = server.url();
    for (name, setting) in settings() {
        // 99 years: clear of any rounding of "100 years".
        let value = if name == "default_ttl" {
            99 * YEAR
        } else {
            limit(name)
        };
        let client = setting(LockClient::builder(&url), value)
            .build()
            .await
            .unwrap_or_else(|e| panic!("{name}({value:?}) refused: {e}"));
        println!("{name}({value:?}): accepted");
        drop(client);
    }
    let client = LockClient::builder(&url)
        .default_wait(Duration::MAX)
        .build()
        .await
        .expect("default_wait(Duration::MAX) refused");
    let other = common::client(&server).await;
    let guard = client
        .lock("trust:settings:endless-wait")
        .ttl(Duration::from_secs(5))
        .acquire()
        .await
        .expect("acquire with an endless default wait");
    assert!(other
        .lock("trust:settings:endless-wait")
        .try_acquire()
        .await
        .unwrap()
        .is_none());
    guard.release().await.expect("release");
}

async fn raw_set(conn: &mut dlock::redis::aio::MultiplexedConnection, args: &[&str]) {
    let mut cmd = dlock::redis::cmd(args[0]);
    for a in &args[1..] {
        cmd.arg(*a);
    }
    let _: dlock::redis::Value = cmd
        .query_async(conn)
        .await
        .unwrap_or_else(|e| panic!("{args:?}: {e}"));
}

async fn key_type(conn: &mut dlock::redis::aio::MultiplexedConnection, key: &str) -> String {
    dlock::redis::cmd("TYPE")
        .arg(key)
        .query_async(conn)
        .await
        .expect("TYPE")
}

/// Guard test (passes on the old code too): a fencing counter that is not a number, or not a
/// string at all, fails the acquire before anything is written: no lock hash is left behind
/// (a lock nobody holds and nobody releases), and the foreign value is left as it was.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_typed_fencing_counter_fails_the_acquire_and_leaves_no_lock() {
    let server = common::server();
    let client = common::client(&server).await;
    let mut conn = common::raw(&server.url()).await;
    for (case, setup, kind) in [
        ("not a number", &["SET", "", "notanumber"][..], "string"),
        ("a list", &["RPUSH", "", "x"][..], "list"),
    ] {
        let lock = client
            .lock(format!("trust:settings:fence:{kind}"))
            .wait(Duration::ZERO);
        let fence = counter_of(Kind::Plain, &format!("trust:settings:fence:{kind}"));
        let mut args = setup.to_vec();
        args[1] = &fence;
        raw_set(&mut conn, &args).await;

        let result = lock.acquire().await;
        println!("fencing counter {case}: {result:?}");
        assert!(
            result.is_err(),
            "{case}: acquire succeeded over a broken fencing counter"
        );
        let exists: i64 = dlock::redis::cmd("EXISTS")
            .arg(lock.key())
            .query_async(&mut conn)
            .await
            .unwrap();
        assert_eq!(exists, 0, "{case}: the failed acquire left a lock hash");
        assert_eq!(key_type(&mut conn, &fence).await, kind, "{case}: counter");
        if kind == "string" {
            let v: String = dlock::redis::cmd("GET")
                .arg(&fence)
                .query_async(&mut conn)
                .await
                .unwrap();
            assert_eq!(v, "notanumber", "{case}: the foreign value was overwritten");
        }
    }
}

/// Item 9: re-entering a hard lease does not extend it. Lease 1 s, re-entered at 0.8 s: at
/// 1.4 s the key is gone and both guards say lost (a re-armed lease would last until 1.8 s).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hard_lease_is_not_rearmed_by_reentry() {
    let server = common::server();
    let client = common::client(&server).await;
    let mut conn = common::raw(&server.url()).await;
    let lock = client
        .lock("trust:settings:hard-lease")
        .lease(Duration::from_secs(1));
    let key = lock.key().to_owned();
    let start = Instant::now();
    let outer = lock.acquire().await.expect("acquire");
    tokio::time::sleep_until((start + Duration::from_millis(800)).into()).await;
    let (pttl, inner_lost, outer_lost) = outer
        .scope(async {
            let inner = lock.acquire().await.expect("re-entry at 0.8 s");
            let pttl_after_reentry: i64 = dlock::redis::cmd("PTTL")
                .arg(&key)
                .query_async(&mut conn.clone())
                .await
                .unwrap();
            println!(
                "re-entered at {:?}: hold count {}, PTTL {pttl_after_reentry} ms",
                start.elapsed(),
                inner.hold_count()
            );
            tokio::time::sleep_until((start + Duration::from_millis(1400)).into()).await;
            let pttl: i64 = dlock::redis::cmd("PTTL")
                .arg(&key)
                .query_async(&mut conn)
                .await
                .unwrap();
            let inner_lost = inner.is_lost();
            drop(inner);
            (pttl, inner_lost, outer.is_lost())
        })
        .await;
    println!(
        "at {:?}: PTTL {pttl}, inner lost {inner_lost}, outer lost {outer_lost}",
        start.elapsed()
    );
    drop(outer);
    assert_eq!(
        pttl, -2,
        "the 1 s hard lease still exists at 1.4 s (PTTL {pttl} ms): the re-entry re-armed it"
    );
    assert!(
        inner_lost,
        "the re-entered guard is not lost after the lease"
    );
    assert!(outer_lost, "the outer guard is not lost after the lease");
}

/// The fencing counter a lock of `kind` named `name` draws its tokens from: the one of its
/// cluster slot, shared by the locks there.
fn counter_of(kind: Kind, name: &str) -> String {
    Layout::new(dlock::DEFAULT_PREFIX, kind, name)
        .fence
        .expect("this kind has a fencing counter")
}

/// A fair lock's key `part`: its fencing counter, or the key `<lock key>:<part>`.
fn part_key(lock_key: &str, part: &str, name: &str) -> String {
    if part == "fence" {
        counter_of(Kind::Fair, name)
    } else {
        format!("{lock_key}:{part}")
    }
}

/// Checks a WRONGTYPE error: the variant, the key it names, and words saying what that key is.
/// Returns what is wrong with it, if anything.
fn wrong_type_problem(e: &LockError, expected_key: &str, role: &str) -> Option<String> {
    let text = e.to_string();
    println!("{role}: {e:?}\n  {text}");
    match e {
        LockError::WrongType { key, .. } if key != expected_key => Some(format!(
            "names {key}, not the {role} {expected_key}: {text}"
        )),
        LockError::WrongType { .. } if !text.contains(expected_key) => {
            Some(format!("message lacks the key {expected_key}: {text}"))
        }
        LockError::WrongType { .. } if !text.contains(role) => {
            Some(format!("message does not say \"{role}\": {text}"))
        }
        LockError::WrongType { .. } => None,
        other => Some(format!(
            "expected WrongType naming the {role} {expected_key}, got {other:?}"
        )),
    }
}

fn check_wrong_type(e: &LockError, expected_key: &str, role: &str) {
    if let Some(problem) = wrong_type_problem(e, expected_key, role) {
        panic!("{problem}");
    }
}

/// Item 10: a fencing counter that is not a counter (a list, or a string that is not a
/// number) names the counter, not the lock key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_typed_fencing_counter_is_named_in_the_error() {
    let server = common::server();
    let client = common::client(&server).await;
    let mut conn = common::raw(&server.url()).await;
    let mut problems = Vec::new();
    for (case, command, value) in [("list", "RPUSH", "x"), ("string", "SET", "notanumber")] {
        let lock = client
            .lock(format!("trust:errors:fence:{case}"))
            .wait(Duration::ZERO);
        let fence = counter_of(Kind::Plain, &format!("trust:errors:fence:{case}"));
        raw_set(&mut conn, &[command, &fence, value]).await;
        let e = lock
            .acquire()
            .await
            .expect_err("acquire over a broken counter");
        print!("({case}) ");
        if let Some(problem) = wrong_type_problem(&e, &fence, "fencing counter") {
            problems.push(format!("{case}: {problem}"));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// Item 10: a string at the lock key names the lock key and says it should be the lock hash.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_typed_lock_hash_is_named_in_the_error() {
    let server = common::server();
    let client = common::client(&server).await;
    let mut conn = common::raw(&server.url()).await;
    let lock = client.lock("trust:errors:hash").wait(Duration::ZERO);
    raw_set(&mut conn, &["SET", lock.key(), "x"]).await;
    let e = lock.acquire().await.expect_err("acquire over a string");
    check_wrong_type(&e, lock.key(), "lock hash");
}

/// Item 10 for the fair lock's acquire, whose keys are type-checked by the reads it needs: a
/// queue, keep-alive set or fencing counter of the wrong type is named, and the refused acquire
/// writes nothing (no lock hash).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fair_acquire_over_a_wrong_typed_key_names_it_and_writes_nothing() {
    let server = common::server();
    let client = common::client(&server).await;
    let mut conn = common::raw(&server.url()).await;
    let mut problems = Vec::new();
    for (part, role) in [
        ("queue", "fair queue"),
        ("alive", "fair queue keep-alive"),
        ("fence", "fencing counter"),
    ] {
        let lock = client
            .fair_lock(format!("trust:errors:fair-acquire:{part}"))
            .wait(Duration::ZERO);
        let key = part_key(
            lock.key(),
            part,
            &format!("trust:errors:fair-acquire:{part}"),
        );
        raw_set(&mut conn, &["RPUSH", &key, "x"]).await;
        let e = lock
            .acquire()
            .await
            .expect_err("acquire over a wrong-typed key");
        print!("({part}) ");
        if let Some(problem) = wrong_type_problem(&e, &key, role) {
            problems.push(format!("{part}: {problem}"));
        }
        let exists: i64 = dlock::redis::cmd("EXISTS")
            .arg(lock.key())
            .query_async(&mut conn)
            .await
            .expect("EXISTS");
        if exists != 0 {
            problems.push(format!("{part}: the refused acquire wrote the lock hash"));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// Item 10 for the fair lock's release, whose keys are type-checked by the reads it needs
/// (not TYPE calls): a queue, keep-alive set or fencing counter of the wrong type is named, and
/// the release changes nothing: the lock is still held by its owner afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fair_release_over_a_wrong_typed_key_names_it_and_changes_nothing() {
    let server = common::server();
    let client = common::client(&server).await;
    let mut conn = common::raw(&server.url()).await;
    let mut problems = Vec::new();
    for (part, role) in [
        ("queue", "fair queue"),
        ("alive", "fair queue keep-alive"),
        ("fence", "fencing counter"),
    ] {
        let lock = client
            .fair_lock(format!("trust:errors:fair-release:{part}"))
            .wait(Duration::ZERO);
        let guard = lock.acquire().await.expect("acquire");
        let key = part_key(
            lock.key(),
            part,
            &format!("trust:errors:fair-release:{part}"),
        );
        raw_set(&mut conn, &["DEL", &key]).await;
        raw_set(&mut conn, &["RPUSH", &key, "x"]).await;
        let e = guard
            .release()
            .await
            .expect_err("release over a wrong-typed key");
        print!("({part}) ");
        if let Some(problem) = wrong_type_problem(&e, &key, role) {
            problems.push(format!("{part}: {problem}"));
        }
        let holders: i64 = dlock::redis::cmd("HLEN")
            .arg(lock.key())
            .query_async(&mut conn)
            .await
            .expect("HLEN");
        if holders != 1 {
            problems.push(format!(
                "{part}: the refused release changed the lock hash ({holders} holders)"
            ));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// Item 10 for the semaphore's acquire, whose keys are type-checked by the reads it needs:
/// holders or a permit count of the wrong type (or a count that is not a number) is named, and
/// the refused acquire writes nothing: the other key is not created, the foreign value stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_semaphore_acquire_over_a_wrong_typed_key_names_it_and_writes_nothing() {
    let server = common::server();
    let client = common::client(&server).await;
    let mut conn = common::raw(&server.url()).await;
    let mut problems = Vec::new();
    for (case, part, setup, role, kind) in [
        (
            "holders a list",
            "",
            &["RPUSH", "", "x"][..],
            "semaphore holders",
            "list",
        ),
        (
            "count a list",
            ":permits",
            &["RPUSH", "", "x"][..],
            "semaphore permit count",
            "list",
        ),
        (
            "count not a number",
            ":permits",
            &["SET", "", "notanumber"][..],
            "semaphore permit count",
            "string",
        ),
    ] {
        let semaphore = client
            .semaphore(format!("trust:errors:semaphore-acquire:{case}"), 2)
            .wait(Duration::ZERO);
        let holders = format!("dlock:{{{}}}:sem", semaphore.name());
        let key = format!("{holders}{part}");
        let other = if part.is_empty() {
            format!("{holders}:permits")
        } else {
            holders.clone()
        };
        let mut args = setup.to_vec();
        args[1] = &key;
        raw_set(&mut conn, &args).await;
        let e = semaphore
            .acquire()
            .await
            .expect_err("acquire over a wrong-typed key");
        print!("({case}) ");
        if let Some(problem) = wrong_type_problem(&e, &key, role) {
            problems.push(format!("{case}: {problem}"));
        }
        let exists: i64 = dlock::redis::cmd("EXISTS")
            .arg(&other)
            .query_async(&mut conn)
            .await
            .expect("EXISTS");
        if exists != 0 {
            problems.push(format!("{case}: the refused acquire wrote {other}"));
        }
        let now = key_type(&mut conn, &key).await;
        if now != kind {
            problems.push(format!(
                "{case}: the foreign {kind} at {key} is now a {now}"
            ));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// Item 10 for the semaphore's release: holders of the wrong type are named, and the release
/// writes nothing (no latch of its answer: a retry would find the same error, not a result).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_semaphore_release_over_wrong_typed_holders_names_them_and_writes_nothing() {
    let server = common::server();
    let client = common::client(&server).await;
    let mut conn = common::raw(&server.url()).await;
    let semaphore = client.semaphore("trust:errors:semaphore-release", 1);
    let permit = semaphore.acquire().await.expect("acquire");
    let holders = format!("dlock:{{{}}}:sem", semaphore.name());
    raw_set(&mut conn, &["DEL", &holders]).await;
    raw_set(&mut conn, &["RPUSH", &holders, "x"]).await;
    let e = permit
        .release()
        .await
        .expect_err("release over wrong-typed holders");
    check_wrong_type(&e, &holders, "semaphore holders");
    let latches: Vec<String> = dlock::redis::cmd("KEYS")
        .arg(format!("{holders}:latch:*"))
        .query_async(&mut conn)
        .await
        .expect("KEYS");
    assert!(latches.is_empty(), "the refused release wrote {latches:?}");
    assert_eq!(
        key_type(&mut conn, &holders).await,
        "list",
        "the foreign list"
    );
}

/// Item 10: a string where a stock segment should be names that segment's key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_typed_stock_segment_is_named_in_the_error() {
    let server = common::server();
    let client = common::client(&server).await;
    let mut conn = common::raw(&server.url()).await;
    let stock = SegmentedStock::new(&client, "trust:errors:sku", 4).expect("stock");
    let _ = stock.init(40).await.expect("init");
    let order = "order-1";
    let home = stock.home_segment(order);
    let segment = stock.segment_key(home).to_owned();
    raw_set(&mut conn, &["SET", &segment, "x"]).await;
    let e = match stock.take(order, 1).await {
        Err(e) => e,
        Ok(t) => panic!("take over a broken segment: {t:?}"),
    };
    check_wrong_type(&e, &segment, "stock segment");
}

/// Sum of successful script calls (EVAL, EVALSHA and FCALL, read-only variants included) in
/// `INFO commandstats`: NOSCRIPT replies count as failed calls and are left out.
async fn script_calls(conn: &mut dlock::redis::aio::MultiplexedConnection) -> (u64, String) {
    let info: String = dlock::redis::cmd("INFO")
        .arg("commandstats")
        .query_async(conn)
        .await
        .expect("INFO commandstats");
    let mut total = 0;
    let mut lines = Vec::new();
    for line in info.lines() {
        let Some((cmd, stats)) = line
            .strip_prefix("cmdstat_")
            .and_then(|l| l.split_once(':'))
        else {
            continue;
        };
        if !(cmd.starts_with("eval") || cmd.starts_with("fcall")) {
            continue;
        }
        let field = |name: &str| -> u64 {
            stats
                .split(',')
                .find_map(|kv| kv.strip_prefix(name)?.strip_prefix('='))
                .and_then(|v| v.parse().ok())
                .unwrap_or(0)
        };
        total += field("calls") - field("failed_calls") - field("rejected_calls");
        lines.push(line.to_owned());
    }
    (total, lines.join("; "))
}

/// Item 11: one lock with a 6 s lease held for 12 s, alone on its server, is renewed at a third
/// of its lease: 3 to 8 renewals, not one every sixth of the lease (11 or 12).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_watchdog_renews_at_a_third_of_the_lease() {
    let server = RedisServer::start().expect("redis-server");
    let client = common::client(&server).await;
    let mut conn = common::raw(&server.url()).await;
    let ttl = Duration::from_secs(6);
    let hold = Duration::from_secs(12);
    let guard = client
        .lock("trust:settings:renewal")
        .ttl(ttl)
        .acquire()
        .await
        .expect("acquire");
    // The acquire's own script calls are done: everything from here until the release is the
    // watchdog's renewals.
    let (before, _) = script_calls(&mut conn).await;
    let start = Instant::now();
    tokio::time::sleep(hold).await;
    let (after, detail) = script_calls(&mut conn).await;
    let held = start.elapsed();
    assert!(!guard.is_lost(), "lost the lock while holding it");
    guard.release().await.expect("release");
    let renewals = after - before;
    println!(
        "ttl {ttl:?} held {held:?}: {renewals} renew script calls (one per {:?}); {detail}",
        held / renewals.max(1) as u32
    );
    assert!(
        (3..=8).contains(&renewals),
        "{renewals} renewals in {held:?} of a {ttl:?} lease; expected 3 to 8 (every third of \
         the lease)"
    );
}

/// What a lock's keys hold, for "nothing was written" comparisons: each key's type and value.
async fn snapshot(conn: &mut dlock::redis::aio::MultiplexedConnection, keys: &[String]) -> String {
    let mut out = Vec::new();
    for key in keys {
        let kind = key_type(conn, key).await;
        let value: dlock::redis::Value = match kind.as_str() {
            "hash" => {
                dlock::redis::cmd("HGETALL")
                    .arg(key)
                    .query_async(conn)
                    .await
            }
            "zset" => {
                dlock::redis::cmd("ZRANGE")
                    .arg(key)
                    .arg(0)
                    .arg(-1)
                    .arg("WITHSCORES")
                    .query_async(conn)
                    .await
            }
            "list" => {
                dlock::redis::cmd("LRANGE")
                    .arg(key)
                    .arg(0)
                    .arg(-1)
                    .query_async(conn)
                    .await
            }
            "string" => dlock::redis::cmd("GET").arg(key).query_async(conn).await,
            _ => Ok(dlock::redis::Value::Nil),
        }
        .expect("read a key");
        out.push(format!("{key}: {kind} {value:?}"));
    }
    out.join("\n")
}

/// Item 10 for the read-write lock, whose acquire checks types by the reads (or the fencing
/// counter's SET .. GET) each path needs rather than by TYPE calls: a lock hash, reader leases,
/// writer-waiting marker or fencing counter of the wrong type is named with its role, on both
/// sides, on a free lock and beside a reader inside, and the refused acquire writes nothing
/// (every key of the lock as it was). Beside a reader, only keys the asking path reads are
/// checked: a writer refused there never reads the fencing counter.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rw_acquire_over_a_wrong_typed_key_names_it_and_writes_nothing() {
    let server = common::server();
    let client = common::client(&server).await;
    let other = common::client(&server).await;
    let mut conn = common::raw(&server.url()).await;
    let mut problems = Vec::new();
    let mut checked = 0;
    for beside in [false, true] {
        for (part, role, foreign) in [
            ("", "lock hash", &["RPUSH", "x"][..]),
            (":readers", "reader leases", &["RPUSH", "x"][..]),
            (":wwait", "writer-waiting marker", &["RPUSH", "x"][..]),
            (":fence", "fencing counter", &["RPUSH", "x"][..]),
            (":fence", "fencing counter", &["SET", "notanumber"][..]),
        ] {
            for side in ["read", "write"] {
                if beside && (part.is_empty() || (part == ":fence" && side == "write")) {
                    continue;
                }
                let name = format!(
                    "trust:errors:rw:{side}{part}:{}:{}",
                    foreign[0],
                    if beside { "beside" } else { "free" }
                );
                let rw = client.read_write_lock(&name);
                let base = rw.write().key().to_owned();
                let key = if part == ":fence" {
                    counter_of(Kind::ReadWrite, &name)
                } else {
                    format!("{base}{part}")
                };
                let _reader = if beside {
                    let r = other.read_write_lock(&name).read();
                    Some(r.acquire().await.expect("the reader beside"))
                } else {
                    None
                };
                // The reader beside made the leases and the counter: replaced.
                raw_set(&mut conn, &["DEL", &key]).await;
                raw_set(&mut conn, &[foreign[0], &key, foreign[1]]).await;
                let mut all: Vec<String> = ["", ":readers", ":wwait"]
                    .iter()
                    .map(|p| format!("{base}{p}"))
                    .collect();
                all.push(counter_of(Kind::ReadWrite, &name));
                let before = snapshot(&mut conn, &all).await;
                let lock = if side == "read" {
                    rw.read()
                } else {
                    rw.write()
                };
                let result = lock.wait(Duration::ZERO).acquire().await;
                let case = format!("{name} ({} at {key})", foreign[0]);
                print!("({case}) ");
                match result {
                    Err(e) => {
                        if let Some(problem) = wrong_type_problem(&e, &key, role) {
                            problems.push(format!("{case}: {problem}"));
                        }
                    }
                    Ok(_) => problems.push(format!("{case}: acquired")),
                }
                let after = snapshot(&mut conn, &all).await;
                if after != before {
                    problems.push(format!(
                        "{case}: the refused acquire wrote:\n{before}\n->\n{after}"
                    ));
                }
                checked += 1;
            }
        }
    }
    println!("{checked} cases");
    assert_eq!(checked, 16, "cases run");
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// Item 10 for the read-write lock's release: a lock hash (either side) or reader leases (the
/// read side) of the wrong type under a held lock is named with its role, and the release
/// writes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rw_release_over_a_wrong_typed_key_names_it_and_changes_nothing() {
    let server = common::server();
    let client = common::client(&server).await;
    let mut conn = common::raw(&server.url()).await;
    let mut problems = Vec::new();
    for (side, part, role) in [
        ("read", "", "lock hash"),
        ("write", "", "lock hash"),
        ("read", ":readers", "reader leases"),
    ] {
        let name = format!("trust:errors:rw-release:{side}{part}");
        let rw = client.read_write_lock(&name);
        let lock = if side == "read" {
            rw.read()
        } else {
            rw.write()
        };
        let base = lock.key().to_owned();
        let key = format!("{base}{part}");
        let guard = lock.acquire().await.expect("acquire");
        raw_set(&mut conn, &["DEL", &key]).await;
        raw_set(&mut conn, &["RPUSH", &key, "x"]).await;
        let all: Vec<String> = ["", ":readers", ":wwait"]
            .iter()
            .map(|p| format!("{base}{p}"))
            .collect();
        let before = snapshot(&mut conn, &all).await;
        let e = guard
            .release()
            .await
            .expect_err("release over a wrong-typed key");
        print!("({side} {part}) ");
        if let Some(problem) = wrong_type_problem(&e, &key, role) {
            problems.push(format!("{side} {part}: {problem}"));
        }
        let after = snapshot(&mut conn, &all).await;
        if after != before {
            problems.push(format!(
                "{side} {part}: the refused release wrote:\n{before}\n->\n{after}"
            ));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}
