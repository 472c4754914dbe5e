//! Deployments besides one plain server: a Sentinel-managed primary, and TLS with ACL users. (The
//! Redis Cluster has its own area, `tests/cluster/`.)
//!
//! One test binary for the area (one link instead of one per file); each file is a module.

#[path = "../common/mod.rs"]
mod common;

mod connect;
mod sentinel;
mod sentinel_paused;
mod tls;
