//! # Sharing locks with Redisson
//!
//! A Rust service using dlock and a Java service using [Redisson](https://redisson.org) can
//! guard the same resource with one lock: [`LockClient::redisson_lock`] speaks Redisson's
//! `RLock` protocol on the wire, [`LockClient::redisson_fenced_lock`] its `RFencedLock`,
//! [`LockClient::redisson_read_write_lock`] its `RReadWriteLock`, and
//! `#[distributed_lock(kind = "redisson" | "redisson_fenced" | "redisson_read" |
//! "redisson_write")]` takes them from the attribute. Both sides see the same Redis hash,
//! exclude each other, and wake each other when they release. Nothing to import: this module
//! holds only this page.
//!
//! [`LockClient::redisson_lock`]: crate::LockClient::redisson_lock
//! [`LockClient::redisson_fenced_lock`]: crate::LockClient::redisson_fenced_lock
//! [`LockClient::redisson_read_write_lock`]: crate::LockClient::redisson_read_write_lock
//!
//! ## The two sides
//!
//! The Java service, with Redisson's defaults (watchdog lease `lockWatchdogTimeout` = 30 s,
//! `shardedSubscriptionMode` AUTO on a cluster):
//!
//! ```java
//! RedissonClient redisson = Redisson.create(config);
//!
//! RLock lock = redisson.getLock("order:42");
//! if (lock.tryLock(5, TimeUnit.SECONDS)) {          // no lease: the watchdog renews it
//!     try { pay(order); } finally { lock.unlock(); }
//! }
//!
//! RFencedLock fenced = redisson.getFencedLock("order:42");
//! Long token = fenced.tryLockAndGetToken(5, TimeUnit.SECONDS);   // same sequence as
//!                                                        // Rust's redisson_fenced_lock
//!
//! RReadWriteLock prices = redisson.getReadWriteLock("prices");
//! prices.readLock().lock();  /* ... */  prices.readLock().unlock();
//! prices.writeLock().lock(); /* ... */  prices.writeLock().unlock();
//! ```
//!
//! The Rust service:
//!
//! ```no_run
//! # async fn demo(client: dlock::LockClient) -> Result<(), dlock::LockError> {
//! use std::time::Duration;
//!
//! let lock = client.redisson_lock("order:42").wait(Duration::from_secs(5));
//! let guard = lock.acquire().await?;          // 30 s lease, renewed every 10 s
//! let token = guard.fencing_token();          // the server's clock in µs: nothing stored
//! guard.release().await?;
//!
//! let fenced = client.redisson_fenced_lock("order:42");
//! let guard = fenced.acquire().await?;        // excludes getLock and getFencedLock holders
//! let counted = guard.fencing_token();        // RFencedLock's counter, Java's sequence
//! guard.release().await?;
//!
//! let prices = client.redisson_read_write_lock("prices");
//! let reading = prices.read().acquire().await?;   // beside Java readers
//! reading.release().await?;
//! let writing = prices.write().acquire().await?;  // alone, on both sides
//! writing.release().await?;
//! # let _ = (token, counted); Ok(()) }
//! ```
//!
//! or, on a function:
//!
//! ```no_run
//! # use dlock::{distributed_lock, LockError};
//! #[distributed_lock(key = "order:{id}", kind = "redisson", wait = "5s")]
//! async fn pay(id: u64) -> Result<(), LockError> {
//!     Ok(()) // runs while neither another Rust task nor a Java thread holds "order:<id>"
//! }
//! ```
//!
//! The handles and guards are dlock's usual ones: re-entry along the call chain, release on
//! every way out, the watchdog, the lost signal, cancellation-safe acquires.
//!
//! ## What is on the wire
//!
//! The same keys, fields, scripts' effects and messages as Redisson's:
//!
//! | | Redis name or value |
//! |---|---|
//! | lock hash | the name itself (`order:42`): no prefix, no hash tag added |
//! | owner field | `<36-character uuid>:<thread id>` -> hold count; the uuid is the client's id, the "thread id" numbers each top-level acquire chain (re-entries along the chain reuse it) |
//! | lease | PTTL of the hash: 30 s unless [`Lock::ttl`](crate::Lock::ttl) or [`Lock::lease`](crate::Lock::lease) says otherwise; renewed every third of it with PEXPIRE while the field exists |
//! | acquire | granted when the hash is missing or has the owner's field (count + 1, lease set); otherwise the PTTL is the answer |
//! | release | the unlock latch `redisson_unlock_latch:{<name>}:<request id>` (1 freed, 0 holds left) makes a retried release apply once; the last hold deletes the hash and publishes `0` on `redisson_lock__channel:{<name>}` |
//! | fencing tokens | `redisson_lock`, the read-write lock: none stored, as in `RLock` and `RReadWriteLock` (the token is the server's `TIME` in µs, read in the acquire script); `redisson_fenced_lock`: `INCR redisson_lock_token:{<name>}` on every grant, re-entries included, never expired, as `RFencedLock` does |
//! | read-write lock | the hash holds `mode` (`read` / `write`), readers as `<uuid>:<thread id>`, the writer as `<uuid>:<thread id>:write`; each read hold has its own lease in `{<name>}:<uuid>:<thread id>:rwlock_timeout:<n>`; releases publish on `redisson_rwlock:{<name>}`: `0` from the last reader, `1` from a writer (wakes every waiter) |
//! | pub/sub | on a Redis 7 cluster SPUBLISH and SSUBSCRIBE on the node serving the channel's slot (Redisson's sharded mode AUTO), PUBLISH and SUBSCRIBE elsewhere |
//!
//! A name with `{` in it keeps its own hash tag, as in Redisson (`redisson_lock__channel:a{b}`
//! rather than `...:{a{b}}`). The attribute renders a key template as for every kind, with
//! `:`, `{`, `}` and `%` in placeholder values percent-escaped: for ids made of letters, digits
//! and `-`, the name is the plain text a Java service would build.
//!
//! Besides Redisson's names, a cancelled re-entry may leave a short-lived marker
//! `redisson_unlock_latch:{<name>}:reentry:<id>` (so the re-entry can be undone once), and
//! unlock latches live for the client's latch lifetime rather than being deleted after the
//! reply as Redisson does; Redisson never reads either.
//!
//! ## Fencing tokens: `RLock` or `RFencedLock`
//!
//! A Java `RLock` writes the lock's hash, which its last unlock deletes, and unlock latches,
//! which expire: a service locking `order:<id>` leaves nothing behind per id.
//! [`LockClient::redisson_lock`] (and the read-write lock, and `kind = "redisson"`) do exactly
//! the same, so they keep no token counter either. Their guard's
//! [`fencing_token`](crate::LockGuard::fencing_token) is the Redis server's clock in µs when
//! the lock was granted (a re-entry reports the enclosing hold's): it rises from holder to
//! holder as long as the server's clock does, and nothing backs it if the clock steps back or a
//! failover lands on a server whose clock is behind by more than the time between two grants.
//! Treat it as a weak token.
//!
//! A counted token is opt-in, with Java's semantics: [`LockClient::redisson_fenced_lock`]
//! (`kind = "redisson_fenced"`) is `RFencedLock`: the same lock, plus
//! `INCR redisson_lock_token:{<name>}` on every grant, so Rust guards and Java's
//! `tryLockAndGetToken` / `getToken` draw from one sequence. That counter is **persistent**:
//! one key per lock name that nobody deletes, as in Java, because a Java `RFencedLock` counts
//! on from whatever value it finds, and an expired counter would start again at 1, below
//! tokens already handed out. Use the fenced lock for a bounded set of names (or delete a
//! name's counter yourself once no store checks its tokens any more). The two sequences do not
//! mix: a store that saw clock tokens (about 1.7 × 10^15 today) refuses the counter's small
//! ones, so give one resource one of the two handles.
//!
//! Fenced and plain handles of one name exclude each other (one hash), but do not re-enter
//! each other along a call chain: that fails with `LockError::WouldDeadlock`.
//!
//! ## Where compatibility stops
//!
//! The Redisson kinds do only what Redisson's protocol can express. Against dlock's own kinds
//! they lack:
//!
//! * **Local handoff.** A release always goes through Redis (dlock's plain lock hands a hold to
//!   the next task of the same client without a round trip); the hash must show who holds.
//! * **dlock's fencing tokens.** The plain Redisson kinds' tokens are a clock reading with no
//!   counter behind it (above). The fenced lock's are the bare `RFencedLock` counter: they rise
//!   by one per grant, re-entries included, and the counter has no expiry. Redis keeps it only
//!   as durably as any other key: after a restart without persistence, a restore of an older
//!   RDB/AOF or a failover to a replica that missed the last INCRs, the counter goes back and a
//!   token is handed out twice (or lower than one already used), and your store cannot tell.
//!   dlock's own locks lift an expiring counter to the server clock (µs) on every free -> held
//!   transition, so their tokens keep rising across such losses and their keys do not pile up;
//!   use them (or keep your store's fence check to `>=` the last token *and* treat a Redis
//!   data loss as an incident) when both sides are Rust.
//! * **Writer preference.** Redisson's read-write lock lets new readers in while a writer
//!   waits, so a steady stream of readers can starve writers; dlock's own
//!   [`ReadWriteLock`](crate::ReadWriteLock) queues new readers behind a waiting writer. A
//!   writer leaving while it still reads (a downgrade) turns the lock to `read` without a
//!   message, as Redisson does, so other readers waiting then get in at their next retry.
//! * **The fair lock.** Redisson's `RFairLock` orders its queue by timestamps from each
//!   client's own clock, which dlock does not trust (its fair lock orders by the server's
//!   `TIME`); it is not offered.
//! * **Replica-synced writes** (`synced_replicas`) cover dlock's side only: a Java service's
//!   acquires are only as synced as its own settings make them.
//!
//! On a cluster, both sides must agree on pub/sub: a Redisson configured with
//! `shardedSubscriptionMode` OFF publishes with PUBLISH, which dlock's shard subscribers do not
//! hear; waiters then still get the lock, but only at the holder's lease end or their wait's.
//! dlock follows a failover by itself (it re-subscribes shard channels on the slot's new
//! master within a second or two, then wakes its waiters), and so does Redisson.
//!
//! ## Versions checked
//!
//! The protocol was read from Redisson's sources (`RedissonLock`, `RedissonBaseLock`,
//! `RedissonFencedLock`, `RedissonReadLock`, `RedissonWriteLock`, `pubsub/LockPubSub`,
//! `renewal/LockTask`, `renewal/ReadLockTask`, `connection/ServiceManager`,
//! `pubsub/PublishSubscribeService`) at 3.24.0, 3.52.0, 4.0.0 and 4.7.0. The scripts that
//! matter are the same across them, except that before 3.52 a read lock's renewal also
//! renewed the other readers' hold timeouts, and 3.24 answers an unlock of a free read-write
//! lock with 1 instead of nil; neither changes what the other side sees. The unlock latch
//! exists since 3.24; earlier Redisson versions interoperate for locking, but without it a
//! retried Java unlock may release twice. Redisson 3.24 to 3.28 pick SPUBLISH on a cluster by
//! probing it, 3.29 and later through `shardedSubscriptionMode` (AUTO by default).
//!
//! ## Wake-up latency
//!
//! From just before a release is sent to the other side's waiter holding the lock, as
//! multiples of a PING on a connection idle for as long (`cargo test --release --test redisson
//! latency -- --ignored --nocapture`; 200 samples per direction, a shared 2-core machine):
//! on one server, p50 3.4 (Java unlock -> dlock waiter) and 2.5 (dlock release -> Java
//! waiter); on a 3-master cluster over shard channels, 1.9 and 1.5. That is the release's own
//! round trip, the message, and the waiter's retry: never the holder's lease.
//!
//! The test suite (`tests/redisson`) drives a second client that replays Redisson's scripts
//! with their KEYS and ARGV against dlock on one server and on a cluster (also across a
//! failover): exclusion on a shared counter, wake-ups both ways, both watchdogs on one key,
//! crashed holders, one token sequence with `RFencedLock`, no key left behind by the
//! counter-free kinds, and the layout at every step. Its scripts are written from the protocol
//! facts; the suite also passed with Redisson's own script texts of 4.7.0 and 3.24.0 swapped
//! in.
