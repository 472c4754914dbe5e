//! Lock-per-segment mode: the stock lives in your database, dlock picks and locks a segment.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use crate::error::LockError;
use crate::handles::client::LockClient;
use crate::handles::lock::Lock;
use crate::machinery::shared::Shared;
use crate::store::redis::backend::names::{cluster_slot, hash_tagged};

use super::keys::{spread, Routing};
use super::segmented::{check_name_and_segments, DEFAULT_DRAINED_FOR};
use super::view::{Drained, DrainedView};

/// Segments of stock kept in your own database (N rows instead of one hot row), each guarded
/// by an ordinary dlock lock. [`SegmentLocks::deduct`] picks a segment, holds its lock and runs
/// your deduction; if that segment is empty it tries the next.
///
/// ```no_run
/// # extern crate dlock_runtime as dlock;
/// # async fn demo(client: dlock::LockClient) -> Result<(), dlock::LockError> {
/// # struct Db; impl Db {
/// #   async fn stock(&self, _: u32) -> Result<u64, dlock::LockError> { Ok(1) }
/// #   async fn set_stock(&self, _: u32, _: u64, _fence: u64) -> Result<(), dlock::LockError> { Ok(()) } }
/// # let db = Db;
/// use dlock::SegmentLocks;
///
/// let locks = SegmentLocks::new(&client, "sku:42", 16)?;
/// let db = &db;
/// let sold = locks
///     .deduct("order-7", |seg| async move {
///         // Runs while this process holds segment `seg.segment`'s lock.
///         let left = db.stock(seg.segment).await?;
///         if left == 0 {
///             return Ok(None); // empty: try another segment
///         }
///         db.set_stock(seg.segment, left - 1, seg.fencing_token).await?;
///         Ok(Some(seg.segment))
///     })
///     .await?;
/// assert!(sold.is_some(), "sold out when None");
/// # Ok(()) }
/// ```
///
/// Segment order and the drained view work as for [`SegmentedStock`](super::segmented::SegmentedStock):
/// a home segment from the route id, then every other segment once; segments your closure
/// reported empty are skipped for [`SegmentLocks::drained_for`], and while all of them are,
/// only the home segment is tried. Idempotency is yours: record the order id in the same
/// transaction as the deduction.
#[derive(Clone)]
pub struct SegmentLocks {
    shared: Arc<Shared>,
    name: String,
    lock_names: Arc<[String]>,
    routing: Arc<Routing>,
    view: Arc<DrainedView>,
    ttl: Option<Duration>,
    wait: Option<Duration>,
}

/// What the closure given to [`SegmentLocks::deduct`] gets: the segment whose lock is held.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct SegmentHold {
    /// The segment (0-based); deduct from this one.
    pub segment: u32,
    /// The lock's fencing token: store it with the row and reject writes with a smaller one,
    /// so a holder whose lease ran out (a long pause) cannot overwrite a newer holder's write.
    pub fencing_token: u64,
}

impl SegmentLocks {
    /// Locks for `segments` segments of the item `name`. The lock of segment `i` is an
    /// ordinary lock named [`SegmentLocks::lock_name`]`(i)`; the names are chosen so that the
    /// locks of one item land in distinct cluster slots.
    pub fn new(
        client: &LockClient,
        name: impl Into<String>,
        segments: u32,
    ) -> Result<Self, LockError> {
        let name = name.into();
        check_name_and_segments(&name, segments)?;
        let prefix = &client.shared.prefix;
        let lock_names = (0..segments)
            .map(|i| {
                spread(
                    i,
                    segments,
                    |suffix| format!("{name}#{i}{suffix}"),
                    // The slot of the lock's key, `<prefix>{<escaped name>}`.
                    |lock| cluster_slot(&hash_tagged(prefix, lock)),
                )
            })
            .collect();
        Ok(SegmentLocks {
            lock_names,
            routing: Arc::new(Routing::new(segments)),
            view: Arc::new(DrainedView::new(segments, DEFAULT_DRAINED_FOR)),
            shared: client.shared.clone(),
            name,
            ttl: None,
            wait: None,
        })
    }

    /// The lease of each segment lock (see [`crate::Lock::ttl`]).
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = Some(ttl);
        self
    }

    /// How long to wait for a busy segment's lock (see [`crate::Lock::wait`]).
    pub fn wait(mut self, wait: Duration) -> Self {
        self.wait = Some(wait);
        self
    }

    /// How long a segment your closure reported empty is skipped (default 100 ms).
    pub fn drained_for(mut self, ttl: Duration) -> Self {
        self.view = Arc::new(self.view.with_ttl(ttl));
        self
    }

    /// The lock name of segment `i`: `<name>#<i>`, sometimes with a suffix that moves it to
    /// another cluster slot.
    ///
    /// # Panics
    /// If `i` is not below the segment count.
    pub fn lock_name(&self, i: u32) -> &str {
        &self.lock_names[i as usize]
    }

    /// The segment a route id tries first.
    pub fn home_segment(&self, route: &str) -> u32 {
        self.routing.home(route)
    }

    /// Runs `deduct` on one segment at a time, holding that segment's lock, until it returns
    /// `Ok(Some(_))` (done), `Err(_)` (returned as is), or every segment said `Ok(None)`
    /// (empty): then the answer is `Ok(None)`, sold out. `route` (an order or buyer id) picks
    /// the first segment.
    ///
    /// The closure runs inside the lock's [`scope`](crate::LockGuard::scope), so code in it
    /// that takes the same segment lock re-enters it. The lock is released before the next
    /// segment is tried, and before this returns.
    pub async fn deduct<T, E, F, Fut>(&self, route: &str, mut deduct: F) -> Result<Option<T>, E>
    where
        F: FnMut(SegmentHold) -> Fut,
        Fut: Future<Output = Result<Option<T>, E>>,
        E: From<LockError>,
    {
        let path = self.routing.path(route);
        // Stale entries are tried again, fresh ones skipped.
        let all_drained = self.view.state() == Drained::All;
        for (i, &seg) in path.iter().enumerate() {
            // While everything looks drained, the home segment alone answers: one lock, not N.
            if all_drained && i > 0 {
                break;
            }
            if !all_drained && self.view.is_drained(seg) {
                continue;
            }
            let mut lock = Lock::new(self.shared.clone(), self.lock_names[seg as usize].clone());
            if let Some(ttl) = self.ttl {
                lock = lock.ttl(ttl);
            }
            if let Some(wait) = self.wait {
                lock = lock.wait(wait);
            }
            let guard = lock.acquire().await?;
            let hold = SegmentHold {
                segment: seg,
                fencing_token: guard.fencing_token(),
            };
            let result = guard.scope(deduct(hold)).await;
            if guard.is_lost() {
                tracing::warn!(stock = %self.name, segment = seg, "dlock: segment lock lost while the deduction ran; rely on the fencing token");
            }
            guard.release_logged().await;
            match result? {
                Some(done) => {
                    self.view.note(seg, 1);
                    tracing::debug!(stock = %self.name, segment = seg, "dlock: deducted under segment lock");
                    return Ok(Some(done));
                }
                None => self.view.note(seg, 0),
            }
        }
        tracing::debug!(stock = %self.name, route, "dlock: every segment reported empty");
        Ok(None)
    }
}

impl std::fmt::Debug for SegmentLocks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SegmentLocks")
            .field("name", &self.name)
            .field("segments", &self.lock_names.len())
            .finish_non_exhaustive()
    }
}
