//! `#[distributed_lock]` and `#[distributed_semaphore]` against a real redis-server: behaviour,
//! options, the lock family, signatures it must keep, axum handlers and the service example over
//! HTTP.
//!
//! One test binary for the area (one link instead of one per file); each file is a module.

#[path = "../common/mod.rs"]
mod common;

mod axum;
mod behaviour;
mod family;
mod options;
mod service;
mod signatures;
mod sync;
mod written;
