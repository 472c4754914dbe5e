use dlock::{distributed_semaphore, LockError};

#[distributed_semaphore(key = "exports:{tenant}", wait = "5s")]
async fn export(tenant: &str) -> Result<(), LockError> {
    Ok(())
}

fn main() {}
