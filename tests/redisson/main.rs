//! Redisson's wire protocol (`client.redisson_lock`, `client.redisson_read_write_lock`):
//! dlock against a second client written here that speaks Redisson's protocol (`java.rs`),
//! on one server and on a cluster.
//!
//! One test binary for the area; each file is a module.

#[path = "../common/mod.rs"]
mod common;

mod attribute;
mod cluster;
mod java;
mod latency;
mod lock;
mod rwlock;
