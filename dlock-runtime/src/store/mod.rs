//! The store seam: what the machinery asks of the place locks are kept, whichever it is.
//!
//! The machinery (acquire loop, releases, orphan clean-up, the watchdog) talks to a store only
//! through a [`link::Link`] (one ordered connection: a release and then an acquire of one key,
//! sent on one link, run in that order) and reads its failures through
//! [`error::StoreError`] (broken link, "not now", refused). The operations are the same for
//! every store: acquire (or re-enter) for an owner, release one count at most once per request
//! id, undo a re-entry, renew many holds in one call, force an unlock, read whether a lock is
//! held and for how long; each store answers in the shapes the kinds decode.
//!
//! - Redis (`redis/`): the kinds (`redis/kinds/`) build script calls, `redis/backend/` sends
//!   them.
//! - PostgreSQL (`postgres/`, feature `postgres`): lease rows and SQL functions in a schema the
//!   user names, releases announced with NOTIFY.
//! - ZooKeeper (`zookeeper/`, feature `zookeeper`): Curator's recipes, ephemeral sequential
//!   children in line under a lock node, the session as the lease, a watch on the child before.
//!
//! Waiting for a release (pub/sub or LISTEN) plugs into `machinery/waiters.rs`.

pub(crate) mod error;
pub(crate) mod link;
#[cfg(feature = "postgres")]
pub(crate) mod postgres;
pub(crate) mod redis;
pub(crate) mod stored;
#[cfg(feature = "zookeeper")]
pub(crate) mod zookeeper;
