#![allow(dead_code)]
use dlock::{distributed_lock, LockError};

struct Order {
    id: u64,
}

// rustc's "a field with a similar name exists" must not offer to rewrite the attribute.
#[distributed_lock(key = "order:{order.idd}")]
async fn pay(order: &Order) -> Result<(), LockError> {
    Ok(())
}

fn main() {}
