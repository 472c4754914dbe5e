#![allow(dead_code)]
use dlock::{distributed_lock, LockError};

#[distributed_lock(key = "job", lease = "forever")]
async fn job() -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(key = "job", wait = "30m1h")]
async fn job2() -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(key = "job", ttl = "1.0005s")]
async fn job3() -> Result<(), LockError> {
    Ok(())
}

fn main() {}
