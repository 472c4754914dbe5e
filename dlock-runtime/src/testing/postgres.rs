//! [`PgServer`]: a throw-away PostgreSQL server on a free loopback port, owned by a test, driven
//! through PostgreSQL's own programs (`initdb`, `postgres`, `psql`, `pg_isready`,
//! `pg_basebackup`, `pg_ctl`) so the harness needs no client library.
//!
//! # Which binaries
//!
//! `$PG_BIN_DIR` if set, else `pg_config --bindir` if that directory holds `initdb` (Debian's
//! `pg_config` can belong to libpq-dev without any server installed), else the newest
//! `/usr/lib/postgresql/<version>/bin` holding `initdb`. [`postgres_available`] says whether
//! one was found.
//!
//! # Running as root
//!
//! `initdb`, `postgres` and `pg_ctl` refuse to run as root. When the test process is root,
//! they run as the `postgres` user (else `nobody`) through `setpriv`, which `exec`s in place:
//! the pid the harness holds is the postmaster's own. `runuser` would stay behind as the
//! postmaster's parent (it waits for its child to close the PAM session), so signals sent to
//! the pid we hold would reach `runuser`, not the server. The temporary directory is handed to
//! that user; the clients (`psql`, `pg_isready`) run as whoever runs the test.
//!
//! # A server is several processes
//!
//! Every child of the postmaster (backends, checkpointer, WAL writer, WAL sender...) calls
//! `setsid`, so no process group holds them all; [`PgServer::kill`] and [`PgServer::pause`]
//! find them in `/proc` by parent pid. The postmaster is stopped first so it forks nothing
//! while its children are listed. A killed server's children must be gone before
//! [`PgServer::start_again`]: a new postmaster refuses to start while anything still holds
//! the old shared memory.
//!
//! # Servers outlive nothing
//!
//! The postmaster is started through the same watcher as redis-server (`watchdog.rs`): if the
//! test process dies without dropping the handle, the postmaster is SIGKILLed and its
//! directory removed; its children exit on their own when they see the postmaster gone
//! (PostgreSQL's postmaster-death check), unless the server was paused at that moment. The
//! watcher is itself a child of the postmaster (a shell, not a `postgres`), so it is left out
//! of what `kill` and `pause` signal.
//!
//! # TLS
//!
//! [`PgServer::builder`]`.ssl()` starts a server with `ssl = on` and certificates generated
//! with the `openssl` tool (a CA, a server certificate for `127.0.0.1` and `localhost`, an
//! unrelated CA), the key handed to the server's user; `.ssl_only()` also refuses TCP
//! connections without TLS (`hostssl` lines only in its `pg_hba.conf`). Its [`PgServer::psql`]
//! connects with `sslmode=verify-full`.
//!
//! # Timings
//!
//! Measured on a 2-core VM with PostgreSQL 15 (`cargo test --all-features --test support
//! postgres -- --nocapture` prints them): the first [`PgServer::start`] of a test process
//! 0.5-3 s (initdb, once), later ones 0.1-0.3 s (a copy and the start); `stop` ~30 ms,
//! `start_again` 30-130 ms, `kill` 5-30 ms, `standby` 0.2-1 s, `promote` ~0.12 s.

use std::io;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use super::bins;
use super::support::{free_port, fresh_dir, last_lines, read_from, signal, wait_until};
use super::tls::{self, TlsFiles};
use super::watchdog::Watched;

/// From spawn to accepting connections: ~0.05 s here, a crash recovery or a standby's
/// catch-up well under a second; the margin is for a loaded CI machine.
const START_TIMEOUT: Duration = Duration::from_secs(30);
/// A fast shutdown (SIGINT) ends in a checkpoint: milliseconds with the few rows tests write.
const STOP_TIMEOUT: Duration = Duration::from_secs(30);
/// How long processes sent SIGKILL or SIGSTOP may take to be gone or stopped (microseconds,
/// unless one is in an uninterruptible disk wait).
const SIGNAL_TIMEOUT: Duration = Duration::from_secs(10);
/// initdb, pg_basebackup and pg_ctl promote (each well under 2 s here).
const TOOL_TIMEOUT: Duration = Duration::from_secs(60);
/// One psql call: connect (bounded separately by `connect_timeout`) and run the statement.
const PSQL_TIMEOUT: Duration = Duration::from_secs(30);
/// psql's own limit on connecting, so a paused server fails a call instead of hanging it.
const PSQL_CONNECT_TIMEOUT_SECS: u32 = 10;
/// How many fresh ports to try when another process takes the one we picked.
const PORT_ATTEMPTS: usize = 5;
/// Lines of the server's own output quoted in an error.
const LOG_LINES: usize = 20;
/// How often a wait looks again.
const POLL: Duration = Duration::from_millis(20);

/// Settings every server gets on its command line rather than in `postgresql.conf`, so a
/// standby (whose `postgresql.conf` is a copy of its primary's) differs only in its port and
/// socket directory. Replication is on so any server can have a standby.
const SETTINGS: &[&str] = &[
    "listen_addresses=127.0.0.1",
    // Test data is thrown away; a process crash (`kill`) loses nothing with fsync off, only an
    // operating-system crash would.
    "fsync=off",
    "wal_level=replica",
    "max_wal_senders=4",
    // WAL a standby started later or restarted still finds on the primary.
    "wal_keep_size=64MB",
    // Several servers run at once in one test process.
    "shared_buffers=16MB",
];

/// A running PostgreSQL server owned by the test: a fresh data directory (trust
/// authentication, superuser `postgres`, UTF8, locale C) in its own temporary directory,
/// listening on a free `127.0.0.1` port. Dropping it kills every process of the server and
/// removes the directory.
///
/// Everything here blocks the calling thread (see the module docs for timings): call it before
/// building a runtime, or from `spawn_blocking` inside one.
///
/// ```no_run
/// # extern crate dlock_runtime as dlock;
/// use dlock::testing::{postgres_available, PgServer};
///
/// if !postgres_available() {
///     println!("skipped: no PostgreSQL server binaries");
///     return;
/// }
/// let server = PgServer::start().unwrap();
/// assert_eq!(server.psql("select 1").unwrap(), "1");
/// ```
#[derive(Debug)]
pub struct PgServer {
    port: u16,
    /// The data directory (`data/`), the Unix socket and the log: removed on drop.
    dir: PathBuf,
    install: &'static Install,
    /// The postmaster, started or last started.
    pid: u32,
    process: Option<Watched>,
    /// The certificates of a server started with TLS ([`PgServerBuilder::ssl`]).
    tls: Option<TlsFiles>,
    /// Whether connections without TLS are refused ([`PgServerBuilder::ssl_only`]).
    ssl_only: bool,
}

/// Options for [`PgServer::builder`]; [`PgServer::start`] is `PgServer::builder().start()`.
///
/// ```no_run
/// # extern crate dlock_runtime as dlock;
/// use dlock::testing::PgServer;
///
/// let server = PgServer::builder().ssl_only().start().unwrap();
/// let ca = std::fs::read(server.ca_cert().unwrap()).unwrap();
/// let url = format!("{}?sslmode=verify-full", server.url());
/// # let _ = (ca, url);
/// ```
#[derive(Debug, Clone, Default)]
#[must_use]
pub struct PgServerBuilder {
    ssl: bool,
    ssl_only: bool,
}

impl PgServerBuilder {
    /// TLS on (`ssl = on`): a CA, a server certificate for `127.0.0.1` and `localhost` signed
    /// by it, and an unrelated CA are generated at start with the `openssl` tool
    /// ([`PgServer::ca_cert`], [`PgServer::other_ca_cert`]). Connections without TLS are still
    /// accepted.
    pub fn ssl(mut self) -> Self {
        self.ssl = true;
        self
    }

    /// [`ssl`](PgServerBuilder::ssl), and TCP connections without TLS refused: `pg_hba.conf`
    /// has only `hostssl` lines, as a managed service's has. The superuser `postgres` logs in
    /// without a password (trust); any other role with its password (`scram-sha-256`).
    pub fn ssl_only(mut self) -> Self {
        self.ssl = true;
        self.ssl_only = true;
        self
    }

    /// Starts the server (see [`PgServer::start`]).
    pub fn start(self) -> io::Result<PgServer> {
        PgServer::start_with(self)
    }
}

impl PgServer {
    /// A fresh data directory (a copy of one initdb'd once per test process) in a new
    /// temporary directory, then `postgres` on a free loopback port; returns once it accepts
    /// connections.
    pub fn start() -> io::Result<PgServer> {
        Self::builder().start()
    }

    /// Options beyond the defaults: TLS.
    pub fn builder() -> PgServerBuilder {
        PgServerBuilder::default()
    }

    fn start_with(options: PgServerBuilder) -> io::Result<PgServer> {
        let install = install()?;
        let template = template(install)?;
        let mut server = PgServer::unstarted(install, "pg")?;
        // -a keeps the owner (the server's user) and the data directory's mode 0700.
        bins::run_ok(
            Command::new("cp")
                .arg("-a")
                .arg(template)
                .arg(server.data_dir()),
            TOOL_TIMEOUT,
        )?;
        if options.ssl {
            server.tls = Some(server.make_certificates()?);
            server.ssl_only = options.ssl_only;
        }
        server.listen_on_a_free_port()?;
        Ok(server)
    }

    /// The CA certificate (PEM file) that signed a TLS server's certificate; `None` without
    /// TLS.
    pub fn ca_cert(&self) -> Option<&Path> {
        self.tls.as_ref().map(|t| t.ca_cert.as_path())
    }

    /// A CA (PEM file) that signed nothing this server presents, for "wrong CA" tests; `None`
    /// without TLS.
    pub fn other_ca_cert(&self) -> Option<&Path> {
        self.tls.as_ref().map(|t| t.other_ca_cert.as_path())
    }

    /// `postgres://postgres@127.0.0.1:<port>/postgres` (no password: trust authentication).
    pub fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    /// The TCP port, the same across [`PgServer::start_again`].
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The postmaster's process id: the running one, or the last one after a
    /// [`stop`](PgServer::stop) or [`kill`](PgServer::kill).
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Whether the postmaster started through this handle is still alive (not stopped or
    /// killed through the handle, and not exited on its own).
    pub fn is_running(&self) -> bool {
        self.process.is_some() && proc_state(self.pid).is_some_and(|s| s != 'Z' && s != 'X')
    }

    /// The temporary directory: `data/` (the data directory), the Unix socket, `postgres.log`.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Everything the server printed, across restarts.
    pub fn log_path(&self) -> PathBuf {
        self.dir.join("postgres.log")
    }

    /// Fast shutdown (SIGINT): clients are disconnected, a checkpoint is written, the data is
    /// kept for [`PgServer::start_again`]. Resumes a paused server first. Does nothing if it
    /// is not running; panics if it has not exited within 30 s (it is then killed).
    pub fn stop(&mut self) {
        if self.process.is_none() {
            return;
        }
        // A stopped postmaster would never act on SIGINT.
        self.signal_all("-CONT");
        let mut process = self.process.take().expect("checked above");
        let start = Instant::now();
        let mut exited = false;
        if signal(self.pid, "-INT").is_ok() {
            for _ in 0..STOP_TIMEOUT.as_millis() / POLL.as_millis() + 1 {
                exited = !matches!(process.try_wait(), Ok(None));
                if exited || start.elapsed() >= STOP_TIMEOUT {
                    break;
                }
                std::thread::sleep(POLL);
            }
        }
        if !exited {
            self.process = Some(process);
            self.kill();
            panic!(
                "PgServer::stop: the postgres on port {} did not exit within {STOP_TIMEOUT:?} of \
                 SIGINT (fast shutdown); killed. {}",
                self.port,
                self.log_tail(0)
            );
        }
        // Exited: dropping releases the watcher and reaps what is already a zombie.
        drop(process);
    }

    /// Starts the server again on the same port from the same data directory, after
    /// [`stop`](PgServer::stop) or [`kill`](PgServer::kill) (after a kill, PostgreSQL replays
    /// its WAL: crash recovery). A running server is stopped first. Returns once it accepts
    /// connections.
    pub fn start_again(&mut self) -> io::Result<()> {
        self.stop();
        self.spawn()
    }

    /// Crashes the server: SIGKILL to the postmaster and every child, then waits until they
    /// are gone (so [`PgServer::start_again`] finds the shared memory released). Committed
    /// transactions survive; [`PgServer::start_again`] recovers them. Does nothing if it is
    /// not running.
    pub fn kill(&mut self) {
        let Some(process) = self.process.take() else {
            return;
        };
        // Even if the postmaster would not stop, its children are the ones seen now.
        let children = self
            .freeze_postmaster()
            .unwrap_or_else(|_| children_of(self.pid));
        send(&children, "-KILL");
        // Releases the watcher, SIGKILLs and reaps the postmaster (stopped or not).
        drop(process);
        // Best effort: Drop calls this too, and must not panic.
        let _ = wait_for(&children, "exited", SIGNAL_TIMEOUT, |s| {
            s.is_none_or(|s| s == 'Z' || s == 'X')
        });
    }

    /// Freezes every process of the server (SIGSTOP): open connections stay open but nothing
    /// answers, and a new connection is accepted by the kernel but never greeted, like a long
    /// GC pause or a VM migration. [`PgServer::resume`] undoes it. Returns once every process
    /// is stopped; panics if the server is not running.
    pub fn pause(&self) {
        self.running_or_panic("pause");
        let paused = self.freeze_postmaster().and_then(|children| {
            send(&children, "-STOP");
            wait_for(&children, "stopped", SIGNAL_TIMEOUT, stopped)
        });
        if let Err(e) = paused {
            panic!("PgServer::pause on port {}: {e}", self.port);
        }
    }

    /// Resumes every process of a server frozen by [`PgServer::pause`] (SIGCONT).
    pub fn resume(&self) {
        self.running_or_panic("resume");
        self.signal_all("-CONT");
    }

    /// A streaming-replication standby of this server: `pg_basebackup -R` into a new
    /// temporary directory, started on a new free port; returns once it accepts (read-only)
    /// connections. [`PgServer::promote`] turns it into a primary.
    pub fn standby(&self) -> io::Result<PgServer> {
        let mut standby = PgServer::unstarted(self.install, &format!("pg-standby-{}", self.port))?;
        let data = standby.data_dir();
        bins::run_ok(
            self.install
                .server_tool("pg_basebackup", &standby.dir)
                .args([
                    "-h",
                    "127.0.0.1",
                    "-p",
                    &self.port.to_string(),
                    "-U",
                    "postgres",
                ])
                .arg("-D")
                .arg(&data)
                // -R: standby.signal and primary_conninfo pointing at this server.
                .args(["-R", "-X", "stream", "--checkpoint=fast", "--no-sync"]),
            TOOL_TIMEOUT,
        )
        .map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("pg_basebackup from port {}: {e}", self.port),
            )
        })?;
        standby.listen_on_a_free_port()?;
        Ok(standby)
    }

    /// Promotes a standby (`pg_ctl promote`); returns once `pg_is_in_recovery()` is false, so
    /// it accepts writes.
    pub fn promote(&self) -> io::Result<()> {
        bins::run_ok(
            self.install
                .server_tool("pg_ctl", &self.dir)
                .args(["promote", "-w", "-t", "30", "-D"])
                .arg(self.data_dir()),
            TOOL_TIMEOUT,
        )
        .map_err(|e| io::Error::new(e.kind(), format!("promoting port {}: {e}", self.port)))?;
        wait_until(
            &format!("postgres on port {}: pg_is_in_recovery() false", self.port),
            START_TIMEOUT,
            || match self.psql("select pg_is_in_recovery()") {
                Ok(answer) if answer == "f" => Ok(()),
                Ok(answer) => Err(format!("pg_is_in_recovery() = {answer}")),
                Err(e) => Err(e.to_string()),
            },
            || self.log_tail(0),
        )
    }

    /// Runs `sql` with `psql -Atc` as `postgres` on database `postgres` and returns what it
    /// printed, trimmed (one row per line, columns separated by `|`). A failed connection or
    /// statement is an `Err` carrying psql's stderr. A paused server fails the connection
    /// after 10 s.
    pub fn psql(&self, sql: &str) -> io::Result<String> {
        // Over TLS where the server has it, since an `ssl_only` server refuses plain TCP.
        let tls = match &self.tls {
            None => "sslmode=disable".to_owned(),
            Some(files) => format!(
                "sslmode=verify-full sslrootcert='{}'",
                files.ca_cert.display()
            ),
        };
        let conninfo = format!(
            "host=127.0.0.1 port={} user=postgres dbname=postgres {tls} \
             connect_timeout={PSQL_CONNECT_TIMEOUT_SECS}",
            self.port
        );
        let output = bins::run(
            Command::new(self.install.bin("psql"))
                // No ~/.psqlrc; stop at the first error so the exit status says so.
                .args(["-X", "-A", "-t", "-q", "-v", "ON_ERROR_STOP=1", "-d"])
                .arg(conninfo)
                .arg("-c")
                .arg(sql),
            PSQL_TIMEOUT,
        )?;
        if output.status.success() {
            return Ok(String::from_utf8_lossy(&output.stdout).trim().to_owned());
        }
        Err(io::Error::other(format!(
            "psql on port {} ({}): {sql:?}: {}",
            self.port,
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        )))
    }

    /// A handle on a fresh directory the server's user owns, with nothing started yet; its
    /// Drop removes the directory if what follows fails.
    fn unstarted(install: &'static Install, tag: &str) -> io::Result<PgServer> {
        let dir = fresh_dir(tag)?;
        let server = PgServer {
            port: 0,
            dir,
            install,
            pid: 0,
            process: None,
            tls: None,
            ssl_only: false,
        };
        install.hand_over(&server.dir)?;
        Ok(server)
    }

    fn data_dir(&self) -> PathBuf {
        self.dir.join("data")
    }

    /// The certificates in `tls/` of the server's directory, the key handed to the server's
    /// user: PostgreSQL refuses a key file anyone else may read.
    fn make_certificates(&self) -> io::Result<TlsFiles> {
        let dir = self.dir.join("tls");
        std::fs::create_dir(&dir)?;
        let files = tls::generate(&dir)?;
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&files.server_key, std::fs::Permissions::from_mode(0o600))?;
        if let Some((uid, gid)) = self.install.run_as {
            std::os::unix::fs::chown(&files.server_key, Some(uid), Some(gid))?;
        }
        // Only `hostssl` lines: the server refuses TCP connections without TLS (the Unix
        // socket, which TLS does not apply to, stays open for the local tools). Roles other
        // than the harness's own authenticate with SCRAM, as on a managed service.
        std::fs::write(
            dir.join("pg_hba.conf"),
            "local all all trust\n\
             hostssl all postgres 127.0.0.1/32 trust\n\
             hostssl replication all 127.0.0.1/32 trust\n\
             hostssl all all 127.0.0.1/32 scram-sha-256\n",
        )?;
        Ok(files)
    }

    /// The command-line settings of TLS, if this server has it.
    fn tls_settings(&self) -> Vec<String> {
        let Some(files) = &self.tls else {
            return Vec::new();
        };
        let mut settings = vec![
            "ssl=on".to_owned(),
            format!("ssl_cert_file={}", files.server_cert.display()),
            format!("ssl_key_file={}", files.server_key.display()),
        ];
        if self.ssl_only {
            let hba = self.dir.join("tls").join("pg_hba.conf");
            settings.push(format!("hba_file={}", hba.display()));
        }
        settings
    }

    /// A port found free can be taken by another process before postgres binds it: new port.
    fn listen_on_a_free_port(&mut self) -> io::Result<()> {
        let mut last_err = None;
        for _ in 0..PORT_ATTEMPTS {
            self.port = free_port()?;
            match self.spawn() {
                Ok(()) => return Ok(()),
                Err(e) if e.kind() == io::ErrorKind::AddrInUse => last_err = Some(e),
                Err(e) => return Err(e),
            }
        }
        Err(last_err.unwrap_or_else(|| io::Error::other("postgres did not start")))
    }

    fn spawn(&mut self) -> io::Result<()> {
        let log = self.log_path();
        // Only this start's lines count in an error: the log keeps earlier runs.
        let from = std::fs::metadata(&log).map_or(0, |m| m.len());
        let (program, mut args) = self.install.server_command("postgres");
        args.extend([
            "-D".into(),
            self.data_dir().display().to_string(),
            "-p".into(),
            self.port.to_string(),
            "-c".into(),
            format!("unix_socket_directories={}", self.dir.display()),
        ]);
        for setting in SETTINGS {
            args.extend(["-c".into(), (*setting).into()]);
        }
        for setting in self.tls_settings() {
            args.extend(["-c".into(), setting]);
        }
        let mut process = Watched::spawn(&program, &args, &self.dir, &log)?;
        self.pid = process.pid();
        let start = Instant::now();
        for _ in 0..START_TIMEOUT.as_millis() / POLL.as_millis() + 1 {
            if let Some(status) = process.try_wait()? {
                let output = read_from(&log, from);
                let kind = if output.contains("Address already in use") {
                    io::ErrorKind::AddrInUse
                } else {
                    io::ErrorKind::Other
                };
                return Err(io::Error::new(
                    kind,
                    format!(
                        "postgres on port {} exited at start-up with {status}; it said:\n{}",
                        self.port,
                        last_lines(&output, LOG_LINES)
                    ),
                ));
            }
            if self.accepts_connections() {
                self.process = Some(process);
                return Ok(());
            }
            if start.elapsed() >= START_TIMEOUT {
                break;
            }
            std::thread::sleep(POLL);
        }
        // Its children (startup process, checkpointer...) must go too.
        self.process = Some(process);
        self.kill();
        Err(io::Error::new(
            io::ErrorKind::TimedOut,
            format!(
                "postgres on port {} did not accept connections within {START_TIMEOUT:?}; it \
                 said:\n{}",
                self.port,
                self.log_tail(from)
            ),
        ))
    }

    /// `pg_isready`: exit status 0 means accepting connections; 1 (starting up, or a standby
    /// not yet consistent) and 2 (no answer) mean not yet.
    fn accepts_connections(&self) -> bool {
        bins::run(
            Command::new(self.install.bin("pg_isready")).args([
                "-q",
                "-h",
                "127.0.0.1",
                "-p",
                &self.port.to_string(),
                "-U",
                "postgres",
                "-d",
                "postgres",
                "-t",
                "2",
            ]),
            Duration::from_secs(5),
        )
        .is_ok_and(|out| out.status.success())
    }

    /// Stops the postmaster (so it forks nothing more) and returns its children but the
    /// watcher.
    fn freeze_postmaster(&self) -> io::Result<Vec<u32>> {
        send(&[self.pid], "-STOP");
        // kill(2) returns before a process running on another CPU has stopped.
        wait_for(&[self.pid], "stopped", SIGNAL_TIMEOUT, stopped)?;
        Ok(children_of(self.pid))
    }

    /// Sends `sig` to the postmaster's children and then to the postmaster.
    fn signal_all(&self, sig: &str) {
        let mut pids = children_of(self.pid);
        pids.push(self.pid);
        send(&pids, sig);
    }

    fn running_or_panic(&self, what: &str) {
        assert!(
            self.process.is_some(),
            "PgServer::{what}: the postgres on port {} is not running",
            self.port
        );
    }

    fn log_tail(&self, from: u64) -> String {
        format!(
            "{} said:\n{}",
            self.log_path().display(),
            last_lines(&read_from(&self.log_path(), from), LOG_LINES)
        )
    }
}

impl Drop for PgServer {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The data directory every [`PgServer::start`] copies: initdb (trust authentication,
/// superuser `postgres`, UTF8, locale C) runs once per test process, since it takes 0.5-1.3 s
/// here (it boots PostgreSQL several times to size its defaults) where a copy takes 0.1 s.
/// Copies share a system identifier, which only replication compares (a standby is a copy of
/// its own primary anyway).
///
/// The template lives as long as the process: a `sleep` run through the watcher holds it, so
/// the directory is removed when the process exits, however it exits.
fn template(install: &'static Install) -> io::Result<&'static Path> {
    static TEMPLATE: OnceLock<Result<(PathBuf, Watched), String>> = OnceLock::new();
    TEMPLATE
        .get_or_init(|| {
            let fail =
                |what: &str, e: io::Error| format!("the template data directory: {what}: {e}");
            let dir = fresh_dir("pg-template").map_err(|e| fail("temp dir", e))?;
            let made = install.hand_over(&dir).and_then(|()| {
                let keeper = Watched::spawn(
                    "sleep",
                    &["1000000000".into()],
                    &dir,
                    &dir.join("keeper.log"),
                )?;
                let data = dir.join("data");
                bins::run_ok(
                    install
                        .server_tool("initdb", &dir)
                        .arg("-D")
                        .arg(&data)
                        .args(["--auth=trust", "--username=postgres", "--encoding=UTF8"])
                        .args(["--no-locale", "--no-sync", "--no-instructions"]),
                    TOOL_TIMEOUT,
                )?;
                Ok((data, keeper))
            });
            made.map_err(|e| {
                let _ = std::fs::remove_dir_all(&dir);
                fail("initdb", e)
            })
        })
        .as_ref()
        .map(|(data, _)| data.as_path())
        .map_err(|why| io::Error::other(why.clone()))
}

/// Whether PostgreSQL's server binaries were found (and, when the tests run as root, a user
/// to run them as). Tests print `skipped: ...` and return when not; CI installs them.
pub fn postgres_available() -> bool {
    install().is_ok()
}

/// Where the binaries are and who runs the server; found once per process.
#[derive(Debug)]
struct Install {
    bin_dir: PathBuf,
    /// `Some((uid, gid))` when the test runs as root.
    run_as: Option<(u32, u32)>,
}

fn install() -> io::Result<&'static Install> {
    static INSTALL: OnceLock<Result<Install, String>> = OnceLock::new();
    INSTALL
        .get_or_init(|| {
            Ok(Install {
                bin_dir: find_bin_dir()?,
                run_as: find_run_as()?,
            })
        })
        .as_ref()
        .map_err(|why| io::Error::new(io::ErrorKind::NotFound, why.clone()))
}

impl Install {
    fn bin(&self, program: &str) -> PathBuf {
        self.bin_dir.join(program)
    }

    /// The program and leading arguments that run `program` from the bin dir as the server's
    /// user.
    fn server_command(&self, program: &str) -> (String, Vec<String>) {
        let bin = self.bin(program).display().to_string();
        match self.run_as {
            None => (bin, Vec::new()),
            Some((uid, gid)) => (
                "setpriv".into(),
                vec![
                    format!("--reuid={uid}"),
                    format!("--regid={gid}"),
                    "--clear-groups".into(),
                    "--".into(),
                    bin,
                ],
            ),
        }
    }

    /// A command running `program` as the server's user, from `dir` (the test's working
    /// directory may be closed to that user).
    fn server_tool(&self, program: &str, dir: &Path) -> Command {
        let (program, args) = self.server_command(program);
        let mut cmd = Command::new(program);
        cmd.args(args).current_dir(dir);
        cmd
    }

    /// Gives `dir` to the server's user, who creates the data directory and socket in it.
    fn hand_over(&self, dir: &Path) -> io::Result<()> {
        match self.run_as {
            None => Ok(()),
            Some((uid, gid)) => std::os::unix::fs::chown(dir, Some(uid), Some(gid)),
        }
    }
}

fn find_bin_dir() -> Result<PathBuf, String> {
    let has_initdb = |dir: &Path| dir.join("initdb").is_file();
    if let Some(dir) = std::env::var_os("PG_BIN_DIR") {
        let dir = PathBuf::from(dir);
        return if has_initdb(&dir) {
            Ok(dir)
        } else {
            Err(format!("PG_BIN_DIR={} holds no initdb", dir.display()))
        };
    }
    if let Ok(out) = bins::run(
        Command::new("pg_config").arg("--bindir"),
        Duration::from_secs(10),
    ) {
        let dir = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
        if out.status.success() && has_initdb(&dir) {
            return Ok(dir);
        }
    }
    let newest = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let version = version_key(&entry.file_name().to_string_lossy())?;
            let dir = entry.path().join("bin");
            has_initdb(&dir).then_some((version, dir))
        })
        .max();
    newest.map(|(_, dir)| dir).ok_or_else(|| {
        "no PostgreSQL server binaries (initdb): not in $PG_BIN_DIR (unset), `pg_config \
         --bindir` nor /usr/lib/postgresql/*/bin; install them (apt-get install -y \
         postgresql) or set PG_BIN_DIR"
            .to_owned()
    })
}

/// "15" -> [15], "9.6" -> [9, 6]; `None` for what is not a version.
fn version_key(name: &str) -> Option<Vec<u32>> {
    name.split('.').map(|part| part.parse().ok()).collect()
}

/// `None` when the test is not root; else the `postgres` user (else `nobody`), whom `setpriv`
/// must be able to switch to.
fn find_run_as() -> Result<Option<(u32, u32)>, String> {
    let id = |args: &[&str]| -> Option<u32> {
        let out = bins::run(Command::new("id").args(args), Duration::from_secs(10)).ok()?;
        if !out.status.success() {
            return None;
        }
        String::from_utf8_lossy(&out.stdout).trim().parse().ok()
    };
    match id(&["-u"]) {
        Some(0) => {}
        Some(_) => return Ok(None),
        None => return Err("`id -u` failed: cannot tell whether this is root".into()),
    }
    let Some(user) = ["postgres", "nobody"]
        .into_iter()
        .find_map(|name| Some((id(&["-u", name])?, id(&["-g", name])?)))
    else {
        return Err(
            "running as root, and neither a `postgres` nor a `nobody` user exists to \
                    run initdb and postgres as (they refuse root)"
                .into(),
        );
    };
    let setpriv = bins::run(
        Command::new("setpriv").arg("--version"),
        Duration::from_secs(10),
    );
    if !setpriv.is_ok_and(|out| out.status.success()) {
        return Err(
            "running as root, and `setpriv` (util-linux) is missing: it runs initdb \
                    and postgres as an unprivileged user (they refuse root)"
                .into(),
        );
    }
    Ok(Some(user))
}

/// The state letter in /proc/<pid>/stat (R, S, D, T, Z...); `None` once the pid is gone.
fn proc_state(pid: u32) -> Option<char> {
    stat(pid).map(|(state, _, _)| state)
}

/// (state, parent pid, command name) from /proc/<pid>/stat.
fn stat(pid: u32) -> Option<(char, u32, String)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // "<pid> (<comm>) <state> <ppid> ...": comm may hold spaces and parentheses.
    let (head, rest) = text.rsplit_once(')')?;
    let comm = head.split_once('(')?.1.to_owned();
    let mut fields = rest.split_whitespace();
    let state = fields.next()?.chars().next()?;
    let ppid = fields.next()?.parse().ok()?;
    Some((state, ppid, comm))
}

/// The live children of `parent`, except the watcher (a shell, see the module docs).
fn children_of(parent: u32) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&pid| {
            stat(pid).is_some_and(|(state, ppid, comm)| {
                ppid == parent && comm != "sh" && state != 'Z' && state != 'X'
            })
        })
        .collect()
}

/// Whether a process is stopped by a signal, or no longer runs at all.
fn stopped(state: Option<char>) -> bool {
    state.is_none_or(|s| matches!(s, 'T' | 't' | 'Z' | 'X'))
}

/// kill(1) with every pid at once; a pid that has exited meanwhile is no error.
fn send(pids: &[u32], sig: &str) {
    if pids.is_empty() {
        return;
    }
    let _ = bins::run(
        Command::new("kill")
            .arg(sig)
            .args(pids.iter().map(u32::to_string)),
        Duration::from_secs(10),
    );
}

/// Waits until every pid's state passes `reached` (`None`: gone); the error names the
/// stragglers.
fn wait_for(
    pids: &[u32],
    what: &str,
    within: Duration,
    reached: impl Fn(Option<char>) -> bool,
) -> io::Result<()> {
    wait_until(
        &format!("processes {pids:?} {what}"),
        within,
        || {
            let late: Vec<String> = pids
                .iter()
                .filter_map(|&pid| {
                    let state = proc_state(pid);
                    (!reached(state)).then(|| format!("{pid} in state {state:?}"))
                })
                .collect();
            if late.is_empty() {
                Ok(())
            } else {
                Err(late.join(", "))
            }
        },
        String::new,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_compare_numerically() {
        assert!(version_key("15") > version_key("9.6"));
        assert!(version_key("16") > version_key("15"));
        assert_eq!(version_key("main"), None);
    }

    #[test]
    fn reads_its_own_stat() {
        let (state, ppid, comm) = stat(std::process::id()).unwrap();
        assert!(state.is_ascii_alphabetic(), "{state}");
        assert!(ppid > 0);
        assert!(!comm.is_empty());
    }
}
