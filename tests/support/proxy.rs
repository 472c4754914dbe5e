//! The fault-injecting proxy of `tests/common/proxy.rs` does what the fault tests rely on:
//! freezing holds bytes without closing anything and thawing delivers them, holding replies
//! holds only what the server sends, delays delay,
//! kills kill, and a dlock client's subscriber is the connection it opens after its command
//! connection.

use crate::common;

use std::time::{Duration, Instant};

use common::proxy::Proxy;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Long enough that a frozen reply is clearly not coming, short enough to keep tests quick.
const HANG: Duration = Duration::from_millis(500);
/// Bound on anything that should happen at once on loopback.
const PROMPT: Duration = Duration::from_secs(5);

/// A raw RESP connection: the tests see exactly the bytes, with no client timeouts or
/// reconnects in between.
struct Raw(TcpStream);

impl Raw {
    async fn connect(proxy: &Proxy) -> Raw {
        let stream = TcpStream::connect(("127.0.0.1", proxy.port()))
            .await
            .expect("connect to the proxy");
        stream.set_nodelay(true).unwrap();
        Raw(stream)
    }

    async fn send_ping(&mut self) {
        self.0.write_all(b"PING\r\n").await.expect("send PING");
    }

    /// Reads the 7 bytes of `+PONG\r\n`; `Err` on end of stream or a read error.
    async fn read_pong(&mut self) -> std::io::Result<()> {
        let mut buf = [0u8; 7];
        self.0.read_exact(&mut buf).await?;
        assert_eq!(&buf, b"+PONG\r\n");
        Ok(())
    }

    async fn ping(&mut self) {
        self.send_ping().await;
        tokio::time::timeout(PROMPT, self.read_pong())
            .await
            .expect("PONG in time")
            .expect("PONG");
    }

    /// Asserts no reply (and no end of stream) arrives within `HANG`.
    async fn assert_silent(&mut self, what: &str) {
        let mut byte = [0u8; 1];
        let r = tokio::time::timeout(HANG, self.0.read(&mut byte)).await;
        assert!(r.is_err(), "{what}: got {r:?} instead of silence");
    }
}

#[tokio::test]
async fn freeze_holds_replies_on_current_and_new_connections_and_thaw_delivers_them() {
    let server = common::server();
    let proxy = Proxy::start(server.port());
    let mut before = Raw::connect(&proxy).await;
    before.ping().await;

    proxy.freeze();
    before.send_ping().await;
    before.assert_silent("PING on a frozen connection").await;
    let mut after = Raw::connect(&proxy).await;
    after.send_ping().await;
    after
        .assert_silent("PING on a connection opened while frozen")
        .await;
    assert_eq!(proxy.connections(), 2, "freezing closed a connection");

    proxy.thaw();
    for (what, conn) in [("old", &mut before), ("new", &mut after)] {
        tokio::time::timeout(PROMPT, conn.read_pong())
            .await
            .unwrap_or_else(|_| panic!("{what}: held PING not delivered after thaw"))
            .unwrap();
        conn.ping().await;
    }
}

#[tokio::test]
async fn a_frozen_connection_hides_the_server_closing_it() {
    let server = common::server();
    let proxy = Proxy::start(server.port());
    let mut conn = Raw::connect(&proxy).await;
    conn.ping().await;
    proxy.freeze_connection(0);

    // The server drops the connection: a dead NAT would not tell the client either.
    let mut admin = common::raw(&server.url()).await;
    let killed: i64 = dlock::redis::cmd("CLIENT")
        .arg("KILL")
        .arg("TYPE")
        .arg("normal")
        .arg("SKIPME")
        .arg("yes")
        .query_async(&mut admin)
        .await
        .unwrap();
    assert_eq!(killed, 1);
    conn.assert_silent("a frozen connection the server closed")
        .await;

    // Thawed, the end of stream is delivered.
    proxy.thaw_connection(0);
    let mut byte = [0u8; 1];
    let n = tokio::time::timeout(PROMPT, conn.0.read(&mut byte))
        .await
        .expect("end of stream after thaw");
    assert!(matches!(n, Ok(0) | Err(_)), "{n:?}");
}

#[tokio::test]
async fn freeze_connection_freezes_only_that_connection() {
    let server = common::server();
    let proxy = Proxy::start(server.port());
    let mut first = Raw::connect(&proxy).await;
    first.ping().await;
    let mut second = Raw::connect(&proxy).await;
    second.ping().await;

    proxy.freeze_connection(1);
    second.send_ping().await;
    first.ping().await;
    second
        .assert_silent("PING on the frozen second connection")
        .await;
    assert!(proxy.held_bytes(1) > 0, "the PING is held");
    assert_eq!(proxy.held_bytes(0), 0);

    proxy.thaw_connection(1);
    tokio::time::timeout(PROMPT, second.read_pong())
        .await
        .expect("held PING delivered after thaw_connection")
        .unwrap();
    assert_eq!(proxy.held_bytes(1), 0);
}

#[tokio::test]
async fn hold_replies_lets_requests_run_and_holds_only_their_replies() {
    let server = common::server();
    let proxy = Proxy::start(server.port());
    let mut held = Raw::connect(&proxy).await;
    held.ping().await;
    let mut other = Raw::connect(&proxy).await;
    other.ping().await;
    let direct = common::raw(&server.url()).await;

    proxy.hold_replies(0);
    held.0
        .write_all(b"SET held-reply 1\r\n")
        .await
        .expect("send SET");
    // The request ran in Redis, though its reply is not delivered.
    common::eventually(PROMPT, "the SET run in Redis", || {
        let mut direct = direct.clone();
        async move {
            let v: Option<String> = dlock::redis::cmd("GET")
                .arg("held-reply")
                .query_async(&mut direct)
                .await
                .unwrap();
            v.is_some()
        }
    })
    .await;
    held.assert_silent("the reply of a connection whose replies are held")
        .await;
    assert!(proxy.held_bytes(0) > 0, "the reply is held");
    // Other connections are not held.
    other.ping().await;

    proxy.thaw_connection(0);
    let mut buf = [0u8; 5];
    tokio::time::timeout(PROMPT, held.0.read_exact(&mut buf))
        .await
        .expect("held reply delivered after thaw_connection")
        .unwrap();
    assert_eq!(&buf, b"+OK\r\n");
    held.ping().await;
}

#[tokio::test]
async fn delay_replies_delays_each_reply_by_at_least_the_delay() {
    let server = common::server();
    let proxy = Proxy::start(server.port());
    let mut conn = Raw::connect(&proxy).await;
    conn.ping().await;

    let delay = Duration::from_millis(300);
    proxy.delay_replies(delay);
    for _ in 0..2 {
        let start = Instant::now();
        conn.ping().await;
        let took = start.elapsed();
        assert!(took >= delay, "reply after {took:?}, delay {delay:?}");
    }

    proxy.delay_replies(Duration::ZERO);
    let start = Instant::now();
    conn.ping().await;
    // Loose: only "not delayed any more", on a possibly busy machine.
    assert!(start.elapsed() < delay, "{:?}", start.elapsed());
}

#[tokio::test]
async fn kill_all_closes_every_connection_and_the_next_command_fails() {
    let server = common::server();
    let proxy = Proxy::start(server.port());
    let mut raw = Raw::connect(&proxy).await;
    raw.ping().await;
    let mut conn = common::raw(&proxy.url()).await;
    let () = dlock::redis::cmd("SET")
        .arg("k")
        .arg(1)
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(proxy.connections(), 2);

    proxy.kill_all();
    assert_eq!(proxy.connections(), 0);
    let next: dlock::redis::RedisResult<i64> = tokio::time::timeout(
        PROMPT,
        dlock::redis::cmd("GET").arg("k").query_async(&mut conn),
    )
    .await
    .expect("the command after kill_all failed promptly, not hung");
    assert!(next.is_err(), "command after kill_all: {next:?}");
    raw.send_ping().await;
    let pong = tokio::time::timeout(PROMPT, raw.read_pong())
        .await
        .expect("end of stream, not a hang");
    assert!(pong.is_err(), "a killed connection answered");

    // The proxy itself still accepts.
    Raw::connect(&proxy).await.ping().await;
}

#[tokio::test]
async fn a_lock_client_opens_its_command_connection_first_then_its_subscriber() {
    let server = common::server();
    let proxy = Proxy::start(server.port());
    let client = dlock::LockClient::builder(proxy.url())
        .response_timeout(Duration::from_millis(500))
        .build()
        .await
        .unwrap();
    assert_eq!(
        proxy.accepted(),
        2,
        "one command connection + one subscriber"
    );
    let lock = client.lock("order");

    // Connection 1 frozen: commands still work, so it is not the command connection.
    proxy.freeze_connection(1);
    assert!(!lock.is_locked().await.expect("command with #1 frozen"));
    proxy.thaw_connection(1);

    // Connection 0 frozen: commands time out.
    proxy.freeze_connection(0);
    let r = tokio::time::timeout(PROMPT, lock.is_locked())
        .await
        .expect("bounded by the response timeout");
    assert!(r.is_err(), "a command went through with #0 frozen: {r:?}");
}
