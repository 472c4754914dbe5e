//! The test harness itself (`dlock::testing`): each piece does what its docs promise, so the
//! fault tests built on it test the locks and not the harness. Timings are printed (run with
//! `--nocapture`), never asserted.

use crate::common;

use std::net::TcpStream;
use std::path::Path;
use std::process::Command;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use dlock::testing::{
    server_version, Persistence, RedisCluster, RedisSentinel, RedisServer, RedisVersion, Role,
};

fn cli(server: &RedisServer, args: &[&str]) -> String {
    server
        .cli(args)
        .unwrap_or_else(|e| panic!("redis-cli {args:?}: {e}"))
        .trim()
        .to_owned()
}

/// The state letter in /proc/<pid>/stat (R, S, T, Z...), `None` once the pid is gone.
fn proc_state(pid: u32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // "<pid> (<comm>) <state> ...": comm may hold spaces, so split after the last ')'.
    stat.rsplit_once(')')?.1.trim_start().chars().next()
}

/// Polls `check` every 20 ms for up to `within`; panics naming `what`.
fn eventually(within: Duration, what: &str, mut check: impl FnMut() -> bool) {
    let start = Instant::now();
    while !check() {
        assert!(
            start.elapsed() < within,
            "{what}: not the case after {within:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_failed_start_quotes_redis_server_itself() {
    assert!(server_version().unwrap() >= RedisVersion::MIN_SUPPORTED);
    let err = RedisServer::start_with_args(&["--no-such-option", "x"]).unwrap_err();
    let msg = err.to_string();
    println!("{msg}");
    // redis-server's own words, not just "exited with status 1".
    assert!(msg.contains("Bad directive"), "{msg}");
    assert!(msg.contains("no-such-option"), "{msg}");
    assert!(msg.contains("exit status: 1"), "{msg}");
}

#[test]
fn rdb_restart_keeps_what_was_saved_and_loses_the_rest() {
    let mut server = RedisServer::start_persistent(Persistence::Rdb).unwrap();
    cli(&server, &["SET", "saved", "1"]);
    assert_eq!(cli(&server, &["SAVE"]), "OK");
    cli(&server, &["SET", "after-save", "2"]);
    let (port, pid) = (server.port(), server.pid());
    server.kill();
    assert!(!server.is_running());
    server.restart().unwrap();
    assert_eq!(server.port(), port);
    assert_ne!(server.pid(), pid);
    assert_eq!(cli(&server, &["GET", "saved"]), "1");
    assert_eq!(cli(&server, &["EXISTS", "after-save"]), "0");
}

#[test]
fn aof_restart_keeps_every_acknowledged_write() {
    let mut server = RedisServer::start_persistent(Persistence::Aof).unwrap();
    cli(&server, &["SET", "a", "1"]);
    cli(&server, &["INCR", "fence"]);
    server.kill();
    server.restart().unwrap();
    assert_eq!(cli(&server, &["MGET", "a", "fence"]), "1\n1");
    cli(&server, &["INCR", "fence"]);
    server.shutdown().unwrap();
    assert!(!server.is_running());
    server.restart().unwrap();
    assert_eq!(cli(&server, &["GET", "fence"]), "2");
}

#[test]
fn plain_restart_is_empty_and_stop_freezes() {
    let started = Instant::now();
    let mut server = RedisServer::start().unwrap();
    println!("RedisServer::start: {:?}", started.elapsed());
    cli(&server, &["SET", "k", "v"]);
    cli(&server, &["SAVE"]);
    let started = Instant::now();
    server.restart().unwrap();
    println!("RedisServer::restart: {:?}", started.elapsed());
    assert_eq!(
        cli(&server, &["DBSIZE"]),
        "0",
        "a non-persistent restart is empty"
    );

    let pid = server.pid().unwrap();
    server.stop().unwrap();
    eventually(Duration::from_secs(5), "server stopped", || {
        proc_state(pid) == Some('T')
    });
    server.cont().unwrap();
    eventually(Duration::from_secs(5), "server resumed", || {
        proc_state(pid) != Some('T')
    });
    assert_eq!(cli(&server, &["PING"]), "PONG");
}

#[test]
fn tls_server_answers_with_its_ca_and_refuses_another() {
    if !crate::common::tls_or_skip("a TLS server") {
        return;
    }
    let started = Instant::now();
    let server = RedisServer::start_tls().unwrap();
    println!("RedisServer::start_tls: {:?}", started.elapsed());
    let port = server.port().to_string();
    assert_eq!(server.url(), format!("rediss://127.0.0.1:{port}"));
    assert_eq!(cli(&server, &["PING"]), "PONG");

    let with_ca = |ca: &Path| {
        Command::new(std::env::var("REDIS_CLI_BIN").unwrap_or_else(|_| "redis-cli".into()))
            .args(["-p", &port, "--tls", "--cacert"])
            .arg(ca)
            .arg("PING")
            .output()
            .expect("run redis-cli")
    };
    let other = with_ca(server.other_ca_cert_path().unwrap());
    assert!(
        !String::from_utf8_lossy(&other.stdout).contains("PONG"),
        "an unrelated CA was accepted: {other:?}"
    );
    assert!(
        String::from_utf8_lossy(&other.stderr).contains("certificate verify failed"),
        "{other:?}"
    );
    let plain = Command::new(std::env::var("REDIS_CLI_BIN").unwrap_or_else(|_| "redis-cli".into()))
        .args(["-p", &port, "PING"])
        .output()
        .expect("run redis-cli");
    assert!(!String::from_utf8_lossy(&plain.stdout).contains("PONG"));
}

#[tokio::test]
async fn acl_user_logs_in_and_can_lock() {
    let password = "s3 cr@t:/";
    let server = RedisServer::builder()
        .user("alice", password)
        .start()
        .unwrap();
    let url = server.url_as("alice", password);
    let mut conn = dlock::redis::Client::open(url.as_str())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let me: String = dlock::redis::cmd("ACL")
        .arg("WHOAMI")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(me, "alice");
    // The user's rules cover what a lock needs: scripts, and pub/sub for waiters.
    let client = dlock::LockClient::connect(&url).await.unwrap();
    let guard = client.lock("acl").acquire().await.unwrap();
    guard.release().await.unwrap();

    let wrong = server.url_as("alice", "nope");
    let denied = dlock::redis::Client::open(wrong.as_str())
        .unwrap()
        .get_multiplexed_async_connection()
        .await;
    assert!(denied.is_err(), "a wrong password was accepted");
}

#[test]
fn cluster_serves_every_slot_and_promotes_replicas() {
    let started = Instant::now();
    let mut cluster = RedisCluster::start(3, 1).unwrap();
    println!("RedisCluster::start(3, 1): {:?}", started.elapsed());

    let masters = cluster.masters().unwrap();
    assert_eq!(masters.len(), 3);
    let served: u32 = masters
        .iter()
        .flat_map(|m| &m.slots)
        .map(|r| u32::from(*r.end() - *r.start()) + 1)
        .sum();
    assert_eq!(served, 16_384);
    assert_eq!(
        cluster.urls(),
        masters.iter().map(|m| m.url.clone()).collect::<Vec<_>>()
    );
    let nodes = cluster.nodes().unwrap();
    assert_eq!(nodes.len(), 6);
    for replica in nodes.iter().filter(|n| n.role == Role::Replica) {
        assert!(masters.iter().any(|m| Some(m.port) == replica.master_port));
    }

    // Routing: redis-cli -c follows MOVED; the key then sits on the master the harness names,
    // which is also where the crate's own slot function sends it.
    let key = "{order:7}:lock";
    assert_eq!(cluster.cli(&["SET", key, "v"]).unwrap().trim(), "OK");
    let owner = cluster.master_for_key(key).unwrap();
    assert_eq!(
        owner,
        cluster
            .master_for_slot(dlock::stock::cluster_slot(key))
            .unwrap()
    );
    assert_eq!(cli(cluster.server(owner.port).unwrap(), &["GET", key]), "v");

    let before = masters[0].clone();
    let started = Instant::now();
    let promoted = cluster.failover(0).unwrap();
    println!("RedisCluster::failover: {:?}", started.elapsed());
    assert_ne!(promoted.port, before.port);
    assert_eq!(promoted.role, Role::Master);
    assert_eq!(promoted.slots, before.slots);
    assert_eq!(cluster.urls()[0], promoted.url);
    assert_eq!(
        cluster
            .nodes()
            .unwrap()
            .iter()
            .find(|n| n.port == before.port)
            .map(|n| n.master_port),
        Some(Some(promoted.port)),
        "the old master follows the new one"
    );

    let victim = cluster.masters().unwrap()[1].clone();
    assert_eq!(victim.port, owner.port, "the key lives on master 1");
    // Replication is asynchronous: a replica promoted before it applied the SET would rightly
    // lack the key. Wait until the replica has it (SCAN: a keyless command a cluster replica
    // answers without READONLY) so the assertion below is about promotion, not replication lag.
    let replica = cluster
        .nodes()
        .unwrap()
        .into_iter()
        .find(|n| n.master_port == Some(victim.port))
        .expect("master 1 has a replica");
    let replica = cluster.server(replica.port).unwrap();
    eventually(Duration::from_secs(30), "the replica has the key", || {
        cli(replica, &["SCAN", "0", "MATCH", key, "COUNT", "1000"]).contains(key)
    });
    let started = Instant::now();
    let heir = cluster.kill_master(1).unwrap();
    println!("RedisCluster::kill_master: {:?}", started.elapsed());
    assert_ne!(heir.port, victim.port);
    assert_eq!(heir.slots, victim.slots);
    assert!(!cluster.server(victim.port).unwrap().is_running());
    assert_eq!(cluster.cli(&["GET", key]).unwrap().trim(), "v");

    // Master 1 has no replica left: the harness says so instead of waiting 30 s.
    let started = Instant::now();
    let err = cluster.failover(1).unwrap_err().to_string();
    assert!(err.contains("no running replica"), "{err}");
    assert!(started.elapsed() < Duration::from_secs(10));
}

#[test]
fn sentinels_promote_the_replica_when_the_primary_dies() {
    let started = Instant::now();
    let mut set = RedisSentinel::start().unwrap();
    println!("RedisSentinel::start: {:?}", started.elapsed());
    assert_eq!(set.sentinel_urls().len(), 3);
    assert!(!set.master_name().is_empty());
    let old_url = set.master_url().unwrap();
    let old_pid = set.master_pid().unwrap();

    let started = Instant::now();
    let new_url = set.kill_master().unwrap();
    println!("RedisSentinel::kill_master: {:?}", started.elapsed());
    assert_ne!(new_url, old_url);
    assert_eq!(set.master_url().unwrap(), new_url);
    assert_ne!(set.master_pid().unwrap(), old_pid);

    let err = set.kill_master().unwrap_err().to_string();
    assert!(err.contains("no running replica"), "{err}");
}

/// Set in the child process of `a_static_server_dies_with_its_process`: where to write the
/// server's pid, port and directory, and whether to exit or wait to be SIGKILLed.
const CHILD_ENV: &str = "DLOCK_HARNESS_CHILD";

/// Does nothing in a normal run. In the child it starts a server kept in a `static` (never
/// dropped), reports it, and exits or hangs.
#[test]
fn child_with_a_static_server() {
    static KEPT: OnceLock<RedisServer> = OnceLock::new();
    let Ok(spec) = std::env::var(CHILD_ENV) else {
        return;
    };
    let (how, report) = spec.split_once(':').unwrap();
    let server = KEPT.get_or_init(|| RedisServer::start().unwrap());
    let line = format!(
        "{} {} {}",
        server.pid().unwrap(),
        server.port(),
        server.dir().display()
    );
    std::fs::write(report, line).unwrap();
    if how == "hang" {
        std::thread::sleep(Duration::from_secs(60));
    }
}

#[test]
fn a_static_server_dies_with_its_process() {
    for how in ["exit", "hang"] {
        let report =
            std::env::temp_dir().join(format!("dlock-harness-child-{}-{how}", std::process::id()));
        let _ = std::fs::remove_file(&report);
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                common::test_path(module_path!(), "child_with_a_static_server").as_str(),
                "--test-threads=1",
            ])
            .env(CHILD_ENV, format!("{how}:{}", report.display()))
            .stdout(std::process::Stdio::null())
            .spawn()
            .unwrap();
        eventually(
            Duration::from_secs(20),
            "the child reported its server",
            || std::fs::read_to_string(&report).is_ok_and(|s| s.split(' ').count() == 3),
        );
        if how == "hang" {
            // The hard way out: no destructor, no atexit, nothing but the kernel closing fds.
            child.kill().unwrap();
        }
        let status = child.wait().unwrap();
        assert!(how == "hang" || status.success(), "child failed: {status}");

        let text = std::fs::read_to_string(&report).unwrap();
        let _ = std::fs::remove_file(&report);
        let mut parts = text.splitn(3, ' ');
        let pid: u32 = parts.next().unwrap().parse().unwrap();
        let port: u16 = parts.next().unwrap().parse().unwrap();
        let dir = parts.next().unwrap().to_owned();
        let started = Instant::now();
        // Both: the main thread of a killed multi-threaded process can be a zombie while its
        // other threads, which share its sockets, are still exiting.
        eventually(
            Duration::from_secs(10),
            &format!("redis-server {pid} on port {port} gone after its test process ended ({how})"),
            || {
                matches!(proc_state(pid), None | Some('Z'))
                    && TcpStream::connect(("127.0.0.1", port)).is_err()
            },
        );
        println!(
            "static server gone {:?} after its process ended ({how})",
            started.elapsed()
        );
        eventually(Duration::from_secs(10), "its directory removed", || {
            !Path::new(&dir).exists()
        });
    }
}
