#![allow(dead_code)]
use dlock::{distributed_lock, LockError};

struct OrderId(u64);

struct Order {
    id: OrderId,
}

#[distributed_lock(key = "order:{order.id}")]
async fn pay(order: &Order) -> Result<(), LockError> {
    Ok(())
}

fn main() {}
