//! Throw-away ZooKeeper servers for tests: [`ZkServer`] (one standalone server) and
//! [`ZkEnsemble`] (three servers electing a leader), on free loopback ports, each with its data
//! in a temporary directory. The harness speaks to them only through ZooKeeper's four-letter
//! words (`ruok`, `srvr`...) over TCP, so it needs no client library.
//!
//! ```no_run
//! # extern crate dlock_runtime as dlock;
//! use dlock::testing::{zookeeper_available, ZkServer};
//!
//! if !zookeeper_available() {
//!     println!("skipped: no ZooKeeper server");
//!     return;
//! }
//! let server = ZkServer::start().unwrap();
//! assert_eq!(server.four_letter("ruok").unwrap(), "imok");
//! let url = server.url(); // zk://127.0.0.1:<port>
//! # let _ = url;
//! ```
//!
//! # Which server
//!
//! `java -cp <classpath> org.apache.zookeeper.server.quorum.QuorumPeerMain <dir>/zoo.cfg`,
//! which runs a standalone server when `zoo.cfg` lists no peers. The classpath is
//! `$ZOOKEEPER_CLASSPATH` if set; else, with `$ZK_HOME` set (an unpacked Apache binary
//! release), its `conf/`, `lib/*` and `*`; else Debian's `/usr/share/java/zookeeper.jar` (the
//! `zookeeper` package: 3.8.0 on Debian 12; the jar's manifest names its libraries) and
//! `slf4j-simple.jar` so that the server logs. `java` is `$JAVA_HOME/bin/java`, else `java` on
//! `PATH`. The first start runs the jar's `VersionInfoMain` to check all that
//! ([`zookeeper_version`]); [`zookeeper_available`] says whether it worked, and every start
//! fails with the reason when it did not (tests print `skipped: ...` then).
//!
//! # Configuration
//!
//! `tickTime` is [`TICK_TIME`] (200 ms), sessions may last from [`MIN_SESSION_TIMEOUT`] to
//! [`MAX_SESSION_TIMEOUT`] (a client asking for 2-4 s gets them), followers take over from a
//! frozen leader after 2 s (`syncLimit` 10 ticks). Four-letter words are all enabled, the
//! Jetty admin server is off, transaction logs are not fsynced (test data), and empty
//! CONTAINER nodes are swept every second instead of every minute. The JVM is kept small and
//! quick to start: `-Xmx256m`, the serial collector, the C1 compiler only, class-data sharing.
//!
//! # Stopping a server
//!
//! | call | signal | what survives |
//! |---|---|---|
//! | [`kill`](ZkServer::kill) | SIGKILL | the data (the transaction log reached the page cache); every session stays open on the server until its timeout, counted from the [`restart`](ZkServer::restart) |
//! | [`stop`](ZkServer::stop) / [`cont`](ZkServer::cont) | SIGSTOP / SIGCONT | everything: the JVM is frozen, clients see no answers, no session expires meanwhile |
//!
//! # TLS
//!
//! [`ZkServer::start_tls`] adds a TLS port (`secureClientPort`, Netty's connection factory,
//! PEM key and trust stores) beside the plain one, with certificates made by `openssl` in the
//! server's directory: a CA ([`ZkServer::ca_cert`]), the server's certificate for `127.0.0.1`
//! and `localhost` (or, with [`ZkTls::certificate_for_another_name`], for `elsewhere.invalid`
//! only), a client certificate the server trusts ([`ZkServer::client_cert`]) and an unrelated
//! CA ([`ZkServer::other_ca_cert`]). Client certificates are required (`ssl.clientAuth=need`,
//! ZooKeeper's default) unless [`ZkTls::client_auth`] says otherwise. The plain port stays: the
//! harness's four-letter words use it, and a test can ask it for TLS and be refused.
//!
//! Dropping a handle kills its JVM and removes its directory. As with redis-server, every JVM
//! is started through the `sh` watcher of `watchdog.rs`: when the test process exits, however
//! it exits, its servers are killed and their directories removed.
//!
//! # Timings
//!
//! Measured on a 2-core VM with Debian 12's ZooKeeper 3.8.0 and OpenJDK 17, one test at a
//! time (`cargo test -p dlock-redis-runtime --features testing zookeeper -- --nocapture
//! --test-threads=1` prints them): [`ZkServer::start`] 0.23-0.43 s (JVM start included),
//! [`ZkServer::restart`] 0.24-0.40 s (both take longer while other JVMs start on the same
//! cores: a restart took 2.4 s beside an ensemble's start), [`ZkServer::kill`] ~5 ms; [`ZkEnsemble::start`] 0.9-1.2 s; a new leader
//! 0.35-0.6 s after the old one's SIGKILL and 2.3-2.5 s after its SIGSTOP (`syncLimit`);
//! [`ZkEnsemble::restart_all`] 0.85-1.5 s. A JVM that fails at start-up (a port taken) takes
//! ~2 s to exit after saying why.

mod ensemble;
mod install;
mod node;
#[cfg(test)]
mod tests;

use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::testing::support::free_port;
use node::{Mode, Node, NodeTls};

pub use ensemble::ZkEnsemble;
pub use install::{zookeeper_available, zookeeper_version};
pub use node::{MAX_SESSION_TIMEOUT, MIN_SESSION_TIMEOUT, TICK_TIME};

/// From spawn to serving: ~0.3 s here (JVM start included); the margin is for a loaded CI
/// machine.
const START_TIMEOUT: Duration = Duration::from_secs(30);
/// How many fresh ports to try when another process takes the one we picked.
const PORT_ATTEMPTS: usize = 5;
/// How often a wait looks again.
const POLL: Duration = Duration::from_millis(20);

/// What [`ZkServer::start_tls`] sets up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ZkTls {
    client_auth: bool,
    another_name: bool,
}

impl Default for ZkTls {
    fn default() -> Self {
        ZkTls::new()
    }
}

impl ZkTls {
    /// Client certificates required (ZooKeeper's `ssl.clientAuth=need`), the server's
    /// certificate valid for `127.0.0.1` and `localhost`.
    pub fn new() -> ZkTls {
        ZkTls {
            client_auth: true,
            another_name: false,
        }
    }

    /// Whether the server requires a client certificate (`need`) or asks for none (`none`).
    pub fn client_auth(mut self, need: bool) -> ZkTls {
        self.client_auth = need;
        self
    }

    /// The server shows a certificate from the same CA for `elsewhere.invalid` only: a client
    /// that checks host names refuses it.
    pub fn certificate_for_another_name(mut self) -> ZkTls {
        self.another_name = true;
        self
    }
}

/// A running standalone ZooKeeper server owned by the test, on a free `127.0.0.1` port with its
/// data in a new temporary directory. Dropping it kills the JVM (SIGKILL) and removes the
/// directory.
///
/// Everything here blocks the calling thread (a start takes ~0.3 s): call it before building a
/// runtime, or from `spawn_blocking` inside one.
#[derive(Debug)]
pub struct ZkServer {
    node: Node,
}

impl ZkServer {
    /// Starts a server on a free loopback port (another port if that one is taken meanwhile)
    /// and returns once it serves (`srvr` says `Mode: standalone`). The error says why no
    /// server could be found (see the module docs) or shows the server's last log lines.
    pub fn start() -> io::Result<ZkServer> {
        Self::start_with(None)
    }

    /// [`ZkServer::start`] with a TLS port as well (see the module docs, "TLS"); returns once
    /// both ports accept connections.
    pub fn start_tls(tls: ZkTls) -> io::Result<ZkServer> {
        Self::start_with(Some(tls))
    }

    fn start_with(tls: Option<ZkTls>) -> io::Result<ZkServer> {
        let install = install::install()?;
        let mut last_err = None;
        for _ in 0..PORT_ATTEMPTS {
            let mut server = ZkServer {
                node: Node::new(install, free_port()?, None)?,
            };
            if let Some(asked) = tls {
                let files = crate::testing::tls::generate(&server.node.dir)?;
                let more = crate::testing::tls::client_and_elsewhere(&server.node.dir, &files)?;
                server.node.tls = Some(NodeTls {
                    secure_port: free_port()?,
                    files,
                    more,
                    client_auth: asked.client_auth,
                    elsewhere: asked.another_name,
                });
                server.node.write_key_store()?;
            }
            match server.spawn_and_wait() {
                Ok(()) => return Ok(server),
                Err(e) if e.kind() == io::ErrorKind::AddrInUse => last_err = Some(e),
                Err(e) => return Err(e),
            }
        }
        Err(last_err.unwrap_or_else(|| io::Error::other("ZooKeeper did not start")))
    }

    /// `zk://127.0.0.1:<port>`: the URL dlock's ZooKeeper store will take.
    pub fn url(&self) -> String {
        format!("zk://{}", self.connect_string())
    }

    /// `127.0.0.1:<port>`: the connect string ZooKeeper clients take.
    pub fn connect_string(&self) -> String {
        format!("127.0.0.1:{}", self.node.client_port)
    }

    /// `zk+tls://127.0.0.1:<secure port>` for a server started with [`ZkServer::start_tls`].
    pub fn tls_url(&self) -> Option<String> {
        self.secure_port()
            .map(|port| format!("zk+tls://127.0.0.1:{port}"))
    }

    /// The TLS client port (`secureClientPort`) of a server started with
    /// [`ZkServer::start_tls`].
    pub fn secure_port(&self) -> Option<u16> {
        self.node.tls.as_ref().map(|t| t.secure_port)
    }

    /// The PEM certificate of the CA that signed the server's and the client's certificates.
    pub fn ca_cert(&self) -> Option<&Path> {
        self.node.tls.as_ref().map(|t| t.files.ca_cert.as_path())
    }

    /// A PEM CA certificate that signed nothing of this server's ("wrong CA" tests).
    pub fn other_ca_cert(&self) -> Option<&Path> {
        self.node
            .tls
            .as_ref()
            .map(|t| t.files.other_ca_cert.as_path())
    }

    /// A PEM client certificate the server trusts (signed by [`ZkServer::ca_cert`]).
    pub fn client_cert(&self) -> Option<&Path> {
        self.node.tls.as_ref().map(|t| t.more.client_cert.as_path())
    }

    /// The client certificate's private key (PEM, PKCS#8).
    pub fn client_key(&self) -> Option<&Path> {
        self.node.tls.as_ref().map(|t| t.more.client_key.as_path())
    }

    /// The client port, the same across [`ZkServer::restart`].
    pub fn port(&self) -> u16 {
        self.node.client_port
    }

    /// The JVM's process id while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.node.pid()
    }

    /// Whether this handle has a JVM running (frozen or not): started, and not killed through
    /// the handle since.
    pub fn is_running(&self) -> bool {
        self.node.is_running()
    }

    /// The temporary directory: `zoo.cfg`, `data/` (snapshots and transaction logs) and
    /// `zookeeper.log`; removed on drop.
    pub fn dir(&self) -> &Path {
        &self.node.dir
    }

    /// Everything the server printed, across restarts.
    pub fn log_path(&self) -> PathBuf {
        self.node.log_path()
    }

    /// Sends a four-letter word (`ruok`, `srvr`, `stat`, `cons`, `dump`, `wchs`, `mntr`...)
    /// and returns the answer. Bounded: 2 s to connect and for each read, so a frozen server
    /// makes it fail rather than hang.
    pub fn four_letter(&self, word: &str) -> io::Result<String> {
        self.node.ask(word)
    }

    /// Kills the JVM (SIGKILL) and waits for it to exit: every connection drops at once. The
    /// data is kept for [`ZkServer::restart`]. Does nothing if it is not running.
    pub fn kill(&mut self) {
        self.node.kill();
    }

    /// Freezes the JVM (SIGSTOP): connections stay open but nothing is answered and no
    /// session expires, like a long GC pause. [`ZkServer::cont`] resumes it.
    pub fn stop(&mut self) -> io::Result<()> {
        self.node.freeze(true)
    }

    /// Resumes a server frozen by [`ZkServer::stop`] (SIGCONT).
    pub fn cont(&mut self) -> io::Result<()> {
        self.node.freeze(false)
    }

    /// Starts the server again on the same port from the same data directory (a running one
    /// is killed first) and returns once it serves. Its nodes are there, and so are the
    /// sessions that were open: the server expires them after their timeout unless their
    /// clients reconnect first.
    pub fn restart(&mut self) -> io::Result<()> {
        self.spawn_and_wait()
    }

    fn spawn_and_wait(&mut self) -> io::Result<()> {
        self.node.spawn()?;
        let start = Instant::now();
        let mut last = String::from("never asked");
        for _ in 0..START_TIMEOUT.as_millis() / POLL.as_millis() + 1 {
            self.node.check_alive()?;
            match self.node.mode() {
                Ok(Mode::Standalone) if self.node.secure_port_open() => return Ok(()),
                Ok(Mode::Standalone) => last = "standalone; its TLS port not open yet".into(),
                Ok(mode) => last = format!("mode {mode:?}"),
                Err(why) => last = why,
            }
            if start.elapsed() >= START_TIMEOUT {
                break;
            }
            std::thread::sleep(POLL);
        }
        let description = self.node.describe();
        self.node.kill();
        Err(io::Error::new(
            io::ErrorKind::TimedOut,
            format!(
                "ZooKeeper was not serving within {START_TIMEOUT:?} (last srvr: {last}): \
                 {description}"
            ),
        ))
    }
}
