//! One ZooKeeper server process, standalone or a member of an ensemble: its directory and
//! `zoo.cfg`, the JVM that runs it, its signals, and the four-letter words it answers.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::time::Duration;

use super::install::Install;
use crate::testing::support::{fresh_dir, last_lines, read_from, signal};
use crate::testing::tls::{MoreFiles, TlsFiles};
use crate::testing::watchdog::Watched;

/// ZooKeeper's tick: the unit of its session expiry checks, heartbeats and the limits below.
/// Small, so that sessions of a few seconds are allowed and a lost leader is noticed fast.
pub const TICK_TIME: Duration = Duration::from_millis(200);
/// The shortest session timeout the harness's servers grant (`minSessionTimeout`, two ticks,
/// ZooKeeper's default ratio): a client asking for less gets this.
pub const MIN_SESSION_TIMEOUT: Duration = Duration::from_millis(400);
/// The longest session timeout the harness's servers grant (`maxSessionTimeout`): a client
/// asking for more gets this. (ZooKeeper's default would be 20 ticks, 4 s here.)
pub const MAX_SESSION_TIMEOUT: Duration = Duration::from_secs(60);

/// Ticks a follower may take to connect to and sync with a new leader (5 s).
const INIT_LIMIT: u32 = 25;
/// Ticks a follower may lag, and a leader wait for a quorum's heartbeats (2 s): how long a
/// frozen leader keeps its followers before they elect another.
const SYNC_LIMIT: u32 = 10;
/// One four-letter word: connect, and each read of the answer (a frozen server accepts the
/// connection in the kernel and never answers).
const FOUR_LETTER_TIMEOUT: Duration = Duration::from_secs(2);
/// Lines of the server's own output quoted in an error.
pub(crate) const LOG_LINES: usize = 20;

/// A small JVM that starts fast: a 256 MiB heap at most, the serial collector (no GC
/// threads), the C1 compiler only, the JDK's class-data archive where it has one, and no
/// `hsperfdata` file under /tmp. No JMX agent is started (no `com.sun.management.*`).
const JVM_ARGS: &[&str] = &[
    "-Xmx256m",
    "-Xms16m",
    "-XX:+UseSerialGC",
    "-XX:TieredStopAtLevel=1",
    "-Xshare:auto",
    "-XX:-UsePerfData",
    "-Djava.net.preferIPv4Stack=true",
    "-Dzookeeper.jmx.log4j.disable=true",
    // Empty CONTAINER nodes are removed once a second instead of once a minute.
    "-Dznode.container.checkIntervalMs=1000",
    // slf4j-simple (Debian's classpath): INFO and up, with the time, to stderr (the log).
    "-Dorg.slf4j.simpleLogger.defaultLogLevel=info",
    "-Dorg.slf4j.simpleLogger.showDateTime=true",
    "-Dorg.slf4j.simpleLogger.dateTimeFormat=HH:mm:ss.SSS",
];

/// The server's role, from the `Mode:` line of its `srvr` answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    Standalone,
    Leader,
    Follower,
    Observer,
}

impl Mode {
    /// The mode in a `srvr` answer; `Err` says why there is none (not serving yet, no quorum).
    pub(crate) fn of_srvr(answer: &str) -> Result<Mode, String> {
        let mode = answer
            .lines()
            .find_map(|line| line.strip_prefix("Mode:"))
            .map(str::trim);
        match mode {
            Some("standalone") => Ok(Mode::Standalone),
            Some("leader") => Ok(Mode::Leader),
            Some("follower") => Ok(Mode::Follower),
            Some("observer") => Ok(Mode::Observer),
            Some(other) => Err(format!("unknown mode {other:?}")),
            // "This ZooKeeper instance is not currently serving requests" while it looks for
            // a leader.
            None if answer.trim().is_empty() => Err("empty srvr answer".into()),
            None => Err(answer.trim().to_owned()),
        }
    }
}

/// Another member of an ensemble, as every member's `zoo.cfg` lists it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Peer {
    /// `myid`, from 1.
    pub(crate) id: u32,
    pub(crate) quorum_port: u16,
    pub(crate) election_port: u16,
}

/// A server's TLS client port (`secureClientPort`) and what it shows and trusts.
#[derive(Debug, Clone)]
pub(crate) struct NodeTls {
    pub(crate) secure_port: u16,
    pub(crate) files: TlsFiles,
    pub(crate) more: MoreFiles,
    /// `ssl.clientAuth=need` (ZooKeeper's default) rather than `none`.
    pub(crate) client_auth: bool,
    /// Shows the certificate for `elsewhere.invalid` instead of the one for 127.0.0.1.
    pub(crate) elsewhere: bool,
}

/// One server's directory, configuration and process.
#[derive(Debug)]
pub(crate) struct Node {
    install: &'static Install,
    pub(crate) client_port: u16,
    /// A TLS port beside the plain one (which the harness's four-letter words keep using).
    pub(crate) tls: Option<NodeTls>,
    /// `zoo.cfg`, `data/` (snapshots, transaction logs, `myid`) and `zookeeper.log`: removed
    /// on drop.
    pub(crate) dir: PathBuf,
    /// This server's id and the whole ensemble; `None` for a standalone server.
    ensemble: Option<(u32, Vec<Peer>)>,
    process: Option<Watched>,
    /// The JVM started last (kept after a kill, for error messages).
    pid: u32,
    /// Frozen by SIGSTOP through the handle.
    stopped: bool,
    /// Where this start's lines begin in the log.
    log_from: u64,
}

impl Node {
    /// A fresh directory with nothing started yet.
    pub(crate) fn new(
        install: &'static Install,
        client_port: u16,
        ensemble: Option<(u32, Vec<Peer>)>,
    ) -> io::Result<Node> {
        let tag = match &ensemble {
            None => format!("zk-{client_port}"),
            Some((id, _)) => format!("zk{id}-{client_port}"),
        };
        Ok(Node {
            install,
            client_port,
            dir: fresh_dir(&tag)?,
            tls: None,
            ensemble,
            process: None,
            pid: 0,
            stopped: false,
            log_from: 0,
        })
    }

    pub(crate) fn log_path(&self) -> PathBuf {
        self.dir.join("zookeeper.log")
    }

    pub(crate) fn pid(&self) -> Option<u32> {
        self.process.as_ref().map(Watched::pid)
    }

    pub(crate) fn is_running(&self) -> bool {
        self.process.is_some()
    }

    /// Running and not frozen: it can answer.
    pub(crate) fn is_live(&self) -> bool {
        self.process.is_some() && !self.stopped
    }

    /// Writes `zoo.cfg` (and `myid`) and starts the JVM; returns at once. A running server is
    /// killed first. Data from an earlier run in the same directory is kept.
    pub(crate) fn spawn(&mut self) -> io::Result<()> {
        self.kill();
        let data = self.dir.join("data");
        std::fs::create_dir_all(&data)?;
        let config = self.dir.join("zoo.cfg");
        std::fs::write(&config, self.config_text())?;
        if let Some((id, _)) = &self.ensemble {
            std::fs::write(data.join("myid"), format!("{id}\n"))?;
        }
        let log = self.log_path();
        self.log_from = std::fs::metadata(&log).map_or(0, |m| m.len());
        let mut args: Vec<String> = JVM_ARGS.iter().map(|a| (*a).to_owned()).collect();
        args.extend([
            "-cp".to_owned(),
            self.install.classpath.clone(),
            "org.apache.zookeeper.server.quorum.QuorumPeerMain".to_owned(),
            config.display().to_string(),
        ]);
        let java = self.install.java.display().to_string();
        let process = Watched::spawn(&java, &args, &self.dir, &log)?;
        self.pid = process.pid();
        self.process = Some(process);
        self.stopped = false;
        Ok(())
    }

    fn config_text(&self) -> String {
        let mut text = format!(
            "# Written by dlock's test harness (dlock::testing::ZkServer / ZkEnsemble).\n\
             tickTime={tick}\n\
             initLimit={INIT_LIMIT}\n\
             syncLimit={SYNC_LIMIT}\n\
             minSessionTimeout={min}\n\
             maxSessionTimeout={max}\n\
             dataDir={data}\n\
             clientPort={port}\n\
             clientPortAddress=127.0.0.1\n\
             # No Jetty admin server (it would take port 8080); four-letter words instead.\n\
             admin.enableServer=false\n\
             4lw.commands.whitelist=*\n\
             # Tests connect many clients from 127.0.0.1 (the default allows 60).\n\
             maxClientCnxns=0\n\
             # Throw-away data: no fsync (a killed JVM's writes are in the page cache, so a\n\
             # restart still finds them), and 1 MiB transaction log files instead of 64 MiB.\n\
             forceSync=no\n\
             preAllocSize=1024\n",
            tick = TICK_TIME.as_millis(),
            min = MIN_SESSION_TIMEOUT.as_millis(),
            max = MAX_SESSION_TIMEOUT.as_millis(),
            data = self.dir.join("data").display(),
            port = self.client_port,
        );
        if let Some(tls) = &self.tls {
            text.push_str(&self.tls_config_text(tls));
        }
        if let Some((_, peers)) = &self.ensemble {
            for peer in peers {
                text.push_str(&format!(
                    "server.{}=127.0.0.1:{}:{}\n",
                    peer.id, peer.quorum_port, peer.election_port
                ));
            }
        }
        text
    }

    /// The secure client port's lines of `zoo.cfg`. Keys ZooKeeper does not know as its own
    /// (`ssl.*`) become `zookeeper.ssl.*` system properties, which is where its TLS reads them.
    fn tls_config_text(&self, tls: &NodeTls) -> String {
        let key_store = self.dir.join("server.pem");
        format!(
            "# TLS: a Netty port (the NIO factory has none), PEM stores (ZooKeeper 3.6+).\n\
             secureClientPort={port}\n\
             secureClientPortAddress=127.0.0.1\n\
             serverCnxnFactory=org.apache.zookeeper.server.NettyServerCnxnFactory\n\
             ssl.keyStore.location={key_store}\n\
             ssl.keyStore.type=PEM\n\
             ssl.trustStore.location={trust}\n\
             ssl.trustStore.type=PEM\n\
             ssl.clientAuth={auth}\n",
            port = tls.secure_port,
            key_store = key_store.display(),
            trust = tls.files.ca_cert.display(),
            auth = if tls.client_auth { "need" } else { "none" },
        )
    }

    /// Writes `server.pem`, the key store: the private key, then the certificate.
    pub(crate) fn write_key_store(&self) -> io::Result<()> {
        let Some(tls) = &self.tls else { return Ok(()) };
        let (cert, key) = if tls.elsewhere {
            (&tls.more.elsewhere_cert, &tls.more.elsewhere_key)
        } else {
            (&tls.files.server_cert, &tls.files.server_key)
        };
        let mut pem = std::fs::read(key)?;
        pem.extend(std::fs::read(cert)?);
        std::fs::write(self.dir.join("server.pem"), pem)
    }

    /// Whether the secure client port accepts connections (`true` without one).
    pub(crate) fn secure_port_open(&self) -> bool {
        self.tls.as_ref().is_none_or(|tls| {
            let addr = SocketAddr::from(([127, 0, 0, 1], tls.secure_port));
            TcpStream::connect_timeout(&addr, FOUR_LETTER_TIMEOUT).is_ok()
        })
    }

    /// `Ok` while the JVM started last runs; `Err` with its last lines once it has exited
    /// (`AddrInUse` when a port was taken).
    pub(crate) fn check_alive(&mut self) -> io::Result<()> {
        let Some(process) = self.process.as_mut() else {
            return Err(io::Error::new(
                io::ErrorKind::NotConnected,
                format!("{} is not running", self.name()),
            ));
        };
        let Some(status) = process.try_wait()? else {
            return Ok(());
        };
        self.process = None;
        let output = read_from(&self.log_path(), self.log_from);
        let kind = if output.contains("Address already in use") {
            io::ErrorKind::AddrInUse
        } else {
            io::ErrorKind::Other
        };
        Err(io::Error::new(
            kind,
            format!(
                "{} exited with {status}; it said:\n{}",
                self.name(),
                last_lines(&output, LOG_LINES)
            ),
        ))
    }

    /// Its role, if it serves; `Err` says why not.
    pub(crate) fn mode(&self) -> Result<Mode, String> {
        if !self.is_live() {
            return Err(self.state().into());
        }
        match self.ask("srvr") {
            Ok(answer) => Mode::of_srvr(&answer),
            Err(e) => Err(format!("srvr: {e}")),
        }
    }

    /// "running", "killed" or "frozen (SIGSTOP)".
    pub(crate) fn state(&self) -> &'static str {
        match (self.process.is_some(), self.stopped) {
            (false, _) => "killed",
            (true, true) => "frozen (SIGSTOP)",
            (true, false) => "running",
        }
    }

    /// Sends a four-letter word (`ruok`, `srvr`, `stat`, `cons`, `dump`, `mntr`...) to the
    /// client port and returns the answer.
    pub(crate) fn ask(&self, word: &str) -> io::Result<String> {
        four_letter(self.client_port, word)
    }

    /// SIGKILL, and waits for the exit; does nothing if not running.
    pub(crate) fn kill(&mut self) {
        self.process = None;
        self.stopped = false;
    }

    /// SIGSTOP (`"-STOP"`) or SIGCONT (`"-CONT"`).
    pub(crate) fn freeze(&mut self, frozen: bool) -> io::Result<()> {
        let pid = self.pid().ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::NotConnected,
                format!("{} is not running", self.name()),
            )
        })?;
        signal(pid, if frozen { "-STOP" } else { "-CONT" })?;
        self.stopped = frozen;
        if frozen {
            // The kernel stops each of the JVM's threads as it next enters the kernel: `kill`
            // returns before that. A thread of a loaded machine that has not stopped yet may
            // still answer a request sent right after, so the freeze is done once every thread
            // reads as stopped (`T` in /proc), waited for at most a few seconds.
            wait_all_threads_stopped(pid, Duration::from_secs(5));
        }
        Ok(())
    }

    /// "ZooKeeper on port 12345" (with its id in an ensemble).
    pub(crate) fn name(&self) -> String {
        match &self.ensemble {
            None => format!("ZooKeeper on port {}", self.client_port),
            Some((id, _)) => format!("ZooKeeper server {id} on port {}", self.client_port),
        }
    }

    /// Its state, what `srvr` says (while it runs) and its last log lines since it last
    /// started, for errors.
    pub(crate) fn describe(&self) -> String {
        let srvr = if self.is_live() {
            match self.ask("srvr") {
                Ok(answer) => Mode::of_srvr(&answer).map_or_else(|e| e, |m| format!("{m:?}")),
                Err(e) => format!("srvr: {e}"),
            }
        } else {
            self.state().to_owned()
        };
        format!(
            "{} (pid {}): {srvr}; {} said:\n{}",
            self.name(),
            self.pid,
            self.log_path().display(),
            last_lines(&read_from(&self.log_path(), self.log_from), LOG_LINES)
        )
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// One four-letter word to `127.0.0.1:port`: ZooKeeper answers and closes the connection.
/// Bounded: 2 s to connect and for each read.
pub(crate) fn four_letter(port: u16, word: &str) -> io::Result<String> {
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let mut stream = TcpStream::connect_timeout(&addr, FOUR_LETTER_TIMEOUT)?;
    stream.set_read_timeout(Some(FOUR_LETTER_TIMEOUT))?;
    stream.set_write_timeout(Some(FOUR_LETTER_TIMEOUT))?;
    stream.write_all(word.as_bytes())?;
    let mut answer = Vec::new();
    // `mntr` and `dump` are a few KiB; cap a runaway answer.
    stream.take(1 << 20).read_to_end(&mut answer)?;
    Ok(String::from_utf8_lossy(&answer).into_owned())
}

/// Waits (at most `within`) until every thread of `pid` is stopped, as /proc says; returns at
/// once where /proc cannot be read.
fn wait_all_threads_stopped(pid: u32, within: Duration) {
    let deadline = std::time::Instant::now() + within;
    let all_stopped = || -> Option<bool> {
        let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).ok()?;
        for task in tasks {
            let stat = std::fs::read_to_string(task.ok()?.path().join("stat")).ok()?;
            // `pid (comm) state ...`: the state follows the last `)`.
            let state = stat.rsplit_once(')')?.1.split_whitespace().next()?;
            if state != "T" {
                return Some(false);
            }
        }
        Some(true)
    };
    while all_stopped() == Some(false) && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
}
