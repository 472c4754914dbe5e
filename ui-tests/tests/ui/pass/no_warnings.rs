// Every option and the common signature shapes, under `deny(warnings)`: the expansion adds no
// warning of its own. (Clippy on generated code is covered by the integration tests, which CI
// lints with `-D warnings`.) `main` only builds the futures; nothing here needs a Redis.
#![deny(warnings, unused_qualifications, unused_results)]

use std::future::Future;
use std::sync::Arc;

use dlock::{distributed_lock, distributed_semaphore, LockClient, LockError};

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
pub async fn pay(order: &Order, user: u64) -> Result<u64, AppError> {
    Ok(order.id + user)
}

#[distributed_lock(key = "job:{{literal}}", lease = "2m", wait = "0s", client = locks)]
pub async fn hard_lease(locks: Arc<LockClient>) -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock]
pub async fn default_key() -> Result<(), AppError> {
    Ok(())
}

#[distributed_lock(key = "x", crate = "::dlock")]
pub async fn explicit_crate() -> Result<(), AppError> {
    Ok(())
}

pub struct Service {
    pub locks: LockClient,
    pub id: u32,
}

impl Service {
    #[distributed_lock(key = "svc:{self.id}", client = self.locks, ttl = "250ms")]
    pub async fn tick(&mut self) -> Result<u32, AppError> {
        self.id += 1;
        Ok(self.id)
    }
}

#[distributed_lock(key = "doc:{id}", kind = "read", wait = "1s")]
pub async fn read_doc(id: u64) -> Result<u64, AppError> {
    Ok(id)
}

#[distributed_lock(key = "doc:{id}", kind = "write", lease = "10s")]
pub async fn write_doc(id: u64) -> Result<u64, AppError> {
    Ok(id)
}

#[distributed_lock(key = "queue", kind = "fair", client = locks, on_busy = "skip")]
pub async fn fair(locks: &LockClient) -> Result<Option<()>, LockError> {
    Ok(Some(()))
}

#[distributed_lock(key = "plain", kind = "reentrant")]
pub async fn reentrant() -> Result<(), AppError> {
    Ok(())
}

#[distributed_lock(keys = ["acct:{from}", "acct:{to}"], ttl = "30s", wait = "forever")]
pub async fn transfer(from: u64, to: u64) -> Result<(), AppError> {
    Ok(())
}

#[distributed_lock(keys = ["only:{id}"], map_err = to_string)]
pub async fn one_key(id: u64) -> Result<(), String> {
    Ok(())
}

fn to_string(e: LockError) -> String {
    e.to_string()
}

#[distributed_semaphore(key = "exports:{tenant}", permits = 3, ttl = "30s", wait = "5s")]
pub async fn export(tenant: &str) -> Result<usize, AppError> {
    Ok(tenant.len())
}

#[distributed_semaphore(permits = 1, client = locks, on_busy = "skip", lease = "1m")]
pub async fn default_semaphore(locks: Arc<LockClient>) -> Result<Option<()>, AppError> {
    Ok(Some(()))
}

fn send<F: Future + Send>(f: F) -> F {
    f
}

fn main() {
    let order = Order { id: 1 };
    drop(send(pay(&order, 2)));
    drop(send(default_key()));
    drop(send(explicit_crate()));
    drop(send(read_doc(1)));
    drop(send(write_doc(1)));
    drop(send(reentrant()));
    drop(send(transfer(1, 2)));
    drop(send(one_key(1)));
    drop(send(export("t")));
    // Futures that are never polled touch neither Redis nor the runtime.
}
