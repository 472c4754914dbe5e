//! The programs the harness runs, how to run one with a time limit, and which redis-server
//! version is installed.

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

/// The version of the redis-server the harness starts (`$REDIS_SERVER_BIN` or `redis-server`),
/// asked once per binary and remembered.
pub fn server_version() -> io::Result<RedisVersion> {
    static SEEN: Mutex<Vec<(String, RedisVersion)>> = Mutex::new(Vec::new());
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
    let version = RedisVersion::parse(&text).ok_or_else(|| {
        io::Error::other(format!(
            "cannot read a version from `{bin} --version`: {text}"
        ))
    })?;
    SEEN.lock()
        .unwrap_or_else(|e| e.into_inner())
        .push((bin, version));
    Ok(version)
}

#[cfg(test)]
mod tests {
    use super::RedisVersion;

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
}
