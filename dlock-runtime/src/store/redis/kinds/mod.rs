//! The lock-kind seam: everything one kind of lock sends to Redis, in one place.
//!
//! A kind says which script calls take, give back, renew and undo a hold, with which keys and
//! arguments, and how to read their replies. The acquire loop, guards, orphan clean-up and the
//! watchdog call these builders and never build KEYS/ARGV by position themselves, so a new kind
//! (read-write, semaphore, fair) is a new implementation here, not a `match` in four files.
//! Waiting, renewal scheduling, orphan clean-up and the lost signal stay shared.

mod fair;
mod plain;
mod redisson;
mod redisson_rw;
mod rw;
mod seam;
mod semaphore;

pub(crate) use fair::Fair;
pub(crate) use plain::Plain;
pub(crate) use redisson::{client_uuid, RedissonLock};
pub(crate) use redisson_rw::{RedissonRead, RedissonWrite};
/// The PostgreSQL store passes the writer's claim lifetime as a value.
#[cfg(feature = "postgres")]
pub(crate) use rw::WRITER_INTENT;
pub(crate) use rw::{Read, Write};
pub(crate) use seam::{Attempt, Claim, LockKind, Nested};
pub(crate) use semaphore::{stored_permits, Semaphore};
