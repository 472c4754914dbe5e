#![allow(dead_code)]
use dlock::{distributed_lock, LockError};

#[distributed_lock(key = "job", wait = "1s", wait = "2s")]
async fn run() -> Result<(), LockError> {
    Ok(())
}

fn main() {}
