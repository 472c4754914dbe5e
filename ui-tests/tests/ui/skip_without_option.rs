#![allow(dead_code)]
use dlock::{distributed_lock, LockError};

#[distributed_lock(key = "job", wait = "0s", on_busy = "skip")]
async fn job() -> Result<u32, LockError> {
    Ok(1)
}

fn main() {}
