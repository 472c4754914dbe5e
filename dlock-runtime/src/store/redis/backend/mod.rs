//! The Redis side, and nothing of locks: connections per topology (one server, a cluster, a
//! Sentinel-managed primary), the client's own thread that drives them, the cluster slot map
//! and a connection to each master it names, Lua scripts and their loading (one FUNCTION
//! library), and how names become hash-tagged keys.
//!
//! Imports only `settings` and `error`. Bottom to top: `retry`, `names`, `open`, `thread`,
//! `node_conns`, `slots`, `sentinel_ask`, `sentinel_events`, `sentinel`, `library`, `conn`,
//! `script`, `topology`, `sync_conn`.

pub(crate) mod acl;
pub(crate) mod conn;
pub(crate) mod connect_check;
pub(crate) mod library;
pub(crate) mod names;
pub(crate) mod node_conns;
pub(crate) mod open;
pub(crate) mod retry;
pub(crate) mod script;
pub(crate) mod sentinel;
pub(crate) mod sentinel_ask;
pub(crate) mod sentinel_events;
pub(crate) mod slots;
pub(crate) mod sync_conn;
pub(crate) mod thread;
pub(crate) mod topology;
