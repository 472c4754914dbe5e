use dlock::{distributed_lock, LockError};

#[distributed_lock(keys = ["acct:{from}", "acct:{to}"], kind = "read")]
async fn audit(from: u64, to: u64) -> Result<(), LockError> {
    Ok(())
}

fn main() {}
