//! The programs the harness runs, how to run one with a time limit, and which redis-server
//! (Redis or Valkey, which version, what it offers) is installed.

use std::fmt;
use std::io;
use std::process::{Command, Output, Stdio};
use std::sync::{mpsc, Mutex};
use std::time::Duration;

use super::support::signal;

/// `$REDIS_SERVER_BIN`, else `redis-server` from `PATH`.
pub(crate) fn server_bin() -> String {
    std::env::var("REDIS_SERVER_BIN").unwrap_or_else(|_| "redis-server".into())
}

/// `$REDIS_CLI_BIN`, else `redis-cli` from `PATH`.
pub(crate) fn cli_bin() -> String {
    std::env::var("REDIS_CLI_BIN").unwrap_or_else(|_| "redis-cli".into())
}

/// Runs `cmd` to completion with its output captured, killing it after `within`.
///
/// The output is read on a helper thread: polling `try_wait` while the pipes fill up would
/// deadlock on a chatty program, and `wait_with_output` alone has no time limit.
pub(crate) fn run(cmd: &mut Command, within: Duration) -> io::Result<Output> {
    let program = cmd.get_program().to_string_lossy().into_owned();
    let child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| explain_spawn_error(&program, e))?;
    let pid = child.id();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(within) {
        Ok(output) => output,
        Err(_) => {
            // The helper thread still owns the child and reaps it once the kill lands.
            let _ = signal(pid, "-KILL");
            Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("`{program}` did not finish within {within:?}"),
            ))
        }
    }
}

/// Like [`run`], but a non-zero exit is an error carrying what the program printed.
pub(crate) fn run_ok(cmd: &mut Command, within: Duration) -> io::Result<String> {
    let line = format!("{cmd:?}");
    let out = run(cmd, within)?;
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    if out.status.success() {
        return Ok(stdout);
    }
    Err(io::Error::other(format!(
        "{line} failed with {}:\n{stdout}{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    )))
}

/// Turns "No such file or directory" into what to install.
pub(crate) fn explain_spawn_error(program: &str, e: io::Error) -> io::Error {
    if e.kind() != io::ErrorKind::NotFound {
        return e;
    }
    let hint = match program {
        p if p.contains("redis-server") => {
            "install redis-server (apt-get install -y redis-server) or set REDIS_SERVER_BIN"
        }
        p if p.contains("redis-cli") => {
            "install redis-cli (apt-get install -y redis-tools) or set REDIS_CLI_BIN"
        }
        p if p.contains("openssl") => "install openssl (apt-get install -y openssl)",
        _ => "install it or put it on PATH",
    };
    io::Error::new(
        io::ErrorKind::NotFound,
        format!("`{program}` not found: {hint}"),
    )
}

/// A redis-server release, as `redis-server --version` reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RedisVersion {
    /// 7 in 7.0.15.
    pub major: u32,
    /// 0 in 7.0.15.
    pub minor: u32,
    /// 15 in 7.0.15.
    pub patch: u32,
}

impl RedisVersion {
    /// The oldest release the harness starts: ACL pub/sub channel rules (`&*`), which lock
    /// waiters need under an ACL user ([`RedisServerBuilder::user`](super::RedisServerBuilder::user)),
    /// arrived in 6.2.
    pub const MIN_SUPPORTED: RedisVersion = RedisVersion::new(6, 2, 0);

    /// `major.minor.patch`.
    pub const fn new(major: u32, minor: u32, patch: u32) -> Self {
        RedisVersion {
            major,
            minor,
            patch,
        }
    }

    fn parse(text: &str) -> Option<Self> {
        // "Redis server v=7.0.15 sha=00000000:0 malloc=jemalloc-5.3.0 bits=64 build=..."
        let v = text.split_whitespace().find_map(|w| w.strip_prefix("v="))?;
        let mut parts = v.split('.').map(|p| p.parse::<u32>().ok());
        Some(RedisVersion::new(
            parts.next()??,
            parts.next()??,
            parts.next().flatten().unwrap_or(0),
        ))
    }
}

impl fmt::Display for RedisVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)
    }
}

/// Whose server the harness starts: Redis, or Valkey (the fork of Redis 7.2, which answers
/// as Redis 7.2.4 on the wire).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ServerFlavour {
    /// `Redis server v=...`.
    Redis,
    /// `Valkey server v=...`.
    Valkey,
}

/// The redis-server binary the harness starts (`$REDIS_SERVER_BIN` or `redis-server`): whose
/// it is, its version, and what that version offers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ServerInfo {
    /// Redis or Valkey.
    pub flavour: ServerFlavour,
    /// The version it reports (Valkey's own numbering for Valkey).
    pub version: RedisVersion,
}

impl ServerInfo {
    fn parse(text: &str) -> Option<Self> {
        let flavour = if text.trim_start().starts_with("Valkey ") {
            ServerFlavour::Valkey
        } else {
            ServerFlavour::Redis
        };
        Some(ServerInfo {
            flavour,
            version: RedisVersion::parse(text)?,
        })
    }

    /// Whether it has FUNCTION and FCALL: Redis 7.0 or later, and every Valkey (forked from
    /// 7.2). Before that, scripts are EVAL / EVALSHA only.
    pub fn has_functions(&self) -> bool {
        self.at_least_redis_7()
    }

    /// Whether it has sharded pub/sub (SPUBLISH, SSUBSCRIBE): Redis 7.0 or later, and every
    /// Valkey.
    pub fn has_sharded_pubsub(&self) -> bool {
        self.at_least_redis_7()
    }

    /// Whether a script may name keys of several slots of one node in a cluster: Redis 7.0 or
    /// later, and every Valkey (6.2 answers CROSSSLOT).
    pub fn has_cross_slot_scripts(&self) -> bool {
        self.at_least_redis_7()
    }

    fn at_least_redis_7(&self) -> bool {
        match self.flavour {
            ServerFlavour::Redis => self.version >= RedisVersion::new(7, 0, 0),
            ServerFlavour::Valkey => true,
        }
    }
}

impl fmt::Display for ServerInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = match self.flavour {
            ServerFlavour::Redis => "Redis",
            ServerFlavour::Valkey => "Valkey",
        };
        write!(f, "{name} {}", self.version)
    }
}

/// The version of the redis-server the harness starts (`$REDIS_SERVER_BIN` or `redis-server`),
/// asked once per binary and remembered.
pub fn server_version() -> io::Result<RedisVersion> {
    server_info().map(|info| info.version)
}

/// Whose the redis-server the harness starts is, and its version (`--version`, asked once per
/// binary and remembered).
pub fn server_info() -> io::Result<ServerInfo> {
    static SEEN: Mutex<Vec<(String, ServerInfo)>> = Mutex::new(Vec::new());
    let bin = server_bin();
    let known = SEEN
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .find(|(b, _)| *b == bin)
        .map(|(_, v)| *v);
    if let Some(v) = known {
        return Ok(v);
    }
    let text = run_ok(Command::new(&bin).arg("--version"), Duration::from_secs(10))?;
    let info = ServerInfo::parse(&text).ok_or_else(|| {
        io::Error::other(format!(
            "cannot read a version from `{bin} --version`: {text}"
        ))
    })?;
    SEEN.lock()
        .unwrap_or_else(|e| e.into_inner())
        .push((bin, info));
    Ok(info)
}

#[cfg(test)]
mod tests {
    use super::{RedisVersion, ServerFlavour, ServerInfo};

    #[test]
    fn parses_the_version_line() {
        let line = "Redis server v=7.0.15 sha=00000000:0 malloc=jemalloc-5.3.0 bits=64 build=ae4";
        assert_eq!(RedisVersion::parse(line), Some(RedisVersion::new(7, 0, 15)));
        assert_eq!(
            RedisVersion::parse("Redis server v=6.2 sha=0"),
            Some(RedisVersion::new(6, 2, 0))
        );
        assert_eq!(RedisVersion::parse("redis-cli 7.0.15"), None);
        assert!(RedisVersion::new(6, 2, 14) < RedisVersion::new(7, 0, 0));
    }

    #[test]
    fn tells_redis_from_valkey_and_what_each_offers() {
        let redis_62 =
            ServerInfo::parse("Redis server v=6.2.14 sha=40305114:0 malloc=libc bits=64").unwrap();
        assert_eq!(redis_62.flavour, ServerFlavour::Redis);
        assert_eq!(redis_62.to_string(), "Redis 6.2.14");
        assert!(!redis_62.has_functions() && !redis_62.has_sharded_pubsub());
        assert!(!redis_62.has_cross_slot_scripts());
        let redis_70 = ServerInfo::parse("Redis server v=7.0.15 sha=00000000:0").unwrap();
        assert!(redis_70.has_functions() && redis_70.has_sharded_pubsub());
        let valkey = ServerInfo::parse("Valkey server v=8.1.8 sha=00000000:1 malloc=libc").unwrap();
        assert_eq!(valkey.flavour, ServerFlavour::Valkey);
        assert_eq!(valkey.to_string(), "Valkey 8.1.8");
        assert!(valkey.has_functions() && valkey.has_sharded_pubsub());
    }
}
