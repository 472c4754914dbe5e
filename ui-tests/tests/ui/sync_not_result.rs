#![allow(dead_code)]
use dlock::distributed_semaphore;

// The sync forms keep every rule of the async ones: here, the `Result`.
#[distributed_semaphore(key = "job", permits = 2)]
fn run() -> u32 {
    1
}

fn main() {}
