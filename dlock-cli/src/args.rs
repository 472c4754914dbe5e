//! The command line: where the locks are, and what to do.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};
use dlock_runtime::inspect::Kind;

use crate::duration::parse_duration;

/// Inspect dlock's locks (Redis, PostgreSQL or ZooKeeper): who holds what, for how long, and
/// who waits.
#[derive(Parser, Debug)]
#[command(name = "dlock", version)]
pub struct Cli {
    #[command(flatten)]
    pub target: Target,

    /// The key prefix the clients were built with (their `key_prefix`).
    #[arg(long, global = true, default_value = dlock_runtime::DEFAULT_PREFIX)]
    pub prefix: String,

    /// Print JSON for scripts instead of a table (`watch`: one JSON object per line).
    #[arg(long, global = true)]
    pub json: bool,

    #[command(subcommand)]
    pub command: Command,
}

/// Where the locks are: the same deployments and URLs as the client takes.
#[derive(Args, Debug, Clone)]
pub struct Target {
    /// One server (`redis://[user:password@]host:port/db`, `rediss://` for TLS), a
    /// PostgreSQL store (`postgres://user:password@host:port/db`) or a ZooKeeper ensemble
    /// (`zk://[user:password@]host:port[,host:port...][/chroot]`). Default:
    /// redis://127.0.0.1:6379.
    // The environment may hold a password: never shown in --help.
    #[arg(long, global = true, env = "DLOCK_URL", hide_env_values = true,
          conflicts_with_all = ["cluster", "sentinel"])]
    pub url: Option<String>,

    /// A Redis Cluster, by seed node URLs (comma-separated); every master is searched.
    #[arg(
        long,
        global = true,
        value_delimiter = ',',
        conflicts_with = "sentinel"
    )]
    pub cluster: Vec<String>,

    /// A Sentinel-managed primary, by sentinel URLs (comma-separated); needs --master.
    #[arg(long, global = true, value_delimiter = ',', requires = "master")]
    pub sentinel: Vec<String>,

    /// The name the sentinels know the primary by.
    #[arg(long, global = true)]
    pub master: Option<String>,

    /// The primary's ACL user (Sentinel only; other deployments take it in their URLs).
    // Without hide_env_values clap renders the unset variable as `[env: DLOCK_MASTER_USER=]`.
    #[arg(long, global = true, env = "DLOCK_MASTER_USER", hide_env_values = true)]
    pub master_user: Option<String>,

    /// The primary's password (Sentinel only).
    #[arg(
        long,
        global = true,
        env = "DLOCK_MASTER_PASSWORD",
        hide_env_values = true
    )]
    pub master_password: Option<String>,

    /// PEM root certificate(s) to trust for `rediss://` instead of the system's.
    #[arg(long, global = true)]
    pub tls_ca: Option<PathBuf>,

    /// The PostgreSQL schema the clients keep their tables in (their `postgres_schema`).
    #[arg(long, global = true, default_value = dlock_runtime::inspect::DEFAULT_POSTGRES_SCHEMA)]
    pub postgres_schema: String,

    /// How long to wait for a connection or an answer.
    #[arg(long, global = true, default_value = "5s", value_parser = parse_duration)]
    pub timeout: Duration,
}

impl Target {
    /// The server URL when neither a cluster nor sentinels are given.
    pub fn single_url(&self) -> String {
        self.url
            .clone()
            .unwrap_or_else(|| "redis://127.0.0.1:6379".to_owned())
    }

    /// Whether `--url` names a PostgreSQL store (`postgres://` or `postgresql://`), as the
    /// client decides it.
    pub fn is_postgres(&self) -> bool {
        self.url
            .as_deref()
            .is_some_and(dlock_runtime::inspect::is_postgres_url)
    }

    /// Whether `--url` names a ZooKeeper ensemble (`zk://`), as the client decides it.
    pub fn is_zookeeper(&self) -> bool {
        self.url
            .as_deref()
            .is_some_and(dlock_runtime::inspect::is_zookeeper_url)
    }
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Every lock that is held or queued for: name, kind, holders, TTL, waiting clients,
    /// queue, semaphore permits.
    List {
        /// Also look for Redisson-layout locks (`redisson_lock`, `redisson_fenced_lock`,
        /// `redisson_read_write_lock`): they have no prefix, so this walks every hash of the
        /// keyspace (SCAN TYPE hash, then only hashes with an expiry and at most 64 fields have
        /// their field names checked, and only Redisson-shaped ones are read).
        #[arg(long)]
        redisson: bool,
    },
    /// One lock in detail (every kind of that name, unless --kind).
    Show {
        /// The lock's name, as the application gives it (e.g. `order:42`).
        name: String,
        #[arg(long, value_enum)]
        kind: Option<KindArg>,
    },
    /// Deletes a lock whoever holds it and wakes its waiters (the library's force unlock).
    Unlock {
        name: String,
        /// Required: this takes the lock away from a holder that may still be working.
        #[arg(long, required = true)]
        force: bool,
        /// Do not ask for confirmation.
        #[arg(long, short = 'y')]
        yes: bool,
        /// Needed only when several kinds of lock of this name are held.
        #[arg(long, value_enum)]
        kind: Option<KindArg>,
    },
    /// Prints the lock's holders each time they change, until interrupted (Ctrl-C), --for or
    /// --count. Polls every --interval: holds shorter than that can go unseen.
    Watch {
        name: String,
        #[arg(long, value_enum, default_value = "plain")]
        kind: KindArg,
        /// Stop after this long (`500ms`, `10s`, `2m`).
        #[arg(long = "for", value_parser = parse_duration)]
        for_: Option<Duration>,
        /// Stop after printing this many states (the first is the state at start).
        #[arg(long)]
        count: Option<u64>,
        /// How often to read the lock.
        #[arg(long, default_value = "200ms", value_parser = parse_interval)]
        interval: Duration,
    },
}

/// `--kind` values.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum KindArg {
    Plain,
    #[value(alias = "read-write")]
    Rw,
    Fair,
    #[value(alias = "sem")]
    Semaphore,
    /// Redisson's `RLock` / `RFencedLock` layout (`redisson_lock`, `redisson_fenced_lock`).
    #[value(alias = "redisson-fenced", alias = "redisson_fenced")]
    Redisson,
    /// Redisson's `RReadWriteLock` layout (`redisson_read_write_lock`).
    #[value(alias = "redisson_rw")]
    RedissonRw,
}

impl From<KindArg> for Kind {
    fn from(k: KindArg) -> Kind {
        match k {
            KindArg::Plain => Kind::Plain,
            KindArg::Rw => Kind::ReadWrite,
            KindArg::Fair => Kind::Fair,
            KindArg::Semaphore => Kind::Semaphore,
            KindArg::Redisson => Kind::Redisson,
            KindArg::RedissonRw => Kind::RedissonReadWrite,
        }
    }
}

/// A poll interval: at least 10 ms, so a watch cannot flood Redis.
fn parse_interval(s: &str) -> Result<Duration, String> {
    let d = parse_duration(s)?;
    if d < Duration::from_millis(10) {
        return Err("the interval must be at least 10ms".to_owned());
    }
    Ok(d)
}
