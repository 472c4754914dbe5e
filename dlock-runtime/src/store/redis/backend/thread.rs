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
//!
//! Two things start on a building multi-thread runtime and move here when it shuts down: one
//! server's command connections (`Topology::open_pool`) and the waiters' subscriber
//! (`Waiters::start`), whose release messages then wake waiters without a second thread.

use std::cell::Cell;
use std::future::Future;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use redis::RedisFuture;
use tokio::runtime::Handle;
use tokio::sync::{oneshot, Notify};

pub(crate) struct Background {
    handle: Handle,
    cleanups: Arc<Tracker>,
    /// Dropping it (with the last client clone) ends the thread and cancels its tasks.
    _stop: oneshot::Sender<()>,
}

thread_local! {
    /// Set on a client's own thread: waiting there for its own tasks would wait for nothing.
    static ON_CLIENT_THREAD: Cell<bool> = const { Cell::new(false) };
}

/// Work in flight that a shutdown waits for: the clean-ups on the client's thread (background
/// releases, undos of cancelled acquires), or the acquires under way.
#[derive(Default)]
pub(crate) struct Tracker {
    running: Mutex<usize>,
    /// For a waiter on a plain thread (a `Drop`).
    idle: Condvar,
    /// For an async waiter.
    idle_async: Notify,
}

impl Tracker {
    fn running(&self) -> std::sync::MutexGuard<'_, usize> {
        self.running.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Counts one piece of work as running until the returned guard is dropped.
    pub(crate) fn start(self: &Arc<Self>) -> Running {
        *self.running() += 1;
        Running(self.clone())
    }

    /// Waits until nothing runs, at most `bound`; whether nothing runs.
    pub(crate) async fn idle(&self, bound: Duration) -> bool {
        let wait = async {
            loop {
                let idle = self.idle_async.notified();
                tokio::pin!(idle);
                idle.as_mut().enable();
                if *self.running() == 0 {
                    return;
                }
                idle.await;
            }
        };
        tokio::time::timeout(bound, wait).await.is_ok()
    }

    /// [`Tracker::idle`] for a caller that cannot await: blocks this thread.
    fn idle_blocking(&self, bound: Duration) -> bool {
        let running = self.running();
        let (running, _) = self
            .idle
            .wait_timeout_while(running, bound, |n| *n > 0)
            .unwrap_or_else(|e| e.into_inner());
        *running == 0
    }
}

/// Counts one piece of work as running until dropped (finished or cancelled).
pub(crate) struct Running(Arc<Tracker>);

impl Drop for Running {
    fn drop(&mut self) {
        let mut running = self.0.running();
        *running -= 1;
        if *running == 0 {
            self.0.idle.notify_all();
            self.0.idle_async.notify_waiters();
        }
    }
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
                ON_CLIENT_THREAD.with(|on| on.set(true));
                // Returns when the sender is dropped; the runtime (and every task on it) is
                // dropped outside any async context right after.
                rt.block_on(async move {
                    let _ = stopped.await;
                });
            })?;
        Ok(Background {
            handle,
            cleanups: Arc::default(),
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

    /// Like [`Background::spawn`], for a clean-up that must reach Redis before the process
    /// exits: [`Background::flushed`] waits for it.
    pub(crate) fn spawn_cleanup<F>(&self, fut: F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        let running = self.cleanups.start();
        self.spawn(async move {
            let _running = running;
            fut.await;
        });
    }

    /// Counts work running elsewhere (a release's reply awaited on the caller's runtime) as a
    /// clean-up until the returned guard is dropped: [`Background::flushed`] waits for it.
    pub(crate) fn track(&self) -> Running {
        self.cleanups.start()
    }

    /// Waits until no clean-up runs, at most `bound`; whether none runs.
    pub(crate) async fn flushed(&self, bound: Duration) -> bool {
        self.cleanups.idle(bound).await
    }

    /// [`Background::flushed`] for a caller that cannot await (a `Drop`): blocks this thread.
    /// On the client's own thread it returns at once (its tasks could not run meanwhile).
    pub(crate) fn flushed_blocking(&self, bound: Duration) -> bool {
        if ON_CLIENT_THREAD.with(Cell::get) {
            return *self.cleanups.running() == 0;
        }
        self.cleanups.idle_blocking(bound)
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
