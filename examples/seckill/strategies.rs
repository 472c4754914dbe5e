//! The five ways to sell one hot item from Redis, each as the code a service would run per
//! buyer (`pg_strategies.rs` sells it from PostgreSQL).

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::LazyLock;

use dlock::redis::{self, AsyncCommands, Script};
use dlock::stock::Take;
use dlock::{distributed_lock, LockClient, LockError, SegmentedStock};

use crate::support::Db;

/// What a buyer is told.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Sold,
    Refused,
}

/// A buyer's request failed (the store down, lock wait timed out, ...): counted apart.
#[derive(Debug)]
pub enum BuyError {
    Lock(LockError),
    Redis(redis::RedisError),
    #[cfg(feature = "postgres")]
    Postgres(tokio_postgres::Error),
    #[cfg(feature = "zookeeper")]
    Zookeeper(zookeeper_client::Error),
    /// (g) lost this many conditional writes in a row to other buyers.
    #[cfg(feature = "zookeeper")]
    Conflicts(usize),
    Unexpected(Take),
}

impl From<LockError> for BuyError {
    fn from(e: LockError) -> Self {
        BuyError::Lock(e)
    }
}

impl From<redis::RedisError> for BuyError {
    fn from(e: redis::RedisError) -> Self {
        BuyError::Redis(e)
    }
}

#[cfg(feature = "postgres")]
impl From<tokio_postgres::Error> for BuyError {
    fn from(e: tokio_postgres::Error) -> Self {
        BuyError::Postgres(e)
    }
}

#[cfg(feature = "zookeeper")]
impl From<zookeeper_client::Error> for BuyError {
    fn from(e: zookeeper_client::Error) -> Self {
        BuyError::Zookeeper(e)
    }
}

impl std::fmt::Display for BuyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BuyError::Lock(e) => e.fmt(f),
            BuyError::Redis(e) => e.fmt(f),
            #[cfg(feature = "postgres")]
            BuyError::Postgres(e) => e.fmt(f),
            #[cfg(feature = "zookeeper")]
            BuyError::Zookeeper(e) => e.fmt(f),
            #[cfg(feature = "zookeeper")]
            BuyError::Conflicts(n) => write!(f, "lost {n} conditional writes in a row; gave up"),
            BuyError::Unexpected(t) => write!(f, "unexpected answer {t:?} to a first attempt"),
        }
    }
}

/// What every strategy shares: the lock client and a connection for the stock keys (to the
/// one server, or routed per key over a cluster).
#[derive(Clone)]
pub struct Shop {
    pub locks: LockClient,
    pub db: Db,
    /// Prefix of this run's keys, so a shared Redis keeps runs apart.
    pub prefix: String,
}

impl Shop {
    /// The key of a plain stock counter.
    pub fn key(&self, name: &str) -> String {
        format!("{}{name}", self.prefix)
    }

    pub async fn set(&self, name: &str, units: u64) -> Result<(), BuyError> {
        let _: () = self.db.clone().set(self.key(name), units).await?;
        Ok(())
    }

    pub async fn get(&self, name: &str) -> Result<i64, BuyError> {
        Ok(self.db.clone().get(self.key(name)).await?)
    }
}

/// The tutorial's first version: read the stock, check it, write it back. Two buyers who read
/// the same level both sell, and the second write undoes the first's decrement.
pub async fn read_check_write(shop: &Shop, stock_key: &str) -> Result<Outcome, BuyError> {
    let left = shop.get(stock_key).await?;
    if left <= 0 {
        return Ok(Outcome::Refused);
    }
    let _: () = shop.db.clone().set(shop.key(stock_key), left - 1).await?;
    Ok(Outcome::Sold)
}

/// (a) No lock.
pub async fn no_lock(shop: &Shop, item: &str) -> Result<Outcome, BuyError> {
    read_check_write(shop, &format!("{item}:a")).await
}

/// (b) The same code under one lock per item: correct, and every buyer queues for that lock.
#[distributed_lock(key = "seckill:{item}", wait = "120s", client = shop.locks)]
pub async fn lock_per_item(shop: &Shop, item: &str) -> Result<Outcome, BuyError> {
    read_check_write(shop, &format!("{item}:b")).await
}

/// (c) The stock split into segments, one lock per segment: buyers queue per segment.
/// (`dlock::SegmentLocks` packages this loop for stock kept in your own database.)
pub async fn segment_locks(
    shop: &Shop,
    item: &str,
    buyer: usize,
    drained: &[AtomicBool],
) -> Result<Outcome, BuyError> {
    from_any_segment(buyer, drained, |segment| lock_segment(shop, item, segment)).await
}

/// (c)'s walk over the segments, whichever store holds them: the buyer's own segment first,
/// then the others, so no stock strands in a segment nobody is routed to. `sell_from` sells
/// one unit of a segment under that segment's lock.
pub async fn from_any_segment<F, Fut>(
    buyer: usize,
    drained: &[AtomicBool],
    mut sell_from: F,
) -> Result<Outcome, BuyError>
where
    F: FnMut(usize) -> Fut,
    Fut: Future<Output = Result<Outcome, BuyError>>,
{
    let n = drained.len();
    // Like SegmentedStock (and SegmentLocks), even a sold-out answer asks the store once, at
    // the buyer's own segment: a local flag alone would keep refusing buyers after another
    // instance gave stock back. Until then, segments seen empty are skipped.
    let all_drained = drained.iter().all(|d| d.load(Ordering::Relaxed));
    for k in 0..n {
        let segment = (buyer + k) % n;
        if all_drained && k > 0 {
            break;
        }
        if !all_drained && drained[segment].load(Ordering::Relaxed) {
            continue;
        }
        match sell_from(segment).await? {
            Outcome::Sold => return Ok(Outcome::Sold),
            Outcome::Refused => drained[segment].store(true, Ordering::Relaxed),
        }
    }
    Ok(Outcome::Refused)
}

#[distributed_lock(key = "seckill:{item}#{segment}", wait = "120s", client = shop.locks)]
async fn lock_segment(shop: &Shop, item: &str, segment: usize) -> Result<Outcome, BuyError> {
    read_check_write(shop, &format!("{item}:c#{segment}")).await
}

/// (d) `SegmentedStock`: one script per take on the buyer's segment, no lock to wait for.
pub async fn segmented_stock(stock: &SegmentedStock, order_id: &str) -> Result<Outcome, BuyError> {
    Ok(match stock.take(order_id, 1).await? {
        Take::Taken { .. } | Take::Split { .. } => Outcome::Sold,
        Take::SoldOut => Outcome::Refused,
        // AlreadyTaken, GivenBack: every buyer here has its own order id and none retries.
        other => return Err(BuyError::Unexpected(other)),
    })
}

/// Sells one unit of the stock counter in KEYS[1] if it has any left; 1 when sold, 0 when not.
/// Redis runs a script alone, so the check and the decrement are one step: no two buyers can
/// both see the last unit. A missing key reads as empty (`GET` answers false to Lua).
static SELL_ONE_IF_LEFT: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local left = tonumber(redis.call('GET', KEYS[1]) or '0')
if left > 0 then
    redis.call('DECR', KEYS[1])
    return 1
end
return 0
",
    )
});

/// Loads (e)'s script before the buyers arrive, as a service would at start-up. Otherwise each
/// of the first buyers in flight gets NOSCRIPT and loads it, and on a cluster redis-rs sends
/// SCRIPT LOAD to every master: hundreds of commands on masters the strategy never uses.
pub async fn load_sell_script(shop: &Shop) -> Result<(), BuyError> {
    SELL_ONE_IF_LEFT.load_async(&mut shop.db.clone()).await?;
    Ok(())
}

/// (e) The stock in one counter, sold by a script that checks and decrements it atomically:
/// correct, one round trip per buyer, no lock to wait for; and every buyer of the item still
/// lands on that one key, so on one node of a cluster.
pub async fn lua_decrement(shop: &Shop, item: &str) -> Result<Outcome, BuyError> {
    let sold: i64 = SELL_ONE_IF_LEFT
        .key(shop.key(&format!("{item}:e")))
        .invoke_async(&mut shop.db.clone())
        .await?;
    Ok(if sold == 1 {
        Outcome::Sold
    } else {
        Outcome::Refused
    })
}
