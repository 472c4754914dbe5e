//! The Redis side, and nothing of locks: connections per topology (one server, a cluster, a
//! Sentinel-managed primary), the client's own thread that drives them, the cluster slot map,
//! Lua scripts and their loading, and how names become hash-tagged keys.
//!
//! Imports only `settings` and `error`. Bottom to top: `names`, `open`, `thread`, `slots`,
//! `sentinel`, `conn`, `script`, `topology`.

pub(crate) mod acl;
pub(crate) mod conn;
pub(crate) mod names;
pub(crate) mod open;
pub(crate) mod script;
pub(crate) mod sentinel;
pub(crate) mod slots;
pub(crate) mod thread;
pub(crate) mod topology;
