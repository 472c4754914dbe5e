#![allow(dead_code)]
use dlock::{distributed_lock, LockError};

#[distributed_lock(key = "job", ttl = "30 seconds", wait = "1.5")]
async fn run() -> Result<(), LockError> {
    Ok(())
}

fn main() {}
