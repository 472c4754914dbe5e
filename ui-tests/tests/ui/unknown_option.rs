#![allow(dead_code)]
use dlock::{distributed_lock, LockError};

#[distributed_lock(key = "job", tll = "30s", timeout = "5s")]
async fn run() -> Result<(), LockError> {
    Ok(())
}

fn main() {}
