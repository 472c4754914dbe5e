//! The public handles: what users hold. `LockClient` and its builder, `Lock`, `LockGuard`,
//! `MultiLock`, `ReadWriteLock`, `Semaphore`, `current_lock()`, the fence checks and the
//! segmented stock. Each wraps the client's shared state (`machinery::shared::Shared`) and
//! may import every layer below.

pub mod blocking;
pub(crate) mod builder;
pub(crate) mod client;
pub(crate) mod current;
pub(crate) mod default_client;
pub mod fence;
pub(crate) mod guard;
pub mod inspect;
pub(crate) mod lock;
pub(crate) mod multi;
pub(crate) mod rwlock;
pub(crate) mod semaphore;
pub mod stock;
