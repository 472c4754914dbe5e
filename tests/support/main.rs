//! The test support itself: the `dlock::testing` harness and the fault-injecting proxy do what the
//! fault tests rely on.
//!
//! One test binary for the area (one link instead of one per file); each file is a module.

#[path = "../common/mod.rs"]
mod common;

mod harness;
mod postgres;
mod proxy;
