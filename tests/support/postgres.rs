//! The PostgreSQL harness (`dlock::testing::PgServer`): start, stop, crash, pause, standby and
//! promotion do what the PostgreSQL store's fault tests rely on. Timings are printed (run with
//! `--nocapture`), never asserted.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use dlock::testing::{postgres_available, PgServer};

/// A started server, or `None` (after printing `skipped: ...`) where PostgreSQL is not
/// installed; CI installs it, so there nothing is skipped.
fn server(test: &str) -> Option<PgServer> {
    if !postgres_available() {
        let why = PgServer::start().err().map(|e| e.to_string());
        println!("skipped: {test}: {}", why.unwrap_or_default());
        return None;
    }
    let start = Instant::now();
    let server = PgServer::start().unwrap_or_else(|e| panic!("PgServer::start: {e}"));
    println!("{test}: started in {:?}", start.elapsed());
    Some(server)
}

/// The processes whose parent is `parent` (a postmaster's backends and background workers).
fn children(parent: u32) -> Vec<u32> {
    let entries = std::fs::read_dir("/proc").expect("/proc");
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&pid| {
            std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
                stat.rsplit_once(')')
                    .and_then(|(_, rest)| rest.split_whitespace().nth(1)?.parse::<u32>().ok())
                    == Some(parent)
            })
        })
        .collect()
}

fn psql(server: &PgServer, sql: &str) -> String {
    server
        .psql(sql)
        .unwrap_or_else(|e| panic!("port {}: {sql}: {e}", server.port()))
}

/// The state letter in /proc/<pid>/stat (R, S, T, Z...), `None` once the pid is gone.
fn proc_state(pid: u32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(')')?.1.trim_start().chars().next()
}

/// What a server's first reply to a connection takes: PostgreSQL's SSLRequest (length 8, code
/// 80877103) is answered with one byte, `N` with SSL off, before any authentication.
fn greeting(port: u16, within: Duration) -> std::io::Result<u8> {
    let mut stream = TcpStream::connect_timeout(&([127, 0, 0, 1], port).into(), within)?;
    stream.set_read_timeout(Some(within))?;
    stream.write_all(&[0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f])?;
    let mut answer = [0u8; 1];
    stream.read_exact(&mut answer)?;
    Ok(answer[0])
}

#[test]
fn a_server_answers_queries_at_its_url() {
    let Some(server) = server("a_server_answers_queries_at_its_url") else {
        return;
    };
    assert!(server.is_running());
    assert_eq!(psql(&server, "select 1"), "1");
    assert_eq!(
        server.url(),
        format!("postgres://postgres@127.0.0.1:{}/postgres", server.port())
    );
    assert_eq!(psql(&server, "show server_encoding"), "UTF8");
    assert_eq!(psql(&server, "show wal_level"), "replica");
    let err = server.psql("select * from no_such_table").unwrap_err();
    assert!(err.to_string().contains("no_such_table"), "{err}");
    let dir = server.dir().to_owned();
    let pid = server.pid();
    drop(server);
    assert!(!dir.exists(), "{} left behind", dir.display());
    assert!(
        matches!(proc_state(pid), None | Some('Z')),
        "postmaster {pid} survived the drop"
    );
}

#[test]
fn stop_and_start_again_keep_the_data() {
    let Some(mut server) = server("stop_and_start_again_keep_the_data") else {
        return;
    };
    psql(
        &server,
        "create table t (v text); insert into t values ('kept')",
    );
    let (port, pid) = (server.port(), server.pid());
    let start = Instant::now();
    server.stop();
    println!("stop: {:?}", start.elapsed());
    assert!(!server.is_running());
    assert!(
        server.psql("select 1").is_err(),
        "a stopped server answered"
    );
    let start = Instant::now();
    server.start_again().unwrap();
    println!("start_again after stop: {:?}", start.elapsed());
    assert_eq!(server.port(), port);
    assert_ne!(server.pid(), pid);
    assert_eq!(psql(&server, "select v from t"), "kept");
}

#[test]
fn kill_is_a_crash_that_start_again_recovers_from() {
    let Some(mut server) = server("kill_is_a_crash_that_start_again_recovers_from") else {
        return;
    };
    psql(&server, "create table t (v int); insert into t values (7)");
    // The checkpointer, WAL writer... each in its own session: kill must find them all.
    let workers = children(server.pid());
    assert!(workers.len() >= 4, "postmaster children: {workers:?}");
    let start = Instant::now();
    server.kill();
    println!("kill: {:?}", start.elapsed());
    assert!(!server.is_running());
    let start = Instant::now();
    server.start_again().unwrap();
    println!("start_again after kill: {:?}", start.elapsed());
    assert_eq!(psql(&server, "select v from t"), "7");
    // PostgreSQL says it recovered from a crash, not from a clean shutdown.
    let log = std::fs::read_to_string(server.log_path()).unwrap();
    assert!(
        log.contains("database system was interrupted")
            || log.contains("was not properly shut down"),
        "no crash recovery in the log:\n{log}"
    );
    for pid in workers {
        assert!(
            matches!(proc_state(pid), None | Some('Z')),
            "{pid} outlived the kill"
        );
    }
}

#[test]
fn pause_leaves_connections_unanswered_until_resume() {
    let Some(server) = server("pause_leaves_connections_unanswered_until_resume") else {
        return;
    };
    assert_eq!(
        greeting(server.port(), Duration::from_secs(5)).unwrap(),
        b'N'
    );
    server.pause();
    let workers = children(server.pid());
    assert!(workers.len() >= 4, "postmaster children: {workers:?}");
    for pid in workers.iter().copied().chain([server.pid()]) {
        // The watcher (a shell: see dlock::testing::postgres) is left running; a backend that
        // exited before the pause stays a zombie, since the stopped postmaster cannot reap it.
        let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
        if comm.trim() != "sh" {
            let state = proc_state(pid);
            assert!(
                matches!(state, Some('T' | 'Z') | None),
                "{pid} ({}) not paused: {state:?}",
                comm.trim()
            );
        }
    }
    let err = greeting(server.port(), Duration::from_millis(300)).unwrap_err();
    assert!(
        matches!(
            err.kind(),
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
        ),
        "a paused server answered or refused: {err}"
    );
    let start = Instant::now();
    server.resume();
    assert_eq!(
        greeting(server.port(), Duration::from_secs(5)).unwrap(),
        b'N'
    );
    assert_eq!(psql(&server, "select 1"), "1");
    println!("answering again {:?} after resume", start.elapsed());
}

#[test]
fn a_standby_follows_its_primary_and_takes_writes_once_promoted() {
    let Some(primary) = server("a_standby_follows_its_primary_and_takes_writes_once_promoted")
    else {
        return;
    };
    psql(&primary, "create table t (v int)");
    let start = Instant::now();
    let standby = primary.standby().unwrap();
    println!("standby: {:?}", start.elapsed());
    assert_ne!(standby.port(), primary.port());
    assert_eq!(psql(&standby, "select pg_is_in_recovery()"), "t");
    let refused = standby.psql("insert into t values (0)").unwrap_err();
    assert!(refused.to_string().contains("read-only"), "{refused}");

    psql(&primary, "insert into t values (1)");
    let start = Instant::now();
    let mut seen = String::new();
    for _ in 0..500 {
        seen = psql(&standby, "select coalesce(sum(v), 0) from t");
        if seen == "1" || start.elapsed() > Duration::from_secs(10) {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(seen, "1", "the standby never saw the primary's row");
    println!("replicated within {:?}", start.elapsed());

    let start = Instant::now();
    standby.promote().unwrap();
    println!("promote: {:?}", start.elapsed());
    assert_eq!(psql(&standby, "select pg_is_in_recovery()"), "f");
    psql(&standby, "insert into t values (2)");
    assert_eq!(psql(&standby, "select sum(v) from t"), "3");
    // The old primary is untouched by the new one's writes.
    assert_eq!(psql(&primary, "select sum(v) from t"), "1");
}

#[test]
fn several_servers_run_at_once() {
    if !postgres_available() {
        println!("skipped: several_servers_run_at_once: no PostgreSQL server binaries");
        return;
    }
    let start = Instant::now();
    let servers: Vec<PgServer> = std::thread::scope(|s| {
        let starts: Vec<_> = (0..3).map(|_| s.spawn(PgServer::start)).collect();
        starts
            .into_iter()
            .map(|h| h.join().unwrap().unwrap())
            .collect()
    });
    println!("3 servers started at once in {:?}", start.elapsed());
    for (i, server) in servers.iter().enumerate() {
        psql(server, &format!("create table mine as select {i} as v"));
    }
    for (i, server) in servers.iter().enumerate() {
        assert_eq!(psql(server, "select v from mine"), i.to_string());
    }
}
