//! The ZooKeeper harness does what the store's fault tests will rely on: a server serves a real
//! client (the `zookeeper-client` crate, a dev-dependency only) and grants short sessions,
//! keeps its data across a kill, freezes and resumes, and an ensemble elects a new leader when
//! its leader is killed or frozen. Timings are printed (`--nocapture`), never asserted.
//!
//! Where no ZooKeeper is installed, each test prints `skipped: <test>: <why>` and passes; CI
//! installs Debian's `zookeeper` package, so there nothing is skipped.

use std::future::Future;
use std::path::Path;
use std::time::{Duration, Instant};

use zookeeper_client as zk;

use super::install::{self, find_classpath, parse_version};
use super::node::Mode;
use super::{ZkEnsemble, ZkServer, MAX_SESSION_TIMEOUT, MIN_SESSION_TIMEOUT};

/// Whether ZooKeeper is installed; if not, says that `test` is skipped and why.
fn available(test: &str) -> bool {
    match install::install() {
        Ok(install) => {
            println!("{test}: ZooKeeper {}", install.version);
            true
        }
        Err(why) => {
            println!("skipped: {test}: {why}");
            false
        }
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime")
}

/// Every client call is bounded: a call that hangs fails the test instead of hanging it.
async fn within<T>(what: &str, call: impl Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(20), call)
        .await
        .unwrap_or_else(|_| panic!("{what}: no answer within 20 s"))
}

async fn connect(connect_string: &str, session: Duration) -> zk::Client {
    within(
        "connect",
        zk::Client::connector()
            .with_session_timeout(session)
            .connect(connect_string),
    )
    .await
    .unwrap_or_else(|e| panic!("connect to {connect_string}: {e}"))
}

fn persistent() -> zk::CreateOptions<'static> {
    zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all())
}

fn pid_alive(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

#[test]
fn a_server_serves_a_real_client_and_leaves_nothing_behind() {
    let test = "a_server_serves_a_real_client_and_leaves_nothing_behind";
    if !available(test) {
        return;
    }
    let start = Instant::now();
    let server = ZkServer::start().unwrap_or_else(|e| panic!("ZkServer::start: {e}"));
    println!("{test}: started in {:?}", start.elapsed());
    let port = server.port();
    assert_eq!(server.url(), format!("zk://127.0.0.1:{port}"));
    assert_eq!(server.connect_string(), format!("127.0.0.1:{port}"));
    assert_eq!(server.four_letter("ruok").unwrap(), "imok");
    let srvr = server.four_letter("srvr").unwrap();
    assert_eq!(Mode::of_srvr(&srvr), Ok(Mode::Standalone), "{srvr}");
    assert!(srvr.contains("Zookeeper version: "), "{srvr}");

    runtime().block_on(async {
        // The session timeouts a lock holder will ask for are granted as asked; beyond the
        // bounds they are clamped to them.
        for asked in [Duration::from_secs(2), Duration::from_secs(4)] {
            let client = connect(&server.connect_string(), asked).await;
            assert_eq!(client.session_timeout(), asked);
        }
        let short = connect(&server.connect_string(), Duration::from_millis(100)).await;
        assert_eq!(short.session_timeout(), MIN_SESSION_TIMEOUT);
        let long = connect(&server.connect_string(), Duration::from_secs(600)).await;
        assert_eq!(long.session_timeout(), MAX_SESSION_TIMEOUT);
        drop((short, long));

        let client = connect(&server.connect_string(), Duration::from_secs(4)).await;
        let (parent, _) = within("create", client.create("/harness", b"hello", &persistent()))
            .await
            .unwrap();
        let sequential = zk::CreateMode::EphemeralSequential.with_acls(zk::Acls::anyone_all());
        let (first, seq0) = within("create", client.create("/harness/n-", b"", &sequential))
            .await
            .unwrap();
        let (second, seq1) = within("create", client.create("/harness/n-", b"", &sequential))
            .await
            .unwrap();
        assert_eq!((seq0.into_i64(), seq1.into_i64()), (0, 1));
        assert!(parent.czxid < first.czxid && first.czxid < second.czxid);
        assert_eq!(first.ephemeral_owner, client.session_id().0);
        let (data, stat) = within("get_data", client.get_data("/harness"))
            .await
            .unwrap();
        assert_eq!((data.as_slice(), stat.czxid), (&b"hello"[..], parent.czxid));
        let mut children = within("list_children", client.list_children("/harness"))
            .await
            .unwrap();
        children.sort();
        assert_eq!(children, ["n-0000000000", "n-0000000001"]);
    });

    let dir = server.dir().to_owned();
    let pid = server.pid().unwrap();
    assert!(dir.join("zoo.cfg").is_file() && pid_alive(pid));
    drop(server);
    assert!(!dir.exists(), "{} left behind", dir.display());
    assert!(!pid_alive(pid), "JVM {pid} left running");
}

#[test]
fn a_killed_server_restarts_with_its_data_and_a_frozen_one_answers_nothing() {
    let test = "a_killed_server_restarts_with_its_data_and_a_frozen_one_answers_nothing";
    if !available(test) {
        return;
    }
    let mut server = ZkServer::start().unwrap_or_else(|e| panic!("ZkServer::start: {e}"));
    let rt = runtime();
    let created = rt.block_on(async {
        let client = connect(&server.connect_string(), Duration::from_secs(2)).await;
        let (stat, _) = within("create", client.create("/kept", b"data", &persistent()))
            .await
            .unwrap();
        stat.czxid
    });

    let port = server.port();
    let killed = Instant::now();
    server.kill();
    println!("{test}: kill in {:?}", killed.elapsed());
    assert!(!server.is_running());
    assert!(server.four_letter("ruok").is_err(), "killed, yet answering");
    // Its port taken meanwhile: the error is ZooKeeper's own, quoted from its log.
    let squatter = std::net::TcpListener::bind(("127.0.0.1", port)).unwrap();
    let err = server.restart().unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::AddrInUse, "{err}");
    assert!(err.to_string().contains("BindException"), "{err}");
    assert!(!server.is_running());
    drop(squatter);
    let restarted = Instant::now();
    server
        .restart()
        .unwrap_or_else(|e| panic!("ZkServer::restart: {e}"));
    println!("{test}: restart in {:?}", restarted.elapsed());
    assert_eq!(server.port(), port);
    rt.block_on(async {
        let client = connect(&server.connect_string(), Duration::from_secs(2)).await;
        let (data, stat) = within("get_data", client.get_data("/kept")).await.unwrap();
        assert_eq!((data.as_slice(), stat.czxid), (&b"data"[..], created));
    });

    server.stop().unwrap();
    let asked = Instant::now();
    let frozen = server.four_letter("ruok");
    assert!(frozen.is_err(), "frozen, yet answering: {frozen:?}");
    println!(
        "{test}: a frozen server's ruok failed after {:?}",
        asked.elapsed()
    );
    server.cont().unwrap();
    assert_eq!(server.four_letter("ruok").unwrap(), "imok");
}

#[test]
fn an_ensemble_elects_another_leader_when_its_leader_is_killed() {
    let test = "an_ensemble_elects_another_leader_when_its_leader_is_killed";
    if !available(test) {
        return;
    }
    let start = Instant::now();
    let mut ensemble = ZkEnsemble::start().unwrap_or_else(|e| panic!("ZkEnsemble::start: {e}"));
    println!("{test}: started in {:?}", start.elapsed());
    assert_eq!(ensemble.len(), 3);
    let ports: Vec<u16> = (0..3).map(|i| ensemble.port(i)).collect();
    assert_eq!(
        ensemble.url(),
        format!(
            "zk://127.0.0.1:{},127.0.0.1:{},127.0.0.1:{}",
            ports[0], ports[1], ports[2]
        )
    );
    assert_eq!(ensemble.urls()[1], format!("zk://127.0.0.1:{}", ports[1]));
    let old = ensemble.leader().unwrap();
    let modes: Vec<Mode> = (0..3)
        .map(|i| Mode::of_srvr(&ensemble.four_letter(i, "srvr").unwrap()).unwrap())
        .collect();
    assert_eq!(modes.iter().filter(|m| **m == Mode::Leader).count(), 1);
    assert_eq!(modes[old], Mode::Leader);

    let rt = runtime();
    let connect_string = ensemble.connect_string();
    let (client, created) = rt.block_on(async {
        let client = connect(&connect_string, Duration::from_secs(4)).await;
        let (stat, _) = within("create", client.create("/ensemble", b"v", &persistent()))
            .await
            .unwrap();
        (client, stat.czxid)
    });

    let killed = Instant::now();
    ensemble.kill(old);
    let new = ensemble.leader().unwrap();
    println!(
        "{test}: new leader {new} {:?} after the kill",
        killed.elapsed()
    );
    assert_ne!(new, old);
    rt.block_on(async {
        // The same session, carried over to a surviving server; and a write commits.
        let (data, stat) = within("get_data", client.get_data("/ensemble"))
            .await
            .unwrap();
        assert_eq!((data.as_slice(), stat.czxid), (&b"v"[..], created));
        let (after, _) = within("create", client.create("/after", b"", &persistent()))
            .await
            .unwrap();
        // The epoch (high 32 bits of a zxid) went up with the new leader.
        assert!(
            after.czxid >> 32 > created >> 32,
            "{after:?} vs {created:#x}"
        );
    });

    let restarted = Instant::now();
    ensemble.restart(old).unwrap();
    println!("{test}: old leader back in {:?}", restarted.elapsed());
    let srvr = ensemble.four_letter(old, "srvr").unwrap();
    assert_eq!(Mode::of_srvr(&srvr), Ok(Mode::Follower), "{srvr}");
    assert_eq!(ensemble.leader().unwrap(), new);
}

#[test]
fn an_ensemble_replaces_a_frozen_leader_and_takes_it_back() {
    let test = "an_ensemble_replaces_a_frozen_leader_and_takes_it_back";
    if !available(test) {
        return;
    }
    let mut ensemble = ZkEnsemble::start().unwrap_or_else(|e| panic!("ZkEnsemble::start: {e}"));
    let old = ensemble.leader().unwrap();
    let stopped = Instant::now();
    ensemble.stop(old).unwrap();
    let new = ensemble.leader().unwrap();
    println!("{test}: new leader {:?} after SIGSTOP", stopped.elapsed());
    assert_ne!(new, old);
    let resumed = Instant::now();
    ensemble.cont(old).unwrap();
    assert_eq!(ensemble.leader().unwrap(), new);
    println!("{test}: settled {:?} after SIGCONT", resumed.elapsed());

    // Two of three down: no quorum, said at once rather than after a time-out.
    let others: Vec<usize> = (0..3).filter(|&i| i != new).collect();
    ensemble.kill(others[0]);
    ensemble.kill(others[1]);
    let err = ensemble.leader().unwrap_err();
    assert!(err.to_string().contains("no quorum"), "{err}");
    let restarted = Instant::now();
    ensemble.restart_all().unwrap();
    println!("{test}: restart_all in {:?}", restarted.elapsed());
    assert!((0..3).all(|i| ensemble.is_running(i)));
}

/// An environment holding only `pairs`.
fn env(pairs: Vec<(&'static str, String)>) -> impl Fn(&str) -> Option<String> {
    move |name| {
        pairs
            .iter()
            .find(|(key, _)| *key == name)
            .map(|(_, value)| value.clone())
    }
}

#[test]
fn finds_the_server_where_the_environment_says() {
    assert_eq!(
        find_classpath(&env(vec![("ZOOKEEPER_CLASSPATH", "/a.jar:/b/*".into())])),
        Ok("/a.jar:/b/*".to_owned())
    );
    let err = find_classpath(&env(vec![("ZK_HOME", "/no/such/zookeeper".into())])).unwrap_err();
    assert!(err.contains("ZK_HOME=/no/such/zookeeper holds no"), "{err}");

    let home = crate::testing::support::fresh_dir("zk-home").unwrap();
    let at_home = || env(vec![("ZK_HOME", home.display().to_string())]);
    std::fs::create_dir(home.join("lib")).unwrap();
    std::fs::write(home.join("lib").join("zookeeper-jute-3.9.2.jar"), "").unwrap();
    assert!(
        find_classpath(&at_home()).is_err(),
        "jute alone is no server"
    );
    std::fs::write(home.join("lib").join("zookeeper-3.9.2.jar"), "").unwrap();
    let h = home.display();
    assert_eq!(
        find_classpath(&at_home()),
        Ok(format!("{h}/conf:{h}/lib/*:{h}/*"))
    );
    let _ = std::fs::remove_dir_all(&home);
}

#[test]
fn reads_versions_and_modes() {
    assert_eq!(
        parse_version("Apache ZooKeeper, version 3.8.0 2024-12-29 17:54 UTC").as_deref(),
        Some("3.8.0")
    );
    assert_eq!(
        parse_version("Apache ZooKeeper, version 3.9.2-e454e8c7283100c7caec6dcae2bc82aaecb63023, built on 2024-02-12 20:59 UTC").as_deref(),
        Some("3.9.2")
    );
    assert_eq!(
        parse_version("Error: Could not find or load main class"),
        None
    );
    assert_eq!(
        Mode::of_srvr("Zookeeper version: 3.8.0\nZxid: 0x0\nMode: follower\nNode count: 5\n"),
        Ok(Mode::Follower)
    );
    assert_eq!(
        Mode::of_srvr("This ZooKeeper instance is not currently serving requests\n"),
        Err("This ZooKeeper instance is not currently serving requests".to_owned())
    );
}
