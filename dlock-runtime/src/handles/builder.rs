//! `LockClientBuilder`: fills the client's `Settings`, and the constructors that start one.

use std::time::Duration;

use crate::error::LockError;
use crate::handles::client::LockClient;
use crate::machinery::shared::Shared;
use crate::settings::{ReplicaSync, Settings, Target};

/// Builds a [`LockClient`]; start with [`LockClient::builder`] (one server) or
/// [`LockClient::cluster_builder`] (a Redis Cluster).
///
/// ```no_run
/// # extern crate dlock_runtime as dlock;
/// # async fn demo() -> Result<(), dlock::LockError> {
/// use std::time::Duration;
/// let client = dlock::LockClient::builder("redis://127.0.0.1:6379")
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
    settings: Settings,
}

impl LockClientBuilder {
    fn new(target: Target) -> Self {
        LockClientBuilder {
            settings: Settings::new(target),
        }
    }

    /// Command connections (multiplexed, auto-reconnecting), used round-robin; default 1. The
    /// client opens this many plus one pub/sub connection shared by all waiters, whatever the
    /// number of waiters or held locks, plus (when built on a multi-thread runtime, which then
    /// drives the command connections) one connection its own thread drives for renewals and
    /// clean-ups. A cluster client opens one multiplexed connection per node instead, and while
    /// it waits, one pub/sub connection per master its waiters' keys live on (a release is
    /// heard on the node that publishes it).
    pub fn connections(mut self, n: usize) -> Self {
        self.settings.connections = n;
        self
    }

    /// The lease of locks that do not set `.ttl()`; the watchdog renews it every third.
    pub fn default_ttl(mut self, ttl: Duration) -> Self {
        self.settings.default_ttl = ttl;
        self
    }

    /// How long `acquire` waits when the lock does not set `.wait()`. `Duration::MAX` waits as
    /// long as it takes.
    pub fn default_wait(mut self, wait: Duration) -> Self {
        self.settings.default_wait = wait;
        self
    }

    /// Prefix of every key and channel (default `dlock:`). Must not contain `{` or `}`: the
    /// lock name is the cluster hash tag. On PostgreSQL it must not contain NUL either (the
    /// store writes a name's NUL as `%00`, which only the name's own escaping keeps apart).
    pub fn key_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.settings.prefix = prefix.into();
        self
    }

    /// How long one Redis reply may take before the command counts as failed (default 5 s; at
    /// most a day). An acquire attempt is bounded by the rest of its `wait` instead (at least
    /// 250 ms), and one whose reply times out is treated as cancelled: its possible hold is
    /// released.
    pub fn response_timeout(mut self, timeout: Duration) -> Self {
        self.settings.response_timeout = timeout;
        self
    }

    /// How long opening a connection may take (default 5 s).
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.settings.connect_timeout = timeout;
        self
    }

    /// How long Redis remembers the result of each release so a retried release is not applied
    /// twice (default 30 s; at most a day). Releases are retried only within half of it.
    pub fn release_latch(mut self, ttl: Duration) -> Self {
        self.settings.latch_ttl = ttl;
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
    /// Applies to the plain lock (also inside multi-locks and the stock helper's segments), and
    /// only between holds of the same lease: a task that asked with another `ttl` (or a hard
    /// `lease`) takes the lock in Redis with its own, so the lease Redis keeps is always the one
    /// its holder believes in.
    ///
    /// [`local_handoff_window`]: LockClientBuilder::local_handoff_window
    pub fn local_handoffs(mut self, limit: u32) -> Self {
        self.settings.handoff.limit = limit;
        self
    }

    /// How long after taking a lock in Redis this process may keep handing it between its own
    /// tasks (see [`local_handoffs`](LockClientBuilder::local_handoffs)); default 10 ms.
    pub fn local_handoff_window(mut self, window: Duration) -> Self {
        self.settings.handoff.window = window;
        self
    }

    /// Trusts these PEM root certificates (a private CA, a self-signed server) for `rediss://`
    /// connections instead of the system's trust store. Applies to every node of a cluster.
    ///
    /// For a PostgreSQL store, the roots its TLS checks the server against, besides the URL's
    /// `sslrootcert`: with `sslmode=verify-ca` or `verify-full` (their absence means the system's
    /// trust store), and `require` or `prefer`, which then check the chain too, as libpq does
    /// with a root certificate (see the crate docs, "Stores"). Refused with `sslmode=disable`.
    ///
    /// For a `zk+tls://` ZooKeeper store (feature `zookeeper-tls`), the only roots its servers'
    /// certificates are checked against, and required there: the servers of a ZooKeeper
    /// ensemble are signed by the deployment's own CA, so the system's trust store is not read.
    pub fn tls_root_certificates(mut self, pem: impl Into<Vec<u8>>) -> Self {
        self.settings.tls_root = Some(pem.into());
        self
    }

    /// The certificate (PEM, the client's first, then any intermediates) and its unencrypted
    /// private key (PEM: PKCS#8, PKCS#1 or SEC1) this client shows a server that asks for
    /// one. For a `zk+tls://` ZooKeeper store (feature `zookeeper-tls`), whose servers ask by
    /// default (`ssl.clientAuth=need`) and check it against their trust store. Refused for
    /// the other stores (not offered there yet) and with a plain `zk://` URL.
    pub fn tls_client_certificate(
        mut self,
        cert_pem: impl Into<Vec<u8>>,
        key_pem: impl Into<Vec<u8>>,
    ) -> Self {
        self.settings.tls_client_cert = Some((cert_pem.into(), key_pem.into()));
        self
    }

    /// The ACL user (or `None` for the default user) and password of a sentinel-managed
    /// primary and its replicas; sentinels' own credentials go in their URLs. Ignored for other
    /// deployments, whose URLs carry them.
    pub fn master_auth(mut self, username: Option<&str>, password: &str) -> Self {
        self.settings.master_auth = (username.map(str::to_owned), Some(password.to_owned()));
        self
    }

    /// Whether to load dlock's scripts as one Redis FUNCTION library and call them with FCALL
    /// (default `true`). Where the server has no FUNCTION (before Redis 7.0) or the ACL user
    /// may not load or call functions, the client uses EVALSHA whatever this says; `false`
    /// uses EVALSHA everywhere.
    ///
    /// A library is replicated and persisted with the data, so after a failover or a restart
    /// from RDB/AOF the first call of each script is answered at once, where the script cache
    /// answers NOSCRIPT and costs one more round trip. Each dlock build has its own library,
    /// `dlock_<version>_<hash>` in `FUNCTION LIST`, so clients of two versions coexist in a
    /// rolling deploy. Libraries of versions no longer running can be deleted with `FUNCTION
    /// DELETE`: a client that still uses one sends its calls as EVAL (one more round trip)
    /// until it has loaded it again, which it starts at once. (A full server refuses the
    /// load; the EVAL still runs, with the same flags.) The user needs `+function|load` and
    /// `+fcall` (both in `+@scripting`); without them the client uses EVALSHA.
    pub fn functions(mut self, enabled: bool) -> Self {
        self.settings.functions = enabled;
        self
    }

    /// What this client's holds say holds them, for people reading a lock during an
    /// incident (`dlock list`, [`crate::inspect::Holder`]): default `<host name>:<process
    /// id>`. Name the service and instance, e.g. `orders-api@web-3`. At most 64 bytes, no
    /// control characters. The name rides in every owner id this client writes, with the
    /// lock's label (the attribute's key template or function name), on every store; the
    /// Redisson kinds keep Redisson's `<uuid>:<thread id>` fields byte for byte and carry none.
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.settings.client_name = name.into();
        self
    }

    /// The PostgreSQL schema dlock keeps its tables and functions in (a `postgres://` URL);
    /// default `dlock`. It is created on first use when missing (which needs CREATE on the
    /// database); a role without that right is told the statement an owner must run once.
    /// Ignored for Redis.
    pub fn postgres_schema(mut self, schema: impl Into<String>) -> Self {
        self.settings.postgres_schema = schema.into();
        self
    }

    /// Where the PostgreSQL store's one LISTEN connection goes (default: the client's URL).
    ///
    /// Every lock operation is one statement in its own transaction, so the client works
    /// through a pooler in transaction mode (PgBouncer's `pool_mode = transaction`). LISTEN does
    /// not: it belongs to a session, and such a pooler hands the next statement to another
    /// server connection, so release notifications never arrive and waiters fall back to
    /// retrying at the holder's lease end. Behind such a pooler, give the server's own address
    /// (or a session-mode pool) here. Ignored for Redis.
    pub fn postgres_listen_url(mut self, url: impl Into<String>) -> Self {
        self.settings.postgres_listen_url = Some(url.into());
        self
    }

    /// Prepares each of the PostgreSQL store's calls once per connection (a named statement)
    /// instead of sending its text to be parsed and planned with every call (default: off).
    /// Measured with `perf/pg-peers` (3 runs, both ways in every round): the uncontended cycle
    /// 15-37 % shorter, the server's CPU per cycle 22-39 % less, the handoff 6-16 % shorter.
    ///
    /// **Only on a direct connection, a session-mode pool, or a transaction-mode pooler that
    /// keeps prepared statements per client** (PgBouncer 1.21 or later with
    /// `max_prepared_statements` above 0). Any other transaction-mode pooler runs the next
    /// statement on another server connection. Where the name is unknown there, or already
    /// taken, or names a statement of other parameters, the call fails naming this setting.
    /// But statement names are the same in every process (`s0`, `s1`, ...), so the name may
    /// also be another dlock client's statement of the same parameters: another of dlock's
    /// calls runs with this call's arguments (a force-unlock in place of a name's record), and
    /// no lock is safe. Ignored for Redis and ZooKeeper.
    pub fn postgres_prepared_statements(mut self, on: bool) -> Self {
        self.settings.postgres_prepared_statements = on;
        self
    }

    /// The session timeout a ZooKeeper client asks for (a `zk://` URL; default 30 s, and the
    /// server clamps it to 2 to 20 of its ticks). On ZooKeeper the session is every hold's
    /// lease: a holder that stops talking to the ensemble for this long loses its locks, and a
    /// crashed holder's locks free after it. The holder reads lost two thirds of the way there
    /// (see the `dlock::stores` page). Ignored for the other stores.
    pub fn zookeeper_session_timeout(mut self, timeout: Duration) -> Self {
        self.settings.zookeeper_session_timeout = timeout;
        self
    }

    /// Replica-synced locks, off by default: after every acquire and every renewal, the client
    /// sends `WAIT replicas within` on the same connection, in the same round trip (Redisson's
    /// `checkLockSyncedSlaves`). An acquire that Redis granted but fewer than `replicas`
    /// replicas confirmed within `within` is released again and fails with
    /// [`LockError::NotSynced`]; a renewal that is not confirmed does not count, so a hold
    /// whose replicas stop confirming reads as lost when its lease runs out. `replicas` 0
    /// turns it off; a handle can choose otherwise ([`Lock::synced_replicas`]). `within` must
    /// be shorter than the [`response_timeout`](LockClientBuilder::response_timeout).
    ///
    /// What it buys: a failover to a replica that confirmed the acquire keeps the lock, where
    /// with asynchronous replication a replica that missed the write is promoted without it
    /// and another client can take the lock the holder still believes it holds.
    ///
    /// What it does not promise. In Redis's own words, WAIT "does not make Redis a strongly
    /// consistent store": the confirmed replicas have *received* the write, not written it to
    /// disk, and Sentinel or Cluster may still promote a replica that did not confirm it (one
    /// that was lagging when the primary died). A replica restarted without persistence
    /// forgets it. So keep fencing tokens for correctness ([`crate::fence`]); a synced lock
    /// narrows the window, it does not close it. WAITAOF (Redis 7.2+, fsync on replicas) is
    /// not used yet.
    ///
    /// Cost: one extra step per acquire and renewal, in the same round trip, plus the
    /// replicas' acknowledgement time. Synced calls go over connections of their own, one per
    /// setting (`replicas`, `within`) for acquires and one for renewals, opened on first use,
    /// since WAIT blocks the connection it is sent on. Calls that share one queue behind each
    /// other's WAIT: while a replica is down, the k-th in line takes up to k times `within`
    /// (a call that runs past the response timeout fails as a timeout, and its grant, if any,
    /// is released as after a lost reply). A synced acquire never receives a hold from another
    /// task without Redis (local handoff); a synced hold may be passed on to a task of the
    /// same client that asked without sync. The fair lock's direct grant is confirmed by the
    /// waiter's next attempt rather than taken from the message.
    ///
    /// [`Lock::synced_replicas`]: crate::Lock::synced_replicas
    pub fn synced_replicas(mut self, replicas: u32, within: Duration) -> Self {
        self.settings.sync = ReplicaSync::new(replicas, within);
        self
    }

    /// Checks the settings, connects, and starts the watchdog and the waiter subscriber.
    pub async fn build(self) -> Result<LockClient, LockError> {
        self.settings.validate()?;
        Shared::connect(self.settings).await.map(LockClient::new)
    }
}

impl std::fmt::Debug for LockClientBuilder {
    // The settings redact every URL's password.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.settings.fmt(f)
    }
}

impl LockClient {
    /// Connects with default settings. `url` is a redis-rs URL (`redis://host:port/db`), or,
    /// with the `postgres` feature, a PostgreSQL one (`postgres://user@host:port/db`): the URL
    /// picks the store, and the rest of the API stays the same (see the crate docs, "Stores").
    pub async fn connect(url: &str) -> Result<Self, LockError> {
        Self::builder(url).build().await
    }

    /// Starts a builder for a client of one Redis server (`redis://host:port/db`,
    /// `redis://user:password@host:port`; `rediss://` for TLS), or, with the `postgres`
    /// feature, of a PostgreSQL server (`postgres://user:password@host:port/db`;
    /// `?sslmode=verify-full` and the rest of libpq's TLS modes, see the crate docs, "Stores"),
    /// or, with the `zookeeper` feature, of a ZooKeeper ensemble (`zk://host:port,host:port/chroot`;
    /// `zk+tls://` for TLS with the `zookeeper-tls` feature, see `dlock::stores`).
    pub fn builder(url: impl Into<String>) -> LockClientBuilder {
        LockClientBuilder::new(Target::Single(url.into()))
    }

    /// Starts a builder for a client of a Redis Cluster, found through `nodes` (seed node URLs,
    /// `redis://host:port`; any reachable master or replica will do, the rest is discovered).
    ///
    /// ```no_run
    /// # extern crate dlock_runtime as dlock;
    /// # async fn demo() -> Result<(), dlock::LockError> {
    /// let client = dlock::LockClient::cluster_builder([
    ///     "redis://10.0.0.1:6379",
    ///     "redis://10.0.0.2:6379",
    /// ])
    /// .build()
    /// .await?;
    /// # Ok(()) }
    /// ```
    pub fn cluster_builder<I, S>(nodes: I) -> LockClientBuilder
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        LockClientBuilder::new(Target::Cluster(nodes.into_iter().map(Into::into).collect()))
    }

    /// Starts a builder for a client of the primary that Redis Sentinel manages under
    /// `master_name`, found through `sentinels` (sentinel URLs, `redis://host:26379`). The
    /// client follows failovers: it asks the sentinels again when a command fails the way a
    /// failover makes it fail, and switches to the new primary. Credentials of the primary go
    /// in [`LockClientBuilder::master_auth`].
    ///
    /// ```no_run
    /// # extern crate dlock_runtime as dlock;
    /// # async fn demo() -> Result<(), dlock::LockError> {
    /// let client = dlock::LockClient::sentinel_builder(
    ///     ["redis://10.0.0.1:26379", "redis://10.0.0.2:26379", "redis://10.0.0.3:26379"],
    ///     "mymaster",
    /// )
    /// .master_auth(Some("locks"), "secret")
    /// .build()
    /// .await?;
    /// # Ok(()) }
    /// ```
    pub fn sentinel_builder<I, S>(sentinels: I, master_name: impl Into<String>) -> LockClientBuilder
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        LockClientBuilder::new(Target::Sentinel {
            sentinels: sentinels.into_iter().map(Into::into).collect(),
            master: master_name.into(),
        })
    }
}
