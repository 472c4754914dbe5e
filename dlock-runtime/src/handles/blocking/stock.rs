//! The blocking face of [`crate::SegmentedStock`]: each call is one atomic script, run on the
//! client's thread like every blocking call; nothing is held between calls, so nothing belongs
//! to the calling thread.

use std::sync::Arc;
use std::time::Duration;

use crate::error::LockError;
use crate::handles::blocking::call::run;
use crate::handles::stock::{Audit, Init, SegmentedStock as AsyncStock, Take};
use crate::machinery::shared::Shared;

/// A [`crate::SegmentedStock`] for blocking code; made by
/// [`LockClient::segmented_stock`](super::LockClient::segmented_stock). Refused when made on a
/// store other than Redis, as the async one is.
///
/// ```no_run
/// # extern crate dlock_runtime as dlock;
/// # fn demo(locks: dlock::blocking::LockClient) -> Result<(), dlock::LockError> {
/// let stock = locks.segmented_stock("sku:42", 16)?;
/// stock.init(1_000)?;
/// if stock.take("order-7", 1)?.is_taken() {
///     // ship it; a cancelled order calls stock.give_back("order-7")
/// }
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct SegmentedStock {
    shared: Arc<Shared>,
    stock: AsyncStock,
}

impl std::fmt::Debug for SegmentedStock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SegmentedStock")
            .field("name", &self.stock.name())
            .field("segments", &self.stock.segments())
            .finish_non_exhaustive()
    }
}

impl SegmentedStock {
    pub(super) fn new(shared: Arc<Shared>, stock: AsyncStock) -> Self {
        SegmentedStock { shared, stock }
    }

    /// See [`crate::SegmentedStock::drained_for`].
    pub fn drained_for(self, ttl: Duration) -> Self {
        SegmentedStock {
            stock: self.stock.drained_for(ttl),
            shared: self.shared,
        }
    }

    /// The item's name, as given.
    pub fn name(&self) -> &str {
        self.stock.name()
    }

    /// The async stock this wraps, for code that has a runtime too.
    pub fn as_async(&self) -> &AsyncStock {
        &self.stock
    }

    /// See [`crate::SegmentedStock::init`].
    pub fn init(&self, total: u64) -> Result<Init, LockError> {
        let stock = self.stock.clone();
        run(
            &self.shared,
            self.name(),
            async move { stock.init(total).await },
        )?
    }

    /// See [`crate::SegmentedStock::reinit`].
    pub fn reinit(&self, total: u64) -> Result<(), LockError> {
        let stock = self.stock.clone();
        run(&self.shared, self.name(), async move {
            stock.reinit(total).await
        })?
    }

    /// See [`crate::SegmentedStock::take`].
    pub fn take(&self, order_id: &str, qty: u64) -> Result<Take, LockError> {
        let (stock, order) = (self.stock.clone(), order_id.to_owned());
        run(&self.shared, self.name(), async move {
            stock.take(&order, qty).await
        })?
    }

    /// See [`crate::SegmentedStock::give_back`].
    pub fn give_back(&self, order_id: &str) -> Result<u64, LockError> {
        let (stock, order) = (self.stock.clone(), order_id.to_owned());
        run(&self.shared, self.name(), async move {
            stock.give_back(&order).await
        })?
    }

    /// See [`crate::SegmentedStock::remaining`].
    pub fn remaining(&self) -> Result<u64, LockError> {
        let stock = self.stock.clone();
        run(
            &self.shared,
            self.name(),
            async move { stock.remaining().await },
        )?
    }

    /// See [`crate::SegmentedStock::audit`].
    pub fn audit(&self) -> Result<Audit, LockError> {
        let stock = self.stock.clone();
        run(
            &self.shared,
            self.name(),
            async move { stock.audit().await },
        )?
    }
}
