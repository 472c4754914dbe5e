#![allow(dead_code)]
use dlock::{distributed_lock, LockError};

#[distributed_lock(key = "job")]
async fn run() -> Result<(), LockError> {
    // The guard and key the expansion binds are hygienic: the body cannot reach them.
    let name = __dlock_key.clone();
    drop(__dlock_guard);
    Ok(())
}

fn main() {}
