//! `SegmentedStock` itself: its keys, set-up and totals. Takes and give-backs are in
//! `take.rs`, the audit in `audit.rs`.

use std::sync::Arc;
use std::time::Duration;

use futures_util::future::try_join_all;

use crate::error::LockError;
use crate::handles::client::LockClient;

use crate::machinery::shared::Shared;

use super::keys::{self, Routing, SegmentKeys};
use super::scripts;
use super::view::DrainedView;

/// Most segments one item may have. Each is a key a take may visit; beyond a few hundred the
/// walk through drained segments costs more than the spreading gains.
pub const MAX_SEGMENTS: u32 = 256;

/// Most units an item, or one order, may have: 2^53 - 1. Redis's Lua counts in doubles, which
/// are exact integers only up to there.
pub const MAX_UNITS: u64 = (1 << 53) - 1;

/// Longest order id accepted, in bytes. Ids are stored once per segment visited.
pub const MAX_ORDER_ID_LEN: usize = 512;

/// How long a segment seen empty is assumed to stay empty, unless set with
/// [`SegmentedStock::drained_for`].
pub const DEFAULT_DRAINED_FOR: Duration = Duration::from_millis(100);

/// One item's stock, split into segments on distinct Redis Cluster slots, each its own key with
/// its own hash tag, so a cluster spreads a hot item over its masters.
///
/// ```no_run
/// # extern crate dlock_runtime as dlock;
/// # async fn demo(client: dlock::LockClient) -> Result<(), dlock::LockError> {
/// use dlock::stock::{Init, Take};
/// use dlock::SegmentedStock;
///
/// let stock = SegmentedStock::new(&client, "sku:42", 16)?;
/// // 63 units in 8 segments, 62 in the other 8; a second init changes nothing.
/// if let Init::Existing { total } = stock.init(1_000).await? {
///     println!("already set up with {total} units");
/// }
/// match stock.take("order-7", 1).await? {
///     Take::Taken { segment } => println!("sold from segment {segment}"),
///     Take::SoldOut => println!("sold out"),
///     Take::AlreadyTaken => println!("a retry: order-7 already holds its unit"),
///     other => println!("{other:?}"),
/// }
/// stock.give_back("order-7").await?;        // order cancelled: the unit returns
/// assert_eq!(stock.remaining().await?, 1_000);
/// # Ok(()) }
/// ```
///
/// Cheap to clone; clones share the drained view. For stock kept in your own database, see
/// [`SegmentLocks`](crate::SegmentLocks): one dlock lock per segment around your deduction.
///
/// # How a take works
///
/// * **Routing.** An order id hashes to a *path*: a home segment, then every other segment once,
///   in an order that depends on the id (so buyers whose home is empty do not all pile onto the
///   same neighbour). Every attempt of one order id, in any process, walks the same path.
/// * **One script per step.** At each segment the script reads the order's record there: none
///   and enough stock -> deduct and record `w<q>`; none and too little -> record a *pass* (`w0`)
///   and go on. A recorded take answers [`Take::AlreadyTaken`](crate::stock::Take::AlreadyTaken); a pass is walked past; a
///   closed record (given back) answers [`Take::GivenBack`](crate::stock::Take::GivenBack) and ends the walk.
/// * **Why passes are recorded.** A retry (lost reply, client-side timeout, a duplicate request)
///   walks the same path and stops where the first attempt took, never at a segment the first
///   attempt walked past but that has stock again since: that is how a retry never deducts
///   twice without any key shared by all segments.
/// * **Split orders.** When no single segment holds the whole quantity but the levels seen add
///   up to it, a second walk takes what each segment has (`p<n>/<q>`) until the order is
///   complete: [`Take::Split`](crate::stock::Take::Split). If concurrent buyers took the units meanwhile, the parts go
///   back and the answer is [`Take::SoldOut`](crate::stock::Take::SoldOut): the stock really was not there for it. Never a
///   sold-out answer while the segments together hold the quantity at the time they are read.
///   Parts are taken one round trip apart, so while a split that will not complete holds
///   some, a concurrent buyer can find them gone: with multi-unit orders the last few units
///   can be refused once and sell to a later buyer.
/// * **Give-back closes every segment.** [`SegmentedStock::give_back`] visits every segment
///   (they are all on the order's path), returns what the order holds there and leaves a
///   closed record (`r<n>`), including `r0` where the order holds nothing or has no record
///   yet. A take never deducts where its order has a closed record, so once a give-back has
///   run, a take of that order deducts nothing wherever it lands: a late take (timed out on one
///   instance, cancelled from another, then arriving), or one still walking. Per segment the
///   two scripts are atomic: a take that landed first is returned by the give-back; one that
///   lands after finds the closed record.
/// * **Drained view.** Replies carry the segment's level; segments seen empty are remembered for
///   [`SegmentedStock::drained_for`] (default 100 ms). While every segment is known empty, a take
///   costs one round trip (the home segment, which also answers a retry of an order that took
///   there) instead of one per segment. Within that window a unit given back by *another*
///   process may be missed; this process's own give-backs update the view at once.
///
/// # Guarantees (checked by `tests/stock_*.rs` against a real Redis)
///
/// Per segment and so in total: `remaining + sold == initial` at every instant, levels never go
/// negative, each order id holds stock at most once whatever the retries, an order given back
/// holds nothing afterwards whether its take came before or after, and a walk that finds
/// no stock has visited every segment, so stock does not strand in a drained segment's
/// neighbours while buyers are turned away. [`SegmentedStock::audit`] recomputes all of it from
/// the order records.
///
/// # Costs
///
/// A take is one round trip while its home segment has stock, one more per drained segment it
/// walks past, and one in all once the view knows every segment is empty. A record per order
/// per segment visited (a few bytes) stays until [`SegmentedStock::reinit`]: the records are
/// what make retries safe, so they must outlive any retry. A give-back is one script per
/// segment, sent concurrently, and leaves a record on every segment.
///
/// Redis only: its scripts are Redis scripts. A PostgreSQL client refuses to make one, naming
/// the item. Synchronous code uses [`crate::blocking::SegmentedStock`].
#[derive(Clone)]
pub struct SegmentedStock {
    pub(super) shared: Arc<Shared>,
    pub(super) name: String,
    pub(super) keys: Arc<[SegmentKeys]>,
    meta: String,
    pub(super) routing: Arc<Routing>,
    pub(super) view: Arc<DrainedView>,
}

/// What [`SegmentedStock::init`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
#[must_use]
pub enum Init {
    /// The stock was set up now with the given total.
    Created,
    /// The stock already existed (another instance set it up, or a restart): nothing changed.
    /// Call [`SegmentedStock::reinit`] to start over on purpose.
    Existing {
        /// The total it was set up with.
        total: u64,
    },
}

impl SegmentedStock {
    /// A handle on the item `name` split into `segments` segments. Nothing is sent to Redis.
    ///
    /// The segment count is part of the keys: every handle on one item must use the same
    /// count ([`SegmentedStock::init`] checks it against the stored set-up).
    pub fn new(
        client: &LockClient,
        name: impl Into<String>,
        segments: u32,
    ) -> Result<Self, LockError> {
        let name = name.into();
        check_name_and_segments(&name, segments)?;
        // Refused at once on a store without Redis keys, not at the first take.
        client.shared.stock_conn(&name)?;
        let prefix = &client.shared.prefix;
        Ok(SegmentedStock {
            keys: keys::segment_keys(prefix, &name, segments).into(),
            meta: keys::meta_key(prefix, &name),
            routing: Arc::new(Routing::new(segments)),
            view: Arc::new(DrainedView::new(segments, DEFAULT_DRAINED_FOR)),
            shared: client.shared.clone(),
            name,
        })
    }

    /// How long a segment seen empty is assumed to stay empty (default 100 ms). Longer saves
    /// round trips after a sell-out; shorter notices sooner that another process gave stock
    /// back. `Duration::ZERO` turns the view off.
    pub fn drained_for(mut self, ttl: Duration) -> Self {
        self.view = Arc::new(self.view.with_ttl(ttl));
        self
    }

    /// The item's name, as given.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The number of segments.
    pub fn segments(&self) -> u32 {
        self.keys.len() as u32
    }

    /// The Redis key of segment `i` (a hash with the fields `left` and `initial`); its order
    /// records are in `<key>:orders`. Each segment has its own hash tag, in its own slot.
    ///
    /// # Panics
    /// If `i >= self.segments()`.
    pub fn segment_key(&self, i: u32) -> &str {
        &self.keys[i as usize].stock
    }

    /// The segment an order id tries first.
    pub fn home_segment(&self, order_id: &str) -> u32 {
        self.routing.home(order_id)
    }

    /// Sets the stock up with `total` units spread over the segments (the remainder one unit
    /// each to the first segments), unless it already exists: then nothing changes and the
    /// answer is [`Init::Existing`]. Safe to call from every instance at start-up.
    ///
    /// Errors: a total above [`MAX_UNITS`], or an existing set-up with another segment count.
    pub async fn init(&self, total: u64) -> Result<Init, LockError> {
        self.set_up(total, false).await
    }

    /// Sets the stock to `total` units whatever it held, and forgets every order record (so
    /// earlier order ids can take again and give-backs of earlier orders return nothing). Not
    /// atomic across segments: do not run it while takes are in flight.
    pub async fn reinit(&self, total: u64) -> Result<(), LockError> {
        self.set_up(total, true).await.map(|_| ())
    }

    async fn set_up(&self, total: u64, force: bool) -> Result<Init, LockError> {
        if total > MAX_UNITS {
            return Err(self.invalid(format!(
                "a total of {total} units is above the limit of {MAX_UNITS} (2^53 - 1, the \
                 largest integer Redis's Lua counts exactly)"
            )));
        }
        let n = u64::from(self.segments());
        let mut conn = self.shared.stock_conn(&self.name)?;
        let (created, old_total, old_segments): (i64, u64, u64) = scripts::STOCK_META
            .key(&self.meta)
            .arg(total)
            .arg(n)
            .arg(if force { "1" } else { "0" })
            .invoke_async(&mut conn)
            .await
            .map_err(|e| self.redis_error(&self.meta, "stock init", e))?;
        if created == 0 {
            if old_segments != n {
                return Err(self.invalid(format!(
                    "it was set up with {old_segments} segments, this handle has {n}; the \
                     segment count is part of the keys: use {old_segments}, or reinit()"
                )));
            }
            return Ok(Init::Existing { total: old_total });
        }
        self.view.clear();
        let conn = self.shared.stock_conn(&self.name)?;
        try_join_all(self.keys.iter().enumerate().map(|(i, k)| {
            let units = total / n + u64::from((i as u64) < total % n);
            let mut conn = conn.clone();
            async move {
                scripts::STOCK_INIT
                    .key(&k.stock)
                    .key(&k.records)
                    .arg(units)
                    .invoke_async::<i64>(&mut conn)
                    .await
                    .map_err(|e| self.redis_error(&k.stock, "stock init", e))
            }
        }))
        .await?;
        tracing::debug!(stock = %self.name, total, segments = n, force, "dlock: stock set up");
        Ok(Init::Created)
    }

    /// Units left over all segments (read one by one, so only exact when no take is running).
    pub async fn remaining(&self) -> Result<u64, LockError> {
        Ok(self.levels().await?.into_iter().sum())
    }

    /// Every segment's level; feeds the drained view.
    pub(super) async fn levels(&self) -> Result<Vec<u64>, LockError> {
        let conn = self.shared.stock_conn(&self.name)?;
        try_join_all(self.keys.iter().enumerate().map(|(i, k)| {
            let mut conn = conn.clone();
            async move {
                let left: Option<u64> = redis::cmd("HGET")
                    .arg(&k.stock)
                    .arg("left")
                    .query_async(&mut conn)
                    .await
                    .map_err(|e| self.redis_error(&k.stock, "stock remaining", e))?;
                let left = left.ok_or_else(|| self.not_initialised(i as u32))?;
                self.view.note(i as u32, left);
                Ok::<_, LockError>(left)
            }
        }))
        .await
    }

    pub(super) fn invalid(&self, reason: String) -> LockError {
        LockError::invalid(&self.name, format!("segmented stock: {reason}"))
    }

    pub(super) fn not_initialised(&self, segment: u32) -> LockError {
        self.invalid(format!(
            "segment {segment} ({}) does not exist: call init() first, with the same segment \
             count on every handle (or reinit() if the keys were deleted after init)",
            self.keys[segment as usize].stock
        ))
    }

    pub(super) fn redis_error(
        &self,
        key: &str,
        op: &'static str,
        e: redis::RedisError,
    ) -> LockError {
        self.shared.redis_error(&self.name, key, op, e)
    }
}

impl std::fmt::Debug for SegmentedStock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SegmentedStock")
            .field("name", &self.name)
            .field("segments", &self.segments())
            .field("drained_for", &self.view.ttl())
            .finish_non_exhaustive()
    }
}

pub(crate) fn check_name_and_segments(name: &str, segments: u32) -> Result<(), LockError> {
    if name.is_empty() {
        return Err(LockError::invalid(
            name,
            "the stock name is empty; name the item, e.g. \"sku:42\"",
        ));
    }
    if segments == 0 || segments > MAX_SEGMENTS {
        return Err(LockError::invalid(
            name,
            format!(
                "segmented stock with {segments} segments; use 1 to {MAX_SEGMENTS} (a few \
                 per cluster master is plenty)"
            ),
        ));
    }
    Ok(())
}
