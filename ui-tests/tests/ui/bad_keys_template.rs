use dlock::{distributed_lock, LockError};

#[distributed_lock(keys = ["acct:{from}", "acct:{too}"])]
async fn transfer(from: u64, to: u64) -> Result<(), LockError> {
    Ok(())
}

fn main() {}
