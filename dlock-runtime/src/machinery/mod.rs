//! The client's machinery: what happens between a lock handle and Redis. Shared state, holds,
//! the local gate and handoff, waiters, the watchdog, orphan clean-up and releases.
//!
//! Imports `settings`, `error` and `store` (the seam, and Redis's `store/redis/backend` and
//! `store/redis/kinds`); nothing here names a public handle.
//! Bottom to top: `telemetry`, `written`, `gate`, `hold`, `scope`, `waiters`, `watchdog`, `failover_watch`,
//! `primary_switch`, `shared`,
//! `orphan`, `release`, `shutdown`.

pub(crate) mod acquire;
pub(crate) mod failover_watch;
pub(crate) mod gate;
pub(crate) mod hold;
pub(crate) mod orphan;
pub(crate) mod primary_switch;
pub(crate) mod release;
pub(crate) mod scope;
pub(crate) mod shard_subscriber;
pub(crate) mod shared;
pub(crate) mod shutdown;
pub(crate) mod telemetry;
pub(crate) mod waiters;
pub(crate) mod watchdog;
pub(crate) mod written;
