//! dlock's scripts as one Redis FUNCTION library (issue 17 item 4): every call is an FCALL of
//! this build's library, the library survives what the script cache does not, comes back
//! after FUNCTION FLUSH or DELETE, coexists with another version's, and a server or user
//! without FUNCTION gets EVALSHA. Released and renewed locks still work on a full server.

use crate::common;

use std::time::Duration;

use dlock::redis::aio::MultiplexedConnection;
use dlock::testing::RedisServer;
use dlock::{LockClient, LockError};

async fn raw_cmd<T: dlock::redis::FromRedisValue>(
    conn: &mut MultiplexedConnection,
    args: &[&str],
) -> T {
    dlock::redis::cmd(args[0])
        .arg(&args[1..])
        .query_async(conn)
        .await
        .unwrap_or_else(|e| panic!("{args:?}: {e}"))
}

/// The names of the function libraries on the server.
async fn libraries(conn: &mut MultiplexedConnection) -> Vec<String> {
    let list: Vec<dlock::redis::Value> = raw_cmd(conn, &["FUNCTION", "LIST"]).await;
    let mut names = Vec::new();
    for lib in list {
        let fields: Vec<(String, dlock::redis::Value)> = match lib {
            dlock::redis::Value::Map(m) => m
                .into_iter()
                .filter_map(|(k, v)| Some((dlock::redis::from_redis_value(k).ok()?, v)))
                .collect(),
            other => {
                let flat: Vec<dlock::redis::Value> = dlock::redis::from_redis_value(other).unwrap();
                flat.chunks(2)
                    .filter_map(|kv| {
                        Some((
                            dlock::redis::from_redis_value(kv[0].clone()).ok()?,
                            kv[1].clone(),
                        ))
                    })
                    .collect()
            }
        };
        for (k, v) in fields {
            if k == "library_name" {
                names.push(dlock::redis::from_redis_value(v).unwrap());
            }
        }
    }
    names.sort();
    names
}

/// The script commands the server ran: (FCALL, EVALSHA + EVAL).
async fn fcalls_and_evals(conn: &mut MultiplexedConnection) -> (u64, u64) {
    let calls = common::command_calls(conn).await;
    let of = |cmd: &str| calls.get(cmd).copied().unwrap_or(0);
    (of("fcall"), of("evalsha") + of("eval"))
}

/// One call of each lock kind's acquire and release, a re-entry included.
async fn every_kind_once(client: &LockClient) {
    let lock = client.lock("fn:plain");
    let g = lock.acquire().await.unwrap();
    let inner = g.scope(lock.acquire()).await.unwrap();
    inner.release().await.unwrap();
    g.release().await.unwrap();
    let rw = client.read_write_lock("fn:rw");
    rw.read().acquire().await.unwrap().release().await.unwrap();
    rw.write().acquire().await.unwrap().release().await.unwrap();
    let fair = client.fair_lock("fn:fair");
    fair.acquire().await.unwrap().release().await.unwrap();
    let sem = client.semaphore("fn:sem", 2);
    sem.acquire().await.unwrap().release().await.unwrap();
}

#[tokio::test]
async fn every_call_is_an_fcall_of_this_builds_library_beside_another_versions() {
    if !common::functions_or_skip("the FUNCTION library beside another version's") {
        return;
    }
    let server = common::server();
    let mut admin = common::raw(&server.url()).await;
    // Another dlock version's library, as in a rolling deploy: left alone, and ours is apart.
    let other = "dlock_0_0_9_aaaaaaaaaaaa";
    let code = format!(
        "#!lua name={other}\nredis.register_function('{other}_lock_acquire', \
         function(KEYS, ARGV) return 'old' end)"
    );
    let _: String = raw_cmd(&mut admin, &["FUNCTION", "LOAD", &code]).await;

    let a = common::client(&server).await;
    let b = common::client(&server).await;
    every_kind_once(&a).await;
    every_kind_once(&b).await;

    let libs = libraries(&mut admin).await;
    assert_eq!(libs.len(), 2, "one library per version: {libs:?}");
    let ours = libs.iter().find(|l| *l != other).unwrap();
    let version = env!("CARGO_PKG_VERSION").replace('.', "_");
    assert!(ours.starts_with(&format!("dlock_{version}_")), "{ours}");
    let old: String = raw_cmd(
        &mut admin,
        &["FCALL", &format!("{other}_lock_acquire"), "1", "k"],
    )
    .await;
    assert_eq!(old, "old", "the other version's library was changed");

    let (fcalls, evals) = fcalls_and_evals(&mut admin).await;
    assert_eq!(
        evals, 0,
        "EVALSHA/EVAL sent although the server has FUNCTION"
    );
    assert!(
        fcalls >= 2 * 12,
        "{fcalls} FCALLs for two rounds of every kind"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn function_flush_and_delete_under_held_and_waited_locks_are_invisible() {
    if !common::functions_or_skip("FUNCTION FLUSH and DELETE under held and waited locks") {
        return;
    }
    let server = common::server();
    let mut admin = common::raw(&server.url()).await;
    let holder = common::client(&server).await;
    let waiting = common::client(&server).await;
    let lock = holder.lock("fn-flushed").ttl(Duration::from_millis(600));
    let held = lock.acquire().await.unwrap();
    let waiter = {
        let l = waiting.lock("fn-flushed").wait(Duration::from_secs(10));
        tokio::spawn(async move { l.acquire().await?.release().await })
    };
    let library = libraries(&mut admin).await.remove(0);
    let _: () = raw_cmd(&mut admin, &["FUNCTION", "FLUSH"]).await;
    // Time is the subject: renewals (every 200 ms) meet a missing library and keep the
    // 600 ms lease alive across more than two leases.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(!held.is_lost(), "a renewal failed after FUNCTION FLUSH");
    assert!(lock.is_locked().await.unwrap());
    assert_eq!(
        libraries(&mut admin).await,
        std::slice::from_ref(&library),
        "not loaded again"
    );

    let _: () = raw_cmd(&mut admin, &["FUNCTION", "DELETE", &library]).await;
    held.release().await.expect("release after FUNCTION DELETE");
    tokio::time::timeout(Duration::from_secs(10), waiter)
        .await
        .expect("waiter hung")
        .unwrap()
        .expect("waiter acquire/release after FUNCTION DELETE");

    for i in 0..20 {
        let _: () = raw_cmd(&mut admin, &["FUNCTION", "FLUSH"]).await;
        let g = lock
            .acquire()
            .await
            .unwrap_or_else(|e| panic!("round {i}: {e}"));
        let _: () = raw_cmd(&mut admin, &["FUNCTION", "FLUSH"]).await;
        let inner = g.scope(lock.acquire()).await.unwrap();
        let _: () = raw_cmd(&mut admin, &["FUNCTION", "FLUSH"]).await;
        inner.release().await.unwrap();
        let _: () = raw_cmd(&mut admin, &["FUNCTION", "FLUSH"]).await;
        g.release()
            .await
            .unwrap_or_else(|e| panic!("round {i}: {e}"));
    }
    assert!(common::lock_keys(&mut admin).await.is_empty());
    assert_eq!(libraries(&mut admin).await, [library]);
}

/// A client logged in as ACL user `locks`, created with `rules`.
async fn client_as(
    server: &RedisServer,
    admin: &mut MultiplexedConnection,
    rules: &[&str],
) -> LockClient {
    let setuser = [&["ACL", "SETUSER", "locks", "on", ">pw"][..], rules].concat();
    let _: () = raw_cmd(admin, &setuser).await;
    let url = format!("redis://locks:pw@127.0.0.1:{}", server.port());
    LockClient::connect(&url).await.expect("build as locks")
}

/// Error replies the server has sent so far (`INFO errorstats`) besides NOSCRIPT (the script
/// cache's first miss of each script): a command it does not know (FCALL renamed away) or
/// refuses (ACL) shows up here, not in `commandstats`.
async fn error_replies(conn: &mut MultiplexedConnection) -> u64 {
    let info: String = raw_cmd(conn, &["INFO", "errorstats"]).await;
    info.lines()
        .filter_map(|l| l.strip_prefix("errorstat_")?.split_once(":count="))
        .filter(|(kind, _)| *kind != "NOSCRIPT")
        .filter_map(|(_, n)| n.trim().parse::<u64>().ok())
        .sum()
}

/// A client of `url` does every kind's calls; the server saw EVALSHA/EVAL only, and no call
/// tried FCALL first (no error reply during the calls).
async fn works_with_evalsha_only(client: LockClient, admin: &mut MultiplexedConnection) {
    let errors = error_replies(admin).await;
    every_kind_once(&client).await;
    let (fcalls, evals) = fcalls_and_evals(admin).await;
    assert!(evals >= 12, "{evals} EVALSHA/EVAL calls");
    assert_eq!(fcalls, 0, "FCALL sent");
    assert_eq!(
        error_replies(admin).await,
        errors,
        "calls were refused before EVALSHA"
    );
    assert!(libraries_or_none(admin).await.is_empty());
}

/// The libraries, or none when the server has no FUNCTION command.
async fn libraries_or_none(conn: &mut MultiplexedConnection) -> Vec<String> {
    let probe: Result<dlock::redis::Value, _> = dlock::redis::cmd("FUNCTION")
        .arg("LIST")
        .query_async(conn)
        .await;
    match probe {
        Ok(_) => libraries(conn).await,
        Err(_) => Vec::new(),
    }
}

#[tokio::test]
async fn a_server_without_function_commands_is_called_with_evalsha() {
    // A server with FUNCTION made one without, as Redis 6.2 is: FUNCTION and FCALL are unknown
    // commands (6.2 itself refuses to rename a command it does not have).
    let server = if common::server_info().has_functions() {
        RedisServer::start_with_args(&[
            "--rename-command",
            "FCALL",
            "",
            "--rename-command",
            "FUNCTION",
            "",
        ])
        .unwrap()
    } else {
        common::server()
    };
    let mut admin = common::raw(&server.url()).await;
    let client = common::client(&server).await;
    works_with_evalsha_only(client, &mut admin).await;
}

#[tokio::test]
async fn a_user_without_function_rights_is_called_with_evalsha() {
    if !common::functions_or_skip("a user refused FUNCTION and FCALL") {
        return;
    }
    let server = common::server();
    let mut admin = common::raw(&server.url()).await;
    let client = client_as(
        &server,
        &mut admin,
        &["~*", "&*", "+@all", "-function", "-fcall"],
    )
    .await;
    works_with_evalsha_only(client, &mut admin).await;
}

#[tokio::test]
async fn functions_turned_off_use_evalsha() {
    let server = common::server();
    let mut admin = common::raw(&server.url()).await;
    let client = LockClient::builder(server.url())
        .functions(false)
        .build()
        .await
        .unwrap();
    works_with_evalsha_only(client, &mut admin).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_server_still_renews_and_frees_locks_and_refuses_new_ones_clearly() {
    let server = common::server();
    let mut admin = common::raw(&server.url()).await;
    let client = common::client(&server).await;
    let renewed = client
        .lock("oom:renewed")
        .ttl(Duration::from_millis(600))
        .acquire()
        .await
        .unwrap();
    let lock = client.lock("oom:freed");
    let freed = lock.acquire().await.unwrap();
    let after_flush = client.lock("oom:after-flush");
    let flushed = after_flush.acquire().await.unwrap();
    // Every write that can grow memory is refused from here on (noeviction).
    let _: () = raw_cmd(&mut admin, &["CONFIG", "SET", "maxmemory", "1"]).await;

    let refused = client.lock("oom:new").try_acquire().await;
    match refused {
        Err(e @ LockError::Redis { .. }) => {
            let text = e.to_string();
            assert!(text.contains("oom:new") && text.contains("OOM"), "{text}");
        }
        other => panic!("acquire on a full server: {other:?}"),
    }
    freed.release().await.expect("release on a full server");
    assert!(!lock.is_locked().await.unwrap());
    // The library lost on a full server: FUNCTION LOAD is refused, the EVAL fallback carries
    // the function's flags and still frees. Without FUNCTION (Redis 6.2): the script cache lost,
    // EVALSHA answered NOSCRIPT, and EVAL still frees.
    let lose = if common::server_info().has_functions() {
        "FUNCTION"
    } else {
        "SCRIPT"
    };
    let _: () = raw_cmd(&mut admin, &[lose, "FLUSH"]).await;
    flushed
        .release()
        .await
        .expect("release on a full server without the library");
    assert!(!after_flush.is_locked().await.unwrap());
    // Time is the subject: renewals every 200 ms keep a 600 ms lease for 1.5 s.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(!renewed.is_lost(), "renewal refused on a full server");
    let _: () = raw_cmd(&mut admin, &["CONFIG", "SET", "maxmemory", "0"]).await;
    renewed.release().await.expect("still held");
}

#[tokio::test]
async fn a_user_refused_one_key_keeps_calling_the_library() {
    let server = common::server();
    let mut admin = common::raw(&server.url()).await;
    let client = client_as(
        &server,
        &mut admin,
        &["~dlock:{ok*", "~dlock:fence:*", "&*", "+@all"],
    )
    .await;
    let refused = client.lock("elsewhere").acquire().await;
    let text = refused
        .expect_err("a key outside the user's pattern")
        .to_string();
    assert!(
        text.contains("permissions") && text.contains("elsewhere"),
        "{text}"
    );
    if !common::functions_or_skip("the library kept after a key's NOPERM") {
        return;
    }
    let (fcalls, evals) = fcalls_and_evals(&mut admin).await;
    client
        .lock("ok:1")
        .acquire()
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    let (fcalls_after, evals_after) = fcalls_and_evals(&mut admin).await;
    assert_eq!(
        evals_after, evals,
        "a key's NOPERM switched the client to EVALSHA"
    );
    assert_eq!(fcalls_after - fcalls, 2, "acquire and release as FCALL");
}
