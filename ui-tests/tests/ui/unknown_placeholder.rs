#![allow(dead_code)]
use dlock::{distributed_lock, LockError};

struct Order {
    id: u64,
}

#[distributed_lock(key = "order:{ordr.id}:{user_id}")]
async fn pay(order: &Order, user_id: u64) -> Result<(), LockError> {
    Ok(())
}

fn main() {}
