//! `LockClient`: connections, identity, and the process-wide default client.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};

use crate::background::Background;
use crate::builder::LockClientBuilder;
use crate::error::LockError;
use crate::gate::Gates;
use crate::lock::Lock;
use crate::waiters::{WaiterSettings, Waiters, DEFAULT_HEALTH_INTERVAL};
use crate::watchdog::Watchdog;

/// A connection to one Redis deployment: command connections, one pub/sub connection shared by
/// every waiter, and one watchdog task renewing every lock this client holds.
///
/// Cheap to clone (an `Arc`); clones share everything. Dropping the last clone stops the
/// watchdog and the subscriber.
#[derive(Clone)]
pub struct LockClient {
    pub(crate) inner: Arc<ClientInner>,
}

pub(crate) struct ClientInner {
    /// The URL with any password removed, for error messages.
    pub(crate) url: String,
    conns: Vec<ConnectionManager>,
    next_conn: AtomicUsize,
    pub(crate) prefix: String,
    pub(crate) default_ttl: Duration,
    pub(crate) default_wait: Duration,
    pub(crate) latch_ttl: Duration,
    /// 128 random bits: owner ids built from it cannot be guessed or collide across processes.
    pub(crate) client_id: String,
    seq: AtomicU64,
    pub(crate) waiters: Waiters,
    pub(crate) watchdog: Arc<Watchdog>,
    pub(crate) gates: Gates,
    /// How long one reply may take (the builder's `response_timeout`).
    pub(crate) response_timeout: Duration,
    /// The client's own thread: connections, watchdog, subscriber, background releases.
    /// Declared last so it is dropped after everything that spawns onto it.
    pub(crate) bg: Background,
}

static GLOBAL: RwLock<Option<LockClient>> = RwLock::new(None);

impl LockClient {
    /// Connects with default settings. `url` is a redis-rs URL (`redis://host:port/db`).
    pub async fn connect(url: &str) -> Result<Self, LockError> {
        Self::builder(url).build().await
    }

    /// Starts a builder for the client's settings.
    pub fn builder(url: impl Into<String>) -> LockClientBuilder {
        LockClientBuilder::new(url.into())
    }

    pub(crate) async fn from_builder(b: LockClientBuilder) -> Result<Self, LockError> {
        let url = redact(&b.url);
        let connect_err = |source| LockError::Connect {
            url: url.clone(),
            source,
        };
        let client = redis::Client::open(b.url.as_str()).map_err(connect_err)?;
        let client_id = format!("{:032x}", rand::random::<u128>());
        let bg =
            Background::start(&client_id).map_err(|e| connect_err(redis::RedisError::from(e)))?;
        let conns = open_connections(&bg, &client, &b)
            .await
            .map_err(connect_err)?;
        // The subscriber tells the watchdog when its connection was lost or replaced: the
        // server may have restarted or failed over, so every hold is checked at once.
        let watchdog = Arc::new(Watchdog::start(conns[0].clone(), url.clone(), bg.handle()));
        let hook = Arc::downgrade(&watchdog);
        let waiters = Waiters::start(
            client,
            WaiterSettings {
                connect_timeout: b.connect_timeout,
                // A SUBSCRIBE or PING is answered in well under a millisecond by a live Redis;
                // waiting longer than 1 s only delays the fallback to PTTL retries.
                ack_timeout: b.response_timeout.min(Duration::from_secs(1)),
                health_interval: DEFAULT_HEALTH_INTERVAL,
                on_connection_change: Box::new(move || {
                    if let Some(w) = hook.upgrade() {
                        w.renew_all_now();
                    }
                }),
            },
            bg.handle(),
        )
        .await
        .map_err(connect_err)?;
        let inner = Arc::new(ClientInner {
            watchdog,
            url,
            conns,
            next_conn: AtomicUsize::new(0),
            prefix: b.prefix,
            default_ttl: b.default_ttl,
            default_wait: b.default_wait,
            response_timeout: b.response_timeout,
            latch_ttl: b.latch_ttl,
            client_id,
            seq: AtomicU64::new(0),
            waiters,
            gates: Gates::default(),
            bg,
        });
        tracing::debug!(url = %inner.url, client_id = %inner.client_id, "dlock client connected");
        Ok(LockClient { inner })
    }

    /// A handle on the lock called `name`. Nothing is sent to Redis until you acquire it.
    ///
    /// The name may hold any text (`{`, `}`, `:` and unicode included); it is escaped where it
    /// becomes a Redis key. An empty name is rejected when the lock is used.
    pub fn lock(&self, name: impl Into<String>) -> Lock {
        Lock::new(self.clone(), name.into())
    }

    /// Makes this client the process default, returned by [`LockClient::global`] and used by
    /// `#[distributed_lock]` without `client = ...`. Returns the client it replaces, if any.
    pub fn install(self) -> Option<LockClient> {
        let mut slot = GLOBAL.write().unwrap_or_else(|e| e.into_inner());
        slot.replace(self)
    }

    /// The installed default client, or [`LockError::NotConfigured`].
    pub fn global() -> Result<LockClient, LockError> {
        let slot = GLOBAL.read().unwrap_or_else(|e| e.into_inner());
        slot.clone().ok_or(LockError::NotConfigured)
    }

    /// The Redis URL this client talks to, password removed.
    pub fn url(&self) -> &str {
        &self.inner.url
    }

    /// The random id of this client; every owner id it creates starts with it.
    pub fn client_id(&self) -> &str {
        &self.inner.client_id
    }
}

impl ClientInner {
    /// A command connection, round-robin. Clones share the underlying socket, so a command
    /// sent on a clone is ordered after everything sent earlier on it (used by orphan cleanup).
    pub(crate) fn conn(&self) -> ConnectionManager {
        let i = self.next_conn.fetch_add(1, Ordering::Relaxed) % self.conns.len();
        self.conns[i].clone()
    }

    /// An id unique across every client and process: this client's random id plus a sequence
    /// number. Used for owners, release request ids and re-entry markers; a bare sequence
    /// number would let two clients answer each other's release from the latch.
    pub(crate) fn unique_id(&self) -> String {
        format!("{}:{}", self.client_id, self.next_seq())
    }

    pub(crate) fn next_seq(&self) -> u64 {
        self.seq.fetch_add(1, Ordering::Relaxed)
    }

    /// Turns a redis-rs error into a `LockError` naming the lock and the operation.
    pub(crate) fn redis_error(
        &self,
        name: &str,
        key: &str,
        op: &'static str,
        e: redis::RedisError,
    ) -> LockError {
        if e.code() == Some("WRONGTYPE") {
            let (key, role) = wrong_type_key(&e, key, op);
            return LockError::WrongType {
                name: name.to_owned(),
                key,
                role,
            };
        }
        if is_connection_error(&e) {
            // The connection may have been replaced (Redis restarted or failed over): the
            // holds this client keeps must be checked now, not at their next renewal.
            self.watchdog.renew_all_now();
        }
        LockError::Redis {
            name: name.to_owned(),
            op,
            url: self.url.clone(),
            source: e,
        }
    }
}

impl std::fmt::Debug for LockClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LockClient")
            .field("url", &self.inner.url)
            .field("client_id", &self.inner.client_id)
            .finish_non_exhaustive()
    }
}

/// Which key a WRONGTYPE error is about. dlock's scripts name it (`<role> \`<key>\` holds ...`);
/// Redis's own WRONGTYPE names nothing, so the key the operation is mostly about is assumed.
fn wrong_type_key(e: &redis::RedisError, key: &str, op: &str) -> (String, String) {
    let detail = e.detail().unwrap_or("");
    let mut parts = detail.splitn(3, '`');
    if let (Some(role), Some(named), Some(_)) = (parts.next(), parts.next(), parts.next()) {
        if !named.is_empty() {
            return (named.to_owned(), role.trim().to_owned());
        }
    }
    let role = if op.starts_with("stock") {
        "stock segment"
    } else {
        "lock hash"
    };
    (key.to_owned(), role.to_owned())
}

/// True for errors that mean the connection broke, not that Redis answered.
fn is_connection_error(e: &redis::RedisError) -> bool {
    e.is_io_error() || e.is_connection_dropped() || e.is_connection_refusal() || e.is_timeout()
}

/// Opens the command connections on the client's own thread, so their drivers (and their
/// reconnects, which redis-rs spawns on the runtime a manager was made on) live as long as the
/// client rather than the caller's runtime.
async fn open_connections(
    bg: &Background,
    client: &redis::Client,
    b: &LockClientBuilder,
) -> redis::RedisResult<Vec<ConnectionManager>> {
    let config = ConnectionManagerConfig::new()
        .set_response_timeout(Some(b.response_timeout))
        .set_connection_timeout(Some(b.connect_timeout))
        .set_number_of_retries(2);
    let (client, n) = (client.clone(), b.connections);
    bg.run(async move {
        let mut conns = Vec::with_capacity(n);
        for _ in 0..n {
            conns.push(ConnectionManager::new_with_config(client.clone(), config.clone()).await?);
        }
        Ok(conns)
    })
    .await?
}

/// `redis://user:secret@host` -> `redis://user:***@host`, so URLs can go into errors and logs.
fn redact(url: &str) -> String {
    let Some(scheme_end) = url.find("://").map(|i| i + 3) else {
        return url.to_owned();
    };
    let rest = &url[scheme_end..];
    let Some(at) = rest.find('@') else {
        return url.to_owned();
    };
    let creds = &rest[..at];
    let user = creds.split(':').next().unwrap_or("");
    if creds.contains(':') {
        format!("{}{user}:***{}", &url[..scheme_end], &rest[at..])
    } else {
        format!("{}***{}", &url[..scheme_end], &rest[at..])
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn redact_hides_passwords() {
        assert_eq!(super::redact("redis://a:pw@h:1"), "redis://a:***@h:1");
        assert_eq!(super::redact("redis://pw@h"), "redis://***@h");
        assert_eq!(super::redact("redis://h:1/0"), "redis://h:1/0");
    }
}
