//! Small shared pieces: free ports, bounded waiting, signals, log tails, temp dirs.

use std::io::{self, Read, Seek, SeekFrom};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// How long the harness waits for anything a cluster or sentinel set-up does (measured: the
/// slowest, a SIGKILL promotion, takes ~4 s).
pub(crate) const SETTLE_TIMEOUT: Duration = Duration::from_secs(30);

/// A loopback port nobody listened on a moment ago. Another process can take it before the
/// server binds it; callers retry on "Address already in use".
pub(crate) fn free_port() -> io::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// A free port `p` whose cluster bus port `p + 10000` is free too. Redis before 7.0 has no
/// `cluster-port` option and always uses `p + 10000`, so `p` must stay below 55536.
pub(crate) fn free_cluster_port() -> io::Result<u16> {
    for _ in 0..200 {
        let port = free_port()?;
        if port <= u16::MAX - 10_000 && TcpListener::bind(("127.0.0.1", port + 10_000)).is_ok() {
            return Ok(port);
        }
    }
    Err(io::Error::new(
        io::ErrorKind::AddrNotAvailable,
        "found no free loopback port p with p + 10000 free too (cluster bus) in 200 tries",
    ))
}

/// A new, empty directory under the system temp dir, unique in this process.
pub(crate) fn fresh_dir(tag: &str) -> io::Result<PathBuf> {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("dlock-{tag}-{}-{n}", std::process::id()));
    // Left over from a process that had our pid before and was killed: start clean.
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}

/// Polls `check` every 20 ms until it returns `Ok`, for at most `within`. On time-out the error
/// names `what`, the last reason `check` gave, and whatever `describe` reports (e.g. CLUSTER
/// NODES from every node), so a failing test shows the state it got stuck in.
pub(crate) fn wait_until<T>(
    what: &str,
    within: Duration,
    mut check: impl FnMut() -> Result<T, String>,
    describe: impl FnOnce() -> String,
) -> io::Result<T> {
    const POLL: Duration = Duration::from_millis(20);
    let start = Instant::now();
    let max_polls = within.as_millis() / POLL.as_millis() + 1;
    let mut last = String::from("never checked");
    for _ in 0..max_polls {
        match check() {
            Ok(value) => return Ok(value),
            Err(why) => last = why,
        }
        if start.elapsed() >= within {
            break;
        }
        std::thread::sleep(POLL);
    }
    Err(io::Error::new(
        io::ErrorKind::TimedOut,
        format!(
            "{what}: not reached within {within:?} (last check: {last})\n{}",
            describe()
        ),
    ))
}

/// Sends a signal with kill(1): the harness has no libc (the workspace forbids unsafe code).
pub(crate) fn signal(pid: u32, sig: &str) -> io::Result<()> {
    let status = Command::new("kill")
        .args([sig, &pid.to_string()])
        .status()?;
    if status.success() {
        Ok(())
    } else {
        Err(io::Error::other(format!(
            "kill {sig} {pid} failed: {status}"
        )))
    }
}

/// What was appended to `log` from byte `from` on (lossy UTF-8; empty if unreadable).
pub(crate) fn read_from(log: &Path, from: u64) -> String {
    let mut text = Vec::new();
    if let Ok(mut file) = std::fs::File::open(log) {
        if file.seek(SeekFrom::Start(from)).is_ok() {
            // A server's start-up log is a few KiB; cap it in case it loops on an error.
            let _ = file.take(1 << 20).read_to_end(&mut text);
        }
    }
    String::from_utf8_lossy(&text).into_owned()
}

/// The last `n` lines of `text`, indented for embedding in an error message.
pub(crate) fn last_lines(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    let start = lines.len().saturating_sub(n);
    let tail: Vec<String> = lines[start..].iter().map(|l| format!("    {l}")).collect();
    if tail.is_empty() {
        "    (nothing)".into()
    } else {
        tail.join("\n")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wait_that_times_out_says_what_and_where_it_stuck() {
        let mut checks = 0;
        let err = wait_until(
            "the moon to turn blue",
            Duration::from_millis(60),
            || -> Result<(), String> {
                checks += 1;
                Err(format!("still grey after {checks} looks"))
            },
            || "sky: clear".to_string(),
        )
        .unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::TimedOut);
        let msg = err.to_string();
        assert!(
            msg.starts_with("the moon to turn blue: not reached within 60ms"),
            "{msg}"
        );
        assert!(
            msg.contains(&format!("still grey after {checks} looks")),
            "{msg}"
        );
        assert!(msg.ends_with("sky: clear"), "{msg}");
        assert!(
            (2..=5).contains(&checks),
            "{checks} checks in 60 ms at 20 ms"
        );
    }

    #[test]
    fn keeps_the_last_lines() {
        assert_eq!(last_lines("a\n\nb\nc\n", 2), "    b\n    c");
        assert_eq!(last_lines("", 2), "    (nothing)");
    }
}
