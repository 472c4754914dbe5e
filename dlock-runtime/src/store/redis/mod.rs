//! The Redis store: `backend/` talks to Redis and knows nothing of locks (connections per
//! topology, retries, the script library, key names); `kinds/` knows each lock kind's keys and
//! scripts and builds the calls `backend/` sends. The seam's `link.rs` joins them to the
//! machinery, as `postgres/` is joined.

pub(crate) mod backend;
pub(crate) mod kinds;
