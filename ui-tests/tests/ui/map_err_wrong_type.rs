#![allow(dead_code)]
use dlock::{distributed_lock, LockError};

fn to_text(e: LockError) -> String {
    e.to_string()
}

// The function maps to `String`, the function returns `u16` errors.
#[distributed_lock(key = "job", map_err = to_text)]
async fn job() -> Result<(), u16> {
    Ok(())
}

fn main() {}
