#![allow(dead_code)]
use dlock::{distributed_lock, LockError};

#[distributed_lock(key = "job", ttl = "30s", lease = "10s")]
async fn run() -> Result<(), LockError> {
    Ok(())
}

fn main() {}
