#![allow(dead_code)]
use dlock::{distributed_lock, LockError};

#[distributed_lock(key = "user:{name.to_lowercase()}")]
async fn rename(name: &str) -> Result<(), LockError> {
    Ok(())
}

fn main() {}
