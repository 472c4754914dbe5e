#![allow(dead_code)]
use dlock::distributed_lock;

#[distributed_lock(key = "job")]
async fn run() -> Option<u8> {
    Some(1)
}

#[distributed_lock(key = "job")]
async fn run_unit() {}

fn main() {}
