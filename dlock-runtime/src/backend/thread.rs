//! The client's own runtime: one thread that runs everything a client does in the background.
//!
//! Connections (their redis-rs drivers), the watchdog, the subscriber, background releases and
//! orphan clean-ups all live here, not on whichever runtime happened to build the client. A
//! client kept in a `static` and used by several `#[tokio::test]` functions (each with its own
//! runtime) would otherwise lose its renewals and connections when the first test's runtime
//! shut down, and a guard dropped on a plain thread would have no runtime to release on.
//!
//! Measured before choosing this over "keep the building runtime's handle" (PING through a
//! multiplexed connection, 2-core VM): from a multi-thread caller runtime a connection driven
//! here answered in 40-43 µs against 53-62 µs for one driven on the caller's runtime; from a
//! current_thread caller 32-46 µs against 20-29 µs (one extra thread wake-up each way). A handle
//! on the building runtime cannot outlive it, so it could only turn the failure into an error.

use std::future::Future;

use redis::RedisFuture;
use tokio::runtime::Handle;
use tokio::sync::oneshot;

pub(crate) struct Background {
    handle: Handle,
    /// Dropping it (with the last client clone) ends the thread and cancels its tasks.
    _stop: oneshot::Sender<()>,
}

impl Background {
    pub(crate) fn start(client_id: &str) -> std::io::Result<Self> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let handle = rt.handle().clone();
        let (stop, stopped) = oneshot::channel::<()>();
        std::thread::Builder::new()
            .name(format!("dlock-{}", &client_id[..8.min(client_id.len())]))
            .spawn(move || {
                // Returns when the sender is dropped; the runtime (and every task on it) is
                // dropped outside any async context right after.
                rt.block_on(async move {
                    let _ = stopped.await;
                });
            })?;
        Ok(Background {
            handle,
            _stop: stop,
        })
    }

    pub(crate) fn handle(&self) -> &Handle {
        &self.handle
    }

    /// Spawns `fut` on the client's thread; works from any thread, with or without a runtime.
    pub(crate) fn spawn<F>(&self, fut: F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        drop(self.handle.spawn(fut));
    }

    /// Runs `fut` on the client's thread and waits for it from the caller's runtime: used to
    /// open connections, whose drivers then live as long as the client.
    pub(crate) async fn run<F, T>(&self, fut: F) -> std::io::Result<T>
    where
        F: Future<Output = T> + Send + 'static,
        T: Send + 'static,
    {
        self.handle
            .spawn(fut)
            .await
            .map_err(|e| std::io::Error::other(format!("dlock background thread: {e}")))
    }
}

/// Sends one request from `rt`. redis-rs opens a replacement connection (and spawns its
/// driver) from whichever task polls a broken manager first; polling only from the client's
/// runtime keeps the driver there, so no caller runtime that ends can take it along. The
/// request goes out even if the caller stops waiting (a multiplexed connection is cancel-safe
/// either way), and requests spawned in order reach the socket in order (the client's runtime
/// runs tasks first come, first served), which orphan clean-up relies on.
pub(crate) fn from_runtime<'a, T: Send + 'static>(
    rt: &Handle,
    request: impl std::future::Future<Output = redis::RedisResult<T>> + Send + 'static,
) -> RedisFuture<'a, T> {
    let task = rt.spawn(request);
    Box::pin(async move {
        task.await
            .map_err(|e| redis::RedisError::from(std::io::Error::other(e.to_string())))?
    })
}
