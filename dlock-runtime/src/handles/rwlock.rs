//! `ReadWriteLock`: many readers or one writer, as two [`Lock`] handles on one Redis hash.

use std::sync::Arc;

use crate::handles::lock::Lock;
use crate::machinery::shared::Shared;
use crate::store::redis::kinds::{LockKind, Read, Write};

/// A read-write lock called `name`; made by
/// [`LockClient::read_write_lock`](crate::LockClient::read_write_lock). Cheap to clone; holds
/// no lock by itself.
///
/// [`ReadWriteLock::read`] and [`ReadWriteLock::write`] are ordinary [`Lock`] handles (`ttl`,
/// `lease`, `wait`, `acquire`, `try_acquire`), and their guards ordinary
/// [`LockGuard`](crate::LockGuard)s:
///
/// * many readers hold at once, or one writer; each reader has its own lease, renewed by the
///   watchdog, and a reader whose process died frees its share when its own lease ends,
///   without stretching the other readers' leases;
/// * reentrant along the call chain like the plain lock: a read inside one's read scope, a
///   write inside one's write scope;
/// * a writer may take the read side inside its write scope (a downgrade: release the write
///   guard and the read guard still holds);
/// * asking for the write side inside one's own read scope fails at once with
///   [`LockError::WouldDeadlock`](crate::LockError::WouldDeadlock) (two readers upgrading
///   would wait for each other forever);
/// * writers are not starved: once a writer is waiting, readers that do not hold the lock yet
///   queue behind it (re-entries of held reads still pass), so it waits at most for the
///   readers already inside;
/// * a write release wakes waiting readers together (or a writer); a read release wakes
///   nobody until the last reader leaves.
///
/// ```no_run
/// # extern crate dlock_runtime as dlock;
/// # async fn demo(client: dlock::LockClient) -> Result<(), dlock::LockError> {
/// let prices = client.read_write_lock("prices");
/// let reading = prices.read().acquire().await?;   // other readers may hold it too
/// reading.release().await?;
/// let writing = prices.write().acquire().await?;  // alone
/// writing.release().await?;
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
#[must_use]
pub struct ReadWriteLock {
    shared: Arc<Shared>,
    name: String,
    /// The two sides' kinds: dlock's own, or Redisson's (see `LockClient::redisson_read_write_lock`).
    read: Arc<dyn LockKind>,
    write: Arc<dyn LockKind>,
}

impl ReadWriteLock {
    pub(crate) fn new(shared: Arc<Shared>, name: String) -> Self {
        Self::of_kinds(shared, name, Arc::new(Read), Arc::new(Write))
    }

    /// A read-write lock whose sides are `read` and `write`.
    pub(crate) fn of_kinds(
        shared: Arc<Shared>,
        name: String,
        read: Arc<dyn LockKind>,
        write: Arc<dyn LockKind>,
    ) -> Self {
        ReadWriteLock {
            shared,
            name,
            read,
            write,
        }
    }

    /// The shared side: held by many readers at once, never beside a writer.
    pub fn read(&self) -> Lock {
        Lock::of_kind(self.shared.clone(), self.name.clone(), self.read.clone())
    }

    /// The exclusive side: one writer, no readers.
    pub fn write(&self) -> Lock {
        Lock::of_kind(self.shared.clone(), self.name.clone(), self.write.clone())
    }

    /// The lock's name, as given.
    pub fn name(&self) -> &str {
        &self.name
    }
}
