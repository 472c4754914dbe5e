//! Trust under faults: the holder's view is never stale, tokens never go back, the client outlives
//! its runtime, settings are checked, and Redis-side faults (script flush, killed or silent
//! connections, restarts, failover) end in recovery or a clear error.
//!
//! One test binary for the area (one link instead of one per file); each file is a module.

#[path = "../common/mod.rs"]
mod common;

mod channel_rights;
mod failover;
mod faults;
mod functions;
mod holder_view;
mod late_acquire;
mod late_acquire_rw;
mod runtime;
mod settings;
mod subscriber;
mod synced;
mod tokens;
mod transient;
