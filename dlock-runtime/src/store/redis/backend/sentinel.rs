//! Following a Sentinel-managed primary across failovers.
//!
//! redis-rs resolves a sentinel's primary when it connects and then keeps talking to that
//! address. [`Follower`] asks the sentinels again (see `sentinel_ask.rs`) when they announce a
//! switch (`sentinel_events.rs`), whenever a command fails in a way a failover causes (the
//! connection broke, or a demoted primary answers READONLY), and at most every [`RECHECK`]
//! otherwise, and swaps its connection to the new primary.
//!
//! A reply is believed only if the client still follows the node it came from: a reply that
//! arrives after a switch, or while a sentinel's announcement of another primary is being
//! checked, becomes an error. An old primary paused through its replica's promotion wakes up
//! still calling itself master and answers what it was sent; a grant in that answer is a write
//! the new primary never sees, so believing it would let two clients hold one lock. Such an
//! acquire is cleaned up like a cancelled one, a release is retried, a renewal is retried
//! until the hold's deadline; the next commands go to the new primary.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::{Cmd, IntoConnectionInfo, Pipeline, RedisFuture, RedisResult, Value};
use tokio::runtime::Handle;
use tokio::sync::watch;

use crate::store::redis::backend::open::root_only;
use crate::store::redis::backend::sentinel_ask::{resolve, Resolved, ASK_TIMEOUT};
use crate::store::redis::backend::sentinel_events::{self, Announced};
use crate::store::redis::backend::thread::from_runtime;

/// How often the sentinels are asked even when nothing failed and nothing was announced (an
/// announcement missed while a sentinel connection was down).
const RECHECK: Duration = Duration::from_secs(5);

/// Shortest pause between two resolutions: a storm of failing commands asks once.
const MIN_GAP: Duration = Duration::from_millis(100);

/// While no primary can be found: ask again this often...
const RETRY: Duration = Duration::from_millis(250);
/// ...for this long (a sentinel failover takes a few seconds plus `down-after-milliseconds`).
const PATIENCE: Duration = Duration::from_secs(60);

/// How long a command waits for an announced switch to be checked before it is sent anyway
/// (its reply is not believed until the check ends, so sending sooner only costs an error).
const SETTLE_WAIT: Duration = Duration::from_secs(2);

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
    /// Counts switches of primary; a reply is believed only under the generation it was sent in.
    generation: AtomicU64,
    /// The same count, for those who act on a switch (the client renews every hold at once
    /// and moves its subscriber).
    switches: watch::Sender<u64>,
    /// An announced primary not yet checked: replies are not believed meanwhile.
    announced: watch::Sender<Option<(String, u16)>>,
    bg: Handle,
}

struct Current {
    addr: (String, u16),
    /// The sentinels' configuration epoch `addr` was named under: a later answer with a lower
    /// one is out of date.
    epoch: u64,
    client: redis::Client,
    conn: ConnectionManager,
    checked: Instant,
}

impl Follower {
    /// Resolves the primary, connects to it and starts listening to the sentinels'
    /// announcements (all on the client's runtime `bg`).
    pub(crate) async fn start(spec: MasterSpec, bg: Handle) -> RedisResult<Arc<Self>> {
        let resolved = resolve(&spec.sentinels, &spec.name, |a| master_client(&spec, a)).await?;
        let (client, conn) = connect(&spec, &resolved.addr, &bg).await?;
        let follower = Arc::new(Follower {
            current: Mutex::new(Current {
                addr: resolved.addr,
                epoch: resolved.epoch,
                client,
                conn,
                checked: Instant::now(),
            }),
            spec,
            resolving: tokio::sync::Mutex::new(()),
            kicked: AtomicBool::new(false),
            generation: AtomicU64::new(0),
            switches: watch::Sender::new(0),
            announced: watch::Sender::new(None),
            bg,
        });
        let weak: Weak<dyn Announced> = Arc::downgrade(&follower) as Weak<dyn Announced>;
        sentinel_events::listen(
            &follower.spec.sentinels,
            &follower.spec.name,
            weak,
            &follower.bg,
        );
        Ok(follower)
    }

    fn current(&self) -> std::sync::MutexGuard<'_, Current> {
        self.current.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A client for the primary as last resolved (the subscriber connects with it).
    pub(crate) fn client(&self) -> redis::Client {
        self.current().client.clone()
    }

    /// Changes each time the client switches primaries.
    pub(crate) fn switches(&self) -> watch::Receiver<u64> {
        self.switches.subscribe()
    }

    /// The connection to send on and the generation it belongs to; waits (bounded) while an
    /// announced switch is checked.
    async fn conn(self: &Arc<Self>) -> (ConnectionManager, u64) {
        if self.announced.borrow().is_some() {
            let mut settled = self.announced.subscribe();
            let _ = tokio::time::timeout(SETTLE_WAIT, settled.wait_for(Option::is_none)).await;
        }
        let (conn, generation, stale) = {
            let cur = self.current();
            let generation = self.generation.load(Ordering::Acquire);
            (
                cur.conn.clone(),
                generation,
                cur.checked.elapsed() > RECHECK,
            )
        };
        if stale {
            self.kick();
        }
        (conn, generation)
    }

    /// `reply`, unless the client no longer follows the node it came from (see the module
    /// docs), or the sentinels announced another one and it is still being checked.
    fn believe<T>(&self, generation: u64, reply: RedisResult<T>) -> RedisResult<T> {
        let moved = self.generation.load(Ordering::Acquire) != generation;
        if !moved && self.announced.borrow().is_none() {
            return reply;
        }
        let now = self.current().addr.clone();
        tracing::debug!(master = %self.spec.name, host = %now.0, port = now.1, "dlock: a reply from a primary the sentinels replaced is not believed");
        Err(redis::RedisError::from(std::io::Error::new(
            std::io::ErrorKind::ConnectionAborted,
            format!(
                "the request went to a primary the sentinels have replaced (now {}:{}); its reply is not believed",
                now.0, now.1
            ),
        )))
    }

    /// `request`'s reply, or, if the client switches primaries first, an error at once: the
    /// old primary may be paused and answer much later (a renewal waiting for it would hold
    /// up the renewals that matter, on the new primary), and its answer would not be believed.
    async fn unless_switched<T>(
        &self,
        generation: u64,
        request: impl std::future::Future<Output = RedisResult<T>>,
    ) -> RedisResult<T> {
        let mut switches = self.switches.subscribe();
        tokio::select! {
            reply = request => reply,
            _ = switches.wait_for(|g| *g != generation) => self.believe(generation, Err(moved_error())),
        }
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
        self.follow_patiently().await;
    }

    /// [`Follower::follow`] without the gap and without waiting for a resolution under way:
    /// that one may be stuck on the paused old primary, which may wake up any moment.
    async fn follow_announced(&self) {
        self.follow_patiently().await;
        self.announced.send_replace(None);
    }

    async fn follow_patiently(&self) {
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
        let spec = &self.spec;
        let found = resolve(&spec.sentinels, &spec.name, |a| master_client(spec, a)).await?;
        let before = self.generation.load(Ordering::Acquire);
        if !self.may_follow(&found).await {
            return Ok(());
        }
        let (client, conn) = connect(spec, &found.addr, &self.bg).await?;
        let mut cur = self.current();
        if found.addr == cur.addr {
            cur.checked = Instant::now();
            return Ok(());
        }
        // Another resolution switched while this one connected: only a newer epoch wins.
        if self.generation.load(Ordering::Acquire) != before && found.epoch <= cur.epoch {
            return Ok(());
        }
        tracing::warn!(master = %spec.name, host = %found.addr.0, port = found.addr.1, epoch = found.epoch, "dlock: following the new primary");
        *cur = Current {
            addr: found.addr,
            epoch: found.epoch,
            client,
            conn,
            checked: Instant::now(),
        };
        let generation = self.generation.fetch_add(1, Ordering::AcqRel) + 1;
        drop(cur);
        self.switches.send_replace(generation);
        Ok(())
    }

    /// Whether `found` should replace the primary followed now. The same node: just note the
    /// check. An older epoch (a resolution that began before a failover and ended after it)
    /// is followed only if the current primary no longer says it is one.
    async fn may_follow(&self, found: &Resolved) -> bool {
        let (addr, epoch, client) = {
            let cur = self.current();
            (cur.addr.clone(), cur.epoch, cur.client.clone())
        };
        if found.addr == addr {
            let mut cur = self.current();
            cur.epoch = cur.epoch.max(found.epoch);
            cur.checked = Instant::now();
            return false;
        }
        found.epoch >= epoch || !is_master(&client).await
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

impl Announced for Follower {
    fn switched_to(self: Arc<Self>, addr: (String, u16)) {
        if self.current().addr == addr {
            return; // already followed (every sentinel announces the same switch)
        }
        let first = self.announced.send_replace(Some(addr)).is_none();
        if first {
            let bg = self.bg.clone();
            drop(bg.spawn(async move { self.follow_announced().await }));
        }
    }
}

/// Whether the node `client` reaches answers ROLE as master (bounded; no answer is "no").
async fn is_master(client: &redis::Client) -> bool {
    let ask = async {
        let mut conn = client.get_multiplexed_async_connection().await?;
        redis::cmd("ROLE")
            .query_async::<Vec<Value>>(&mut conn)
            .await
    };
    matches!(
        tokio::time::timeout(ASK_TIMEOUT, ask).await,
        Ok(Ok(role)) if matches!(role.first(), Some(Value::BulkString(r)) if r.as_slice() == b"master")
    )
}

/// Placeholder error for a request abandoned at a switch; [`Follower::believe`] replaces it
/// with one naming the new primary.
fn moved_error() -> redis::RedisError {
    redis::RedisError::from(std::io::Error::from(std::io::ErrorKind::ConnectionAborted))
}

/// Errors a failover causes: the old primary is gone, or it came back as a replica.
fn failover_sign(e: &redis::RedisError) -> bool {
    e.is_io_error()
        || e.is_connection_dropped()
        || e.is_connection_refusal()
        || e.is_timeout()
        || e.code() == Some("READONLY")
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
            let (mut conn, generation) = follower.conn().await;
            let reply = follower
                .unless_switched(generation, conn.req_packed_command(&cmd))
                .await;
            follower.after(&reply);
            follower.believe(generation, reply)
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
            let (mut conn, generation) = follower.conn().await;
            let reply = follower
                .unless_switched(
                    generation,
                    conn.req_packed_commands(&pipeline, offset, count),
                )
                .await;
            if let Err(e) = &reply {
                follower.after(&Err(e.clone()));
            }
            follower.believe(generation, reply)
        })
    }

    fn get_db(&self) -> i64 {
        0
    }
}
