//! The four ways to sell one hot item from ZooKeeper nodes, each as the code a service would
//! run per buyer. The locks are dlock's ZooKeeper store (`LockClient::connect("zk://..")`) on
//! the same ensemble as the stock.

use std::sync::atomic::AtomicBool;

use dlock::{distributed_lock, LockClient};

use crate::strategies::{from_any_segment, BuyError, Outcome};
use crate::zk_stock::StockTree;

/// Conditional writes one buyer of (g) may lose to other buyers before it gives up: each loss
/// means another buyer sold a unit (or the stock ran out), so a buyer that loses this many in
/// a row has watched that many sales go by; far more than a sale of 1,000 units can make.
const MAX_LOST_WRITES: usize = 100_000;

/// What every strategy shares: the lock client and the session to the stock nodes.
#[derive(Clone)]
pub struct ZkShop {
    pub locks: LockClient,
    pub stock: StockTree,
}

/// The tutorial's first version again: read the stock node, check it, write it back
/// unconditionally. Two buyers who read the same level both sell, and the second write undoes
/// the first's decrement.
pub async fn read_check_write(shop: &ZkShop, item: &str) -> Result<Outcome, BuyError> {
    let (left, _) = shop.stock.get(item).await?;
    if left <= 0 {
        return Ok(Outcome::Refused);
    }
    shop.stock.write(item, left - 1, None).await?;
    Ok(Outcome::Sold)
}

/// (a) No lock.
pub async fn no_lock(shop: &ZkShop, item: &str) -> Result<Outcome, BuyError> {
    read_check_write(shop, &format!("{item}:a")).await
}

/// (b) The same code under one dlock lock per item, kept in ZooKeeper (Curator's mutex on the
/// wire): correct, and every buyer queues for that lock.
#[distributed_lock(key = "seckill:{item}", wait = "120s", client = shop.locks)]
pub async fn lock_per_item(shop: &ZkShop, item: &str) -> Result<Outcome, BuyError> {
    read_check_write(shop, &format!("{item}:b")).await
}

/// (c) The stock in segment nodes, one lock per segment: buyers queue per segment.
pub async fn segment_locks(
    shop: &ZkShop,
    item: &str,
    buyer: usize,
    drained: &[AtomicBool],
) -> Result<Outcome, BuyError> {
    from_any_segment(buyer, drained, |segment| lock_segment(shop, item, segment)).await
}

#[distributed_lock(key = "seckill:{item}#{segment}", wait = "120s", client = shop.locks)]
async fn lock_segment(shop: &ZkShop, item: &str, segment: usize) -> Result<Outcome, BuyError> {
    read_check_write(shop, &format!("{item}:c#{segment}")).await
}

/// (g) What a ZooKeeper user writes without any lock: read the node with its version, write
/// the decrement only if the version is still the one read, and read again when another buyer
/// wrote first. Correct; every lost write is a request the ensemble orders through its leader
/// like a won one.
pub async fn versioned_write(shop: &ZkShop, item: &str) -> Result<Outcome, BuyError> {
    let item = format!("{item}:g");
    for _ in 0..MAX_LOST_WRITES {
        let (left, version) = shop.stock.get(&item).await?;
        if left <= 0 {
            return Ok(Outcome::Refused);
        }
        match shop.stock.write(&item, left - 1, Some(version)).await {
            Ok(()) => return Ok(Outcome::Sold),
            Err(zookeeper_client::Error::BadVersion) => continue,
            Err(e) => return Err(e.into()),
        }
    }
    Err(BuyError::Conflicts(MAX_LOST_WRITES))
}
