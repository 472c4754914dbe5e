//! The `dlock` binary against real redis-server processes (`dlock_runtime::testing`): one
//! server, a TLS server, a Sentinel-managed primary and a local cluster. Each test sets locks up through the library and
//! asserts on what the binary prints (`--json`) and on Redis afterwards.

mod cluster;
mod common;
mod redisson;
mod sentinel;
mod single;
mod tls;
