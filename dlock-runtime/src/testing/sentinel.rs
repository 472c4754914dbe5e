//! [`RedisSentinel`]: a primary, a replica and three sentinels watching them.

use std::io;
use std::time::Duration;

use super::options::Mode;
use super::resp::{self, info_field, Reply};
use super::server::{start_many, RedisServer};
use super::support::{wait_until, SETTLE_TIMEOUT};

/// The name the sentinels know the primary by.
const MASTER_NAME: &str = "dlock-primary";
/// Per-call timeout when the harness asks a sentinel or a data node.
const ASK: Duration = Duration::from_secs(2);

/// A Sentinel-managed primary on loopback: one primary, one replica and three sentinels
/// (quorum 2, `down-after-milliseconds` 1000, `failover-timeout` 5000), every process a
/// [`RedisServer`] killed on drop or when the test process exits. Every wait is bounded (30 s)
/// and a time-out error shows what each sentinel believes.
#[derive(Debug)]
pub struct RedisSentinel {
    /// The primary and the replica as started; which is primary now is the sentinels' call.
    data: Vec<RedisServer>,
    sentinels: Vec<RedisServer>,
}

impl RedisSentinel {
    /// Starts the primary, its replica (in sync before the sentinels start, so they find it
    /// at their first INFO), then the sentinels, and returns once each sentinel sees the
    /// primary up, the replica's link up and the two other sentinels, i.e. once a failover
    /// could be authorised. Takes ~2 s (sentinels find each other through hello messages
    /// published every 2 s).
    pub fn start() -> io::Result<Self> {
        let primary = RedisServer::start()?;
        let replica = RedisServer::start_with_args(&[
            "--replicaof",
            "127.0.0.1",
            &primary.port().to_string(),
        ])?;
        wait_until(
            "the replica in sync with the primary",
            SETTLE_TIMEOUT,
            || {
                let info = resp::call_text(replica.port(), &["INFO", "replication"], ASK)
                    .map_err(|e| e.to_string())?;
                match info_field(&info, "master_link_status") {
                    Some("up") => Ok(()),
                    status => Err(format!("master_link_status {status:?}")),
                }
            },
            String::new,
        )?;
        let monitor = format!(
            "sentinel monitor {MASTER_NAME} 127.0.0.1 {} 2\n\
             sentinel down-after-milliseconds {MASTER_NAME} 1000\n\
             sentinel failover-timeout {MASTER_NAME} 5000\n\
             sentinel parallel-syncs {MASTER_NAME} 1\n",
            primary.port()
        );
        let sentinels = start_many(3, &RedisServer::builder().mode(Mode::Sentinel(monitor)))?;
        let set = RedisSentinel {
            data: vec![primary, replica],
            sentinels,
        };
        wait_until(
            "every sentinel watching the primary and its replica, aware of the other two",
            SETTLE_TIMEOUT,
            || set.sentinels.iter().try_for_each(|s| ready(s.port())),
            || set.dump(),
        )?;
        Ok(set)
    }

    /// `redis://127.0.0.1:<port>` of each sentinel.
    pub fn sentinel_urls(&self) -> Vec<String> {
        self.sentinels.iter().map(RedisServer::url).collect()
    }

    /// The name the sentinels monitor the primary under (`sentinel monitor <name> ...`).
    pub fn master_name(&self) -> &str {
        MASTER_NAME
    }

    /// The primary's URL, as the first sentinel that answers reports it.
    pub fn master_url(&self) -> io::Result<String> {
        Ok(format!("redis://127.0.0.1:{}", self.master_port()?))
    }

    /// The primary's process id (the sentinels' current primary), e.g. to SIGSTOP it.
    pub fn master_pid(&self) -> io::Result<u32> {
        let port = self.master_port()?;
        self.data
            .iter()
            .find(|s| s.port() == port)
            .and_then(RedisServer::pid)
            .ok_or_else(|| io::Error::other(format!("the primary 127.0.0.1:{port} is not running")))
    }

    /// The process id of a running replica (a data node that is not the current primary),
    /// e.g. to SIGSTOP it.
    pub fn replica_pid(&self) -> io::Result<u32> {
        let port = self.master_port()?;
        self.data
            .iter()
            .filter(|s| s.port() != port)
            .find_map(RedisServer::pid)
            .ok_or_else(|| io::Error::other("no replica is running"))
    }

    /// Kills the primary (SIGKILL) and returns the new primary's URL once every running
    /// sentinel reports it (`SENTINEL GET-MASTER-ADDR-BY-NAME`) and it answers ROLE as master.
    /// Takes ~2.3 s (1 s to be judged down, an election, the promotion). Fails at once when no
    /// replica is left to promote (the harness does not restart the killed primary).
    pub fn kill_master(&mut self) -> io::Result<String> {
        let old = self.master_port()?;
        if !self.data.iter().any(|s| s.is_running() && s.port() != old) {
            return Err(io::Error::other(format!(
                "no running replica of 127.0.0.1:{old} is left to promote"
            )));
        }
        if let Some(primary) = self.data.iter_mut().find(|s| s.port() == old) {
            primary.kill();
        }
        self.promoted_after(old, "killed")
    }

    /// Waits until every running sentinel names a primary other than `old_master_url` and that
    /// node answers ROLE as master, and returns its URL: a failover the test caused some other
    /// way (the primary SIGSTOPped past `down-after-milliseconds`, `SENTINEL FAILOVER`). The
    /// old primary is left as it is: a paused one wakes up still calling itself master until
    /// the sentinels reconfigure it. Bounded (30 s).
    pub fn wait_for_new_master(&self, old_master_url: &str) -> io::Result<String> {
        let old = old_master_url
            .rsplit(':')
            .next()
            .and_then(|p| p.trim_end_matches('/').parse().ok())
            .ok_or_else(|| io::Error::other(format!("no port in {old_master_url:?}")))?;
        self.promoted_after(old, "replaced")
    }

    /// The new primary's URL once every running sentinel names one other than `old` and it
    /// answers ROLE as master.
    fn promoted_after(&self, old: u16, how: &str) -> io::Result<String> {
        let what = format!("the sentinels promoting a replica of 127.0.0.1:{old} ({how})");
        let port = wait_until(
            &what,
            SETTLE_TIMEOUT,
            || {
                let mut agreed = None;
                for sentinel in self.sentinels.iter().filter(|s| s.is_running()) {
                    let port = master_addr(sentinel.port()).map_err(|e| e.to_string())?;
                    if port == old || agreed.is_some_and(|p| p != port) {
                        return Err(format!(
                            "sentinel 127.0.0.1:{} reports the primary at 127.0.0.1:{port}",
                            sentinel.port()
                        ));
                    }
                    agreed = Some(port);
                }
                let port = agreed.ok_or("no sentinel is running")?;
                match role(port) {
                    Ok(role) if role == "master" => Ok(port),
                    other => Err(format!("127.0.0.1:{port} answers ROLE with {other:?}")),
                }
            },
            || self.dump(),
        )?;
        Ok(format!("redis://127.0.0.1:{port}"))
    }

    fn master_port(&self) -> io::Result<u16> {
        let mut last_err = io::Error::other("no sentinel is running");
        for sentinel in self.sentinels.iter().filter(|s| s.is_running()) {
            match master_addr(sentinel.port()) {
                Ok(port) => return Ok(port),
                Err(e) => last_err = e,
            }
        }
        Err(last_err)
    }

    /// What each sentinel believes about the primary, for time-out errors.
    fn dump(&self) -> String {
        let mut out = String::from("SENTINEL MASTER from each sentinel:");
        for sentinel in &self.sentinels {
            let port = sentinel.port();
            let text = match resp::call(port, &["SENTINEL", "MASTER", MASTER_NAME], ASK)
                .and_then(Reply::into_map)
            {
                Ok(m) => [
                    "ip",
                    "port",
                    "flags",
                    "num-slaves",
                    "num-other-sentinels",
                    "failover-state",
                ]
                .iter()
                .map(|k| format!("{k}={}", m.get(*k).map_or("?", String::as_str)))
                .collect::<Vec<_>>()
                .join(" "),
                Err(e) => format!("(no answer: {e})"),
            };
            out.push_str(&format!("\n--- 127.0.0.1:{port}: {text}"));
        }
        out
    }
}

/// Whether the sentinel on `port` could take part in a failover now.
fn ready(port: u16) -> Result<(), String> {
    let master = resp::call(port, &["SENTINEL", "MASTER", MASTER_NAME], ASK)
        .and_then(Reply::into_map)
        .map_err(|e| e.to_string())?;
    let field = |k: &str| master.get(k).map_or("?", String::as_str);
    if field("flags") != "master"
        || field("num-other-sentinels") != "2"
        || field("num-slaves") != "1"
    {
        return Err(format!(
            "sentinel 127.0.0.1:{port}: flags {}, {} other sentinels, {} replicas",
            field("flags"),
            field("num-other-sentinels"),
            field("num-slaves")
        ));
    }
    let replicas = resp::call(port, &["SENTINEL", "REPLICAS", MASTER_NAME], ASK)
        .and_then(Reply::into_array)
        .map_err(|e| e.to_string())?;
    for replica in replicas {
        let replica = replica.into_map().map_err(|e| e.to_string())?;
        let field = |k: &str| replica.get(k).map_or("?", String::as_str);
        if field("flags") != "slave" || field("master-link-status") != "ok" {
            return Err(format!(
                "sentinel 127.0.0.1:{port} sees replica port {} with flags {}, link {}",
                field("port"),
                field("flags"),
                field("master-link-status")
            ));
        }
    }
    Ok(())
}

/// The primary's port according to the sentinel on `port`.
fn master_addr(port: u16) -> io::Result<u16> {
    let addr = resp::call(
        port,
        &["SENTINEL", "GET-MASTER-ADDR-BY-NAME", MASTER_NAME],
        ASK,
    )?
    .into_array()?;
    addr.get(1)
        .cloned()
        .map(Reply::into_text)
        .transpose()?
        .and_then(|p| p.parse().ok())
        .ok_or_else(|| io::Error::other(format!("sentinel 127.0.0.1:{port} answered {addr:?}")))
}

/// The first element of ROLE: "master", "slave" or "sentinel".
fn role(port: u16) -> io::Result<String> {
    resp::call(port, &["ROLE"], ASK)?
        .into_array()?
        .into_iter()
        .next()
        .ok_or_else(|| io::Error::other("empty ROLE reply"))?
        .into_text()
}
