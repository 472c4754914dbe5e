//! [`RedisServer`]: one redis-server process on a free loopback port, owned by a test.

use std::io;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::bins::{self, RedisVersion};
use super::options::{Persistence, RedisServerBuilder};
use super::resp;
use super::support::{self, free_cluster_port, free_port, fresh_dir, last_lines, read_from};
use super::tls::{self, TlsFiles};
use super::watchdog::Watched;

/// How long a server may take from spawn to ready (it starts in ~10 ms; loading a test's AOF
/// is not much more).
const START_TIMEOUT: Duration = Duration::from_secs(20);
/// How many fresh ports to try when another process takes the one we picked.
const PORT_ATTEMPTS: usize = 5;
/// Lines of redis-server's own output quoted in a start-up error.
const LOG_LINES: usize = 20;

/// A running `redis-server` owned by the test: killed (SIGKILL) and its directory removed when
/// dropped, or when the test process exits if it is never dropped (see the module docs).
///
/// Available with the `testing` feature. In your own tests, with
/// `dlock = { version = "...", features = ["testing"] }` under `[dev-dependencies]` and
/// `redis-server` on the `PATH`:
///
/// ```no_run
/// # extern crate dlock_runtime as dlock;
/// use dlock::testing::RedisServer;
/// use dlock::LockClient;
///
/// #[tokio::test]
/// async fn one_job_at_a_time() {
///     // Its own server on a free port: tests run in parallel without sharing state.
///     let server = RedisServer::start().expect("redis-server on PATH");
///     let client = LockClient::connect(&server.url()).await.unwrap();
///     let guard = client.lock("job").acquire().await.unwrap();
///     let other = LockClient::connect(&server.url()).await.unwrap();
///     assert!(other.lock("job").try_acquire().await.unwrap().is_none());
///     guard.release().await.unwrap();
///     // `client.with_default(fut)` makes it the default of `#[distributed_lock]` for `fut`
///     // only, where `install()` would be shared by every test of the binary.
/// }
/// ```
#[derive(Debug)]
pub struct RedisServer {
    port: u16,
    dir: PathBuf,
    config: RedisServerBuilder,
    version: RedisVersion,
    tls: Option<TlsFiles>,
    process: Option<Watched>,
}

impl RedisServer {
    /// Starts an empty server on a free loopback port, keeping nothing on disk, and waits
    /// until it answers PING.
    pub fn start() -> io::Result<Self> {
        Self::builder().start()
    }

    /// Like [`RedisServer::start`] with extra `redis-server` arguments, e.g.
    /// `["--replicaof", "127.0.0.1", "6379"]`.
    pub fn start_with_args(args: &[&str]) -> io::Result<Self> {
        Self::builder().args(args.iter().copied()).start()
    }

    /// A server whose data survives [`RedisServer::kill`] + [`RedisServer::restart`] as
    /// `persistence` says.
    pub fn start_persistent(persistence: Persistence) -> io::Result<Self> {
        Self::builder().persistence(persistence).start()
    }

    /// A TLS-only server with freshly generated certificates; see [`RedisServerBuilder::tls`].
    pub fn start_tls() -> io::Result<Self> {
        Self::builder().tls().start()
    }

    /// Options beyond the defaults: persistence, TLS, ACL users, extra arguments.
    pub fn builder() -> RedisServerBuilder {
        RedisServerBuilder::default()
    }

    /// `redis://127.0.0.1:<port>`, or `rediss://...` for a TLS server.
    pub fn url(&self) -> String {
        format!("{}://127.0.0.1:{}", self.scheme(), self.port)
    }

    /// The URL logging in as an ACL user added with [`RedisServerBuilder::user`]:
    /// `redis://user:password@127.0.0.1:<port>`, both parts percent-encoded.
    pub fn url_as(&self, user: &str, password: &str) -> String {
        format!(
            "{}://{}:{}@127.0.0.1:{}",
            self.scheme(),
            percent_encode(user),
            percent_encode(password),
            self.port
        )
    }

    /// The port it listens on (the TLS port for a TLS server).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Whether this handle has a process running: started, and not killed or shut down through
    /// this handle since. (A server that exits on its own, e.g. after a SHUTDOWN command, still
    /// counts until the handle notices at its next kill or restart.)
    pub fn is_running(&self) -> bool {
        self.process.is_some()
    }

    /// The redis-server process id, e.g. to send it a signal.
    pub fn pid(&self) -> Option<u32> {
        self.process.as_ref().map(Watched::pid)
    }

    /// The version of this server's binary.
    pub fn version(&self) -> RedisVersion {
        self.version
    }

    /// The data directory (RDB, AOF, `nodes.conf`, certificates, the log), removed on drop.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Everything the server printed, across restarts.
    pub fn log_path(&self) -> PathBuf {
        self.dir.join("redis.log")
    }

    /// The CA certificate that signed this TLS server's certificate; `None` without TLS.
    pub fn ca_cert_path(&self) -> Option<&Path> {
        self.tls.as_ref().map(|t| t.ca_cert.as_path())
    }

    /// A CA certificate unrelated to this server, for tests that a client refuses it;
    /// `None` without TLS.
    pub fn other_ca_cert_path(&self) -> Option<&Path> {
        self.tls.as_ref().map(|t| t.other_ca_cert.as_path())
    }

    /// Kills the server with SIGKILL and waits for it to exit: every connection drops, and
    /// whatever was not on disk is lost (everything with [`Persistence::None`], writes after
    /// the last SAVE with [`Persistence::Rdb`], nothing acknowledged with [`Persistence::Aof`]).
    /// Does nothing if it is not running.
    pub fn kill(&mut self) {
        self.process = None;
    }

    /// Stops the server the way a service manager does (SIGTERM): Redis closes its clients,
    /// flushes and fsyncs the AOF ([`Persistence::Aof`]) and exits. It takes no RDB snapshot,
    /// since no save points are configured: run SAVE first for that. SIGKILL after 10 s.
    pub fn shutdown(&mut self) -> io::Result<()> {
        match self.process.take() {
            Some(process) => process.terminate(Duration::from_secs(10)),
            None => Ok(()),
        }
    }

    /// Starts the server again on the same port and from the same directory, after a
    /// [`kill`](RedisServer::kill) or [`shutdown`](RedisServer::shutdown) (a running server is
    /// killed first). It finds what its [`Persistence`] kept: nothing, the last snapshot, or the
    /// whole AOF.
    pub fn restart(&mut self) -> io::Result<()> {
        self.kill();
        if !self.config.keeps_data() {
            for file in ["dump.rdb", "appendonly.aof"] {
                let _ = std::fs::remove_file(self.dir.join(file));
            }
            let _ = std::fs::remove_dir_all(self.dir.join("appendonlydir"));
        }
        self.spawn()
    }

    /// Freezes the server (SIGSTOP): connections stay open but nothing is answered, like a
    /// long GC pause or a VM migration. [`RedisServer::cont`] resumes it.
    pub fn stop(&self) -> io::Result<()> {
        support::signal(self.running_pid()?, "-STOP")
    }

    /// Resumes a server frozen by [`RedisServer::stop`] (SIGCONT).
    pub fn cont(&self) -> io::Result<()> {
        support::signal(self.running_pid()?, "-CONT")
    }

    /// Runs `redis-cli` against this server (with `--tls --cacert` for a TLS server) and
    /// returns what it printed; an error reply or failure is an `Err` with its output.
    /// Needs `redis-cli` (`redis-tools`) or `$REDIS_CLI_BIN`.
    pub fn cli(&self, args: &[&str]) -> io::Result<String> {
        let mut cmd = Command::new(bins::cli_bin());
        cmd.args(["-h", "127.0.0.1", "-p", &self.port.to_string()]);
        if let Some(files) = &self.tls {
            cmd.arg("--tls").arg("--cacert").arg(&files.ca_cert);
        }
        bins::run_ok(cmd.args(args), Duration::from_secs(10))
    }

    pub(crate) fn launch(config: RedisServerBuilder) -> io::Result<Self> {
        let version = bins::server_version()?;
        if version < RedisVersion::MIN_SUPPORTED {
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                format!(
                    "redis-server {version} is older than {}, the oldest the dlock harness supports",
                    RedisVersion::MIN_SUPPORTED
                ),
            ));
        }
        let mut last_err = None;
        // A port found free can be taken by another process before redis binds it: new port.
        for _ in 0..PORT_ATTEMPTS {
            let port = if config.is_cluster_node() {
                free_cluster_port()?
            } else {
                free_port()?
            };
            let dir = fresh_dir(&format!("redis-{port}"))?;
            let mut server = RedisServer {
                port,
                tls: None,
                dir,
                config: config.clone(),
                version,
                process: None,
            };
            if config.wants_tls() {
                server.tls = Some(tls::generate(&server.dir)?);
            }
            match server.spawn() {
                Ok(()) => return Ok(server),
                Err(e) if e.kind() == io::ErrorKind::AddrInUse => last_err = Some(e),
                Err(e) => return Err(e),
            }
        }
        Err(last_err.unwrap_or_else(|| io::Error::other("redis-server did not start")))
    }

    fn spawn(&mut self) -> io::Result<()> {
        let log = self.log_path();
        // Only this start's lines count: the log keeps earlier runs' "ready" lines.
        let from = std::fs::metadata(&log).map_or(0, |m| m.len());
        let args =
            self.config
                .command_line(self.port, &self.dir, self.tls.as_ref(), self.version)?;
        let mut process = Watched::spawn(&bins::server_bin(), &args, &self.dir, &log)?;
        let ready_line = self.config.ready_line();
        let start = Instant::now();
        for _ in 0..START_TIMEOUT.as_millis() / 10 + 1 {
            if let Some(status) = process.try_wait()? {
                let output = read_from(&log, from);
                let (kind, why) = if output.contains("Address already in use") {
                    (io::ErrorKind::AddrInUse, String::new())
                } else if self.tls.is_some() && built_without_tls(&output) {
                    let which =
                        bins::server_info().map_or_else(|e| e.to_string(), |i| i.to_string());
                    (
                        io::ErrorKind::Unsupported,
                        format!(" ({which} was built without TLS)"),
                    )
                } else {
                    (io::ErrorKind::Other, String::new())
                };
                return Err(io::Error::new(
                    kind,
                    format!(
                        "redis-server on port {} exited at start-up with {status}{why}; it \
                         said:\n{}",
                        self.port,
                        last_lines(&output, LOG_LINES)
                    ),
                ));
            }
            // A TLS port cannot be PINGed in plain text; the log line comes after the listen.
            if read_from(&log, from).contains(ready_line)
                && (self.tls.is_some() || resp::ping(self.port))
            {
                self.process = Some(process);
                return Ok(());
            }
            if start.elapsed() >= START_TIMEOUT {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        drop(process);
        Err(io::Error::new(
            io::ErrorKind::TimedOut,
            format!(
                "redis-server on port {} was not ready within {START_TIMEOUT:?}; it said:\n{}",
                self.port,
                last_lines(&read_from(&log, from), LOG_LINES)
            ),
        ))
    }

    fn scheme(&self) -> &'static str {
        if self.tls.is_some() {
            "rediss"
        } else {
            "redis"
        }
    }

    fn running_pid(&self) -> io::Result<u32> {
        self.pid().ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::NotConnected,
                format!("redis-server on port {} is not running", self.port),
            )
        })
    }
}

/// Whether a server that exited at start-up said it has no TLS: a build without it refuses the
/// TLS options (Redis 6.2: `'tls-port ...'` "Bad directive"; Valkey, like Redis 7.2 and later
/// built with TLS as a module that is not loaded: "Failed finding TLS support").
fn built_without_tls(output: &str) -> bool {
    (output.contains("'tls-") && output.contains("Bad directive"))
        || output.contains("Failed finding TLS support")
}

/// Whether the redis-server the harness starts (`$REDIS_SERVER_BIN` or `redis-server`) was built
/// with TLS: asked once per binary by starting a TLS server (certificates included, ~55 ms) and
/// remembered. `Ok(false)` only when the server itself said it has no TLS; any other failure to
/// start is an `Err`.
pub fn supports_tls() -> io::Result<bool> {
    static SEEN: Mutex<Vec<(String, bool)>> = Mutex::new(Vec::new());
    let bin = bins::server_bin();
    let known = SEEN
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .find(|(b, _)| *b == bin)
        .map(|(_, v)| *v);
    if let Some(v) = known {
        return Ok(v);
    }
    let supported = match RedisServer::start_tls() {
        Ok(_server) => true,
        // Also the kind of a server older than the harness supports: that is no answer.
        Err(e)
            if e.kind() == io::ErrorKind::Unsupported
                && bins::server_version()? >= RedisVersion::MIN_SUPPORTED =>
        {
            false
        }
        Err(e) => return Err(e),
    };
    SEEN.lock()
        .unwrap_or_else(|e| e.into_inner())
        .push((bin, supported));
    Ok(supported)
}

/// Starts `count` servers from `builder` at once (each start is mostly waiting).
pub(crate) fn start_many(
    count: usize,
    builder: &RedisServerBuilder,
) -> io::Result<Vec<RedisServer>> {
    std::thread::scope(|s| {
        let starts: Vec<_> = (0..count)
            .map(|_| s.spawn(|| builder.clone().start()))
            .collect();
        starts
            .into_iter()
            .map(|start| {
                start
                    .join()
                    .unwrap_or_else(|_| Err(io::Error::other("starting a redis-server panicked")))
            })
            .collect()
    })
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// RFC 3986 percent-encoding of everything but unreserved characters, for URL userinfo.
fn percent_encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

// Here rather than in `options.rs`, which describes a server without knowing how one runs.
impl RedisServerBuilder {
    /// Starts the server on a free loopback port and waits until it is ready.
    pub fn start(self) -> io::Result<RedisServer> {
        self.check_users()?;
        RedisServer::launch(self)
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn percent_encodes_userinfo() {
        assert_eq!(super::percent_encode("a-b_c.d~9"), "a-b_c.d~9");
        assert_eq!(
            super::percent_encode("p@ss:w/rd é"),
            "p%40ss%3Aw%2Frd%20%C3%A9"
        );
    }
}
