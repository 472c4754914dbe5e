//! # dlock
//!
//! Run a piece of async work on one machine at a time across a fleet, with a Redis lock named
//! from the function's arguments. See the README for the tour; this crate re-exports the
//! runtime ([`LockClient`], [`Lock`], [`LockGuard`], [`LockError`]) and the
//! `#[distributed_lock]` and `#[distributed_semaphore]` attributes.
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
//! Every option, its default, the code the attribute writes and the release and reentrancy
//! rules are documented on [`distributed_lock`]. Inside the body, [`current_lock`] gives the
//! lock's fencing token and lost signal.
//!
//! The same attribute takes the rest of the lock family: `kind = "read"`, `"write"` (a
//! [`ReadWriteLock`]) or `"fair"` (a fair lock) on one key, and `keys = ["acct:{from}",
//! "acct:{to}"]` for a [`MultiLock`] over several. [`distributed_semaphore`] lets at most
//! `permits` bodies run at once (a [`Semaphore`]):
//!
//! ```no_run
//! use dlock::{distributed_lock, distributed_semaphore, LockError};
//!
//! #[distributed_lock(keys = ["acct:{from}", "acct:{to}"], wait = "2s")]
//! async fn transfer(from: u64, to: u64, cents: u64) -> Result<(), LockError> {
//!     Ok(()) // both accounts held, taken in one order whatever the call's order
//! }
//!
//! #[distributed_semaphore(key = "exports:{tenant}", permits = 3)]
//! async fn export(tenant: &str) -> Result<(), LockError> {
//!     Ok(()) // at most 3 at once per tenant across the fleet
//! }
//! ```
//!
//! ## Without the attribute
//!
//! The attribute writes calls to the same API you can use yourself: a [`LockClient`], a
//! [`Lock`] handle per name, a [`LockGuard`] while held.
//!
//! ```no_run
//! # async fn demo() -> Result<(), dlock::LockError> {
//! use std::time::Duration;
//! use dlock::LockClient;
//!
//! let client = LockClient::connect("redis://127.0.0.1:6379").await?;
//! let guard = client.lock("order:42").wait(Duration::from_secs(5)).acquire().await?;
//! let token = guard.fencing_token(); // hand it to the store you write to
//! guard.release().await?;
//! # Ok(()) }
//! ```
//!
//! Synchronous code uses [`blocking::LockClient`] the same way, and the attribute on a plain
//! `fn` expands to it.
//!
//! ## Stores
//!
//! [`stores`]: the URL picks where the locks live, Redis (one server, Cluster, Sentinel) or
//! PostgreSQL (feature `postgres`), and the rest of the code stays the same.
//!
//! ## Before you rely on it
//!
//! [`guide`]: is a Redis lock enough for what you protect? Efficiency against correctness,
//! fencing, failovers, persistence, and the supported Redis versions and deployments.
//!
//! [`redisson`]: sharing locks with Java services that use Redisson (`client.redisson_lock`,
//! `client.redisson_fenced_lock`, `client.redisson_read_write_lock`, `kind = "redisson"`), and
//! where compatibility stops.
//!
//! [`fence`]: the check your store makes so a holder that outlived its lease cannot overwrite
//! the next holder's work (in Redis, and the SQL pattern).
//!
//! ## Features
//!
//! * `postgres`: the PostgreSQL store, chosen by a `postgres://` URL (see [`stores`]). Brings `tokio-postgres`; Redis-only users compile nothing of it.
//! * `testing`: the `testing` module (`RedisServer`, `RedisCluster`, `RedisSentinel`), throw-away
//!   Redis deployments for your own tests. Needs `redis-server` on the `PATH`.

// docs.rs builds with nightly and `--cfg docsrs`: feature-gated items get their badge there;
// stable rustdoc has no `doc(cfg)`, so the crate docs also say it in words.
#![cfg_attr(docsrs, feature(doc_cfg))]

pub use dlock_runtime::*;

pub use dlock_macros::{distributed_lock, distributed_semaphore};

pub mod guide;

pub mod redisson;

pub mod stores;

/// What the code `#[distributed_lock]` writes calls; not an API, may change in any release.
#[doc(hidden)]
pub mod __private {
    /// The function's return type, seen as a `Result`. The generated code builds its `Err`
    /// through this trait when the return type is not spelled `Result<T, E>` (`io::Result<T>`,
    /// an alias), so a type that only looks like a result (`SearchResult`) gets one message
    /// saying what is wrong instead of two type mismatches pointing at the attribute.
    #[diagnostic::on_unimplemented(
        message = "#[distributed_lock] needs the function to return a `Result<T, E>`, and `{Self}` is not one",
        label = "not a `Result`",
        note = "when the lock cannot be taken the function returns `Err(..)` instead of running the body, so its return type must be a `Result` (or an alias of one)"
    )]
    pub trait LockResult: Sized {
        /// The `E` of `Result<T, E>`.
        type Error;
        /// `Err(e)`.
        fn from_error(e: Self::Error) -> Self;
    }

    impl<T, E> LockResult for Result<T, E> {
        type Error = E;
        fn from_error(e: E) -> Self {
            Err(e)
        }
    }

    /// The function's error type, as the attribute converts a `LockError` into it. Through a
    /// trait (implemented for every `E: From<LockError>`) so that an error type without the
    /// conversion gets one message saying both ways to give it one.
    #[diagnostic::on_unimplemented(
        message = "#[distributed_lock] returns `Err(..)` of `{Self}` when the lock cannot be taken, and `{Self}` has no `From<dlock::LockError>`",
        label = "no `From<dlock::LockError>` for this error type",
        note = "add `impl From<dlock::LockError> for {Self}` (a variant holding the `LockError` keeps its message), or convert it yourself with `map_err = path::to::fn`, a `fn(dlock::LockError) -> {Self}`"
    )]
    pub trait FromLockError {
        /// `Self::from(e)`.
        fn from_lock_error(e: crate::LockError) -> Self;
    }

    impl<E: From<crate::LockError>> FromLockError for E {
        fn from_lock_error(e: crate::LockError) -> Self {
            E::from(e)
        }
    }

    /// What `client = ...` of a plain `fn` may be: a blocking client, or a reference or
    /// smart pointer to one. Through a trait so that an async client given there gets one
    /// message saying what to pass instead.
    #[diagnostic::on_unimplemented(
        message = "`client = ...` on a plain `fn` must be a `dlock::blocking::LockClient`, and `{Self}` is not one",
        label = "not a `dlock::blocking::LockClient`",
        note = "a plain `fn` takes its lock through the blocking client; make one from an async client with `dlock::blocking::LockClient::from(client.clone())` (both share the connections and the locks), or make the function `async`"
    )]
    pub trait BlockingClient {
        /// The blocking client itself.
        fn blocking_client(&self) -> &crate::blocking::LockClient;
    }

    impl BlockingClient for crate::blocking::LockClient {
        fn blocking_client(&self) -> &crate::blocking::LockClient {
            self
        }
    }

    impl<T: BlockingClient + ?Sized> BlockingClient for &T {
        fn blocking_client(&self) -> &crate::blocking::LockClient {
            (**self).blocking_client()
        }
    }

    impl<T: BlockingClient + ?Sized> BlockingClient for &mut T {
        fn blocking_client(&self) -> &crate::blocking::LockClient {
            (**self).blocking_client()
        }
    }

    impl<T: BlockingClient + ?Sized> BlockingClient for Box<T> {
        fn blocking_client(&self) -> &crate::blocking::LockClient {
            (**self).blocking_client()
        }
    }

    impl<T: BlockingClient + ?Sized> BlockingClient for std::sync::Arc<T> {
        fn blocking_client(&self) -> &crate::blocking::LockClient {
            (**self).blocking_client()
        }
    }

    impl<T: BlockingClient + ?Sized> BlockingClient for std::rc::Rc<T> {
        fn blocking_client(&self) -> &crate::blocking::LockClient {
            (**self).blocking_client()
        }
    }

    /// The receiver type's name as it appears in a default key: `type_name` with every path
    /// shortened to its last segment (`my_app::jobs::Cleanup<alloc::string::String>` ->
    /// `Cleanup<String>`), so moving a type between modules does not change its keys, while
    /// two types (or two instances of one generic type) never share one.
    pub fn type_key<T: ?Sized>() -> String {
        let full = std::any::type_name::<T>();
        let mut out = String::with_capacity(full.len());
        let mut segment = String::new();
        let mut chars = full.chars().peekable();
        while let Some(c) = chars.next() {
            if c == ':' && chars.peek() == Some(&':') {
                // A path separator: what came before was a module, drop it.
                chars.next();
                segment.clear();
            } else if c.is_alphanumeric() || c == '_' {
                segment.push(c);
            } else {
                out.push_str(&segment);
                segment.clear();
                out.push(c);
            }
        }
        out.push_str(&segment);
        out
    }

    #[cfg(test)]
    mod tests {
        #[test]
        fn type_keys() {
            struct Cleanup;
            assert_eq!(super::type_key::<Cleanup>(), "Cleanup");
            assert_eq!(super::type_key::<Vec<String>>(), "Vec<String>");
            assert_eq!(
                super::type_key::<(u8, Option<std::vec::Vec<Cleanup>>)>(),
                "(u8, Option<Vec<Cleanup>>)"
            );
        }
    }
}
