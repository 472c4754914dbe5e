//! The `dlock` binary against real redis-server processes (`dlock_runtime::testing`): one
//! server, a TLS server, a Sentinel-managed primary and a local cluster, and a throw-away
//! PostgreSQL server (`PgServer`). Each test sets locks up through the library and
//! asserts on what the binary prints (`--json`) and on Redis afterwards.

mod cluster;
mod common;
#[cfg(feature = "postgres")]
mod postgres;
mod redisson;
mod sentinel;
mod single;
mod tls;
