// Both attributes on plain (non-async) `fn`s, with every option and the common signature
// shapes, under `deny(warnings)`: they expand to the blocking client and add no warning.
// Nothing is called: nothing here needs a Redis.
#![deny(warnings, unused_qualifications, unused_results)]

use std::fmt::Display;
use std::rc::Rc;
use std::sync::Arc;

use dlock::blocking::LockClient;
use dlock::{distributed_lock, distributed_semaphore, LockError};

#[derive(Debug)]
pub struct AppError;

impl From<LockError> for AppError {
    fn from(_: LockError) -> Self {
        AppError
    }
}

pub struct Order {
    pub id: u64,
}

#[distributed_lock(key = "order:{order.id}:{user}", ttl = "30s", wait = "5s")]
pub fn pay(order: &Order, user: u64) -> Result<u64, AppError> {
    if user == 0 {
        return Err(AppError);
    }
    let parsed: u64 = "7".parse().map_err(|_| AppError)?;
    Ok(order.id + user + parsed)
}

#[distributed_lock(key = "job:{{literal}}", lease = "2m", wait = "0s", client = locks)]
pub fn hard_lease(locks: Arc<LockClient>) -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(client = locks)]
pub fn borrowed_client(locks: &LockClient) -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(client = locks)]
pub fn rc_client(locks: Rc<LockClient>) -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock]
pub fn default_key() -> Result<(), AppError> {
    Ok(())
}

pub struct Service<T> {
    pub locks: LockClient,
    pub id: u32,
    pub name: T,
}

impl<T: Display + Clone> Service<T> {
    #[distributed_lock(key = "svc:{self.id}", client = self.locks, ttl = "250ms")]
    pub fn tick(&mut self) -> Result<u32, AppError> {
        self.id += 1;
        Ok(self.id)
    }

    #[distributed_lock(key = "svc:{self.name}", client = self.locks)]
    pub fn name(&self) -> Result<&T, AppError> {
        Ok(&self.name)
    }

    #[distributed_lock(client = self.locks)]
    pub fn by_value(self) -> Result<T, AppError> {
        Ok(self.name)
    }
}

#[distributed_lock(key = "doc:{id}", kind = "read", wait = "1s")]
pub fn read_doc(id: u64) -> Result<u64, AppError> {
    Ok(id)
}

#[distributed_lock(key = "doc:{id}", kind = "write", lease = "10s")]
pub fn write_doc(id: u64) -> Result<u64, AppError> {
    Ok(id)
}

#[distributed_lock(key = "queue", kind = "fair", client = locks, on_busy = "skip")]
pub fn fair(locks: &LockClient) -> Result<Option<()>, LockError> {
    Ok(Some(()))
}

#[distributed_lock(key = "r:{id}", kind = "redisson_write")]
pub fn redisson(id: impl Display) -> Result<impl Display, AppError> {
    Ok(id.to_string())
}

#[distributed_lock(keys = ["acct:{from}", "acct:{to}"], ttl = "30s", wait = "forever")]
pub fn transfer<A: Display>(from: A, to: A) -> Result<(), AppError> {
    Ok(())
}

#[distributed_lock(keys = ["only:{id}"], map_err = to_string)]
pub fn one_key(id: u64) -> Result<(), String> {
    Ok(())
}

fn to_string(e: LockError) -> String {
    e.to_string()
}

#[distributed_semaphore(key = "exports:{tenant}", permits = 3, ttl = "30s", wait = "5s")]
pub fn export(tenant: &str) -> Result<usize, AppError> {
    Ok(tenant.len())
}

#[distributed_semaphore(permits = 1, client = locks, on_busy = "skip", lease = "1m")]
pub fn default_semaphore(locks: Arc<LockClient>) -> Result<Option<()>, AppError> {
    Ok(Some(()))
}

fn main() {}
