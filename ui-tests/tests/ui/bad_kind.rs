use dlock::{distributed_lock, LockError};

#[distributed_lock(key = "doc:{id}", kind = "exclusive")]
async fn edit(id: u64) -> Result<(), LockError> {
    Ok(())
}

fn main() {}
