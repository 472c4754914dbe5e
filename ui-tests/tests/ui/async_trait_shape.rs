#![allow(dead_code)]
use std::future::Future;
use std::pin::Pin;

use dlock::{distributed_lock, LockError};

struct Worker;

impl Worker {
    // What #[async_trait] turns `async fn run(&self)` into before this attribute sees it.
    #[distributed_lock(key = "job")]
    fn run<'a>(&'a self) -> Pin<Box<dyn Future<Output = Result<(), LockError>> + Send + 'a>> {
        Box::pin(async move { Ok(()) })
    }
}

fn main() {}
