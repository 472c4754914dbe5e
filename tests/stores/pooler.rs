//! Through PgBouncer in transaction mode (a server connection per transaction, not per
//! client session): every lock operation is one statement, so the locks work; LISTEN needs a
//! session, so the client's LISTEN connection goes to the server itself
//! (`postgres_listen_url`), and releases still wake waiters at once.

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use dlock::testing::{postgres_available, PgServer};
use dlock::LockClient;

/// A throw-away `pgbouncer` in transaction mode in front of `server`, on a free loopback port.
struct Bouncer {
    child: Child,
    port: u16,
    dir: PathBuf,
}

impl Bouncer {
    fn start(server: &PgServer) -> Bouncer {
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let dir =
            std::env::temp_dir().join(format!("dlock-pgbouncer-{}-{port}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("pgbouncer dir");
        // pgbouncer drops root for the `postgres` user (`-u`), which must still write here.
        let _ = Command::new("chmod").arg("777").arg(&dir).status();
        let ini = format!(
            "[databases]\npostgres = host=127.0.0.1 port={} dbname=postgres\n\
             [pgbouncer]\nlisten_addr = 127.0.0.1\nlisten_port = {port}\nunix_socket_dir =\n\
             auth_type = trust\nauth_file = {}/users.txt\npool_mode = transaction\n\
             default_pool_size = 4\nmax_client_conn = 100\nlogfile = {}/pgbouncer.log\n\
             ignore_startup_parameters = extra_float_digits\n",
            server.port(),
            dir.display(),
            dir.display()
        );
        std::fs::write(dir.join("pgbouncer.ini"), ini).expect("pgbouncer.ini");
        std::fs::write(dir.join("users.txt"), "\"postgres\" \"\"\n").expect("users.txt");
        let mut cmd = Command::new("pgbouncer");
        if is_root() {
            cmd.args(["-u", "postgres"]);
        }
        let child = cmd
            .arg(dir.join("pgbouncer.ini"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start pgbouncer");
        let started = Instant::now();
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "pgbouncer did not listen in 10 s"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        Bouncer { child, port, dir }
    }

    fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }
}

impl Drop for Bouncer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

fn pgbouncer_available() -> bool {
    Command::new("pgbouncer")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn locks_work_through_a_transaction_mode_pooler_and_waiters_wake_at_once() {
    if !postgres_available() || !pgbouncer_available() {
        super::common::skipped(
            "PgBouncer in transaction mode",
            "no PostgreSQL or pgbouncer binaries",
        );
        return;
    }
    let server = PgServer::start().expect("start PostgreSQL");
    let bouncer = Bouncer::start(&server);
    let client = || {
        LockClient::builder(bouncer.url())
            .connections(2)
            .postgres_listen_url(server.url())
            .build()
    };
    let (a, b) = (client().await.expect("a"), client().await.expect("b"));
    let guard = a
        .lock("stores:pooled")
        .acquire()
        .await
        .expect("acquire through pgbouncer");
    assert!(b
        .lock("stores:pooled")
        .try_acquire()
        .await
        .expect("try")
        .is_none());
    let waiting = b.lock("stores:pooled").wait(Duration::from_secs(20));
    let next = tokio::spawn(async move {
        let g = waiting.acquire().await.expect("next holder");
        let at = Instant::now();
        let token = g.fencing_token();
        g.release().await.expect("release");
        (at, token)
    });
    // Time is the subject: the waiter parks well within this.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let released = Instant::now();
    let first = guard.fencing_token();
    guard.release().await.expect("release through pgbouncer");
    let (at, token) = next.await.expect("waiter");
    assert!(token > first);
    // Its lease is 30 s: a wake-up that waited for it, or for a poll, would take seconds.
    let after = at.duration_since(released);
    assert!(
        after < Duration::from_secs(1),
        "woken {after:?} after the release"
    );
}
