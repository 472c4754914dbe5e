use dlock::{distributed_lock, LockError};

#[distributed_lock(key = "acct:{from}", keys = ["acct:{from}", "acct:{to}"])]
async fn transfer(from: u64, to: u64) -> Result<(), LockError> {
    Ok(())
}

fn main() {}
