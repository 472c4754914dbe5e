//! Taking and giving back: the walk over an order's path (see the module docs of `stock`).

use futures_util::future::try_join_all;

use super::scripts;
use crate::error::LockError;

use super::segmented::{SegmentedStock, MAX_ORDER_ID_LEN, MAX_UNITS};
use super::view::Drained;

/// The answer to [`SegmentedStock::take`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
#[must_use]
pub enum Take {
    /// The whole quantity was deducted now, from one segment.
    Taken {
        /// The segment it came from.
        segment: u32,
    },
    /// The quantity was deducted now from several segments, because no single segment held
    /// all of it (an order larger than a segment, or the last units spread thin).
    Split {
        /// Where the units came from; they add up to the quantity.
        parts: Vec<Part>,
    },
    /// Not enough stock: nothing was deducted. Every segment was visited (or seen empty within
    /// the drained view's window) and together they held less than the quantity.
    SoldOut,
    /// This order id already holds its stock (a retry, or a duplicate request): nothing was
    /// deducted now.
    AlreadyTaken,
    /// This order id was given back ([`SegmentedStock::give_back`]), before or after it took:
    /// it cannot take again, so a late take or retry of a cancelled order deducts nothing. Use
    /// a new order id for a new order.
    GivenBack,
}

impl Take {
    /// True for [`Take::Taken`] and [`Take::Split`]: stock was deducted by this call.
    pub fn is_taken(&self) -> bool {
        matches!(self, Take::Taken { .. } | Take::Split { .. })
    }

    /// True when the order holds its stock after this call, whether this call or an earlier
    /// attempt deducted it.
    pub fn holds_stock(&self) -> bool {
        self.is_taken() || *self == Take::AlreadyTaken
    }
}

/// One segment's share of a [`Take::Split`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Part {
    /// The segment.
    pub segment: u32,
    /// Units taken from it.
    pub units: u64,
}

/// An order's record in one segment, as lua/stock/take.lua writes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Record {
    /// `w0`: walked past, holds nothing here.
    Passed,
    /// `w<q>`: took the whole quantity here.
    Whole,
    /// `p<n>/<q>`: holds `n` here of a split order of `q`.
    Part { units: u64, of: u64 },
    /// `r<n>`: given back (`r0` where it held nothing, or never came).
    GivenBack,
    /// `x<n>`: a split that could not complete, returned.
    RolledBack,
}

impl Record {
    fn parse(s: &str) -> Option<Record> {
        let (kind, rest) = s.split_at_checked(1)?;
        let (n, of) = match rest.split_once('/') {
            Some((n, of)) => (n.parse::<u64>().ok()?, Some(of.parse::<u64>().ok()?)),
            None => (rest.parse::<u64>().ok()?, None),
        };
        Some(match (kind, of) {
            ("w", None) if n == 0 => Record::Passed,
            ("w", None) => Record::Whole,
            ("p", Some(of)) => Record::Part { units: n, of },
            ("r", None) => Record::GivenBack,
            ("x", None) => Record::RolledBack,
            _ => return None,
        })
    }
}

/// The outcome of one script at one segment.
enum Step {
    Took(u64),
    Short { left: u64 },
    Seen { record: Record, left: u64 },
}

#[derive(Clone, Copy)]
enum Mode {
    Whole,
    Part,
}

impl SegmentedStock {
    /// Takes `qty` units for `order_id`, or says why not. Safe to retry with the same order id
    /// after any error or timeout: an order id holds stock at most once ([`Take::AlreadyTaken`]).
    /// A retry must ask for the same quantity; if it does not, the first attempt's wins.
    ///
    /// Errors: an empty or over-long order id, a quantity of 0 or above [`MAX_UNITS`], a
    /// stock that was not set up, Redis failures (naming the item and the URL).
    pub async fn take(&self, order_id: &str, qty: u64) -> Result<Take, LockError> {
        self.check_order(order_id)?;
        if qty == 0 || qty > MAX_UNITS {
            return Err(self.invalid(format!(
                "a quantity of {qty} for order {order_id:?}; use 1 to {MAX_UNITS}"
            )));
        }
        let path = self.routing.path(order_id);
        // Sold out as far as this process knows: one round trip of two plain reads, no script,
        // nothing written. The home segment also holds the record of an earlier attempt that
        // took there, so a retry still hears AlreadyTaken rather than SoldOut.
        if self.looks_sold_out().await? && self.home_is_empty_for(path[0], order_id, qty).await? {
            tracing::debug!(stock = %self.name, order = order_id, "dlock: sold out (drained view)");
            return Ok(Take::SoldOut);
        }
        let mut seen_left = 0u64;
        let mut first_here = false;
        for (i, &seg) in path.iter().enumerate() {
            // Once every segment is known empty, a walk that wrote its home record itself (no
            // earlier attempt of this order exists) may stop: it took nothing, so the passes
            // it would leave further on protect nothing.
            if i > 0 && first_here && self.view.state() == Drained::All {
                tracing::debug!(stock = %self.name, order = order_id, "dlock: sold out (walk cut short)");
                return Ok(Take::SoldOut);
            }
            let (record, left) = match self.step(seg, order_id, qty, qty, Mode::Whole).await? {
                Step::Took(_) => {
                    tracing::debug!(stock = %self.name, order = order_id, segment = seg, "dlock: taken");
                    return Ok(Take::Taken { segment: seg });
                }
                Step::Short { left } => {
                    first_here |= i == 0;
                    (Record::Passed, left)
                }
                Step::Seen { record, left } => (record, left),
            };
            match record {
                Record::Passed => seen_left = seen_left.saturating_add(left),
                Record::Whole => return Ok(Take::AlreadyTaken),
                Record::Part { .. } => return self.split(order_id, qty, &path).await,
                Record::GivenBack => return Ok(Take::GivenBack),
                Record::RolledBack => return Ok(Take::SoldOut),
            }
        }
        if seen_left >= qty {
            return self.split(order_id, qty, &path).await;
        }
        tracing::debug!(stock = %self.name, order = order_id, seen_left, "dlock: sold out");
        Ok(Take::SoldOut)
    }

    /// The second walk: take what each segment has until the order is complete. Every attempt
    /// of the order reads the same records in the same order, so all agree on the parts.
    async fn split(&self, order_id: &str, qty: u64, path: &[u32]) -> Result<Take, LockError> {
        let mut of = None;
        let mut need = qty;
        let mut parts = Vec::new();
        let mut took_now = false;
        for &seg in path {
            if need == 0 {
                break;
            }
            let order_qty = of.unwrap_or(qty);
            let units = match self
                .step(seg, order_id, need, order_qty, Mode::Part)
                .await?
            {
                Step::Took(n) => {
                    // Concurrent duplicates may each take some parts; the one that wrote the
                    // first segment's record answers for the order, the others AlreadyTaken.
                    took_now |= of.is_none();
                    of.get_or_insert(qty);
                    n
                }
                Step::Seen {
                    record: Record::Part { units, of: q },
                    ..
                } => {
                    // The first segment of the path fixes the order's quantity for everyone.
                    if of.is_none() {
                        of = Some(q);
                        need = q;
                    }
                    units
                }
                Step::Seen {
                    record: Record::Whole,
                    ..
                } => return Ok(Take::AlreadyTaken),
                Step::Seen {
                    record: Record::GivenBack,
                    ..
                } => return Ok(Take::GivenBack),
                Step::Seen {
                    record: Record::RolledBack,
                    ..
                } => return Ok(Take::SoldOut),
                // The part script upgrades passes and never reports short.
                Step::Seen {
                    record: Record::Passed,
                    ..
                }
                | Step::Short { .. } => 0,
            };
            need = need.saturating_sub(units);
            if units > 0 {
                parts.push(Part {
                    segment: seg,
                    units,
                });
            }
        }
        if need > 0 {
            // Concurrent buyers took what the first walk saw: return the parts, all attempts of
            // this order will read `x` and answer SoldOut too.
            for part in &parts {
                self.give_back_at(part.segment, order_id, "x").await?;
            }
            tracing::debug!(stock = %self.name, order = order_id, need, "dlock: split rolled back");
            return Ok(Take::SoldOut);
        }
        tracing::debug!(stock = %self.name, order = order_id, parts = parts.len(), "dlock: taken in parts");
        Ok(match parts.as_slice() {
            _ if !took_now => Take::AlreadyTaken,
            [one] => Take::Taken {
                segment: one.segment,
            },
            _ => Take::Split { parts },
        })
    }

    /// Gives back the stock `order_id` holds (a cancelled order) and returns how many units
    /// went back: 0 when it holds nothing (never took, or already given back). Idempotent; the
    /// order id cannot take afterwards ([`Take::GivenBack`]), even when this give-back came
    /// first: a take of the order that is late (a client-side timeout on another instance, a
    /// retry still queued) or still walking deducts nothing.
    ///
    /// Cost: one script per segment, sent concurrently (one round trip of latency, but `N`
    /// scripts of server work, and one closing record left on every segment until
    /// [`SegmentedStock::reinit`]). Every segment, because a take of the order may land on any
    /// segment of its path. On an error, some segments may be closed and others not: call it
    /// again (it is idempotent) before treating the order as cancelled.
    pub async fn give_back(&self, order_id: &str) -> Result<u64, LockError> {
        self.check_order(order_id)?;
        let returned: u64 =
            try_join_all((0..self.segments()).map(|seg| self.give_back_at(seg, order_id, "r")))
                .await?
                .into_iter()
                .sum();
        tracing::debug!(stock = %self.name, order = order_id, returned, "dlock: given back");
        Ok(returned)
    }

    /// Closes the order's record at `seg` with `mark` (writing one if it has none) and returns
    /// the units that went back now: 0 if it held nothing here or was closed already.
    async fn give_back_at(&self, seg: u32, order_id: &str, mark: &str) -> Result<u64, LockError> {
        let k = &self.keys[seg as usize];
        let mut conn = self.shared.stock_conn(&self.name)?;
        // The level as i64: only something outside dlock can make it negative, and then the
        // give-back should still return the order's units (audit() reports the level).
        let (code, units, left): (i64, u64, i64) = scripts::STOCK_GIVE_BACK
            .key(&k.stock)
            .key(&k.records)
            .arg(order_id)
            .arg(mark)
            .invoke_async(&mut conn)
            .await
            .map_err(|e| self.redis_error(&k.stock, "stock give_back", e))?;
        if code == -1 {
            return Err(self.not_initialised(seg));
        }
        // A fresh level for the view; our own give-back refilling a segment is seen at once.
        self.view.note(seg, left.max(0) as u64);
        Ok(if code == 1 { units } else { 0 })
    }

    /// One script at one segment.
    async fn step(
        &self,
        seg: u32,
        order_id: &str,
        want: u64,
        order_qty: u64,
        mode: Mode,
    ) -> Result<Step, LockError> {
        let k = &self.keys[seg as usize];
        let mut conn = self.shared.stock_conn(&self.name)?;
        let (code, units, left, record): (i64, u64, u64, String) = scripts::STOCK_TAKE
            .key(&k.stock)
            .key(&k.records)
            .arg(order_id)
            .arg(want)
            .arg(match mode {
                Mode::Whole => "w",
                Mode::Part => "p",
            })
            .arg(order_qty)
            .invoke_async(&mut conn)
            .await
            .map_err(|e| self.redis_error(&k.stock, "stock take", e))?;
        if code == -1 {
            return Err(self.not_initialised(seg));
        }
        self.view.note(seg, left);
        Ok(match code {
            1 => Step::Took(units),
            0 => Step::Short { left },
            _ => Step::Seen {
                record: Record::parse(&record).ok_or_else(|| LockError::WrongType {
                    name: self.name.clone(),
                    key: k.records.clone(),
                    role: "stock order records".into(),
                })?,
                left,
            },
        })
    }

    /// True when `seg` has fewer than `qty` units and no record of the order: then this
    /// attempt may answer SoldOut without walking (it takes nothing, so it needs no passes).
    async fn home_is_empty_for(
        &self,
        seg: u32,
        order_id: &str,
        qty: u64,
    ) -> Result<bool, LockError> {
        let k = &self.keys[seg as usize];
        let mut conn = self.shared.stock_conn(&self.name)?;
        let (left, record): (Option<u64>, Option<String>) = redis::pipe()
            .hget(&k.stock, "left")
            .hget(&k.records, order_id)
            .query_async(&mut conn)
            .await
            .map_err(|e| self.redis_error(&k.stock, "stock take", e))?;
        let left = left.ok_or_else(|| self.not_initialised(seg))?;
        self.view.note(seg, left);
        Ok(record.is_none() && left < qty)
    }

    /// True when every segment is known empty; refreshes stale entries with one read per
    /// segment (one task at a time), instead of a walk per buyer.
    async fn looks_sold_out(&self) -> Result<bool, LockError> {
        if self.view.ttl().is_zero() {
            return Ok(false);
        }
        match self.view.state() {
            Drained::No => Ok(false),
            Drained::All => Ok(true),
            Drained::AllButStale => {
                let _one_at_a_time = self.view.refresh.lock().await;
                if self.view.state() == Drained::AllButStale {
                    self.levels().await?;
                }
                Ok(self.view.state() == Drained::All)
            }
        }
    }

    fn check_order(&self, order_id: &str) -> Result<(), LockError> {
        if order_id.is_empty() || order_id.len() > MAX_ORDER_ID_LEN {
            return Err(self.invalid(format!(
                "order id of {} bytes; use 1 to {MAX_ORDER_ID_LEN} bytes (it is what makes a \
                 retry safe, so it must name the order)",
                order_id.len()
            )));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::Record;

    #[test]
    fn records_parse() {
        assert_eq!(Record::parse("w0"), Some(Record::Passed));
        assert_eq!(Record::parse("w12"), Some(Record::Whole));
        assert_eq!(
            Record::parse("p3/9"),
            Some(Record::Part { units: 3, of: 9 })
        );
        assert_eq!(Record::parse("r3"), Some(Record::GivenBack));
        assert_eq!(Record::parse("x0"), Some(Record::RolledBack));
        for bad in ["", "w", "q1", "w1/2", "p1", "wx", "é1"] {
            assert_eq!(Record::parse(bad), None, "{bad}");
        }
    }
}
