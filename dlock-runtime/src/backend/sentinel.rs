//! Following a Sentinel-managed primary across failovers.
//!
//! redis-rs resolves a sentinel's primary when it connects and then keeps talking to that
//! address. [`Follower`] asks the sentinels again whenever a command fails in a way a failover
//! causes (the connection broke, or a demoted primary answers READONLY), and at most every
//! [`RECHECK`] otherwise, and swaps its connection to the new primary. Commands in flight at the
//! failover fail (an acquire is then cleaned up like a cancelled one, a release is retried, a
//! renewal is retried until the hold's deadline); the next ones go to the new primary.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::{Cmd, IntoConnectionInfo, Pipeline, RedisFuture, RedisResult, Value};
use tokio::runtime::Handle;

use crate::backend::open::root_only;
use crate::backend::thread::from_runtime;

/// How often the sentinels are asked even when nothing failed: a primary that was demoted
/// while still reachable (a partition healed) only answers READONLY to writes, which we notice
/// anyway; this bounds how long a read-only connection could linger.
const RECHECK: Duration = Duration::from_secs(5);

/// Shortest pause between two resolutions: a storm of failing commands asks once.
const MIN_GAP: Duration = Duration::from_millis(100);

/// While no primary can be found: ask again this often...
const RETRY: Duration = Duration::from_millis(250);
/// ...for this long (a sentinel failover takes a few seconds plus `down-after-milliseconds`).
const PATIENCE: Duration = Duration::from_secs(60);

/// Where the primary is and how to log in to it.
#[derive(Clone)]
pub(crate) struct MasterSpec {
    pub(crate) sentinels: Vec<redis::Client>,
    pub(crate) name: String,
    pub(crate) username: Option<String>,
    pub(crate) password: Option<String>,
    pub(crate) tls_root: Option<Vec<u8>>,
    pub(crate) config: ConnectionManagerConfig,
}

pub(crate) struct Follower {
    spec: MasterSpec,
    current: Mutex<Current>,
    resolving: tokio::sync::Mutex<()>,
    /// A resolution task is spawned or running: later kicks spawn nothing.
    kicked: AtomicBool,
    bg: Handle,
}

struct Current {
    addr: (String, u16),
    client: redis::Client,
    conn: ConnectionManager,
    checked: Instant,
}

impl Follower {
    /// Resolves the primary and connects to it (on the client's runtime `bg`).
    pub(crate) async fn start(spec: MasterSpec, bg: Handle) -> RedisResult<Arc<Self>> {
        let addr = resolve(&spec).await?;
        let (client, conn) = connect(&spec, &addr, &bg).await?;
        Ok(Arc::new(Follower {
            current: Mutex::new(Current {
                addr,
                client,
                conn,
                checked: Instant::now(),
            }),
            spec,
            resolving: tokio::sync::Mutex::new(()),
            kicked: AtomicBool::new(false),
            bg,
        }))
    }

    fn current(&self) -> std::sync::MutexGuard<'_, Current> {
        self.current.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A client for the primary as last resolved (the subscriber connects with it).
    pub(crate) fn client(&self) -> redis::Client {
        self.current().client.clone()
    }

    fn conn(self: &Arc<Self>) -> ConnectionManager {
        let (conn, stale) = {
            let cur = self.current();
            (cur.conn.clone(), cur.checked.elapsed() > RECHECK)
        };
        if stale {
            self.kick();
        }
        conn
    }

    /// Asks the sentinels again in the background and switches to a new primary if they
    /// name one.
    pub(crate) fn kick(self: &Arc<Self>) {
        if self.kicked.swap(true, Ordering::AcqRel) {
            return;
        }
        let me = self.clone();
        drop(self.bg.spawn(async move {
            me.follow().await;
            me.kicked.store(false, Ordering::Release);
        }));
    }

    /// Resolves again; while the sentinels name no reachable primary (a failover under way),
    /// keeps asking every [`RETRY`] for up to [`PATIENCE`], so the client has switched soon
    /// after the promotion even if no command fails meanwhile.
    async fn follow(&self) {
        let Ok(_one) = self.resolving.try_lock() else {
            return; // another resolution is under way
        };
        if self.current().checked.elapsed() < MIN_GAP {
            return;
        }
        let started = Instant::now();
        loop {
            match self.follow_once().await {
                Ok(()) => return,
                Err(e) if started.elapsed() >= PATIENCE => {
                    tracing::warn!(master = %self.spec.name, error = %e, "dlock: no primary found through the sentinels; the next failing command asks again");
                    return;
                }
                Err(e) => {
                    tracing::debug!(master = %self.spec.name, error = %e, "dlock: no primary yet");
                    tokio::time::sleep(RETRY).await;
                }
            }
        }
    }

    async fn follow_once(&self) -> RedisResult<()> {
        let addr = resolve(&self.spec).await?;
        if addr == self.current().addr {
            self.current().checked = Instant::now();
            return Ok(());
        }
        let (client, conn) = connect(&self.spec, &addr, &self.bg).await?;
        tracing::warn!(master = %self.spec.name, host = %addr.0, port = addr.1, "dlock: following the new primary");
        *self.current() = Current {
            addr,
            client,
            conn,
            checked: Instant::now(),
        };
        Ok(())
    }

    /// Looks at a reply for the signs of a failover; a server error may come back as a value
    /// (redis-rs turns it into an error later).
    fn after(self: &Arc<Self>, reply: &RedisResult<Value>) {
        let sign = match reply {
            Err(e) => failover_sign(e),
            Ok(Value::ServerError(e)) => e.code() == "READONLY",
            Ok(_) => false,
        };
        if sign {
            self.kick();
        }
    }
}

/// Errors a failover causes: the old primary is gone, or it came back as a replica.
fn failover_sign(e: &redis::RedisError) -> bool {
    e.is_io_error()
        || e.is_connection_dropped()
        || e.is_connection_refusal()
        || e.is_timeout()
        || e.code() == Some("READONLY")
}

/// The primary's address: the first sentinel that answers names it, and the node named must
/// say it is a primary (a sentinel may lag behind a failover).
async fn resolve(spec: &MasterSpec) -> RedisResult<(String, u16)> {
    let mut last = None;
    for sentinel in &spec.sentinels {
        match ask(sentinel, spec).await {
            Ok(addr) => return Ok(addr),
            Err(e) => last = Some(e),
        }
    }
    Err(last
        .unwrap_or_else(|| redis::RedisError::from(std::io::Error::other("no sentinel to ask"))))
}

async fn ask(sentinel: &redis::Client, spec: &MasterSpec) -> RedisResult<(String, u16)> {
    let timeout = Duration::from_secs(2);
    let mut conn = tokio::time::timeout(timeout, sentinel.get_multiplexed_async_connection())
        .await
        .map_err(|_| timed_out("connecting to a sentinel"))??;
    let addr: Option<(String, u16)> = redis::cmd("SENTINEL")
        .arg("get-master-addr-by-name")
        .arg(&spec.name)
        .query_async(&mut conn)
        .await?;
    let addr = addr.ok_or_else(|| {
        redis::RedisError::from(std::io::Error::new(
            std::io::ErrorKind::NotFound,
            format!("the sentinels know no master named {:?}", spec.name),
        ))
    })?;
    let client = master_client(spec, &addr)?;
    let mut node = tokio::time::timeout(timeout, client.get_multiplexed_async_connection())
        .await
        .map_err(|_| timed_out("connecting to the primary"))??;
    let role: Vec<Value> = redis::cmd("ROLE").query_async(&mut node).await?;
    match role.first() {
        Some(Value::BulkString(r)) if r.as_slice() == b"master" => Ok(addr),
        _ => Err(redis::RedisError::from(std::io::Error::other(format!(
            "{}:{} is not a primary yet",
            addr.0, addr.1
        )))),
    }
}

async fn connect(
    spec: &MasterSpec,
    addr: &(String, u16),
    bg: &Handle,
) -> RedisResult<(redis::Client, ConnectionManager)> {
    let client = master_client(spec, addr)?;
    let (c, config) = (client.clone(), spec.config.clone());
    let conn = bg
        .spawn(async move { ConnectionManager::new_with_config(c, config).await })
        .await
        .map_err(|e| redis::RedisError::from(std::io::Error::other(e.to_string())))??;
    Ok((client, conn))
}

fn master_client(spec: &MasterSpec, (host, port): &(String, u16)) -> RedisResult<redis::Client> {
    let scheme = if spec.tls_root.is_some() {
        "rediss"
    } else {
        "redis"
    };
    let mut settings = redis::RedisConnectionInfo::default();
    if let Some(user) = &spec.username {
        settings = settings.set_username(user);
    }
    if let Some(password) = &spec.password {
        settings = settings.set_password(password);
    }
    let info = format!("{scheme}://{host}:{port}")
        .into_connection_info()?
        .set_redis_settings(settings);
    match &spec.tls_root {
        Some(pem) => redis::Client::build_with_tls(info, root_only(pem)),
        None => redis::Client::open(info),
    }
}

fn timed_out(what: &str) -> redis::RedisError {
    redis::RedisError::from(std::io::Error::new(
        std::io::ErrorKind::TimedOut,
        format!("timed out {what}"),
    ))
}

/// The command connection of a sentinel deployment: the current primary's, swapped on
/// failover.
#[derive(Clone)]
pub(crate) struct SentinelConn(pub(crate) Arc<Follower>);

impl ConnectionLike for SentinelConn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        // Sent from the client's runtime, so reconnects stay there (see `thread::from_runtime`).
        let (follower, cmd) = (self.0.clone(), cmd.clone());
        let bg = follower.bg.clone();
        from_runtime(&bg, async move {
            let mut conn = follower.conn();
            let reply = conn.req_packed_command(&cmd).await;
            follower.after(&reply);
            reply
        })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        let (follower, pipeline) = (self.0.clone(), pipeline.clone());
        let bg = follower.bg.clone();
        from_runtime(&bg, async move {
            let mut conn = follower.conn();
            let reply = conn.req_packed_commands(&pipeline, offset, count).await;
            if let Err(e) = &reply {
                follower.after(&Err(e.clone()));
            }
            reply
        })
    }

    fn get_db(&self) -> i64 {
        0
    }
}
