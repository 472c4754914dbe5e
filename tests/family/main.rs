//! The lock family: fence checks, the fair lock, multi-locks, the read-write lock and the
//! semaphore.
//!
//! One test binary for the area (one link instead of one per file); each file is a module.

#[path = "../common/mod.rs"]
mod common;

mod fair_lock;
mod fence;
mod multi_lock;
mod rwlock;
mod rwlock_smoke;
mod semaphore;
