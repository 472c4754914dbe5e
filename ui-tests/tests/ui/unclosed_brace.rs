#![allow(dead_code)]
use dlock::{distributed_lock, LockError};

#[distributed_lock(key = "order:{id")]
async fn pay(id: u64) -> Result<(), LockError> {
    Ok(())
}

fn main() {}
