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
use node::{Mode, Node};

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
        let install = install::install()?;
        let mut last_err = None;
        for _ in 0..PORT_ATTEMPTS {
            let mut server = ZkServer {
                node: Node::new(install, free_port()?, None)?,
            };
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
                Ok(Mode::Standalone) => return Ok(()),
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
