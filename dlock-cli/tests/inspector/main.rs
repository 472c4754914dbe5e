//! The `dlock` binary against real redis-server processes (`dlock_runtime::testing`): one
//! server, a TLS server, a Sentinel-managed primary and a local cluster, a throw-away
//! PostgreSQL server (`PgServer`) and a throw-away ZooKeeper (`ZkServer`). Each test sets
//! locks up through the library and asserts on what the binary prints (`--json`) and on the
//! store afterwards.

mod cluster;
mod common;
#[cfg(feature = "postgres")]
mod postgres;
mod redisson;
mod sentinel;
mod single;
mod tls;
#[cfg(feature = "zookeeper")]
mod zookeeper;
