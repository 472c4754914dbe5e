//! The four ways to sell one hot item from a PostgreSQL table, each as the code a service would
//! run per buyer. The locks are dlock's PostgreSQL store (`LockClient::connect("postgres://..")`)
//! on the same server as the stock.

use std::sync::atomic::AtomicBool;

use dlock::{distributed_lock, LockClient};

use crate::pg_stock::StockDb;
use crate::strategies::{from_any_segment, BuyError, Outcome};

/// What every strategy shares: the lock client and the stock table's connections.
#[derive(Clone)]
pub struct PgShop {
    pub locks: LockClient,
    pub stock: StockDb,
    /// Prefix of this run's rows, so a shared server keeps runs apart.
    pub prefix: String,
}

impl PgShop {
    /// The `item` column of a stock counter.
    pub fn item(&self, name: &str) -> String {
        format!("{}{name}", self.prefix)
    }
}

/// The tutorial's first version again: SELECT the stock, check it, UPDATE it back, each
/// statement its own transaction. Two buyers who read the same level both sell, and the second
/// write undoes the first's decrement.
pub async fn read_check_write(shop: &PgShop, name: &str) -> Result<Outcome, BuyError> {
    let item = shop.item(name);
    let db = shop.stock.conn();
    let left: i64 = db.client.query_one(&db.read, &[&item]).await?.get(0);
    if left <= 0 {
        return Ok(Outcome::Refused);
    }
    db.client.execute(&db.write, &[&item, &(left - 1)]).await?;
    Ok(Outcome::Sold)
}

/// (a) No lock.
pub async fn no_lock(shop: &PgShop, item: &str) -> Result<Outcome, BuyError> {
    read_check_write(shop, &format!("{item}:a")).await
}

/// (b) The same code under one dlock lock per item, kept in PostgreSQL: correct, and every
/// buyer queues for that lock.
#[distributed_lock(key = "seckill:{item}", wait = "120s", client = shop.locks)]
pub async fn lock_per_item(shop: &PgShop, item: &str) -> Result<Outcome, BuyError> {
    read_check_write(shop, &format!("{item}:b")).await
}

/// (c) The stock in segment rows, one lock per segment: buyers queue per segment.
pub async fn segment_locks(
    shop: &PgShop,
    item: &str,
    buyer: usize,
    drained: &[AtomicBool],
) -> Result<Outcome, BuyError> {
    from_any_segment(buyer, drained, |segment| lock_segment(shop, item, segment)).await
}

#[distributed_lock(key = "seckill:{item}#{segment}", wait = "120s", client = shop.locks)]
async fn lock_segment(shop: &PgShop, item: &str, segment: usize) -> Result<Outcome, BuyError> {
    read_check_write(shop, &format!("{item}:c#{segment}")).await
}

/// (f) What a PostgreSQL user writes without any distributed lock: the check and the
/// decrement in one statement. PostgreSQL locks the row for the statement's transaction, so
/// concurrent buyers queue on that row inside the server, and one that finds `units > 0` no
/// longer true (after waiting) updates nothing: correct, one round trip per buyer.
pub async fn one_update(shop: &PgShop, item: &str) -> Result<Outcome, BuyError> {
    let item = shop.item(&format!("{item}:f"));
    let db = shop.stock.conn();
    let taken = db.client.execute(&db.take, &[&item]).await?;
    Ok(if taken == 1 {
        Outcome::Sold
    } else {
        Outcome::Refused
    })
}
