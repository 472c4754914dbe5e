#![allow(dead_code)]
use dlock::{distributed_lock, LockError};

struct Order {
    id: u64,
}

#[distributed_lock(key = "order:{order.number}")]
async fn pay(order: &Order) -> Result<(), LockError> {
    Ok(())
}

fn main() {}
