//! Throw-away Redis deployments for tests (feature `testing`): a single server, a cluster, a
//! Sentinel-managed primary, TLS and ACL users, all on free loopback ports; and PostgreSQL
//! ([`PgServer`]) and ZooKeeper ([`ZkServer`], [`ZkEnsemble`]) servers the same way.
//!
//! ```no_run
//! # extern crate dlock_runtime as dlock;
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use dlock::testing::RedisServer;
//!
//! let server = RedisServer::start()?;
//! let client = dlock::LockClient::connect(&server.url()).await?;
//! # Ok(()) }
//! ```
//!
//! * [`RedisServer`]: one `redis-server`, empty and keeping nothing on disk unless built with
//!   a [`Persistence`] mode; [`RedisServer::builder`] adds TLS, ACL users and extra arguments.
//! * [`RedisCluster`]: masters with replicas, created with `redis-cli --cluster create`;
//!   [`RedisCluster::failover`] and [`RedisCluster::kill_master`] promote replicas.
//! * [`RedisSentinel`]: a primary, a replica and three sentinels;
//!   [`RedisSentinel::kill_master`] makes the sentinels fail over.
//! * [`PgServer`]: a PostgreSQL server, its standbys and promotions ([`postgres`]).
//! * [`ZkServer`] and [`ZkEnsemble`]: a standalone ZooKeeper and a three-server ensemble
//!   whose leader can be killed or frozen ([`zookeeper`]).
//!
//! Everything here is synchronous and blocks the calling thread (a start takes milliseconds,
//! a cluster ~3 s): call it before building a runtime, or from `spawn_blocking` inside one.
//! Every wait is bounded, and a time-out error says what was not reached and shows the state
//! it got stuck in (CLUSTER NODES from every node, what each sentinel believes, or the last
//! lines redis-server printed).
//!
//! # Stopping a server
//!
//! | call | signal | what survives a [`RedisServer::restart`] |
//! |---|---|---|
//! | [`kill`](RedisServer::kill) | SIGKILL | only what was on disk: nothing ([`Persistence::None`]), the last SAVE ([`Persistence::Rdb`]), every acknowledged write ([`Persistence::Aof`]) |
//! | [`shutdown`](RedisServer::shutdown) | SIGTERM | the same: the AOF is flushed, no snapshot is taken |
//! | [`stop`](RedisServer::stop) / [`cont`](RedisServer::cont) | SIGSTOP / SIGCONT | everything: the process is frozen, not ended |
//!
//! Dropping a handle kills its process and removes its directory.
//!
//! # Servers outlive nothing
//!
//! A server kept in a `static` is never dropped, and a test process that is killed or aborts
//! runs no destructors. So every redis-server is started through a small `sh` wrapper whose
//! watcher reads a pipe only this process writes to: when this process exits, however it
//! exits, the pipe closes and the watcher SIGKILLs its server and removes its directory. A
//! server stopped through its handle releases its watcher first, so a watcher never signals
//! a recycled pid. (`prctl(PR_SET_PDEATHSIG)` would need `unsafe`, which this workspace
//! forbids, and follows the spawning thread rather than the process.)
//!
//! # What it needs
//!
//! Linux or another Unix with `sh` and `kill(1)`, and:
//!
//! * `redis-server` 6.2 or newer, or Valkey's `valkey-server` (`$REDIS_SERVER_BIN` to pick
//!   another binary; checked at start, tested with Redis 6.2 and 7.0 and Valkey 8.1).
//!   `--enable-debug-command local` is passed from 7.0 on, where DEBUG is otherwise refused; on
//!   6.2 DEBUG is always on. [`server_info`] says which server it is and what it offers
//!   (FUNCTION, sharded pub/sub), [`supports_tls`] whether it was built with TLS.
//! * `redis-cli` (package `redis-tools`, or `$REDIS_CLI_BIN`) for [`RedisCluster`] and
//!   [`RedisServer::cli`].
//! * `openssl` (the command-line tool) for TLS servers (Redis, and PostgreSQL through
//!   [`PgServer::builder`]): a CA, a certificate for `127.0.0.1` and `localhost` and an
//!   unrelated CA are generated at start.
//! * A ZooKeeper server and `java` for [`ZkServer`] and [`ZkEnsemble`] (Debian's `zookeeper`
//!   package, or `$ZK_HOME` / `$ZOOKEEPER_CLASSPATH`; see [`zookeeper`]).
//!   [`zookeeper_available`] says whether they were found.
//!
//! # Timings
//!
//! Measured on a 2-core VM with Redis 7.0 (`cargo test --test harness -- --nocapture`
//! prints them): a server starts in ~20 ms, a TLS one (certificates
//! included) in ~55 ms; `RedisCluster::start(3, 1)` 2.4-3.0 s;
//! `failover` 0.3-1 s; `kill_master` 3.7-4.2 s (node timeout 2 s plus the election);
//! `RedisSentinel::start` 2.1 s and its `kill_master` 2.2-2.3 s.

mod bins;
mod cluster;
mod cluster_view;
mod options;
pub mod postgres;
mod resp;
mod sentinel;
mod server;
mod support;
mod tls;
mod watchdog;
pub mod zookeeper;

pub use bins::{server_info, server_version, RedisVersion, ServerFlavour, ServerInfo};
pub use cluster::{ClusterNode, RedisCluster};
pub use cluster_view::Role;
pub use options::{Persistence, RedisServerBuilder};
pub use postgres::{postgres_available, PgServer, PgServerBuilder};
pub use sentinel::RedisSentinel;
pub use server::{supports_tls, RedisServer};
pub use zookeeper::{zookeeper_available, zookeeper_version, ZkEnsemble, ZkServer, ZkTls};
