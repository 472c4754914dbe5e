//! The ZooKeeper store over TLS (`zk+tls://`, feature `zookeeper-tls`), against servers the
//! harness starts with a secure client port beside the plain one, certificates signed by a CA
//! it generates, and client certificates required (`ssl.clientAuth=need`) unless a test says
//! otherwise. Every refusal must come within the connect timeout and say what to change.

use std::time::{Duration, Instant};

use dlock::testing::{zookeeper_available, ZkServer, ZkTls};
use dlock::{LockClient, LockError};

/// Generous beside a handshake on loopback, short beside a hang.
const CONNECT: Duration = Duration::from_secs(5);

fn zookeeper_or_skip(what: &str) -> bool {
    let there = zookeeper_available();
    if !there {
        super::common::skipped(what, "no ZooKeeper server");
    }
    there
}

fn start(tls: ZkTls) -> ZkServer {
    ZkServer::start_tls(tls).expect("start ZooKeeper with TLS")
}

fn read(path: Option<&std::path::Path>) -> Vec<u8> {
    std::fs::read(path.expect("a TLS server")).expect("read a PEM file")
}

/// A builder for `url` trusting `ca`, with the server's client certificate when `with_cert`.
fn builder(server: &ZkServer, url: &str, ca: Vec<u8>, with_cert: bool) -> dlock::LockClientBuilder {
    let b = LockClient::builder(url)
        .tls_root_certificates(ca)
        .connect_timeout(CONNECT)
        .zookeeper_session_timeout(Duration::from_secs(30));
    if with_cert {
        b.tls_client_certificate(read(server.client_cert()), read(server.client_key()))
    } else {
        b
    }
}

/// The error of a client that must not have been built, and how long the refusal took.
async fn refused(b: dlock::LockClientBuilder, what: &str) -> (String, Duration) {
    let start = Instant::now();
    match b.build().await {
        Ok(_) => panic!("built: {what}"),
        Err(e) => {
            let took = start.elapsed();
            assert!(
                took < CONNECT + Duration::from_secs(2),
                "{what}: refused after {took:?}, past the connect timeout {CONNECT:?}: {e}"
            );
            eprintln!("{what}: refused after {took:?}: {e}");
            (e.to_string(), took)
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_is_held_and_a_waiter_woken_over_tls_with_a_client_certificate() {
    if !zookeeper_or_skip("ZooKeeper over TLS") {
        return;
    }
    let server = tokio::task::spawn_blocking(|| start(ZkTls::new()))
        .await
        .expect("spawn_blocking");
    // The secure port speaks TLS only: a session there is a session over TLS.
    let url = server.tls_url().expect("a TLS port");
    let ca = read(server.ca_cert());
    let holder = builder(&server, &url, ca.clone(), true)
        .build()
        .await
        .unwrap_or_else(|e| panic!("connect over TLS with a client certificate: {e}"));
    let waiter = builder(&server, &url, ca, true)
        .build()
        .await
        .expect("a second client over TLS");
    let name = "stores:zk:tls";
    let guard = holder.lock(name).acquire().await.expect("acquire over TLS");
    let waiting = tokio::spawn({
        let lock = waiter.lock(name).wait(Duration::from_secs(20));
        async move {
            let got = lock.acquire().await;
            (got, Instant::now())
        }
    });
    // In line: its child made and the holder's child watched (the server's watches by path).
    let watched = |s: &ZkServer| {
        s.four_letter("wchp")
            .map(|w| w.matches("/dlock:{stores:zk:tls}/_c_").count())
            .unwrap_or(0)
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    while watched(&server) == 0 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        watched(&server),
        1,
        "the waiter never watched the holder's child"
    );
    assert!(!waiting.is_finished(), "the waiter stopped waiting");
    let token = guard.fencing_token();
    let released = Instant::now();
    guard.release().await.expect("release over TLS");
    let (got, at) = waiting.await.expect("waiter task");
    let got = got.expect("the waiter's lock over TLS");
    // The sessions last 30 s: only the watch can wake the waiter this soon.
    let after = at.duration_since(released);
    assert!(
        after < Duration::from_secs(2),
        "woken {after:?} after the release"
    );
    assert!(got.fencing_token() > token, "tokens went back");
    got.release().await.expect("release");
    // Both sessions showed the client certificate (ZooKeeper's x509 scheme authenticates it).
    let log = std::fs::read_to_string(server.log_path()).unwrap_or_default();
    let shown = log
        .matches("Authenticated Id 'CN=dlock test client' for Scheme 'x509'")
        .count();
    assert!(
        shown >= 2,
        "{shown} sessions authenticated by certificate:\n{log}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_signed_by_another_ca_is_refused_naming_the_url_and_the_cause() {
    if !zookeeper_or_skip("ZooKeeper TLS, wrong CA") {
        return;
    }
    let server = tokio::task::spawn_blocking(|| start(ZkTls::new()))
        .await
        .expect("spawn_blocking");
    let url = server.tls_url().expect("a TLS port");
    let other = read(server.other_ca_cert());
    let (text, _) = refused(builder(&server, &url, other, true), "another CA's roots").await;
    let port = server.secure_port().unwrap();
    assert!(
        text.contains(&format!("127.0.0.1:{port}")),
        "names the server: {text}"
    );
    assert!(
        text.contains("not signed by a root in tls_root_certificates")
            && text.contains("tls_root_certificates ("),
        "says why: {text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_certificate_for_another_name_is_refused() {
    if !zookeeper_or_skip("ZooKeeper TLS, host names") {
        return;
    }
    let server = tokio::task::spawn_blocking(|| start(ZkTls::new().certificate_for_another_name()))
        .await
        .expect("spawn_blocking");
    let url = server.tls_url().expect("a TLS port");
    let ca = read(server.ca_cert());
    let (text, _) = refused(
        builder(&server, &url, ca, true),
        "a certificate for elsewhere",
    )
    .await;
    assert!(
        text.contains("not valid for the host name") && text.contains("elsewhere.invalid"),
        "says why: {text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_asked_of_a_port_without_tls_is_refused() {
    if !zookeeper_or_skip("ZooKeeper TLS to a plain port") {
        return;
    }
    let server = tokio::task::spawn_blocking(|| start(ZkTls::new()))
        .await
        .expect("spawn_blocking");
    // The same server's plain client port.
    let url = format!("zk+tls://127.0.0.1:{}", server.port());
    let ca = read(server.ca_cert());
    let (text, _) = refused(
        builder(&server, &url, ca.clone(), true),
        "TLS to a plain port",
    )
    .await;
    assert!(
        text.contains(&format!("127.0.0.1:{}", server.port()))
            && (text.contains("is TLS on at this port") || text.contains("does not speak TLS")),
        "says why: {text}"
    );
    // And the plain URL still works there (the refusal is TLS's, not the server's).
    let plain = LockClient::builder(server.url())
        .connect_timeout(CONNECT)
        .build()
        .await
        .expect("a plain client at the plain port");
    drop(plain);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_needs_a_client_certificate_refuses_a_client_without_one() {
    if !zookeeper_or_skip("ZooKeeper TLS, client certificates") {
        return;
    }
    let (needs, asks_none) = tokio::task::spawn_blocking(|| {
        (start(ZkTls::new()), start(ZkTls::new().client_auth(false)))
    })
    .await
    .expect("spawn_blocking");
    let url = needs.tls_url().expect("a TLS port");
    let (text, _) = refused(
        builder(&needs, &url, read(needs.ca_cert()), false),
        "no client certificate where ssl.clientAuth=need",
    )
    .await;
    assert!(
        text.contains("tls_client_certificate") && text.contains("ssl.clientAuth"),
        "says what to give: {text}"
    );
    // A server that asks for none takes the same client.
    let url = asks_none.tls_url().expect("a TLS port");
    let client = builder(&asks_none, &url, read(asks_none.ca_cert()), false)
        .build()
        .await
        .unwrap_or_else(|e| panic!("TLS without a client certificate where none is asked: {e}"));
    let guard = client
        .lock("stores:zk:tls:no-cert")
        .acquire()
        .await
        .expect("acquire");
    guard.release().await.expect("release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_client_reconnects_over_tls_after_a_server_restart() {
    if !zookeeper_or_skip("ZooKeeper TLS, restart") {
        return;
    }
    let mut server = tokio::task::spawn_blocking(|| start(ZkTls::new()))
        .await
        .expect("spawn_blocking");
    let url = server.tls_url().expect("a TLS port");
    let client = builder(&server, &url, read(server.ca_cert()), true)
        .build()
        .await
        .expect("connect over TLS");
    let guard = client
        .lock("stores:zk:tls:restart")
        .acquire()
        .await
        .expect("acquire");
    guard.release().await.expect("release");
    let server = tokio::task::spawn_blocking(move || {
        server.kill();
        server
            .restart()
            .expect("restart ZooKeeper with its TLS port");
        server
    })
    .await
    .expect("spawn_blocking");
    // The same session (30 s) on a new connection, which only TLS can open at that port.
    let guard = (client.lock("stores:zk:tls:restart"))
        .wait(Duration::from_secs(15))
        .acquire()
        .await
        .expect("acquire after the restart");
    guard.release().await.expect("release");
    let log = std::fs::read_to_string(server.log_path()).unwrap_or_default();
    let shown = log
        .matches("Authenticated Id 'CN=dlock test client' for Scheme 'x509'")
        .count();
    assert!(
        shown >= 2,
        "{shown} connections authenticated by certificate:\n{log}"
    );
}

#[tokio::test]
async fn tls_settings_that_cannot_work_are_refused_by_name() {
    let pem = b"-----BEGIN CERTIFICATE-----\n-----END CERTIFICATE-----\n".to_vec();
    let cases: Vec<(dlock::LockClientBuilder, &str)> = vec![
        (
            LockClient::builder("zk+tls://127.0.0.1:1"),
            "zk+tls:// URL needs tls_root_certificates",
        ),
        (
            LockClient::builder("zk://127.0.0.1:1").tls_root_certificates(pem.clone()),
            "tls_root_certificates is for TLS",
        ),
        (
            LockClient::builder("zk://127.0.0.1:1")
                .tls_client_certificate(pem.clone(), pem.clone()),
            "tls_client_certificate is for TLS",
        ),
        (
            LockClient::builder("redis://127.0.0.1:1")
                .tls_client_certificate(pem.clone(), pem.clone()),
            "tls_client_certificate is offered for zk+tls:// URLs only",
        ),
        (
            LockClient::builder("zk+tls://127.0.0.1:1").tls_root_certificates(b"not pem".to_vec()),
            "tls_root_certificates holds no PEM certificate",
        ),
    ];
    for (b, wanted) in cases {
        let start = Instant::now();
        let e: LockError = match b.connect_timeout(Duration::from_secs(2)).build().await {
            Ok(_) => panic!("built; wanted {wanted:?}"),
            Err(e) => e,
        };
        assert!(e.to_string().contains(wanted), "{wanted:?} in: {e}");
        assert!(
            start.elapsed() < Duration::from_secs(1),
            "refused without connecting"
        );
    }
}
