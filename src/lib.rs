//! # dlock
//!
//! Run a piece of async work on one machine at a time across a fleet, with a Redis lock named
//! from the function's arguments. See the README for the tour; this crate re-exports the
//! runtime ([`LockClient`], [`Lock`], [`LockGuard`], [`LockError`]) and the
//! `#[distributed_lock]` attribute.
//!
//! ## `#[distributed_lock]`
//!
//! ```no_run
//! use dlock::distributed_lock;
//! # struct Order { id: u64 }
//! # #[derive(Debug)] struct AppError;
//! # impl From<dlock::LockError> for AppError { fn from(_: dlock::LockError) -> Self { AppError } }
//!
//! #[distributed_lock(key = "order:{order.id}", ttl = "30s", wait = "5s")]
//! async fn pay(order: &Order, amount: u64) -> Result<u64, AppError> {
//!     // Runs only while this process holds the lock `order:<id>`; released on every way out.
//!     Ok(amount)
//! }
//! ```
//!
//! The key is a template over the parameters, checked at compile time; the rendered key is the
//! lock's name, so `pay` above takes the same lock as `client.lock("order:7")` for order 7.
//! Options, defaults and the code the attribute writes are documented on [`distributed_lock`].

pub use dlock_runtime::*;

pub use dlock_macros::distributed_lock;
