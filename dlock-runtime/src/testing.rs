//! Throw-away `redis-server` processes for tests (feature `testing`).
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let server = dlock_runtime::testing::RedisServer::start()?;
//! let client = dlock_runtime::LockClient::connect(&server.url()).await?;
//! # Ok(()) }
//! ```
//!
//! Each server listens on a free loopback port, keeps nothing on disk, and is killed when the
//! value is dropped. The binary is `redis-server` from `PATH`, or `$REDIS_SERVER_BIN`.

use std::io::{self, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A running `redis-server` owned by the test; killed on drop.
#[derive(Debug)]
pub struct RedisServer {
    port: u16,
    dir: PathBuf,
    extra_args: Vec<String>,
    child: Option<Child>,
}

impl RedisServer {
    /// Starts a server on a free loopback port and waits until it answers PING.
    pub fn start() -> io::Result<Self> {
        Self::start_with_args(&[])
    }

    /// Like [`RedisServer::start`] with extra `redis-server` arguments, e.g.
    /// `["--replicaof", "127.0.0.1", "6379"]`.
    pub fn start_with_args(args: &[&str]) -> io::Result<Self> {
        let mut last_err = None;
        // A port found free can be taken by someone else before redis binds it: try again.
        for _ in 0..5 {
            let port = free_port()?;
            let dir =
                std::env::temp_dir().join(format!("dlock-redis-{}-{port}", std::process::id()));
            std::fs::create_dir_all(&dir)?;
            let mut server = RedisServer {
                port,
                dir,
                extra_args: args.iter().map(|s| s.to_string()).collect(),
                child: None,
            };
            match server.spawn() {
                Ok(()) => return Ok(server),
                Err(e) if e.kind() == io::ErrorKind::NotFound => return Err(e),
                Err(e) => last_err = Some(e),
            }
        }
        Err(last_err.unwrap_or_else(|| io::Error::other("redis-server did not start")))
    }

    /// `redis://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// The port it listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Whether the process is running (not stopped or killed by this handle).
    pub fn is_running(&self) -> bool {
        self.child.is_some()
    }

    /// The process id, e.g. to send it SIGSTOP.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Kills the server (SIGKILL) and waits for it to exit: every connection drops, all data is
    /// gone (nothing is persisted).
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts the server again on the same port (after [`RedisServer::kill`]), empty.
    pub fn restart(&mut self) -> io::Result<()> {
        self.kill();
        self.spawn()
    }

    fn spawn(&mut self) -> io::Result<()> {
        let bin = std::env::var("REDIS_SERVER_BIN").unwrap_or_else(|_| "redis-server".into());
        let port = self.port.to_string();
        let dir = self.dir.to_string_lossy().into_owned();
        let mut cmd = Command::new(&bin);
        cmd.args([
            "--port",
            &port,
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
        ])
        .args(["--dir", &dir, "--daemonize", "no", "--protected-mode", "no"])
        .args(["--enable-debug-command", "local", "--logfile", ""])
        .args(&self.extra_args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
        let mut child = cmd.spawn().map_err(|e| {
            if e.kind() == io::ErrorKind::NotFound {
                io::Error::new(
                    io::ErrorKind::NotFound,
                    format!("`{bin}` not found: install redis-server (apt-get install -y redis-server) or set REDIS_SERVER_BIN"),
                )
            } else {
                e
            }
        })?;
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(status) = child.try_wait()? {
                return Err(io::Error::other(format!(
                    "redis-server on port {port} exited at start-up with {status}"
                )));
            }
            if ping(self.port) {
                self.child = Some(child);
                return Ok(());
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("redis-server on port {port} did not answer PING within 10 s"),
                ));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn free_port() -> io::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

fn ping(port: u16) -> bool {
    let Ok(mut s) =
        TcpStream::connect_timeout(&([127, 0, 0, 1], port).into(), Duration::from_millis(200))
    else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_millis(500)));
    let mut buf = [0u8; 7];
    s.write_all(b"PING\r\n").is_ok() && s.read_exact(&mut buf).is_ok() && &buf == b"+PONG\r\n"
}
