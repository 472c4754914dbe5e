//! Settings: the plain data a client is built from, filled by `LockClientBuilder` and checked
//! once by [`Settings::validate`]. Every layer above reads it; nothing here talks to Redis.

pub(crate) mod holder;
// Without the store, a postgres:// URL is still checked (and refused), but what the store
// itself reads of it (the rest of the URL, the root file) goes unused.
#[cfg_attr(not(feature = "postgres"), allow(dead_code))]
mod postgres_tls;
mod redact;
mod url_scheme;

use std::time::Duration;

use crate::error::LockError;

#[cfg(feature = "postgres")]
pub(crate) use postgres_tls::RootCert;
pub(crate) use postgres_tls::{split_tls, SslMode};
pub(crate) use redact::{redact, redact_all};

/// Default lease kept alive by the watchdog (Redisson's `lockWatchdogTimeout`).
pub const DEFAULT_TTL: Duration = Duration::from_secs(30);
/// Default time `acquire` waits for a held lock before `LockError::Timeout`.
pub const DEFAULT_WAIT: Duration = Duration::from_secs(10);
/// Default prefix of every Redis key and channel dlock creates.
pub const DEFAULT_PREFIX: &str = "dlock:";

/// Consecutive local handoffs before a release goes to Redis (see `local_handoffs`).
const DEFAULT_HANDOFFS: u32 = 32;

/// How long a process may keep a lock among its tasks (see `local_handoff_window`).
const DEFAULT_HANDOFF_WINDOW: Duration = Duration::from_millis(10);

/// Longest lease a lock may have (`default_ttl`, `.ttl()`, `.lease()`): 100 years, far inside
/// what Redis's millisecond expiries and tokio's timers can represent.
pub(crate) const MAX_LEASE: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

/// Longest `response_timeout`, `connect_timeout` and `release_latch`: a day. Longer would only
/// hide a dead connection (timeouts) or keep one key per release for no purpose (the latch).
const MAX_TIMEOUT: Duration = Duration::from_secs(24 * 3600);

/// Tokens a Redis free -> held transition leaves room for: the token of such a transition is
/// the Redis counter times this, its local successors add one each. The handoff limit stays
/// below it, so the sub-sequence never reaches the next Redis token.
pub(crate) const LOCAL_TOKENS: u64 = 1024;

/// The largest `local_handoffs` setting (see [`LOCAL_TOKENS`]).
pub(crate) const MAX_HANDOFFS: u32 = (LOCAL_TOKENS - 1) as u32;

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

/// The client's bounds on keeping a lock in the process (local handoff).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Bounds {
    /// Consecutive local handoffs before a release goes to Redis; 0 turns handoff off.
    pub(crate) limit: u32,
    /// How long after its Redis acquire a lock may still be handed on locally.
    pub(crate) window: Duration,
}

/// Replica-synced writes: after each acquire and renewal, WAIT until `replicas` replicas
/// confirmed it, at most `within`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct ReplicaSync {
    pub(crate) replicas: u32,
    pub(crate) within: Duration,
}

impl ReplicaSync {
    /// `None` for zero replicas (off).
    pub(crate) fn new(replicas: u32, within: Duration) -> Option<Self> {
        (replicas > 0).then_some(ReplicaSync { replicas, within })
    }

    /// Why this cannot work with a client whose replies may take `response_timeout`, if so.
    pub(crate) fn problem(&self, response_timeout: Duration) -> Option<String> {
        if self.within.as_millis() == 0 {
            return Some(format!(
                "synced_replicas' bound must be at least 1 ms, got {:?}",
                self.within
            ));
        }
        // WAIT's reply comes after the bound: the connection must wait longer than that.
        (self.within >= response_timeout).then(|| {
            format!(
                "synced_replicas' bound of {:?} must be shorter than the response_timeout ({:?}), \
                 or every WAIT that runs its course times out first",
                self.within, response_timeout
            )
        })
    }
}

/// Everything a client is built from. The builder's setters document each field.
#[derive(Clone)]
pub(crate) struct Settings {
    pub(crate) target: Target,
    pub(crate) connections: usize,
    pub(crate) default_ttl: Duration,
    pub(crate) default_wait: Duration,
    pub(crate) prefix: String,
    pub(crate) response_timeout: Duration,
    pub(crate) connect_timeout: Duration,
    pub(crate) latch_ttl: Duration,
    pub(crate) handoff: Bounds,
    /// PEM root certificate(s) to trust for `rediss://` instead of the system's, and for a
    /// PostgreSQL store's TLS (see `postgres_tls.rs` for what each `sslmode` does with them).
    pub(crate) tls_root: Option<Vec<u8>>,
    /// PEM certificate chain and private key this client shows a server that asks for one
    /// (ZooKeeper's `ssl.clientAuth`); a `zk+tls://` target only for now.
    pub(crate) tls_client_cert: Option<(Vec<u8>, Vec<u8>)>,
    /// ACL user and password for a sentinel-managed primary (the sentinels' own are in their
    /// URLs).
    pub(crate) master_auth: (Option<String>, Option<String>),
    /// Call the scripts as functions of dlock's library (FCALL) where the server has them.
    pub(crate) functions: bool,
    /// What every owner id of this client says holds it (see `holder.rs`): `host:pid` unless
    /// the builder names it.
    pub(crate) client_name: String,
    /// Every lock's default for replica-synced writes (`None`: asynchronous replication).
    pub(crate) sync: Option<ReplicaSync>,
    /// The PostgreSQL schema dlock's tables and functions live in (a `postgres://` target).
    pub(crate) postgres_schema: String,
    /// Where the PostgreSQL store's LISTEN connection goes, when not to the target's URL (a
    /// transaction-mode pooler in front of the server forwards no notifications).
    pub(crate) postgres_listen_url: Option<String>,
    /// Whether the PostgreSQL store prepares each call once per connection (named statements)
    /// instead of sending its text with every call.
    pub(crate) postgres_prepared_statements: bool,
    /// The session timeout a ZooKeeper client asks for (a `zk://` target): the lease of every
    /// hold it makes (see `store/zookeeper/mod.rs`).
    pub(crate) zookeeper_session_timeout: Duration,
}

/// The session timeout a ZooKeeper client asks for unless the builder names another: the
/// default lease of the other stores, so a crashed holder's lock frees in about the same time.
pub(crate) const DEFAULT_ZOOKEEPER_SESSION_TIMEOUT: Duration = Duration::from_secs(30);

/// Whether `url` names a ZooKeeper ensemble (`zk://`, or `zk+tls://` over TLS).
pub(crate) fn is_zookeeper_url(url: &str) -> bool {
    url.split_once("://").is_some_and(|(scheme, _)| {
        scheme.eq_ignore_ascii_case("zk") || scheme.eq_ignore_ascii_case("zk+tls")
    })
}

/// Whether `url` asks a ZooKeeper ensemble for TLS (`zk+tls://`).
pub(crate) fn is_zookeeper_tls_url(url: &str) -> bool {
    url.split_once("://")
        .is_some_and(|(scheme, _)| scheme.eq_ignore_ascii_case("zk+tls"))
}

/// The schema of a PostgreSQL store unless the builder names another.
pub(crate) const DEFAULT_POSTGRES_SCHEMA: &str = "dlock";

/// Whether `url` names a PostgreSQL server (`postgres://` or `postgresql://`): the store is
/// chosen by the URL's scheme, so user code stays the same.
pub(crate) fn is_postgres_url(url: &str) -> bool {
    let scheme = url.split_once("://").map_or("", |(s, _)| s);
    scheme.eq_ignore_ascii_case("postgres") || scheme.eq_ignore_ascii_case("postgresql")
}

impl Settings {
    /// The defaults for a client of `target`.
    pub(crate) fn new(target: Target) -> Self {
        Settings {
            target,
            connections: 1,
            default_ttl: DEFAULT_TTL,
            default_wait: DEFAULT_WAIT,
            prefix: DEFAULT_PREFIX.to_owned(),
            response_timeout: Duration::from_secs(5),
            connect_timeout: Duration::from_secs(5),
            latch_ttl: Duration::from_secs(30),
            handoff: Bounds {
                limit: DEFAULT_HANDOFFS,
                window: DEFAULT_HANDOFF_WINDOW,
            },
            tls_root: None,
            tls_client_cert: None,
            master_auth: (None, None),
            functions: true,
            client_name: holder::default_client_name(),
            sync: None,
            postgres_schema: DEFAULT_POSTGRES_SCHEMA.to_owned(),
            postgres_listen_url: None,
            postgres_prepared_statements: false,
            zookeeper_session_timeout: DEFAULT_ZOOKEEPER_SESSION_TIMEOUT,
        }
    }

    /// Refuses, for a ZooKeeper store, the settings it cannot honour, and a build without the
    /// store.
    fn validate_zookeeper(&self) -> Result<(), LockError> {
        let bad = |reason: String| Err(LockError::invalid("", reason));
        if !cfg!(feature = "zookeeper") {
            return bad("a zk:// URL needs dlock's `zookeeper` cargo feature: `cargo add dlock-redis --features zookeeper` (features = [\"zookeeper\"] on the dlock-redis dependency)".into());
        }
        if self.sync.is_some() {
            return bad("synced_replicas is a Redis setting (WAIT); ZooKeeper commits every write to a quorum before it answers".into());
        }
        let tls = matches!(&self.target, Target::Single(url) if is_zookeeper_tls_url(url));
        if tls && !cfg!(feature = "zookeeper-tls") {
            return bad("a zk+tls:// URL needs dlock's `zookeeper-tls` cargo feature (features = [\"zookeeper-tls\"] on the dlock-redis dependency)".into());
        }
        if !tls && (self.tls_root.is_some() || self.tls_client_cert.is_some()) {
            let setting = if self.tls_root.is_some() {
                "tls_root_certificates"
            } else {
                "tls_client_certificate"
            };
            return bad(format!("{setting} is for TLS, and a zk:// URL connects without it: write zk+tls:// (feature `zookeeper-tls`) for the servers' secureClientPort"));
        }
        if tls && self.tls_root.is_none() {
            // ZooKeeper's servers are signed by a deployment's own CA, not a public one: the
            // system's trust store is not read (the client takes only PEM roots).
            return bad("a zk+tls:// URL needs tls_root_certificates: the PEM CA certificate(s) that signed the servers' certificates".into());
        }
        if self.prefix.contains('\0') {
            // A lock's node path writes NUL as `%00` (ZooKeeper refuses it in a name): that
            // is unambiguous inside the name, whose `%` are escaped, but not in a prefix.
            return bad(format!(
                "key prefix {:?} contains NUL, which the ZooKeeper store cannot keep apart from `%00`",
                self.prefix
            ));
        }
        let t = self.zookeeper_session_timeout;
        if t < Duration::from_millis(100) || t > Duration::from_secs(24 * 3600) {
            return bad(format!(
                "zookeeper_session_timeout {t:?} must be 100 ms to a day (the server also clamps it to 2 to 20 ticks)"
            ));
        }
        Ok(())
    }

    /// Refuses, for a PostgreSQL store, the settings only Redis has, and a build without the
    /// store.
    fn validate_postgres(&self) -> Result<(), LockError> {
        let bad = |reason: String| Err(LockError::invalid("", reason));
        if !cfg!(feature = "postgres") {
            return bad("a postgres:// URL needs dlock's `postgres` cargo feature: `cargo add dlock-redis --features postgres` (features = [\"postgres\"] on the dlock-redis dependency)".into());
        }
        if self.sync.is_some() {
            return bad("synced_replicas is a Redis setting (WAIT); on PostgreSQL use synchronous_commit and synchronous_standby_names on the server".into());
        }
        if let Target::Single(url) = &self.target {
            let tls = split_tls(url).map_err(|why| LockError::invalid("", why))?;
            if self.tls_root.is_some() && tls.mode == SslMode::Disable {
                return bad(format!(
                    "tls_root_certificates is set, but the PostgreSQL URL {} says sslmode=disable \
                     (no TLS): remove one of them",
                    redact(url)
                ));
            }
        }
        if let Some(url) = &self.postgres_listen_url {
            if !is_postgres_url(url) {
                return bad(format!(
                    "postgres_listen_url `{}` is not a postgres:// URL",
                    redact(url)
                ));
            }
            split_tls(url)
                .map_err(|why| LockError::invalid("", format!("postgres_listen_url: {why}")))?;
        }
        if self.prefix.contains('\0') {
            // The store writes a name's NUL as `%00` (PostgreSQL text cannot hold NUL); that
            // is unambiguous inside the name, whose `%` are escaped, but not in a prefix.
            return bad(format!(
                "key prefix {:?} contains NUL, which the PostgreSQL store cannot keep apart from `%00`",
                self.prefix
            ));
        }
        let name = &self.postgres_schema;
        if name.is_empty() || name.len() > 63 {
            return bad(format!(
                "postgres_schema `{name}` must be 1 to 63 bytes (a PostgreSQL identifier)"
            ));
        }
        Ok(())
    }

    /// Refuses settings no client can work with, naming the setting.
    pub(crate) fn validate(&self) -> Result<(), LockError> {
        let bad = |reason: String| Err(LockError::invalid("", reason));
        if let Some(problem) = self.scheme_problem() {
            return bad(problem);
        }
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
            Target::Single(url) if is_postgres_url(url) => self.validate_postgres()?,
            Target::Single(url) if is_zookeeper_url(url) => self.validate_zookeeper()?,
            _ => {}
        }
        let zookeeper = matches!(&self.target, Target::Single(url) if is_zookeeper_url(url));
        if self.tls_client_cert.is_some() && !zookeeper {
            return bad("tls_client_certificate is offered for zk+tls:// URLs only (not yet for Redis or PostgreSQL)".into());
        }
        if self.handoff.limit > MAX_HANDOFFS {
            return bad(format!(
                "local_handoffs of {} is above the limit of {}: fencing tokens leave room for that many local successors of one Redis acquire",
                self.handoff.limit, MAX_HANDOFFS
            ));
        }
        if self.handoff.window > MAX_TIMEOUT {
            return bad(format!(
                "local_handoff_window of {:?} is above the limit of {MAX_TIMEOUT:?}",
                self.handoff.window
            ));
        }
        if let Some(problem) = self.sync.and_then(|s| s.problem(self.response_timeout)) {
            return bad(problem);
        }
        if let Some(problem) = holder::client_name_problem(&self.client_name) {
            return bad(problem);
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
        Ok(())
    }

    /// The ACL user the client logs in as (`default` when none is named), for messages.
    /// The first URL of the target whose scheme no client takes, said with the ones it does.
    fn scheme_problem(&self) -> Option<String> {
        match &self.target {
            Target::Single(url) => url_scheme::scheme_problem(url, true),
            Target::Cluster(urls)
            | Target::Sentinel {
                sentinels: urls, ..
            } => urls
                .iter()
                .find_map(|u| url_scheme::scheme_problem(u, false)),
        }
    }

    pub(crate) fn acl_user(&self) -> String {
        let named = match &self.target {
            Target::Single(url) => url_user(url),
            Target::Cluster(nodes) => nodes.first().and_then(|u| url_user(u)),
            Target::Sentinel { .. } => self.master_auth.0.clone(),
        };
        named.unwrap_or_else(|| "default".to_owned())
    }

    /// The deployment's address for messages: its URL(s), passwords removed.
    pub(crate) fn display_target(&self) -> String {
        match &self.target {
            Target::Single(url) => redact(url),
            Target::Cluster(nodes) => redact_all(nodes),
            Target::Sentinel { sentinels, master } => {
                format!("{master} via {}", redact_all(sentinels))
            }
        }
    }
}

/// The user `url` logs in as, if it names one: redis-rs authenticates only with a password,
/// so a name alone (which may be a password written in the wrong place) logs in as `default`.
fn url_user(url: &str) -> Option<String> {
    let parsed = url::Url::parse(url).ok()?;
    let user = parsed.username();
    (!user.is_empty() && parsed.password().is_some()).then(|| user.to_owned())
}

impl std::fmt::Debug for Settings {
    // By hand: the URLs may carry passwords, which must never reach a log.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LockClientBuilder")
            .field("target", &self.display_target())
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
            .field("tls_client_certificate", &self.tls_client_cert.is_some())
            .field("master_user", &self.master_auth.0)
            .field("postgres_schema", &self.postgres_schema)
            .field(
                "postgres_listen_url",
                &self.postgres_listen_url.as_deref().map(redact),
            )
            .field(
                "postgres_prepared_statements",
                &self.postgres_prepared_statements,
            )
            .finish()
    }
}

// Only in a build without the stores' features (`.ci/run` makes one for this crate).
#[cfg(all(test, not(feature = "postgres"), not(feature = "zookeeper")))]
mod tests {
    use super::*;

    #[test]
    fn zk_url_without_the_feature_names_the_package_and_the_feature() {
        let settings = Settings::new(Target::Single("zk://127.0.0.1:2181/app".into()));
        let e = settings.validate().unwrap_err();
        assert_eq!(
            e.to_string(),
            "invalid argument: a zk:// URL needs dlock's `zookeeper` cargo feature: `cargo add \
             dlock-redis --features zookeeper` (features = [\"zookeeper\"] on the dlock-redis \
             dependency)"
        );
    }

    /// A Redis-only build refuses a PostgreSQL URL by naming the package and the feature to
    /// turn on. Runs in `.ci/run`'s build of this crate without features (with the feature,
    /// the same URL is accepted, which `tests/stores` shows).
    #[test]
    fn postgres_url_without_the_feature_names_the_package_and_the_feature() {
        let settings = Settings::new(Target::Single("postgres://app@127.0.0.1:5432/app".into()));
        let e = settings.validate().unwrap_err();
        assert_eq!(
            e.to_string(),
            "invalid argument: a postgres:// URL needs dlock's `postgres` cargo \
             feature: `cargo add dlock-redis --features postgres` (features = [\"postgres\"] on \
             the dlock-redis dependency)"
        );
    }
}
