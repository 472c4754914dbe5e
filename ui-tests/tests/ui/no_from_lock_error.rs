#![allow(dead_code)]
use dlock::distributed_lock;

#[derive(Debug)]
struct AppError;

#[distributed_lock(key = "job")]
async fn run() -> Result<(), AppError> {
    Ok(())
}

fn main() {}
