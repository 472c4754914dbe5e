use dlock::{distributed_semaphore, LockError};

#[distributed_semaphore(key = "exports", permits = 0)]
async fn export() -> Result<(), LockError> {
    Ok(())
}

fn main() {}
