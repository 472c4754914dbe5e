//! Reconciliation: recompute every segment's sales from its order records.

use futures_util::future::try_join_all;

use super::scripts;
use crate::error::LockError;

use super::segmented::SegmentedStock;

/// The result of [`SegmentedStock::audit`]: per segment and in total, what the levels say and
/// what the order records say.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Audit {
    /// Units the stock was set up with.
    pub initial: u64,
    /// Units left, from the levels.
    pub remaining: u64,
    /// Units held by orders, from the order records.
    pub sold: u64,
    /// Orders holding stock (an order split over segments counts once per segment).
    pub holders: u64,
    /// Units that came back through give-backs and rolled-back splits.
    pub returned: u64,
    /// Each segment's figures.
    pub segments: Vec<SegmentAudit>,
}

/// One segment's figures in an [`Audit`], read atomically (one script).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct SegmentAudit {
    /// The segment.
    pub segment: u32,
    /// Its Redis key.
    pub key: String,
    /// Units it was set up with.
    pub initial: u64,
    /// Units left.
    pub remaining: u64,
    /// Units its order records say orders hold.
    pub sold: u64,
    /// Orders holding units here.
    pub holders: u64,
    /// Units given back or rolled back into it.
    pub returned: u64,
    /// Order records kept (holders, passes and closed orders).
    pub records: u64,
    /// The level as stored; only something outside dlock can make it negative.
    level: i64,
}

impl SegmentAudit {
    /// `sold + remaining == initial`.
    pub fn is_consistent(&self) -> bool {
        self.level >= 0 && self.sold.checked_add(self.remaining) == Some(self.initial)
    }
}

impl Audit {
    /// True when every segment is consistent: no unit was sold twice or lost.
    pub fn is_consistent(&self) -> bool {
        self.segments.iter().all(SegmentAudit::is_consistent)
            && self.sold + self.remaining == self.initial
    }
}

impl SegmentedStock {
    /// Recomputes, segment by segment, `sold` from the order records and checks
    /// `sold + remaining == initial` ([`Audit::is_consistent`]).
    ///
    /// Each segment is read in one script, so it is consistent on its own even while takes
    /// run; the totals add segments read at slightly different moments. The script walks all
    /// of a segment's records (blocking that segment's Redis for the while): an operator's
    /// tool, not a per-request check.
    pub async fn audit(&self) -> Result<Audit, LockError> {
        let conn = self.shared.stock_conn(&self.name)?;
        let segments = try_join_all(self.keys.iter().enumerate().map(|(i, k)| {
            let mut conn = conn.clone();
            async move {
                let figures: Vec<i64> = scripts::STOCK_AUDIT
                    .key(&k.stock)
                    .key(&k.records)
                    .invoke_async(&mut conn)
                    .await
                    .map_err(|e| self.redis_error(&k.stock, "stock audit", e))?;
                let [initial, level, sold, returned, holders, records] = figures[..] else {
                    return Err(self.not_initialised(i as u32));
                };
                let unsigned = |v: i64| v.max(0) as u64;
                Ok(SegmentAudit {
                    segment: i as u32,
                    key: k.stock.clone(),
                    initial: unsigned(initial),
                    remaining: unsigned(level),
                    sold: unsigned(sold),
                    holders: unsigned(holders),
                    returned: unsigned(returned),
                    records: unsigned(records),
                    level,
                })
            }
        }))
        .await?;
        let sum = |f: fn(&SegmentAudit) -> u64| segments.iter().map(f).sum::<u64>();
        let audit = Audit {
            initial: sum(|s| s.initial),
            remaining: sum(|s| s.remaining),
            sold: sum(|s| s.sold),
            holders: sum(|s| s.holders),
            returned: sum(|s| s.returned),
            segments,
        };
        if !audit.is_consistent() {
            tracing::warn!(stock = %self.name, ?audit, "dlock: stock audit found an inconsistency");
        }
        Ok(audit)
    }
}
