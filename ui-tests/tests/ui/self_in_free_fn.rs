#![allow(dead_code)]
use dlock::{distributed_lock, LockError};

#[distributed_lock(key = "account:{self.id}")]
async fn close(id: u64) -> Result<(), LockError> {
    Ok(())
}

fn main() {}
