#![allow(dead_code)]
use dlock::{distributed_lock, LockError};

#[distributed_lock(key = "job", crate = "not a path")]
async fn run() -> Result<(), LockError> {
    Ok(())
}

fn main() {}
