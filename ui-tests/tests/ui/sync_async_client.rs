#![allow(dead_code)]
use dlock::{distributed_lock, LockClient, LockError};

// A plain `fn` locks through the blocking client; an async one given as `client` is refused.
#[distributed_lock(key = "job", client = locks)]
fn run(locks: &LockClient) -> Result<(), LockError> {
    Ok(())
}

fn main() {}
