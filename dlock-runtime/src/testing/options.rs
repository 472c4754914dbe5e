//! How a [`RedisServer`](super::RedisServer) is configured: the builder, persistence modes, and
//! the redis-server command line they turn into.

use std::io;
use std::path::Path;

use super::bins::RedisVersion;
use super::tls::TlsFiles;

/// What a server keeps on disk, i.e. what [`RedisServer::restart`](super::RedisServer::restart) finds again.
///
/// Automatic snapshots (`save` points) are always off: a test decides exactly what is on disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Persistence {
    /// Nothing (`--save "" --appendonly no`). A restart starts empty: a snapshot the test took
    /// with SAVE is deleted first.
    #[default]
    None,
    /// RDB snapshots, only when the test runs SAVE or BGSAVE (`--save ""`). A restart loads the
    /// last snapshot; writes after it are lost.
    Rdb,
    /// Append-only file with `--appendfsync always`: every write is on disk before its reply,
    /// so a restart after SIGKILL still has every acknowledged write.
    Aof,
}

/// Options for [`RedisServer`](super::RedisServer); [`RedisServer::builder`](super::RedisServer::builder) makes one.
///
/// ```no_run
/// # extern crate dlock_runtime as dlock;
/// use dlock::testing::{Persistence, RedisServer};
/// let server = RedisServer::builder()
///     .persistence(Persistence::Aof)
///     .user("app", "s3cret")
///     .arg("--maxmemory")
///     .arg("64mb")
///     .start()?;
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Debug, Clone, Default)]
#[must_use = "nothing starts until .start()"]
pub struct RedisServerBuilder {
    args: Vec<String>,
    persistence: Persistence,
    tls: bool,
    users: Vec<(String, String)>,
    mode: Mode,
}

/// What kind of process the builder starts; only the harness itself makes the non-plain ones.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) enum Mode {
    #[default]
    Plain,
    ClusterNode,
    /// A sentinel; the `sentinel monitor ...` lines of its config file.
    Sentinel(String),
}

impl RedisServerBuilder {
    /// One more `redis-server` argument, passed after the harness's own (so it wins), e.g.
    /// `"--maxmemory"` then `"64mb"`.
    pub fn arg(mut self, arg: impl Into<String>) -> Self {
        self.args.push(arg.into());
        self
    }

    /// Several more `redis-server` arguments, e.g. `["--replicaof", "127.0.0.1", "6379"]`.
    pub fn args<I, S>(mut self, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.args.extend(args.into_iter().map(Into::into));
        self
    }

    /// What the server keeps on disk for [`RedisServer::restart`](super::RedisServer::restart); default
    /// [`Persistence::None`].
    pub fn persistence(mut self, persistence: Persistence) -> Self {
        self.persistence = persistence;
        self
    }

    /// Serve TLS only: certificates are generated at start with the `openssl` tool, the server
    /// listens with `--tls-port` (plain port 0) and does not ask clients for certificates.
    /// [`RedisServer::url`](super::RedisServer::url) is then `rediss://...` and [`RedisServer::ca_cert_path`](super::RedisServer::ca_cert_path) is set.
    pub fn tls(mut self) -> Self {
        self.tls = true;
        self
    }

    /// Adds an ACL user allowed everything (`on >password ~* &* +@all`), for
    /// `redis://user:password@...` URLs ([`RedisServer::url_as`](super::RedisServer::url_as)). The `default` user stays as
    /// it is (no password), so the harness and other clients keep working.
    pub fn user(mut self, name: impl Into<String>, password: impl Into<String>) -> Self {
        self.users.push((name.into(), password.into()));
        self
    }

    /// Refuses ACL users redis-server would reject (or misread) before anything starts.
    pub(super) fn check_users(&self) -> io::Result<()> {
        for (name, password) in &self.users {
            if name.is_empty() || name.contains(char::is_whitespace) || password.is_empty() {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("ACL user {name:?}: the name must be non-empty without spaces, and the password non-empty"),
                ));
            }
        }
        Ok(())
    }

    /// A cluster node or a sentinel instead of a plain server.
    pub(crate) fn mode(mut self, mode: Mode) -> Self {
        self.mode = mode;
        self
    }

    pub(crate) fn wants_tls(&self) -> bool {
        self.tls
    }

    pub(crate) fn is_cluster_node(&self) -> bool {
        self.mode == Mode::ClusterNode
    }

    pub(crate) fn keeps_data(&self) -> bool {
        self.persistence != Persistence::None
    }

    /// The `redis-server` arguments for a server on `port` with data in `dir`. A sentinel's
    /// configuration goes into `dir/sentinel.conf` (sentinels rewrite their config file, so it
    /// must be a real, writable file); it is written once and kept across restarts.
    pub(crate) fn command_line(
        &self,
        port: u16,
        dir: &Path,
        tls: Option<&TlsFiles>,
        version: RedisVersion,
    ) -> io::Result<Vec<String>> {
        let dir_text = dir.to_string_lossy().into_owned();
        if let Mode::Sentinel(monitor) = &self.mode {
            let conf = dir.join("sentinel.conf");
            if !conf.exists() {
                std::fs::write(
                    &conf,
                    format!(
                        "port {port}\nbind 127.0.0.1\nprotected-mode no\ndaemonize no\n\
                         logfile \"\"\ndir \"{dir_text}\"\n{monitor}"
                    ),
                )?;
            }
            let mut args = vec![conf.to_string_lossy().into_owned(), "--sentinel".into()];
            args.extend(self.args.iter().cloned());
            return Ok(args);
        }
        let mut args: Vec<String> = [
            "--bind",
            "127.0.0.1",
            "--dir",
            &dir_text,
            "--daemonize",
            "no",
            "--protected-mode",
            "no",
            "--logfile",
            "",
            // Redis 7 defaults to diskless sync after a 5 s delay: a replica would wait 5 s.
            "--repl-diskless-sync-delay",
            "0",
            "--save",
            "",
        ]
        .map(String::from)
        .to_vec();
        let port = port.to_string();
        match tls {
            Some(files) => args.extend([
                "--port".into(),
                "0".into(),
                "--tls-port".into(),
                port,
                "--tls-cert-file".into(),
                files.server_cert.to_string_lossy().into_owned(),
                "--tls-key-file".into(),
                files.server_key.to_string_lossy().into_owned(),
                "--tls-ca-cert-file".into(),
                files.ca_cert.to_string_lossy().into_owned(),
                "--tls-auth-clients".into(),
                "no".into(),
            ]),
            None => args.extend(["--port".into(), port]),
        }
        let aof: &[&str] = match self.persistence {
            Persistence::Aof => &["--appendonly", "yes", "--appendfsync", "always"],
            Persistence::None | Persistence::Rdb => &["--appendonly", "no"],
        };
        args.extend(aof.iter().map(|s| s.to_string()));
        // DEBUG is refused from 7.0 on unless enabled; before 7.0 it is always on and the
        // option does not exist (6.2 would refuse to start).
        if version >= RedisVersion::new(7, 0, 0) {
            args.extend(["--enable-debug-command".into(), "local".into()]);
        }
        if self.mode == Mode::ClusterNode {
            args.extend(
                [
                    "--cluster-enabled",
                    "yes",
                    "--cluster-config-file",
                    "nodes.conf",
                    "--cluster-node-timeout",
                    "2000",
                    // A replica may be promoted however long ago it last heard its master.
                    "--cluster-replica-validity-factor",
                    "0",
                    // Replicas stay where the test put them (no migration to orphaned masters).
                    "--cluster-migration-barrier",
                    "100",
                ]
                .map(String::from),
            );
        }
        for (name, password) in &self.users {
            args.extend(
                [
                    "--user",
                    name,
                    "on",
                    &format!(">{password}"),
                    "~*",
                    "&*",
                    "+@all",
                ]
                .map(String::from),
            );
        }
        args.extend(self.args.iter().cloned());
        Ok(args)
    }

    /// The log line that says the process is listening; anything before it may be another
    /// process answering on a port we lost a race for.
    pub(crate) fn ready_line(&self) -> &'static str {
        match self.mode {
            Mode::Sentinel(_) => "Sentinel ID is",
            Mode::Plain | Mode::ClusterNode => "Ready to accept connections",
        }
    }
}
