//! The `#[distributed_lock]` and `#[distributed_semaphore]` attributes of
//! [dlock](https://docs.rs/dlock).
//!
//! Use them through the `dlock` facade (`use dlock::{distributed_lock, distributed_semaphore};`):
//! the code they write calls `::dlock::...`, and their reference documentation is on the
//! attributes themselves, which users read as `dlock::distributed_lock` and
//! `dlock::distributed_semaphore`. This crate holds only the macros; both share one option
//! parser, one key compiler and one code generator.

mod args;
mod diagnostics;
mod expand;
mod key;

use proc_macro::TokenStream;

/// Runs the body of an `async fn` (or of a plain `fn`, through the blocking client) only while
/// this process holds a Redis lock named after the function's arguments, and releases it on
/// every way out.
///
/// ```no_run
/// use dlock::{distributed_lock, LockClient, LockError};
///
/// struct Order {
///     id: u64,
///     amount: u64,
/// }
///
/// #[derive(Debug)]
/// enum PayError {
///     Lock(LockError),
///     Declined,
/// }
///
/// impl From<LockError> for PayError {
///     fn from(e: LockError) -> Self {
///         PayError::Lock(e)
///     }
/// }
///
/// /// Pays an order at most once at a time across the whole fleet.
/// #[distributed_lock(key = "order:{order.id}", ttl = "30s", wait = "5s")]
/// async fn pay(order: &Order) -> Result<u64, PayError> {
///     // Runs only while this process holds the lock `order:<id>`.
///     if order.amount == 0 {
///         return Err(PayError::Declined); // the lock is released before the caller sees this
///     }
///     Ok(order.amount)
/// }
///
/// #[tokio::main]
/// async fn main() -> Result<(), PayError> {
///     // Once at start-up: the client the attribute uses when no `client = ...` is given.
///     LockClient::connect("redis://127.0.0.1:6379").await?.install();
///     pay(&Order { id: 7, amount: 100 }).await?;
///     Ok(())
/// }
/// ```
///
/// # The function
///
/// * It must be an `async fn` with a body: the lock is taken with `.await` before the body runs.
///   Or a plain `fn`: the lock is then taken through the blocking client, see
///   [On a plain `fn`](#on-a-plain-fn). Free functions, inherent and trait-impl methods (`&self`, `&mut self`, `self`), generics
///   and `where` clauses, lifetimes and borrowed arguments and results, `impl Trait` arguments,
///   `mut` and pattern parameters (`(a, b): (u8, u8)`) all work. Attributes, docs, visibility
///   and the signature are kept as written.
/// * It must return `Result<T, E>` (or an alias of it, such as `io::Result<T>` or
///   `JobResult<T>`: a path whose last segment ends in `Result`) with
///   `E: From<dlock::LockError>`, or give `map_err = ...` for error types that cannot implement
///   it. When the lock cannot be taken (another owner kept it for the whole `wait`, Redis is
///   down, no client is configured, ...) the function returns `Err(E::from(lock_error))` and
///   **the body does not run**. Nothing ever runs unlocked. (`on_busy = "skip"` turns "another
///   owner kept it" into `Ok(None)`.)
/// * The returned future is `Send` whenever the body's is, so an axum handler stays a handler.
///
/// # Options
///
/// All options are optional: `#[distributed_lock]` alone locks on the function's path with the
/// client's default TTL (30 s) and wait (10 s).
///
/// | option | default | |
/// |---|---|---|
/// | `key = "..."` | `<module>::<fn>`, `<module>::<Type>::<method>` | the lock's name |
/// | `kind = "read"` | `"reentrant"` | `"read"`, `"write"`, `"fair"`, `"redisson"`, `"redisson_fenced"`, `"redisson_read"`, `"redisson_write"`: which lock of the family |
/// | `keys = ["a:{x}", ..]` | none | several locks, all or none; exclusive with `key` |
/// | `ttl = "30s"` | the client's `default_ttl`, 30 s | lease renewed by the watchdog |
/// | `wait = "5s"` | the client's `default_wait`, 10 s | `"0s"` tries once, `"forever"` |
/// | `lease = "10s"` | none | hard lease, no watchdog; exclusive with `ttl` |
/// | `client = <expr>` | the default client | which `LockClient` |
/// | `on_busy = "skip"` | `"error"` | `Ok(None)` when the lock stays busy |
/// | `map_err = <path>` | `From<LockError>` | converts the lock error |
/// | `crate = "path"` | `::dlock` | where the facade is |
///
/// Durations are numbers with units, from the largest unit down: `"250ms"`, `"1.5s"`, `"30s"`,
/// `"2m"` or `"2min"`, `"1h30m"`, `"1h30m15s"`. Fractions must come to whole milliseconds. They
/// are checked and converted at compile time: a typo is a compile error, never a run-time
/// surprise.
///
/// ## `key = "..."`
///
/// The lock's name, a template over the parameters: `{name}`, `{name.field.sub}`, `{pair.0}`,
/// `{self.field}` in methods, `{{` and `}}` for literal braces. Each placeholder must start at a
/// parameter (checked at compile time, with a suggestion for typos) and its value must implement
/// `Display`. Values are rendered with `Display` and then percent-escaped (`%`, `{`, `}` and `:`
/// become `%25`, `%7B`, `%7D`, `%3A`, as `dlock::KeyPart` does), so an argument cannot end the key
/// early or make two different argument tuples share a lock; the text you write around them is
/// kept as it is. The rendered key is the lock's name: the function below called with `id = 7`
/// takes the same lock as `client.lock("order:7")`, so code using the attribute and code using
/// the runtime API directly exclude each other.
///
/// ```no_run
/// # use dlock::{distributed_lock, LockError};
/// struct User {
///     name: String,
/// }
///
/// #[distributed_lock(key = "order:{id}:{user.name}")]
/// async fn ship(id: u64, user: &User) -> Result<(), LockError> {
///     // Holds `order:7:ann` for `ship(7, &ann)`; a name "a:b" would give `order:7:a%3Ab`.
///     Ok(())
/// }
/// ```
///
/// Without `key`, the lock is named `<module path>::<fn name>` (`my_app::jobs::nightly`): one
/// lock for every call, the usual "run this job on one node" case. A method (a function with a
/// `self` parameter) gets its receiver type too, `<module path>::<Type>::<method>`
/// (`my_app::jobs::Cleanup::run`), with the type's own path left out and generic arguments
/// kept (`Repo<String>`), so two impls of one trait never share a lock. Associated functions
/// without `self` cannot be told from free functions by the macro and keep `<module>::<fn>`.
///
/// A default key changes when the module, the type or the function is renamed or moved, and
/// the type part comes from `std::any::type_name`, whose text the compiler does not promise to
/// keep; during a rolling deploy the old and the new version then hold different locks. Give
/// every lock that runs in production an explicit `key`.
///
/// ```no_run
/// # use dlock::{distributed_lock, LockError};
/// #[distributed_lock]
/// async fn nightly_report() -> Result<(), LockError> {
///     // Holds `<this module>::nightly_report`.
///     Ok(())
/// }
/// ```
///
/// ## `kind = "read" | "write" | "fair" | "redisson" | "redisson_fenced" | "redisson_read" | "redisson_write"`
///
/// Which lock of the family the function takes on its key. Everything else (the key,
/// `ttl`/`lease`/`wait`, `client`, `on_busy`, `map_err`, `current_lock()` in the body, the
/// release on every way out, re-entry along the call chain) works the same for every kind;
/// only the lock handle changes:
///
/// | `kind` | the handle | |
/// |---|---|---|
/// | `"reentrant"` (or no `kind`) | `client.lock(key)` | the plain exclusive lock |
/// | `"read"` | `client.read_write_lock(key).read()` | shared with other readers |
/// | `"write"` | `client.read_write_lock(key).write()` | excludes readers and writers |
/// | `"fair"` | `client.fair_lock(key)` | exclusive, granted first come, first served |
/// | `"redisson"` | `client.redisson_lock(key)` | Redisson's `RLock`, shared with Java services |
/// | `"redisson_fenced"` | `client.redisson_fenced_lock(key)` | Redisson's `RFencedLock`: `RLock` plus its token counter, kept per name for good |
/// | `"redisson_read"` | `client.redisson_read_write_lock(key).read()` | Redisson's `RReadWriteLock`, read side |
/// | `"redisson_write"` | `client.redisson_read_write_lock(key).write()` | Redisson's `RReadWriteLock`, write side |
///
/// The Redisson kinds use Redisson's own keys and messages, so a Java service calling
/// `redisson.getLock("order:7")` and `kind = "redisson"` on `"order:{id}"` exclude each other
/// for order 7 (placeholder values are percent-escaped as for every kind, so a value with `:`,
/// `{` or `}` renders differently from the raw text; see the `dlock::redisson` page).
///
/// A read-write lock and a fair lock keep their own Redis keys: `kind = "read"` on
/// `"doc:{id}"` and a plain `client.lock("doc:7")` do not exclude each other, while
/// `kind = "write"` and `client.read_write_lock("doc:7").write()` do. A writer's body may call
/// a `kind = "read"` function on the same key (a downgrade); a reader's body calling a
/// `kind = "write"` function on its key fails at once with `LockError::WouldDeadlock` (an
/// upgrade) instead of deadlocking.
/// Any other text is a compile error listing the kinds.
///
/// ```no_run
/// # use dlock::{distributed_lock, LockError};
/// #[distributed_lock(key = "doc:{id}", kind = "read")]
/// async fn show(id: u64) -> Result<String, LockError> {
///     Ok(format!("doc {id}")) // many readers at once, never during a `kind = "write"` body
/// }
///
/// #[distributed_lock(key = "doc:{id}", kind = "write", wait = "5s")]
/// async fn edit(id: u64, text: &str) -> Result<(), LockError> {
///     Ok(()) // alone: no reader and no other writer of `doc:<id>`
/// }
///
/// #[distributed_lock(key = "queue:{name}", kind = "fair")]
/// async fn take_turn(name: &str) -> Result<(), LockError> {
///     Ok(()) // callers of every process get in in the order they asked
/// }
/// ```
///
/// ## `keys = ["acct:{from}", "acct:{to}"]`
///
/// Several plain locks taken together, all or none, through `client.multi_lock(keys)`: each
/// template is compiled and checked against the parameters like `key`, and the locks are taken
/// in one canonical order (sorted by Redis key, duplicates once), so `transfer(a, b)` racing
/// `transfer(b, a)` never deadlocks whatever order the templates are listed in. `ttl`, `lease`
/// and `wait` apply to the whole acquire (one `wait` budget for all the locks; each lock has its
/// own lease). If one lock stays busy for the whole `wait`, the ones already taken are given
/// back and the function returns the `Timeout` (or `Ok(None)` with `on_busy = "skip"`).
///
/// They are the plain locks of `client.lock(name)`: `keys = ["acct:{from}", "acct:{to}"]` and
/// `key = "acct:{id}"` exclude each other on a shared account, and a body holding the multi-lock
/// re-enters any of its locks (alone or in another multi-lock) in calls it makes.
///
/// `keys` is exclusive with `key`, cannot be empty, and takes only the plain lock: `kind`
/// other than `"reentrant"` beside it is a compile error.
///
/// Inside the body, `current_lock()` returns **one** of the held locks: the last in the
/// canonical order (the greatest Redis key, which is not always the last template listed nor
/// the greatest rendered name). Its `lost()` and `fencing_token()` are that lock's only; for
/// every lock's token, take the locks with `client.multi_lock(...)` yourself and use
/// `MultiGuard::fencing_token(name)`.
///
/// ```no_run
/// # use dlock::{distributed_lock, LockError};
/// #[distributed_lock(keys = ["acct:{from}", "acct:{to}"], wait = "2s")]
/// async fn transfer(from: u64, to: u64, cents: u64) -> Result<(), LockError> {
///     Ok(()) // holds `acct:<from>` and `acct:<to>`
/// }
/// ```
///
/// ## `ttl = "30s"`
///
/// The lease kept alive by the client's watchdog while the body runs (renewed every third of
/// it). If the process dies, the lock frees itself at most this long after the last renewal.
/// Default: the client's `default_ttl`, 30 s. Must be more than zero; exclusive with `lease`.
///
/// ```no_run
/// # use dlock::{distributed_lock, LockError};
/// #[distributed_lock(key = "invoice:{id}", ttl = "10s")]
/// async fn render_invoice(id: u64) -> Result<(), LockError> {
///     // May run for minutes: the watchdog keeps renewing the 10 s lease meanwhile.
///     Ok(())
/// }
/// ```
///
/// ## `wait = "5s"`
///
/// How long to wait for another owner to release before giving up with `LockError::Timeout`
/// (converted into `E`). Waiting is event-driven (woken by the release), not polling. Default:
/// the client's `default_wait`, 10 s. `wait = "0s"` tries once and fails at once if the lock is
/// held: "skip this run if another node is already doing it" (see `on_busy`).
/// `wait = "forever"` waits as long as it takes.
///
/// ```no_run
/// # use dlock::{distributed_lock, LockError};
/// #[distributed_lock(key = "sync:{tenant}", wait = "0s")]
/// async fn sync_tenant(tenant: &str) -> Result<(), LockError> {
///     // Another node is syncing this tenant? Then this call returns Err(Timeout) at once.
///     Ok(())
/// }
/// ```
///
/// ## `lease = "10s"`
///
/// A hard lease instead of `ttl`: no watchdog; the lock expires this long after it was taken,
/// whatever the body is doing. Use it when a stuck holder must not keep the lock. The body is
/// not stopped when the lease runs out: watch `current_lock().lost()` and fence your writes
/// (see "The lock inside the body" below).
///
/// ```no_run
/// # use dlock::{distributed_lock, LockError};
/// #[distributed_lock(key = "warmup", lease = "2m")]
/// async fn warm_caches() -> Result<(), LockError> {
///     Ok(())
/// }
/// ```
///
/// ## `client = <expr>`
///
/// The `LockClient` to use, as any expression that may use `self` and the parameters:
/// `self.locks`, `state.locks`, `client`, an `Arc<LockClient>`... It is borrowed (`&(expr)`),
/// never cloned. Without it the default client is used, `LockClient::global()`: the one given
/// to the running future with `LockClient::with_default(fut)` (per test, per tenant), else the
/// one installed process-wide with `LockClient::install()`; with neither, the call returns
/// `Err(E::from(LockError::NotConfigured))`.
///
/// ```no_run
/// # use dlock::{distributed_lock, LockClient, LockError};
/// struct Inventory {
///     locks: LockClient,
/// }
///
/// impl Inventory {
///     #[distributed_lock(key = "sku:{sku}", client = self.locks, wait = "2s")]
///     async fn restock(&self, sku: &str, count: u32) -> Result<u32, LockError> {
///         Ok(count)
///     }
/// }
/// ```
///
/// ## `on_busy = "skip"`
///
/// For "run on one node, skip elsewhere": when another owner keeps the lock through the whole
/// `wait`, the function returns `Ok(None)` without running the body, instead of
/// `Err(LockError::Timeout)`. It must return `Result<Option<T>, E>` (a compile error says so
/// otherwise). Every other failure (Redis down, no client) is still an `Err`: a job must not
/// look skipped when it could not even ask. `on_busy = "error"` is the default.
///
/// ```no_run
/// # use dlock::{distributed_lock, LockError};
/// #[distributed_lock(key = "billing-run", wait = "0s", on_busy = "skip")]
/// async fn billing_run() -> Result<Option<u32>, LockError> {
///     Ok(Some(42)) // invoices sent; `Ok(None)` on the nodes that skipped
/// }
/// ```
///
/// ## `map_err = path::to::fn`
///
/// A function (or closure) `fn(LockError) -> E` used instead of `From` to turn a lock failure
/// into the function's error. For error types that cannot implement `From<LockError>` because
/// of the orphan rule, such as axum's `(StatusCode, String)` or `String`.
///
/// ```no_run
/// # use dlock::{distributed_lock, LockError};
/// # type StatusCode = u16;
/// fn lock_to_http(e: LockError) -> (StatusCode, String) {
///     let status = match e {
///         LockError::Timeout { .. } => 409,
///         _ => 503,
///     };
///     (status, e.to_string())
/// }
///
/// #[distributed_lock(key = "refund:{id}", wait = "0s", map_err = lock_to_http)]
/// async fn refund(id: u64) -> Result<String, (StatusCode, String)> {
///     Ok(format!("refunded {id}"))
/// }
/// ```
///
/// ## `crate = "path"`
///
/// Where the facade is when it is not `::dlock` (renamed in `Cargo.toml`, or re-exported by
/// another crate of yours): the generated code then uses `path::LockClient` and so on.
///
/// ```no_run
/// // As if `Cargo.toml` said `locking = { package = "dlock", ... }`.
/// use ::dlock as locking;
///
/// #[locking::distributed_lock(key = "job", crate = "locking")]
/// async fn job() -> Result<(), locking::LockError> {
///     Ok(())
/// }
/// ```
///
/// # The lock inside the body
///
/// `dlock::current_lock()` returns the innermost lock the call chain holds (`None` outside):
/// its `name()` (the rendered key), `fencing_token()`, `is_lost()` and `lost()`. With a hard
/// `lease`, or whenever the work must stop once mutual exclusion is no longer promised, race
/// the work against `lost()`, and hand the fencing token to the store so it refuses a former
/// holder's late writes:
///
/// ```no_run
/// # use dlock::{current_lock, distributed_lock, LockError};
/// # async fn render() -> Vec<u8> { Vec::new() }
/// # async fn store_if_newer(_token: u64, _page: Vec<u8>) -> Result<(), LockError> { Ok(()) }
/// #[distributed_lock(key = "report", lease = "30s")]
/// async fn report() -> Result<bool, LockError> {
///     let lock = current_lock().expect("inside a locked body");
///     tokio::select! {
///         // Lost (lease over, Redis lost the key): stop, someone else may hold it now.
///         _ = lock.lost() => Ok(false),
///         page = render() => {
///             // The store keeps the highest token it has seen and refuses lower ones.
///             store_if_newer(lock.fencing_token(), page).await?;
///             Ok(true)
///         }
///     }
/// }
/// ```
///
/// # What the macro writes for you
///
/// The `async fn` stays an `async fn` with the same signature; only its body is replaced. This:
///
/// ```no_run
/// # use dlock::{distributed_lock, LockError};
/// # struct Order { id: u64, amount: u64 }
/// # #[derive(Debug)] struct AppError;
/// # impl From<LockError> for AppError { fn from(_: LockError) -> Self { AppError } }
/// #[distributed_lock(key = "order:{order.id}", ttl = "30s", wait = "5s")]
/// pub async fn pay(order: &Order) -> Result<u64, AppError> {
///     Ok(order.amount)
/// }
/// ```
///
/// becomes (the `__dlock_*` names are hygienic: the body can neither see nor shadow them):
///
/// ```no_run
/// # use dlock::LockError;
/// # struct Order { id: u64, amount: u64 }
/// # #[derive(Debug)] struct AppError;
/// # impl From<LockError> for AppError { fn from(_: LockError) -> Self { AppError } }
/// pub async fn pay(order: &Order) -> Result<u64, AppError> {
///     // 1. The key, from the arguments.
///     let __dlock_key: String = format!("order:{}", ::dlock::KeyPart(&format_args!("{}", order.id)));
///     // 2. The client (here the default one, `LockClient::global()`: the task's default,
///     //    else the installed one; `client = ...` borrows yours instead).
///     let __dlock_client = match ::dlock::LockClient::global() {
///         Ok(c) => c,
///         Err(__dlock_err) => return Err(<AppError as From<::dlock::LockError>>::from(__dlock_err)),
///     };
///     // 3. Acquire, with only the options you gave.
///     let __dlock_acquired = __dlock_client
///         .lock(__dlock_key)
///         .ttl(core::time::Duration::from_millis(30000))
///         .wait(core::time::Duration::from_millis(5000))
///         .acquire()
///         .await;
///     match __dlock_acquired {
///         Ok(__dlock_guard) => {
///             // 4. Your body, in its own block: `return` and `?` end the block, not the fn,
///             //    so they cannot skip the release. The scope makes nested annotated calls
///             //    on the same lock re-enter it. The type is pinned so `?` still infers.
///             let __dlock_ret: Result<u64, AppError> =
///                 __dlock_guard.scope(async move { Ok(order.amount) }).await;
///             // 5. Release, written: the call returns once the release is on its way (see
///             //    "Every way out releases the lock" for what others see meanwhile).
///             ::dlock::LockGuard::release_written(__dlock_guard).await;
///             __dlock_ret
///         }
///         // 6. No lock, no body.
///         Err(__dlock_err) => Err(<AppError as From<::dlock::LockError>>::from(__dlock_err)),
///     }
/// }
/// ```
///
/// The kinds and `keys` change only step 3 and the guard's type, nothing else:
///
/// * `kind = "read"`: `__dlock_client.read_write_lock(__dlock_key).read()` instead of
///   `.lock(__dlock_key)`; `kind = "write"`: `...read_write_lock(__dlock_key).write()`;
///   `kind = "fair"`: `__dlock_client.fair_lock(__dlock_key)`; `kind = "redisson"`:
///   `__dlock_client.redisson_lock(__dlock_key)`, `"redisson_fenced"`:
///   `__dlock_client.redisson_fenced_lock(__dlock_key)`, `"redisson_read"` / `"redisson_write"`:
///   `...redisson_read_write_lock(__dlock_key).read()` / `.write()`. The guard is a
///   `LockGuard` for each, so steps 4 to 6 are as above.
/// * `keys = ["acct:{from}", "acct:{to}"]`: step 1 renders every template,
///   `let __dlock_key: [String; 2] = [format!("acct:{}", KeyPart(&from)), ...];`; step 3 is
///   `__dlock_client.multi_lock(__dlock_key)` with the same options and `.acquire().await`;
///   step 4 is `::dlock::MultiGuard::scope(&__dlock_guard, async move { ... }).await` and step 5
///   `::dlock::MultiGuard::release_logged(__dlock_guard).await` (every lock, concurrently,
///   failures logged).
///
/// The other options change only their part: `map_err = f` builds both `Err`s as
/// `Err(f(__dlock_err))`; `on_busy = "skip"` adds an arm
/// `Err(LockError::Timeout { .. }) => Ok(None)` before the last one; a return type not spelled
/// `Result<..>` (an alias) builds its `Err` through a trait implemented for `Result` only, so a
/// type that merely looks like one gets a clear error; a method without `key` names its lock
/// `format!("{}::{}::name", module_path!(), <the receiver type's short name>)`.
///
/// # Every way out releases the lock
///
/// * **Return and `?`**: the release is written to the lock's connection before the function
///   returns, and its reply is awaited in the background (`LockGuard::release_written`), which
///   saves the caller a round trip. This client sees the lock free as soon as the call
///   completes: its next acquire of the lock follows the release on the same connection.
///   Another process may still see it held for up to one round trip after the call returned,
///   and is woken by the release's message as usual. With `keys`, and in
///   `#[distributed_semaphore]`, the release is still awaited.
/// * **A failed release** (Redis unreachable at that moment, the lease already lost): the body's
///   result is returned anyway, because its effects already happened; a lost reply is retried
///   in the background with the same request id (applied once), a failure is logged at `warn`
///   by the runtime, and the lock frees itself when its lease runs out.
/// * **Panic** and **cancellation** (the call's future dropped mid-body, e.g. by a request
///   timeout or `select!`): the guard's `Drop` stops the watchdog at once and releases in the
///   background on the current tokio runtime. Cancelled while still acquiring: the runtime
///   gives back whatever Redis may have granted.
/// * **Process crash**: nobody renews the lease any more; the lock expires after `ttl`.
///
/// The same holds for every `kind` and for `keys` (a dropped `MultiGuard` releases every lock in
/// the background; a multi-lock acquire that gives up gives back what it had taken first).
///
/// Parameters the body uses are moved into its `async move` block and dropped when the body
/// finishes, just before the release.
///
/// # Reentrancy follows the call chain
///
/// An annotated call made (at any depth) from inside the body of another one holding the same
/// lock, through the same client, re-enters it instead of waiting for itself:
///
/// ```no_run
/// # use dlock::{distributed_lock, LockError};
/// #[distributed_lock(key = "account:{id}")]
/// async fn transfer_out(id: u64, cents: u64) -> Result<(), LockError> {
///     audit(id).await // same lock, same call chain: re-entered, no deadlock
/// }
///
/// #[distributed_lock(key = "account:{id}")]
/// async fn audit(id: u64) -> Result<(), LockError> {
///     Ok(())
/// }
/// ```
///
/// Everything else is another owner and waits: other processes, a task spawned from the body
/// (`tokio::spawn` starts a new chain), and two top-level calls run concurrently in one task
/// (`tokio::join!(pay(&o), pay(&o))` runs them one after the other, not both at once). Calls
/// joined *inside* one body that re-enter its lock share the body's hold: re-entering means "my
/// caller already holds it".
///
/// Re-entry follows one client's holds. A nested call that takes a lock the chain holds through
/// *another* `LockClient` on the same Redis (an outer `client = state.locks`, an inner call on
/// the default client) would wait for its own caller; it fails at once with
/// `LockError::SelfDeadlock` instead. A task spawned by the body that takes the body's lock
/// cannot be told from another owner: it waits (and deadlocks if the body awaits it), so do
/// not await such a task while holding the lock.
///
/// # On a plain `fn`
///
/// On a function without `async` the attribute takes the lock through `dlock::blocking`: the
/// same options, key checks, kinds, `keys`, `on_busy` and `map_err`, and the same release on
/// every way out, for synchronous code (a CLI, a batch job, a synchronous framework's
/// handler).
///
/// ```no_run
/// use dlock::{distributed_lock, LockError};
///
/// #[distributed_lock(key = "report:{day}", ttl = "30s", wait = "5s")]
/// fn nightly_report(day: u32) -> Result<u64, LockError> {
///     // Runs on this thread, while this process holds `report:<day>`.
///     Ok(u64::from(day))
/// }
///
/// fn main() -> Result<(), LockError> {
///     // Once at start-up: the default client, for plain and async functions alike.
///     dlock::blocking::LockClient::connect("redis://127.0.0.1:6379")?.install();
///     nightly_report(7)?;
///     Ok(())
/// }
/// ```
///
/// * **The client**: without `client = ...`, the blocking face of the default client
///   (`dlock::blocking::LockClient::global()`: the installed one, or the running future's
///   default). `client = <expr>` must be a `dlock::blocking::LockClient` (or a reference,
///   `Box`, `Arc` or `Rc` of one); an async `LockClient` there is a compile error saying to
///   pass `dlock::blocking::LockClient::from(client.clone())` instead (both share the
///   connections and the locks).
/// * **The body** runs as a closure called at once on the calling thread, so `return` and `?`
///   end the body, not the function, and cannot skip the release.
/// * **Release**: on return and `?`, `dlock::blocking::LockGuard::release_written` (returns
///   once the release is written; `MultiGuard::release_logged` / `Permit::release_logged` with
///   `keys` and `#[distributed_semaphore]`) before the function returns. On a panic the guard's
///   drop releases in the background on the client's thread.
/// * **Re-entry follows the thread**, the call chain of synchronous code: an annotated `fn`
///   called from the body of another holding the same lock (through the same client)
///   re-enters it; another thread is another owner. The guard belongs to the thread (it is not
///   `Send`), which is why the body runs on the calling thread. `current_lock()` in the body
///   returns the lock (the innermost one this thread holds).
/// * **Each call blocks the thread** until the lock is taken (at most `wait`) and released.
///   Call such functions from synchronous code or inside `tokio::task::spawn_blocking`, not
///   from async code (see the `dlock::blocking` page for what happens there).
///
/// # With other attributes
///
/// * `#[tracing::instrument]` works above or below. Put it **below** `#[distributed_lock]` to
///   have its span cover the whole call, waiting for the lock included (the attribute written
///   first expands first, and instrument then wraps the code it wrote); put it above to have it
///   cover only the body.
/// * `#[async_trait]` is not supported: it rewrites the methods of the impl it is put on before
///   `#[distributed_lock]` runs, whatever the order, and the boxed future it leaves cannot be
///   locked. This is a compile error that says so. Use native `async fn` in traits (Rust 1.75+),
///   which works, or call an annotated inherent `async fn` from the trait method.
///
/// # Mistakes caught at compile time
///
/// Each points at the offending token and says how to fix it: a placeholder that is not a
/// parameter (listing the parameters, with "did you mean"), `{self...}` outside a method, an
/// unclosed or unmatched brace, an empty key or placeholder, format specs or calls in a
/// placeholder, an `Option` parameter as a placeholder, a duration that does not parse or a
/// zero `ttl`/`lease`, `lease` together with `ttl`, an unknown option (listing the valid ones),
/// a bare string instead of `key = "..."`, a repeated option, a missing `=` or value, a `const
/// fn`, a function that does not return a `Result` (also when its return type is only named
/// like one, `SearchResult`), `on_busy = "skip"` without `Result<Option<T>, E>`, an unknown
/// `kind` (listing the kinds), `key` together with `keys`, an empty `keys = []`, `keys` with a
/// `kind` other than `"reentrant"`, `permits` (an option of `#[distributed_semaphore]`). rustc
/// itself
/// reports, on your tokens, an error type without `From<LockError>` (at `E`), a `map_err`
/// function of the wrong type (at the function), a missing field and a value that is not
/// `Display` (at the key), and on a plain `fn` a `client` that is not a
/// `dlock::blocking::LockClient` (at the expression). After an error the function is still emitted as written, so one
/// mistake does not cascade into errors at every call site.
#[proc_macro_attribute]
pub fn distributed_lock(attr: TokenStream, item: TokenStream) -> TokenStream {
    attribute(args::Attr::Lock, attr, item)
}

/// The shared front of both attributes: expand, or emit the error beside the item as written.
fn attribute(which: args::Attr, attr: TokenStream, item: TokenStream) -> TokenStream {
    let item = proc_macro2::TokenStream::from(item);
    match expand::expand(which, attr.into(), item.clone()) {
        Ok(out) => out.into(),
        Err(err) => {
            // Emit the item unchanged beside the error (tokio's approach): the function still
            // exists, so its callers do not add a cascade of "cannot find function" errors.
            // Parameters used only by the rejected key would now look unused; rustc's advice
            // to rename them `_id` would break the key, so that one lint is silenced.
            let mut out = err.into_compile_error();
            if syn::parse2::<syn::ItemFn>(item.clone()).is_ok() {
                out.extend(quote::quote!(#[allow(unused_variables)]));
            }
            out.extend(item);
            out.into()
        }
    }
}

/// Runs the body of an `async fn` (or of a plain `fn`, through the blocking client) only while
/// this process holds one of the `permits` permits of a Redis semaphore named after the
/// function's arguments, and gives the permit back on
/// every way out: at most `permits` bodies run at once across the fleet.
///
/// ```no_run
/// use dlock::{distributed_semaphore, LockError};
///
/// /// At most 3 exports of one tenant at a time, across every process.
/// #[distributed_semaphore(key = "exports:{tenant}", permits = 3, ttl = "30s", wait = "5s")]
/// async fn export(tenant: &str) -> Result<usize, LockError> {
///     Ok(tenant.len())
/// }
/// ```
///
/// # Options
///
/// The options and rules of [`#[distributed_lock]`](macro@distributed_lock), from the same
/// parser and code generator: the function must be an `async fn` (or a plain `fn`, which takes
/// its permit through `dlock::blocking`, as described for the lock) returning `Result<T, E>`
/// with `E: From<LockError>` (or `map_err`); the key is a compile-checked template over the
/// parameters (without `key`, `<module>::<fn>` as for the lock); `ttl`, `lease`, `wait`,
/// `client`, `on_busy`, `map_err`, `crate` mean what they mean there. When no permit frees up
/// within `wait`, the body does not run and the function returns `Err(LockError::Timeout)`
/// (converted), or `Ok(None)` with `on_busy = "skip"`.
///
/// | option | default | |
/// |---|---|---|
/// | `permits = N` | **required** | how many bodies may run at once, an integer literal > 0 |
/// | `key = "..."` | `<module>::<fn>`, `<module>::<Type>::<method>` | the semaphore's name |
/// | `ttl`, `wait`, `lease`, `client`, `on_busy`, `map_err`, `crate` | as for the lock | |
///
/// `permits` must be the same for every user of the name (the runtime refuses a different count
/// while permits are held, with `LockError::InvalidArgument`). Missing, zero, negative or not an
/// integer literal is a compile error; `kind` and `keys` are lock options and are refused.
///
/// The semaphore is `client.semaphore(key, permits)`: `#[distributed_semaphore(key =
/// "exports:{t}", permits = 3)]` with `t = "a"` shares its permits with
/// `client.semaphore("exports:a", 3)`. Its Redis keys differ from a lock's of the same name.
///
/// # What the macro writes
///
/// The expansion of `#[distributed_lock]` (see there) with steps 3 to 5 changed:
///
/// ```text
/// let __dlock_acquired = __dlock_client
///     .semaphore(__dlock_key, 3)          // permits, as written
///     .ttl(..).wait(..)                   // only the options given
///     .acquire()
///     .await;
/// match __dlock_acquired {
///     Ok(__dlock_guard) => {              // a `Permit`
///         let __dlock_ret: Result<usize, LockError> = (async move { /* body */ }).await;
///         ::dlock::Permit::release_logged(__dlock_guard).await;
///         __dlock_ret
///     }
///     Err(__dlock_err) => Err(From::from(__dlock_err)),
/// }
/// ```
///
/// # Released on every way out
///
/// Return and `?` give the permit back before the function returns (a failed give-back is
/// logged at `warn` and the body's result is returned; the permit expires on its own). Panic
/// and cancellation drop the `Permit`, which stops its renewals and gives it back in the
/// background. A crashed process's permit comes back one lease (`ttl`) after its last renewal.
///
/// # Not re-entrant
///
/// Every acquire is a new permit: a body calling another `#[distributed_semaphore]` function on
/// the same semaphore takes a second permit (and waits for one if none is free; with
/// `permits = 1` that is a wait for itself, ended by `wait`). The body runs without a lock
/// scope: `current_lock()` inside it returns what it returns outside (the caller's innermost
/// lock, or `None`); the permit is not a lock and is not shown there.
#[proc_macro_attribute]
pub fn distributed_semaphore(attr: TokenStream, item: TokenStream) -> TokenStream {
    attribute(args::Attr::Semaphore, attr, item)
}
