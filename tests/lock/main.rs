//! The plain lock on one server: acquire, wait, re-enter, release on every way out, the watchdog,
//! hard leases, cancelled acquires, several processes, local handoff.
//!
//! One test binary for the area (one link instead of one per file); each file is a module.

#[path = "../common/mod.rs"]
mod common;

mod bad_input;
mod blocking;
mod cancel;
mod exclusion;
mod exit;
mod handoff;
mod lease;
mod processes;
mod reentrancy;
mod release_paths;
mod smoke;
mod waiters;
mod watchdog;
