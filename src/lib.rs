//! # dlock
//!
//! Run a piece of async work on one machine at a time across a fleet, with a Redis lock named
//! from the function's arguments. See the README for the tour; this crate re-exports the
//! runtime ([`LockClient`], [`Lock`], [`LockGuard`], [`LockError`]) and the
//! `#[distributed_lock]` attribute.

pub use dlock_runtime::*;
