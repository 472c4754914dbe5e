//! Ties each redis-server to the life of the test process, with no unsafe code and no libc.
//!
//! A server kept in a `static` is never dropped, and a test process that panics across an
//! `abort`, is SIGKILLed or hits a timeout never runs destructors either. Each server is
//! therefore spawned through a small `sh` wrapper that forks a watcher and then `exec`s
//! redis-server, so the pid the harness holds is redis-server's own (tests SIGSTOP it):
//!
//! * the watcher blocks reading a pipe whose only write end is held by this process (std opens
//!   it close-on-exec, so no other child inherits it). When this process exits, however it
//!   exits, the kernel closes the write end, the read returns end-of-file, and the watcher
//!   SIGKILLs the server and, a second later, removes its temp directory;
//! * when the harness stops the server itself it first writes one line to the pipe: the watcher
//!   reads it and leaves quietly, so it can never signal a pid the kernel has since reused;
//! * before killing, the watcher checks in `/proc/self/stat` that its parent is still the
//!   server (the watcher is the server's child, since the server `exec`ed over the shell that
//!   forked it); a server that already died on its own is not "killed" by pid again.
//!
//! `prctl(PR_SET_PDEATHSIG)` would need libc and `unsafe`, which the workspace forbids, and
//! fires on the death of the spawning *thread*, not the process: wrong for a server started
//! from a test thread and kept in a `static`.

use std::fs::OpenOptions;
use std::io::{self, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use super::bins::explain_spawn_error;
use super::support::signal;

/// `$1` is the directory to remove once the server is killed; the rest is the command.
const WRAPPER: &str = r#"dir=$1; shift
exec 3<&0
(
  if read -r line <&3; then exit 0; fi
  if [ -r /proc/self/stat ]; then
    read -r _pid _comm _state ppid _rest < /proc/self/stat
    [ "$ppid" = "$$" ] || exit 0
  fi
  kill -9 $$ 2>/dev/null
  sleep 1
  rm -rf -- "$dir"
) &
exec "$@" 0</dev/null 3<&-
"#;

/// A running server process with its watcher; SIGKILLed when dropped.
#[derive(Debug)]
pub(crate) struct Watched {
    child: Child,
    /// Our end of the watcher's pipe. Writing a line releases the watcher; closing it (our
    /// process exiting) makes the watcher kill the server.
    leash: Option<ChildStdin>,
}

impl Watched {
    /// Spawns `bin args...` with stdout and stderr appended to `log`.
    pub(crate) fn spawn(bin: &str, args: &[String], dir: &Path, log: &Path) -> io::Result<Self> {
        let out = OpenOptions::new().create(true).append(true).open(log)?;
        let err = out.try_clone()?;
        let mut child = Command::new("sh")
            .arg("-c")
            .arg(WRAPPER)
            .arg("sh")
            .arg(dir)
            .arg(bin)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(out)
            .stderr(err)
            .spawn()
            .map_err(|e| explain_spawn_error("sh", e))?;
        let leash = child.stdin.take();
        Ok(Watched { child, leash })
    }

    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    pub(crate) fn try_wait(&mut self) -> io::Result<Option<ExitStatus>> {
        self.child.try_wait()
    }

    /// Sends SIGTERM (the server's own clean shutdown) and waits up to `within` for it to
    /// exit; SIGKILL after that.
    pub(crate) fn terminate(mut self, within: Duration) -> io::Result<()> {
        self.release_watcher();
        signal(self.pid(), "-TERM")?;
        let start = Instant::now();
        for _ in 0..within.as_millis() / 10 + 1 {
            if self.child.try_wait()?.is_some() {
                return Ok(());
            }
            if start.elapsed() >= within {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        Err(io::Error::new(
            io::ErrorKind::TimedOut,
            format!(
                "redis-server (pid {}) did not exit within {within:?} of SIGTERM; killed",
                self.pid()
            ),
        ))
    }

    fn release_watcher(&mut self) {
        if let Some(mut leash) = self.leash.take() {
            // Fails only if the watcher is gone already, which is fine.
            let _ = leash.write_all(b"\n");
        }
    }
}

impl Drop for Watched {
    fn drop(&mut self) {
        self.release_watcher();
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
