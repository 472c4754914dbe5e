#![allow(dead_code)]
use dlock::{distributed_lock, LockError};

#[distributed_lock(key = "user:{user_id}")]
async fn refresh(user_id: Option<u64>) -> Result<(), LockError> {
    Ok(())
}

fn main() {}
