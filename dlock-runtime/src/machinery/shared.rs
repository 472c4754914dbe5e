//! The client's shared state: what locks, guards, orphan clean-up, the watchdog and the stock
//! helpers all use. The public handles (`LockClient`, `Lock`, `LockGuard`, ...) wrap it, so the
//! dependency arrows point one way: client -> lock -> guard -> shared.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::error::LockError;
use crate::machinery::gate::Gates;
use crate::machinery::hold::Hold;
use crate::machinery::shard_subscriber::{self, ChannelKind};
use crate::machinery::waiters::{WaiterSettings, Waiters, DEFAULT_HEALTH_INTERVAL};
use crate::machinery::watchdog::Renewer;
use crate::machinery::watchdog::Watchdog;
use crate::machinery::written::Written;
use crate::machinery::{failover_watch, primary_switch};
#[cfg(feature = "postgres")]
use crate::settings::is_postgres_url;
use crate::settings::{holder, Bounds, ReplicaSync, Settings, Target};
use crate::store::error::StoreError;
use crate::store::link::Link;
use crate::store::redis::backend::acl::{check_channel, Refused};
use crate::store::redis::backend::conn::{Conn, Pool};
use crate::store::redis::backend::connect_check::{self, Checked};
use crate::store::redis::backend::library::Mode;
use crate::store::redis::backend::names::LockKeys;
use crate::store::redis::backend::script::install_library;
use crate::store::redis::backend::sentinel::SentinelConn;
use crate::store::redis::backend::sync_conn::SyncConn;
use crate::store::redis::backend::thread::{Background, Tracker};
use crate::store::redis::backend::topology::Topology;
use crate::store::redis::kinds::{Claim, LockKind};

/// The store behind a client.
enum Backing {
    Redis {
        pool: Arc<Pool>,
        /// The connection for replica-synced calls (opened on first use).
        sync_conn: Arc<SyncConn>,
    },
    #[cfg(feature = "postgres")]
    Postgres(Arc<crate::store::postgres::store::PgStore>),
    #[cfg(feature = "zookeeper")]
    Zookeeper(Arc<crate::store::zookeeper::store::ZkStore>),
}

pub(crate) struct Shared {
    /// The URL(s) with any password removed, for error messages.
    pub(crate) url: String,
    /// Where the locks are kept: Redis (its connections) or PostgreSQL.
    backing: Backing,
    /// The default of every lock for replica-synced writes.
    pub(crate) sync: Option<ReplicaSync>,
    /// Stops the watchdog, the failover watch and the subscriber (shutdown).
    pub(crate) stop: CancellationToken,
    /// Set by shutdown: no more acquires.
    pub(crate) closed: AtomicBool,
    /// Acquires under way: shutdown waits for them (each ends at its next step once closed).
    pub(crate) acquiring: Arc<Tracker>,
    pub(crate) prefix: String,
    pub(crate) default_ttl: Duration,
    pub(crate) default_wait: Duration,
    pub(crate) latch_ttl: Duration,
    /// 128 random bits: owner ids built from it cannot be guessed or collide across processes.
    pub(crate) client_id: String,
    /// What its holds say holds them: `@` and the builder's `name` (`host:pid` by default),
    /// escaped once (see `settings/holder.rs`).
    pub(crate) client_tag: String,
    seq: AtomicU64,
    pub(crate) waiters: Waiters,
    pub(crate) watchdog: Arc<Watchdog>,
    pub(crate) gates: Gates,
    /// Releases written and not yet answered, which a replica-synced acquire lets go first.
    pub(crate) written: Arc<Written>,
    /// How long one reply may take (the builder's `response_timeout`).
    pub(crate) response_timeout: Duration,
    /// Bounds on passing a lock between tasks of this client without Redis.
    pub(crate) handoff: Bounds,
    /// Whether PUBLISH's reply counts every subscriber of the deployment. On a cluster it
    /// counts only the node's own (the message reaches the others over the cluster bus). On
    /// Sentinel it counts the primary's, which is where every client subscribes once it has
    /// followed a failover.
    pub(crate) publish_counts_all: bool,
    /// Whether the Redisson kinds publish and subscribe on shard channels: a cluster whose
    /// nodes answer `PUBSUB SHARDNUMSUB` (Redis 7+), as Redisson's sharded mode AUTO decides.
    pub(crate) sharded_pubsub: bool,
    /// The client's own thread: connections, watchdog, subscriber, background releases.
    /// Declared last so it is dropped after everything that spawns onto it.
    pub(crate) bg: Background,
}

impl Shared {
    async fn connect_store(b: Settings) -> Result<Arc<Self>, LockError> {
        #[cfg(feature = "postgres")]
        if let Target::Single(url) = &b.target {
            if is_postgres_url(url) {
                let url = url.clone();
                return Self::connect_postgres(b, &url).await;
            }
        }
        #[cfg(feature = "zookeeper")]
        if let Target::Single(url) = &b.target {
            if crate::settings::is_zookeeper_url(url) {
                let url = url.clone();
                return Self::connect_zookeeper(b, &url).await;
            }
        }
        Self::connect_redis(b).await
    }

    /// Opens the connections of the builder's deployment and starts the background work.
    ///
    /// With the `zookeeper-tls` feature rustls has two crypto providers compiled in (see
    /// `store/zookeeper/tls.rs`) and picks none by itself: ring is made the process default
    /// before a Redis TLS target (`rediss://`, `valkeys://`) is opened, since redis-rs builds
    /// its config that way (a `zk+tls://` store does the same before its session), and only
    /// then, so an application that installs its own default later is not refused for a
    /// client that never needed one.
    pub(crate) async fn connect(b: Settings) -> Result<Arc<Self>, LockError> {
        #[cfg(feature = "zookeeper-tls")]
        {
            let urls: Vec<&String> = match &b.target {
                Target::Single(url) => vec![url],
                Target::Cluster(urls) => urls.iter().collect(),
                Target::Sentinel { sentinels, .. } => sentinels.iter().collect(),
            };
            let tls = |u: &str| {
                let scheme = u.split("://").next().unwrap_or_default();
                scheme.eq_ignore_ascii_case("rediss") || scheme.eq_ignore_ascii_case("valkeys")
            };
            // A Sentinel-managed primary may be reached over TLS with plain sentinel URLs.
            if urls.iter().any(|u| tls(u)) || matches!(b.target, Target::Sentinel { .. }) {
                crate::store::zookeeper::tls::ensure_provider();
            }
        }
        Self::connect_store(b).await
    }

    /// [`Shared::connect`] to ZooKeeper: one session for every request and watch of the
    /// client, a new one when the server expires it.
    #[cfg(feature = "zookeeper")]
    async fn connect_zookeeper(b: Settings, raw_url: &str) -> Result<Arc<Self>, LockError> {
        use crate::store::zookeeper::store::{ZkHooks, ZkStore};
        let url = crate::settings::redact(raw_url);
        let parsed = crate::store::zookeeper::url::parse(raw_url).map_err(|why| {
            LockError::invalid("", format!("cannot read the ZooKeeper URL {url}: {why}"))
        })?;
        let tls = zookeeper_tls(&b, parsed.tls)
            .map_err(|why| LockError::invalid("", format!("{why} (ZooKeeper URL {url})")))?;
        let client_id = format!("{:032x}", rand::random::<u128>());
        let bg = Background::start(&client_id).map_err(|e| {
            LockError::invalid("", format!("cannot start the client's thread: {e}"))
        })?;
        let stop = CancellationToken::new();
        let store = ZkStore::connect(
            parsed,
            tls,
            b.zookeeper_session_timeout,
            b.connect_timeout,
            b.response_timeout,
            bg.handle(),
            stop.clone(),
        )
        .await
        .map_err(|e| e.into_lock_error("", "connect", &url))?;
        let watchdog = Arc::new(Watchdog::start(
            Renewer::Zookeeper(store.clone()),
            url.clone(),
            bg.handle(),
            stop.clone(),
        ));
        let waiters = Waiters::start_local(bg.handle(), stop.clone());
        let (to, hook, wake) = (
            waiters.dispatcher(),
            Arc::downgrade(&watchdog),
            waiters.dispatcher(),
        );
        store.set_hooks(ZkHooks {
            dispatch: Box::new(move |channel| to.dispatch(channel, String::new())),
            session_replaced: Box::new(move || {
                wake.wake_all();
                if let Some(w) = hook.upgrade() {
                    w.renew_all_now();
                }
            }),
        });
        let shared = Arc::new(Shared {
            sharded_pubsub: false,
            watchdog,
            url,
            backing: Backing::Zookeeper(store),
            sync: None,
            stop,
            closed: AtomicBool::new(false),
            acquiring: Arc::default(),
            prefix: b.prefix,
            default_ttl: b.default_ttl,
            default_wait: b.default_wait,
            response_timeout: b.response_timeout,
            latch_ttl: b.latch_ttl,
            handoff: b.handoff,
            // A watch wakes one waiter and counts nobody.
            publish_counts_all: false,
            client_id,
            client_tag: holder::client_tag(&b.client_name),
            seq: AtomicU64::new(0),
            waiters,
            gates: Gates::default(),
            written: Arc::default(),
            bg,
        });
        tracing::debug!(url = %shared.url, client_id = %shared.client_id, "dlock client connected to ZooKeeper");
        Ok(shared)
    }

    /// [`Shared::connect`] to PostgreSQL: a fixed set of connections for requests, one LISTEN
    /// connection for the waiters, and dlock's schema created on first use.
    #[cfg(feature = "postgres")]
    async fn connect_postgres(b: Settings, raw_url: &str) -> Result<Arc<Self>, LockError> {
        use crate::store::postgres::store::PgStore;
        use crate::store::postgres::tls::PgConnect;
        let url = crate::settings::redact(raw_url);
        let failed =
            |e: crate::store::postgres::errors::PgError| e.into_lock_error("", "connect", &url);
        let roots = b.tls_root.as_deref();
        let connect = PgConnect::from_url(raw_url, roots).map_err(|e| {
            LockError::invalid("", format!("cannot read the PostgreSQL URL {url}: {e}"))
        })?;
        let client_id = format!("{:032x}", rand::random::<u128>());
        let bg = Background::start(&client_id).map_err(|e| {
            LockError::invalid("", format!("cannot start the client's thread: {e}"))
        })?;
        let store = PgStore::connect(
            connect.clone(),
            &b.postgres_schema,
            b.connections,
            b.connect_timeout,
            b.response_timeout,
            bg.handle(),
        )
        .await
        .map_err(failed)?;
        store.prepare_statements(b.postgres_prepared_statements);
        let stop = CancellationToken::new();
        let watchdog = Arc::new(Watchdog::start(
            Renewer::Postgres(store.clone()),
            url.clone(),
            bg.handle(),
            stop.clone(),
        ));
        let hook = Arc::downgrade(&watchdog);
        let listen_connect = match &b.postgres_listen_url {
            Some(listen) => PgConnect::from_url(listen, roots).map_err(|e| {
                let shown = crate::settings::redact(listen);
                LockError::invalid("", format!("cannot read postgres_listen_url {shown}: {e}"))
            })?,
            None => connect,
        };
        let waiters = Waiters::start_postgres(
            listen_connect,
            WaiterSettings {
                connect_timeout: b.connect_timeout,
                ack_timeout: b.response_timeout.min(Duration::from_secs(1)),
                health_interval: DEFAULT_HEALTH_INTERVAL,
                on_connection_change: Box::new(move || {
                    if let Some(w) = hook.upgrade() {
                        w.renew_all_now();
                    }
                }),
                stop: stop.clone(),
            },
            bg.handle(),
        )
        .await
        .map_err(failed)?;
        let shared = Arc::new(Shared {
            sharded_pubsub: false,
            watchdog,
            url,
            backing: Backing::Postgres(store),
            sync: None,
            stop,
            closed: AtomicBool::new(false),
            acquiring: Arc::default(),
            prefix: b.prefix,
            default_ttl: b.default_ttl,
            default_wait: b.default_wait,
            response_timeout: b.response_timeout,
            latch_ttl: b.latch_ttl,
            handoff: b.handoff,
            // NOTIFY cannot count its listeners.
            publish_counts_all: false,
            client_id,
            client_tag: holder::client_tag(&b.client_name),
            seq: AtomicU64::new(0),
            waiters,
            gates: Gates::default(),
            written: Arc::default(),
            bg,
        });
        tracing::debug!(url = %shared.url, client_id = %shared.client_id, "dlock client connected to PostgreSQL");
        Ok(shared)
    }

    /// [`Shared::connect`] to Redis: one server, a cluster or a Sentinel-managed primary.
    async fn connect_redis(b: Settings) -> Result<Arc<Self>, LockError> {
        let topology = Topology::from_settings(&b)?;
        let url = topology.display_url();
        let user = b.acl_user();
        let db = match &b.target {
            Target::Single(raw) => connect_check::url_user_db(raw).1,
            _ => None,
        };
        // Redis's own words for a wrong password or a missing database, in words that say
        // what to change; anything else as redis-rs said it.
        let connect_err = |source: redis::RedisError| {
            connect_check::explain(&url, &user, db, &source).unwrap_or_else(|| LockError::Connect {
                url: url.clone(),
                source,
            })
        };
        let client_id = format!("{:032x}", rand::random::<u128>());
        let bg =
            Background::start(&client_id).map_err(|e| connect_err(redis::RedisError::from(e)))?;
        let mode = Arc::new(Mode::new(b.functions));
        let pool = Arc::new(
            topology
                .open_pool(
                    &bg,
                    b.connections,
                    b.response_timeout,
                    b.connect_timeout,
                    mode.clone(),
                )
                .await
                .map_err(connect_err)?,
        );
        let sync_conn = Arc::new(SyncConn::new(
            topology.clone(),
            bg.handle().clone(),
            mode,
            b.response_timeout,
            b.connect_timeout,
        ));
        let timeout = b.response_timeout.max(b.connect_timeout);
        checked(
            connect_check::check(&mut pool.get(), &url, &user, timeout).await,
            &url,
        )?;
        install_library(&mut pool.get()).await;
        checked(
            connect_check::check_scripts(&mut pool.get(), &url, &user, timeout).await,
            &url,
        )?;
        check_channel_rights(&b, &pool, &url).await?;
        // The subscriber tells the watchdog when its connection was lost or replaced: the
        // server may have restarted or failed over, so every hold is checked at once.
        let stop = CancellationToken::new();
        let watchdog = Arc::new(Watchdog::start(
            Renewer::Redis {
                pool: pool.clone(),
                sync: sync_conn.clone(),
            },
            url.clone(),
            bg.handle(),
            stop.clone(),
        ));
        if topology.is_cluster() {
            let watch = Arc::downgrade(&watchdog);
            failover_watch::start(watch, pool.clone(), bg.handle(), stop.clone());
        }
        let hook = Arc::downgrade(&watchdog);
        // Where the command connections are driven by the caller's runtime (one server, a
        // multi-thread runtime: see `Topology::open_pool`), so is the subscriber, until that
        // runtime shuts down.
        let here = tokio::runtime::Handle::current();
        let front = (matches!(topology, Topology::Single { .. })
            && here.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread)
            .then_some(here);
        let waiters = Waiters::start(
            topology.pubsub_source(&pool),
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
                stop: stop.clone(),
            },
            bg.handle(),
            front,
        )
        .await
        .map_err(connect_err)?;
        let sharded_pubsub = topology.is_cluster() && shard_subscriber::supported(&pool).await;
        // On a cluster, channels are subscribed where their messages are published: a shard
        // channel can only be heard there, and a classic one heard elsewhere has crossed the
        // cluster bus, which delays some messages by tens of milliseconds.
        for (wanted, kind) in [
            (sharded_pubsub, ChannelKind::Shard),
            (topology.is_cluster(), ChannelKind::Classic),
        ] {
            if !wanted {
                continue;
            }
            let source = shard_subscriber::source(kind, &topology, &pool, b.connect_timeout, &stop);
            if let Some(source) = source {
                waiters.start_placed(source, bg.handle());
            }
        }
        if let Some(SentinelConn(follower)) = pool.get().sentinel() {
            primary_switch::start(
                follower.switches(),
                Arc::downgrade(&watchdog),
                waiters.reconnect_handle(),
                bg.handle(),
                stop.clone(),
            );
        }
        let shared = Arc::new(Shared {
            sharded_pubsub,
            watchdog,
            url,
            backing: Backing::Redis { pool, sync_conn },
            sync: b.sync,
            stop,
            closed: AtomicBool::new(false),
            acquiring: Arc::default(),
            prefix: b.prefix,
            default_ttl: b.default_ttl,
            default_wait: b.default_wait,
            response_timeout: b.response_timeout,
            latch_ttl: b.latch_ttl,
            handoff: b.handoff,
            publish_counts_all: !topology.is_cluster(),
            client_id,
            client_tag: holder::client_tag(&b.client_name),
            seq: AtomicU64::new(0),
            waiters,
            gates: Gates::default(),
            written: Arc::default(),
            bg,
        });
        tracing::debug!(url = %shared.url, client_id = %shared.client_id, "dlock client connected");
        Ok(shared)
    }

    /// A command connection for the stock item `name`, whose segments are Redis keys taken by
    /// Lua scripts: a PostgreSQL client refuses, naming the item and what to use instead.
    pub(crate) fn stock_conn(&self, name: &str) -> Result<Conn, LockError> {
        let _ = name; // named only in the refusal, which needs the `postgres` feature
        match &self.backing {
            Backing::Redis { pool, .. } => Ok(pool.get()),
            #[cfg(feature = "postgres")]
            Backing::Postgres(_) => Err(LockError::invalid(
                name,
                format!(
                    "SegmentedStock needs Redis (its segments are Redis keys spread over cluster slots); this client's store is PostgreSQL ({}): keep the stock in a row of your own and take it with one `UPDATE ... SET stock = stock - 1 WHERE stock > 0` (see examples/seckill.rs, --store postgres)",
                    self.url
                ),
            )),
            #[cfg(feature = "zookeeper")]
            Backing::Zookeeper(_) => Err(LockError::invalid(
                name,
                format!(
                    "SegmentedStock needs Redis (its segments are Redis keys spread over cluster slots); this client's store is ZooKeeper ({}), which is made for coordination, not for counting stock",
                    self.url
                ),
            )),
        }
    }

    /// The connection for replica-synced calls (Redis only; a PostgreSQL client refuses
    /// `synced_replicas` when it is built).
    pub(crate) fn sync_conn(&self) -> Result<&Arc<SyncConn>, LockError> {
        match &self.backing {
            Backing::Redis { sync_conn, .. } => Ok(sync_conn),
            #[cfg(feature = "postgres")]
            Backing::Postgres(_) => Err(LockError::invalid(
                "",
                "synced_replicas needs Redis; this client's store is PostgreSQL",
            )),
            #[cfg(feature = "zookeeper")]
            Backing::Zookeeper(_) => Err(LockError::invalid(
                "",
                "synced_replicas needs Redis; this client's store is ZooKeeper",
            )),
        }
    }

    /// The command connection for requests about `key` (see `Pool::for_key`): an acquire
    /// and a release of one key go over the same socket, in order.
    fn conn_for(pool: &Pool, key: &str) -> Conn {
        pool.for_key(key)
    }

    /// The store link for requests about `key` (see [`Shared::conn_for`]).
    pub(crate) fn link_for(&self, key: &str) -> Link {
        match &self.backing {
            Backing::Redis { pool, .. } => Link::Redis(Self::conn_for(pool, key)),
            #[cfg(feature = "postgres")]
            Backing::Postgres(store) => Link::Postgres(store.link_for(key)),
            #[cfg(feature = "zookeeper")]
            Backing::Zookeeper(store) => {
                Link::Zookeeper(crate::store::zookeeper::link::ZkLink::new(store.clone()))
            }
        }
    }

    /// A store link, round-robin (see [`Shared::conn`]).
    pub(crate) fn link(&self) -> Link {
        match &self.backing {
            Backing::Redis { pool, .. } => Link::Redis(pool.get()),
            #[cfg(feature = "postgres")]
            Backing::Postgres(store) => Link::Postgres(store.any_link()),
            #[cfg(feature = "zookeeper")]
            Backing::Zookeeper(store) => {
                Link::Zookeeper(crate::store::zookeeper::link::ZkLink::new(store.clone()))
            }
        }
    }

    /// A store link driven by the client's own thread (see `Pool::background`; every
    /// PostgreSQL connection is).
    pub(crate) fn background_link(&self) -> Link {
        match &self.backing {
            Backing::Redis { pool, .. } => Link::Redis(pool.background()),
            #[cfg(feature = "postgres")]
            Backing::Postgres(store) => Link::Postgres(store.any_link()),
            #[cfg(feature = "zookeeper")]
            Backing::Zookeeper(store) => {
                Link::Zookeeper(crate::store::zookeeper::link::ZkLink::new(store.clone()))
            }
        }
    }

    /// The error for a request about lock `name` that the store did not answer within its
    /// bound (`io`: what timed out), as this client's store reports its failures. Built
    /// directly: a wait that ran out is not a broken connection, so it must not make the
    /// watchdog renew every hold (`Shared::redis_error` would).
    pub(crate) fn unanswered(&self, name: &str, op: &'static str, io: std::io::Error) -> LockError {
        match &self.backing {
            Backing::Redis { .. } => LockError::Redis {
                name: name.to_owned(),
                op,
                url: self.url.clone(),
                source: redis::RedisError::from(io),
            },
            #[cfg(feature = "postgres")]
            Backing::Postgres(_) => LockError::Store {
                name: name.to_owned(),
                op,
                store: "postgres",
                url: self.url.clone(),
                fault: crate::error::StoreFault::Unreachable,
                source: Box::new(io),
            },
            #[cfg(feature = "zookeeper")]
            Backing::Zookeeper(_) => LockError::Store {
                name: name.to_owned(),
                op,
                store: "zookeeper",
                url: self.url.clone(),
                fault: crate::error::StoreFault::Unreachable,
                source: Box::new(io),
            },
        }
    }

    /// Turns a store's error into a `LockError` naming the lock and the operation.
    pub(crate) fn store_error(
        &self,
        name: &str,
        key: &str,
        op: &'static str,
        e: StoreError,
    ) -> LockError {
        match e {
            StoreError::Redis(e) => self.redis_error(name, key, op, e),
            #[cfg(feature = "postgres")]
            StoreError::Postgres(e) => e.into_lock_error(name, op, &self.url),
            #[cfg(feature = "zookeeper")]
            StoreError::Zookeeper(e) => e.into_lock_error(name, op, &self.url),
        }
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

    /// A new hold of the lock `name` (keys `keys`) for a new owner of this client, not yet
    /// acquired. Its owner id carries this client's name and `label` (see
    /// `settings/holder.rs`), except for a kind whose owner ids are another library's.
    pub(crate) fn new_hold(
        &self,
        (name, label): (String, Option<&str>),
        keys: LockKeys,
        lease: Duration,
        hard: bool,
        kind: Arc<dyn LockKind>,
        sync: Option<ReplicaSync>,
    ) -> Hold {
        let id = self.next_seq();
        let mut owner = self.unique_id();
        if kind.labels_owner() {
            owner.push_str(&self.client_tag);
            holder::push_label(&mut owner, label);
        }
        let claim = Claim {
            name,
            keys,
            owner,
            client_id: self.client_id.clone(),
            lease: self.store_lease(lease),
            hard,
            sync,
        };
        Hold::new(id, claim, kind, self.bg.handle().clone())
    }

    /// The lease a hold is given on this client's store: `asked` (the lock's TTL), except on
    /// ZooKeeper, where the session is the lease (see `ZkStore::lease`).
    pub(crate) fn store_lease(&self, asked: Duration) -> Duration {
        match &self.backing {
            #[cfg(feature = "zookeeper")]
            Backing::Zookeeper(store) => store.lease(),
            _ => asked,
        }
    }

    /// Whether every refused attempt leaves its owner in line in the store, whatever the kind
    /// (ZooKeeper: its child waits there), so an acquire that ends without the lock must take
    /// it back (see `LockKind::refusal_leaves_a_trace`).
    pub(crate) fn refusal_leaves_a_trace(&self) -> bool {
        match &self.backing {
            #[cfg(feature = "zookeeper")]
            Backing::Zookeeper(_) => true,
            _ => false,
        }
    }

    /// A release or a clean-up of `owner` gave up on passing faults. Where a lease ends on its
    /// own nothing is left to do; on ZooKeeper the owner's child lives as long as its session
    /// (a quorum lost for a while expires no session), so it is deleted in the background for
    /// as long as that session lives (`ZkStore::abandon`).
    pub(crate) fn store_gave_up(&self, owner: &str, kind_id: &str) {
        let _ = (owner, kind_id);
        match &self.backing {
            #[cfg(feature = "zookeeper")]
            Backing::Zookeeper(store) => {
                if let Some(key) = crate::store::zookeeper::link::entry_key(owner, kind_id) {
                    store.abandon(vec![key]);
                }
            }
            _ => {}
        }
    }

    /// Turns a redis-rs error into a `LockError` naming the lock and the operation.
    /// Waits for this client's written releases of `key` to be answered (see `written.rs`), at
    /// most the response timeout: a release that the store does not answer (it is down) goes
    /// on in the background, and what follows finds out for itself.
    pub(crate) async fn written_settled(&self, key: &str) {
        let _ = tokio::time::timeout(self.response_timeout, self.written.settled(key)).await;
    }

    pub(crate) fn redis_error(
        &self,
        name: &str,
        key: &str,
        op: &'static str,
        e: redis::RedisError,
    ) -> LockError {
        // Redis before 7.0 wraps an error raised inside a script ("Error running script
        // (call to f_...): @user_script:15: WRONGTYPE ..."), so its code reads ERR.
        let wrapped_wrong_type =
            e.code() == Some("ERR") && e.detail().is_some_and(|d| d.contains(": WRONGTYPE "));
        if e.code() == Some("WRONGTYPE") || wrapped_wrong_type {
            let (key, role) = wrong_type_key(&e, key, op);
            return LockError::WrongType {
                name: name.to_owned(),
                key,
                role,
            };
        }
        if crate::store::redis::backend::retry::is_link_error(&e) {
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

/// Fails the build when the ACL user may not PUBLISH or SUBSCRIBE on dlock's channels (every
/// one starts with the key prefix), naming the rule that grants them: without it, releases
/// wake nobody and waiters of other clients sleep until the holder's lease ends.
/// A connect check's answer: a refusal fails the build; no answer (a server still loading, a
/// slow link) leaves the client as it was before the check existed, its first command saying
/// what is wrong.
fn checked(result: Result<(), Checked>, url: &str) -> Result<(), LockError> {
    match result {
        Ok(()) => Ok(()),
        Err(Checked::Refused(e)) => Err(e),
        Err(Checked::Unanswered(e)) => {
            tracing::debug!(url, error = %e, "dlock: the connect check got no answer");
            Ok(())
        }
    }
}

async fn check_channel_rights(b: &Settings, pool: &Pool, url: &str) -> Result<(), LockError> {
    let channel = format!("{}channel-check", b.prefix);
    let timeout = b.response_timeout.max(b.connect_timeout);
    match check_channel(&mut pool.get(), &channel, timeout).await {
        Ok(()) => Ok(()),
        // Not an answer about rights (a server still loading, a slow link): the client works
        // as it did before the check existed, and the first command says what is wrong.
        Err(Refused::Unanswered(e)) => {
            tracing::debug!(url, error = %e, "dlock: channel rights not checked");
            Ok(())
        }
        Err(Refused::Denied(said)) => {
            // Denied the command itself (`-publish`), or the channel (no `&` rule for it).
            let rule = if said.contains("command") {
                "+publish +subscribe".to_owned()
            } else {
                format!("&{}*", glob_escape(&b.prefix))
            };
            let user = b.acl_user();
            Err(LockError::invalid(
                "",
                format!(
                    "the ACL user `{user}` of {url} may not PUBLISH on dlock's channels \
                     (`{channel}`; Redis said: {said}), so releases would wake no waiter; \
                     grant them with `ACL SETUSER {user} {rule}` (or `allchannels`)"
                ),
            ))
        }
    }
}

/// `text` as a Redis glob pattern that matches it literally.
fn glob_escape(text: &str) -> String {
    text.chars()
        .flat_map(|c| match c {
            '*' | '?' | '[' | ']' | '\\' => vec!['\\', c],
            c => vec![c],
        })
        .collect()
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

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LockClient")
            .field("url", &self.url)
            .field("client_id", &self.client_id)
            .finish_non_exhaustive()
    }
}

/// A `zk+tls://` client's TLS settings from the builder's (`None` for `zk://`); the settings'
/// validation has refused TLS without the `zookeeper-tls` feature and without roots.
#[cfg(feature = "zookeeper")]
fn zookeeper_tls(
    b: &Settings,
    asked: bool,
) -> Result<Option<crate::store::zookeeper::store::Tls>, String> {
    if !asked {
        return Ok(None);
    }
    #[cfg(feature = "zookeeper-tls")]
    {
        let ca = b.tls_root.as_deref().unwrap_or_default();
        let identity = b
            .tls_client_cert
            .as_ref()
            .map(|(cert, key)| (cert.as_slice(), key.as_slice()));
        crate::store::zookeeper::tls::ZkTls::new(ca, identity).map(Some)
    }
    #[cfg(not(feature = "zookeeper-tls"))]
    {
        let _ = b;
        Err("a zk+tls:// URL needs dlock's `zookeeper-tls` cargo feature".into())
    }
}
