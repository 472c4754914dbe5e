// The expansion keeps the user's fn as it is: an unused one is still reported, and nothing
// else is (no warning from generated code). `dead_code` is named because trybuild passes
// `-A dead_code`, which `warnings` alone would not undo.
#![deny(dead_code, warnings)]
use dlock::{distributed_lock, LockError};

#[distributed_lock(key = "job:{id}", ttl = "30s", wait = "1s")]
async fn never_called(id: u64) -> Result<(), LockError> {
    Ok(())
}

fn main() {}
