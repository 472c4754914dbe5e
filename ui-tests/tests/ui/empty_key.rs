#![allow(dead_code)]
use dlock::{distributed_lock, LockError};

#[distributed_lock(key = "")]
async fn pay() -> Result<(), LockError> {
    Ok(())
}

fn main() {}
