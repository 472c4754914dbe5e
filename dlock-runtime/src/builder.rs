//! `LockClientBuilder`: the settings of a client and their defaults.

use std::time::Duration;

use crate::client::LockClient;
use crate::conn::{redact, redact_all};
use crate::error::LockError;
use crate::shared::Shared;

/// Default lease kept alive by the watchdog (Redisson's `lockWatchdogTimeout`).
pub const DEFAULT_TTL: Duration = Duration::from_secs(30);
/// Default time `acquire` waits for a held lock before `LockError::Timeout`.
pub const DEFAULT_WAIT: Duration = Duration::from_secs(10);
/// Default prefix of every Redis key and channel dlock creates.
pub const DEFAULT_PREFIX: &str = "dlock:";

/// Longest lease a lock may have (`default_ttl`, `.ttl()`, `.lease()`): 100 years, far inside
/// what Redis's millisecond expiries and tokio's timers can represent.
/// Consecutive local handoffs before a release goes to Redis (see `local_handoffs`).
const DEFAULT_HANDOFFS: u32 = 32;

/// How long a process may keep a lock among its tasks (see `local_handoff_window`).
const DEFAULT_HANDOFF_WINDOW: Duration = Duration::from_millis(10);

pub(crate) const MAX_LEASE: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

/// Longest `response_timeout`, `connect_timeout` and `release_latch`: a day. Longer would only
/// hide a dead connection (timeouts) or keep one key per release for no purpose (the latch).
const MAX_TIMEOUT: Duration = Duration::from_secs(24 * 3600);

/// Which deployment a client talks to.
#[derive(Clone)]
pub(crate) enum Target {
    /// One server: a `redis://` or `rediss://` URL.
    Single(String),
    /// A Redis Cluster, found through these seed node URLs.
    Cluster(Vec<String>),
    /// A primary managed by Redis Sentinel: the sentinels' URLs and the master's name.
    Sentinel {
        sentinels: Vec<String>,
        master: String,
    },
}

/// Builds a [`LockClient`]; start with [`LockClient::builder`] (one server) or
/// [`LockClient::cluster_builder`] (a Redis Cluster).
///
/// ```no_run
/// # async fn demo() -> Result<(), dlock_runtime::LockError> {
/// use std::time::Duration;
/// let client = dlock_runtime::LockClient::builder("redis://127.0.0.1:6379")
///     .connections(2)
///     .default_ttl(Duration::from_secs(10))
///     .key_prefix("myapp:lock:")
///     .build()
///     .await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
#[must_use]
pub struct LockClientBuilder {
    pub(crate) target: Target,
    pub(crate) connections: usize,
    pub(crate) default_ttl: Duration,
    pub(crate) default_wait: Duration,
    pub(crate) prefix: String,
    pub(crate) response_timeout: Duration,
    pub(crate) connect_timeout: Duration,
    pub(crate) latch_ttl: Duration,
    pub(crate) handoff: crate::handoff::Bounds,
    /// PEM root certificate(s) to trust for `rediss://` instead of the system's.
    pub(crate) tls_root: Option<Vec<u8>>,
    /// ACL user and password for a sentinel-managed primary (the sentinels' own are in their
    /// URLs).
    pub(crate) master_auth: (Option<String>, Option<String>),
}

impl LockClientBuilder {
    pub(crate) fn new(target: Target) -> Self {
        LockClientBuilder {
            target,
            connections: 1,
            default_ttl: DEFAULT_TTL,
            default_wait: DEFAULT_WAIT,
            prefix: DEFAULT_PREFIX.to_owned(),
            response_timeout: Duration::from_secs(5),
            connect_timeout: Duration::from_secs(5),
            latch_ttl: Duration::from_secs(30),
            handoff: crate::handoff::Bounds {
                limit: DEFAULT_HANDOFFS,
                window: DEFAULT_HANDOFF_WINDOW,
            },
            tls_root: None,
            master_auth: (None, None),
        }
    }

    /// Command connections (multiplexed, auto-reconnecting), used round-robin; default 1. The
    /// client opens this many plus one pub/sub connection shared by all waiters, whatever the
    /// number of waiters or held locks, plus (when built on a multi-thread runtime, which then
    /// drives the command connections) one connection its own thread drives for renewals and
    /// clean-ups. A cluster client opens one multiplexed connection per node instead.
    pub fn connections(mut self, n: usize) -> Self {
        self.connections = n;
        self
    }

    /// The lease of locks that do not set `.ttl()`; the watchdog renews it every third.
    pub fn default_ttl(mut self, ttl: Duration) -> Self {
        self.default_ttl = ttl;
        self
    }

    /// How long `acquire` waits when the lock does not set `.wait()`. `Duration::MAX` waits as
    /// long as it takes.
    pub fn default_wait(mut self, wait: Duration) -> Self {
        self.default_wait = wait;
        self
    }

    /// Prefix of every key and channel (default `dlock:`). Must not contain `{` or `}`: the
    /// lock name is the cluster hash tag.
    pub fn key_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// How long one Redis reply may take before the command counts as failed (default 5 s; at
    /// most a day). An acquire attempt is bounded by the rest of its `wait` instead (at least
    /// 250 ms), and one whose reply times out is treated as cancelled: its possible hold is
    /// released.
    pub fn response_timeout(mut self, timeout: Duration) -> Self {
        self.response_timeout = timeout;
        self
    }

    /// How long opening a connection may take (default 5 s).
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// How long Redis remembers the result of each release so a retried release is not applied
    /// twice (default 30 s; at most a day). Releases are retried only within half of it.
    pub fn release_latch(mut self, ttl: Duration) -> Self {
        self.latch_ttl = ttl;
        self
    }

    /// Local handoff: when a task releases a lock that another task of this client is queued
    /// for, the hold goes straight to that task, without a release and an acquire in Redis
    /// (the next holder is still another owner, with a larger fencing token, and the watchdog
    /// renews on without a gap). After `limit` consecutive handoffs (default 32, at most 1023),
    /// or once the process has kept the lock for the [`local_handoff_window`] (default 10 ms),
    /// the release goes to Redis and the next local task lets a waiter of another process
    /// ask first, so processes take turns. That pause (twice the release's round trip, 0.2 to
    /// 20 ms, rounded up to tokio's 1 ms timer tick) is skipped when the release's message
    /// reached no subscriber: no other client was subscribed to the lock, so none was parked
    /// waiting for it (one that is between a try and its subscription is not counted, and gets
    /// its turn at the next bound). On a Redis Cluster, where PUBLISH counts one node's
    /// subscribers, the pause is always taken. `0` turns handoff off: every release goes to
    /// Redis.
    /// Applies to the plain lock (also inside multi-locks and the stock helper's segments).
    ///
    /// [`local_handoff_window`]: LockClientBuilder::local_handoff_window
    pub fn local_handoffs(mut self, limit: u32) -> Self {
        self.handoff.limit = limit;
        self
    }

    /// How long after taking a lock in Redis this process may keep handing it between its own
    /// tasks (see [`local_handoffs`](LockClientBuilder::local_handoffs)); default 10 ms.
    pub fn local_handoff_window(mut self, window: Duration) -> Self {
        self.handoff.window = window;
        self
    }

    /// Trusts these PEM root certificates (a private CA, a self-signed server) for `rediss://`
    /// connections instead of the system's trust store. Applies to every node of a cluster.
    pub fn tls_root_certificates(mut self, pem: impl Into<Vec<u8>>) -> Self {
        self.tls_root = Some(pem.into());
        self
    }

    /// The ACL user (or `None` for the default user) and password of a sentinel-managed
    /// primary and its replicas; sentinels' own credentials go in their URLs. Ignored for other
    /// deployments, whose URLs carry them.
    pub fn master_auth(mut self, username: Option<&str>, password: &str) -> Self {
        self.master_auth = (username.map(str::to_owned), Some(password.to_owned()));
        self
    }

    /// Checks the settings, connects, and starts the watchdog and the waiter subscriber.
    pub async fn build(self) -> Result<LockClient, LockError> {
        let bad = |reason: String| Err(LockError::invalid("", reason));
        match &self.target {
            Target::Cluster(nodes) if nodes.is_empty() => {
                return bad("a cluster client needs at least one seed node URL".into());
            }
            Target::Sentinel { sentinels, .. } if sentinels.is_empty() => {
                return bad("a sentinel client needs at least one sentinel URL".into());
            }
            Target::Sentinel { master, .. } if master.is_empty() => {
                return bad("a sentinel client needs the master's name".into());
            }
            _ => {}
        }
        if self.handoff.limit > crate::handoff::MAX_HANDOFFS {
            return bad(format!(
                "local_handoffs of {} is above the limit of {}: fencing tokens leave room for that many local successors of one Redis acquire",
                self.handoff.limit,
                crate::handoff::MAX_HANDOFFS
            ));
        }
        if self.handoff.window > MAX_TIMEOUT {
            return bad(format!(
                "local_handoff_window of {:?} is above the limit of {MAX_TIMEOUT:?}",
                self.handoff.window
            ));
        }
        if self.connections == 0 {
            return bad("connections must be at least 1".into());
        }
        if self.prefix.contains(['{', '}']) {
            return bad(format!(
                "key prefix {:?} contains a brace; the lock name must be the only hash tag",
                self.prefix
            ));
        }
        // Every duration ends up as milliseconds in a Redis command (PX, PEXPIRE) or as a timer;
        // out of range, Redis rejects the command after a script already wrote (it does not roll
        // back) or a timer overflows. Checked here, once, with the setting's name.
        for (what, d, max) in [
            ("default_ttl", self.default_ttl, MAX_LEASE),
            ("response_timeout", self.response_timeout, MAX_TIMEOUT),
            ("connect_timeout", self.connect_timeout, MAX_TIMEOUT),
            ("release_latch", self.latch_ttl, MAX_TIMEOUT),
        ] {
            if d.as_millis() == 0 {
                return bad(format!("{what} must be at least 1 ms, got {d:?}"));
            }
            if d > max {
                return bad(format!("{what} of {d:?} is above the limit of {max:?}"));
            }
        }
        Shared::connect(self)
            .await
            .map(|shared| LockClient { shared })
    }
}

impl std::fmt::Debug for LockClientBuilder {
    // By hand: the URLs may carry passwords, which must never reach a log.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let target = match &self.target {
            Target::Single(url) => redact(url),
            Target::Cluster(nodes) => redact_all(nodes),
            Target::Sentinel { sentinels, master } => {
                format!("{master} via {}", redact_all(sentinels))
            }
        };
        f.debug_struct("LockClientBuilder")
            .field("target", &target)
            .field("connections", &self.connections)
            .field("default_ttl", &self.default_ttl)
            .field("default_wait", &self.default_wait)
            .field("prefix", &self.prefix)
            .field("response_timeout", &self.response_timeout)
            .field("connect_timeout", &self.connect_timeout)
            .field("release_latch", &self.latch_ttl)
            .field("local_handoffs", &self.handoff.limit)
            .field("local_handoff_window", &self.handoff.window)
            .field("tls_root_certificates", &self.tls_root.is_some())
            .field("master_user", &self.master_auth.0)
            .finish()
    }
}
