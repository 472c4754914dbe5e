//! The lock runtime behind [dlock](https://docs.rs/dlock): a Redisson-grade reentrant Redis lock
//! for async Rust. Most users depend on the `dlock` facade and its `#[distributed_lock]`
//! attribute; this crate is the API underneath.
//!
//! ```no_run
//! # extern crate dlock_runtime as dlock;
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
//! # What it guarantees
//!
//! * **The protocol** (Redis side): one lock is one hash, owner id -> hold count, whose PTTL is
//!   the lease. Acquire, release, renew and force-unlock are Lua scripts, loaded as one
//!   versioned Redis FUNCTION library and called with FCALL (Redis 7+; replicated and
//!   persisted with the data, so a failover does not lose them), or sent with EVALSHA where
//!   the server has no FUNCTION (see [`LockClientBuilder::functions`]). Every key and channel
//!   of a lock is `<prefix>{<name>}...`: one hash tag, one cluster slot. Names are percent-escaped, so user text cannot break the tag.
//! * **Owners** are `<128 random bits of the client>:<sequence>`, one per top-level acquire,
//!   never a thread or task id.
//! * **Reentrancy follows the call chain**: an acquire inside [`LockGuard::scope`] of a hold of
//!   the same lock re-enters it; spawned tasks and futures joined beside each other are other
//!   owners and wait.
//! * **Release on every way out**: [`LockGuard::release`] awaits the release; dropping a guard
//!   (panic, `?`, cancellation) stops its renewals at once and releases in the background. A
//!   dropped *acquire* whose request may have reached Redis releases what it may have been
//!   granted, on the same connection, right away. An acquire whose reply timed out is treated
//!   the same way. A crashed process is covered by the lease.
//! * **Waiting is event-driven**: tasks of one process queue locally per key (FIFO), the head
//!   of the queue waits on one pub/sub connection shared by the whole client, woken by the
//!   release message or at the holder's PTTL, whichever comes first. Connections: the command
//!   connections (`connections`, default 1), one more driven by the client's own thread for
//!   renewals and clean-ups when the command connections are driven by a multi-thread caller
//!   runtime, and one subscriber, whatever the waiter count (on a Redis Cluster, one more
//!   subscriber connection per master the client waits on: see "Deployments").
//! * **Watchdog**: one task per client renews all held locks at a third of their lease, in one
//!   round trip per tick (holds due within a twelfth of their lease share it). A tick slower
//!   than a third of the lease (a slow link, a busy machine) is not cut short while the
//!   connection keeps answering, up to half the lease: renewals are spaced out, and holds are
//!   lost only once one tick takes about half their lease (tests/stores/slow_link.rs). After a connection was lost
//!   or replaced (Redis restarted, failed over, a frozen link), every hold is renewed at once,
//!   so a hold whose key is gone learns it within a reconnect and a round trip (measured:
//!   130 ms after a restart without persistence, 30 s lease).
//! * **The holder's view is never stale**: every hold keeps a validity deadline, the instant
//!   its last successful acquire or renewal was *sent* plus the lease minus a drift margin of
//!   1 % + 2 ms (at most half the lease). Redis cannot expire the key before then, so
//!   [`LockGuard::is_lost`] turns true, and [`LockGuard::lost`] completes, before anybody else
//!   can take the lock: a timer, not a renewal reply, decides (measured with a frozen link:
//!   lost 13 ms before another client acquired, 1 s lease; 33 ms, 3 s lease; a SIGSTOPped
//!   holder reads "lost" at its first look after SIGCONT). Once passed, a deadline never
//!   comes back. A reply that arrives after the lease it granted could be trusted is released
//!   and the acquire goes on waiting. Only data loss in Redis (a restart without persistence,
//!   a failover to a replica that missed the write) can beat the deadline; then the holder
//!   learns at the next round trip and the fencing token protects the store.
//! * **Fencing tokens**: [`LockGuard::fencing_token`] grows with each free -> held transition:
//!   Redis counts `max(last + 1, Redis server time in µs)`, so tokens keep rising after Redis
//!   restores an older RDB or AOF or promotes a replica that missed the last acquires (as long
//!   as the server clock does not step back by more than the gap). The token is that count
//!   times 1024 (room for the local handoffs that may follow one acquire), about 2^61 today:
//!   it fits an `i64` / SQL `BIGINT` until the year 2255.
//! * **Fence checks for your store**: a token only helps if the store refuses stale ones.
//!   [`fence::set_if_newer`] keeps the highest token per Redis key and refuses lower ones
//!   (one hash per key, so it works on a Cluster); [`fence`] also shows the SQL pattern.
//! * **Waits are honoured**: each attempt is bounded by what is left of the wait (at least
//!   250 ms, so the last attempt can be answered; `try_acquire` by the response timeout). An
//!   attempt cut short is cleaned up like a cancelled one.
//! * **Passing faults are waited out, never stranded**: a server's "not now" (`LOADING` while
//!   a restart reads a large dataset, `TRYAGAIN` during a slot migration, `CLUSTERDOWN`,
//!   `MASTERDOWN`) is retried within an acquire's wait, and so is a broken link once Redis has
//!   refused the acquire (a first attempt that cannot reach Redis is the caller's answer at
//!   once). A waiter whose retry broke keeps its owner id, so the next attempt adopts a grant
//!   Redis made unseen (its lease counted from the attempt that may have made it) instead of
//!   being refused by it; if the wait ends first, that owner is released. Releases, renewals
//!   and the undo of a cancelled acquire retry the same faults (50 ms doubling to 1 s) until
//!   Redis answers or the lease has surely ended.
//! * **The client's work does not depend on the caller's runtime**: the watchdog, the
//!   subscriber, background releases and orphan clean-ups run on the client's own thread (one
//!   per client), so a client kept in a `static` and used from several `#[tokio::test]`
//!   runtimes keeps renewing, and a guard dropped on any thread (no runtime needed) is
//!   released at once.
//! * **Multi-locks** ([`LockClient::multi_lock`]) take several plain locks all or none, in one
//!   canonical order (sorted by Redis key, duplicates once), within one wait for the whole
//!   acquire: callers listing the same names in any order never deadlock, and the locks already
//!   taken are released before an error returns (see [`MultiLock`]).
//! * **Releases are idempotent per request**: a release retried after a lost reply is answered
//!   from a short-lived latch instead of releasing twice.
//! * **Read-write locks**: [`LockClient::read_write_lock`] gives a [`ReadWriteLock`] whose
//!   `read()` and `write()` are ordinary [`Lock`] handles. Each reader has its own lease
//!   (server time, in a zset beside the hash), so a dead reader frees its share after its own
//!   lease without stretching the others'. A refused writer's claim keeps *new* readers out
//!   until it is in (it renews the claim every second while it waits; a writer that died
//!   stops blocking readers within 2 s), so a stream of readers cannot starve it. Downgrade
//!   (read inside one's write scope) works; upgrade fails at once with
//!   [`LockError::WouldDeadlock`]. A release publishes only when the lock frees (or turns
//!   from write to read).
//! * **Fair locks**: [`LockClient::fair_lock`] queues waiters in Redis in arrival order
//!   (server time). A release hands the lock to the queue's head and tells it on its own
//!   channel, so it holds without another round trip (measured: handoff 1.79 idle-PING
//!   RTT against 2.83 for the plain lock across clients). Waiters keep their place by coming
//!   back every 2/3 s; a place not kept for 2 s (server time) is dropped, and a grant lasts
//!   2 s until its owner renews it (at 2/3 s, by 1 s at the latest, counted from its last
//!   request): a waiter whose process died is skipped within ~5 s. A
//!   waiter that times out or is cancelled leaves the queue at once. The order is the order of
//!   asking whichever client asked: every task stands in Redis's line itself (the plain lock's
//!   local queue would let another client overtake a busy client's tasks).
//! * **Semaphores**: [`LockClient::semaphore`] gives N permits at once, each with its own
//!   deadline in Redis (server time), renewed by the watchdog; a crashed holder's permit comes
//!   back one lease after its last renewal. Keys, waking and the crash bound: [`Semaphore`].
//!
//! # Flash sales
//!
//! [`SegmentedStock`] splits one hot item's stock over N keys in distinct cluster slots and takes
//! from it atomically, idempotently per order id, probing other segments before answering "sold
//! out"; [`SegmentLocks`] locks one segment at a time for stock kept in your own database.
//! `cargo run --release --example seckill` compares both with one lock per item; the [`stock`]
//! module has their answers and limits.
//!
//! # Connections
//!
//! Commands go over redis-rs `ConnectionManager`s (multiplexed, reconnecting, cancel-safe:
//! a dropped request is discarded, never left to corrupt the next reply). Built on a
//! multi-thread runtime (a service's `#[tokio::main]`), the command connections are driven by
//! that runtime while it lives, which saves two thread wake-ups per command; when it shuts
//! down, the client switches to connections driven by its own thread (opened lazily then).
//! Built anywhere else (a `#[tokio::test]`), they are driven by the client's thread from the
//! start. Measured: a PING from a multi-thread caller through a connection on the client's
//! thread took 40-43 µs against 53-62 µs through one on the caller's runtime; from a
//! current_thread caller 32-46 µs against 20-29 µs. We measured against
//! deadpool-redis and chose not to pool: deadpool-redis 0.23 checks every connection out with an
//! `UNWATCH` + `PING` round trip, which would double the cost of an uncontended acquire +
//! release, while one multiplexed connection already pipelines every concurrent request.
//! `LockClientBuilder::connections(n)` spreads commands over `n` of them. Waiters share one
//! separate pub/sub connection (per master, on a cluster); nothing blocking (WAIT, BLPOP) is ever sent on a command
//! connection, so the watchdog's renewals are never stuck behind one.
//!
//! # Deployments
//!
//! * **One server**: [`LockClient::connect`] / [`LockClient::builder`] with a `redis://` or
//!   `rediss://` URL.
//! * **Redis Cluster**: [`LockClient::cluster_builder`] with seed node URLs. Every key of a lock
//!   shares one hash tag, so every script runs on one node. The watchdog renews with one call
//!   per node per tick (Redis 7's `allow-cross-slot-keys` script flag; it falls back to one
//!   call per slot on older servers or while slots move). Waiters use *classic* pub/sub,
//!   subscribed on the master that serves the lock's slot: the release script PUBLISHes there,
//!   so the message reaches the waiter without crossing the cluster bus, which delays 1-2 % of
//!   messages by 30-43 ms (see "How cost grows" below). The client keeps one pub/sub connection
//!   per master that has waiters, PINGs each every second, and moves a channel when its slot
//!   moves (a failover, resharding) or its connection drops; then it wakes every waiter once,
//!   since a release may have been missed meanwhile. A subscription on another node still hears
//!   every message, later: classic PUBLISH reaches every node of the cluster (measured: 50 of 50
//!   messages published on another node's channel arrived), so placement only ever costs
//!   latency. (The Redisson kinds' shard channels, on a Redis 7+ cluster, have a subscriber of
//!   their own, placed the same way: up to two pub/sub connections per master.) A dlock release stays a classic `PUBLISH`, which every dlock version and every
//!   node hears: sharded pub/sub (SPUBLISH) would cut the bus traffic too, but a waiter of an
//!   older dlock, listening classically, would no longer hear a newer one's releases during a
//!   rolling deploy and would sleep to the holder's PTTL. Classic PUBLISH costs cluster-bus
//!   traffic proportional to the node count; dlock publishes once per release, and only when
//!   the lock was freed. One more pub/sub connection, to one seed node, carries no channels;
//!   when it is lost the watchdog renews every hold at once, as on one server.
//!
//!   An orphan's undo (a cancelled acquire) goes to the same node over the same socket, so it
//!   runs after the acquire, except when a redirect (MOVED/ASK during a failover or resharding)
//!   makes redis-rs resend the acquire to the new node after the undo got there: then the undo
//!   finds nothing, and the orphaned hold, never renewed, expires with its lease.
//! * **Sentinel**: [`LockClient::sentinel_builder`] with the sentinels' URLs and the master's
//!   name ([`LockClientBuilder::master_auth`] for its ACL user). The client listens to every
//!   sentinel's `+switch-master` announcement (one pub/sub connection per sentinel), and
//!   asks the sentinels again whenever a command fails the way a failover makes it fail (a
//!   broken connection, or READONLY from a demoted primary), and at least every 5 s while in
//!   use. It asks every sentinel and follows the answer with the highest `config-epoch`, so a
//!   sentinel that has not heard of a failover yet cannot send it back. On a switch it renews
//!   every hold on the new primary at once and moves its subscriber there (measured: acquiring
//!   again 0.43 s after the sentinels promoted the replica). Commands in flight at the switch
//!   fail and are handled like any Redis error; a reply that arrives after the switch is not
//!   believed.
//!
//!   That last rule matters when the primary is *paused* rather than killed (SIGSTOP, a long
//!   `DEBUG SLEEP`, a stalled VM) past `down-after-milliseconds`: the sentinels promote its
//!   replica, and the old primary wakes up still calling itself master and accepting writes
//!   for seconds, until they reconfigure it. A grant it sends after the announcement, or
//!   that arrives after the client switched, is treated like a cancelled acquire's; a hold
//!   the promoted replica lacks is reported lost at the switch (tests/deployments/
//!   sentinel_paused.rs). What remains is the window between the promotion and the first
//!   announcement the client hears (milliseconds on one host): a grant the old primary makes
//!   then is a write the new primary never sees, data loss like any write a promoted replica
//!   missed. The server-side closing of that window is `min-replicas-to-write 1` with a small
//!   `min-replicas-max-lag` on the primary: it then refuses writes once its replica is gone.
//! * **TLS and ACL users** on each: `rediss://` URLs (rustls with the ring provider: pure Rust,
//!   no OpenSSL headers needed to build), [`LockClientBuilder::tls_root_certificates`] for a
//!   private CA, `user:password@` in URLs. Passwords never appear in errors, logs or `Debug`.
//!   An ACL user's key patterns must cover its locks' keys (`<prefix>{<name>}…`) and the
//!   fencing counters, `<prefix>fence:{*}` (one per cluster slot, shared by the locks there);
//!   its channel patterns the locks' `…:chan` channels.
//!
//! A failover can lose a lock that was not yet replicated to the promoted replica: the holder
//! learns it within a reconnect and a round trip (one server, Sentinel: the connection broke,
//! and every hold is renewed at once). On a cluster a master can fail over while nothing this
//! client sends goes to it, so a client that holds locks reads the slot map every 250 ms and
//! renews every hold when a slot has a new master: measured with a SIGKILLed master whose
//! replica missed the write (45 s lease), the holder was told 0.05-0.2 s after the promotion,
//! from 44 ms before to 25 ms after another client took the lock (before this watch: 15 s
//! after the kill, at its scheduled renewal). That gap is data loss: the fencing token still
//! rises for the next holder, and it is what protects the store.
//!
//! A master frozen rather than dead (SIGSTOP, a stalled host, a link that drops packets) and
//! promoted past holds up only its own slots. The watchdog's per-node renewals (plain, fair
//! and Redisson-lock holds without replica sync, on Redis 7 and later) go over a connection of
//! their own to each master the slot map names, so the failover watch's pass renews those
//! holds on the new master (`tests/cluster`, `failover::a_promotion_past_…`: the hold renewed
//! there 4-5 s after the freeze, and 270-300 acquire + release cycles on a healthy master in
//! the 4 s after the promotion, the slowest 9-22 ms). Everything else goes through redis-rs's
//! cluster connection, which reads the slot map again on a redirect or a broken link, not on a
//! timeout (redis-rs 1.8): acquires and releases of the frozen master's slots, and renewals
//! sent per slot (the other kinds, replica-synced holds, Redis 6.2), time out until it answers
//! again (it then redirects) or its link breaks; such a hold is reported lost if its lease runs
//! out first. Before, a renewal sent to the new master by its address made redis-rs reconnect
//! to every seed, the frozen one included, and stopped every request of the client for 5 s.
//!
//! # Stores
//!
//! The URL picks the store; the rest of the API, the attribute included, stays the same.
//! `redis://` and `rediss://` keep locks in Redis (the deployments above). With the `postgres`
//! cargo feature, `postgres://` and `postgresql://` keep them in PostgreSQL
//! (`LockClient::connect("postgres://app@db:5432/app")`); without the feature nothing of it is
//! compiled, and such a URL is refused when the client is built.
//!
//! What the PostgreSQL store does, and why (lease rows, fencing, waking, poolers, schema, TLS,
//! names, kinds): the facade's [`dlock::stores`](https://docs.rs/dlock-redis/latest/dlock/stores/)
//! page.
//!
//! # Where this differs from Redisson
//!
//! * Tasks of one process queue locally (FIFO) per key before contending in Redis: no local
//!   barging, one subscription per key, and Redis load that grows with keys, not tasks. Across
//!   processes the plain lock is not fair (like Redisson's `RLock`); the fair lock is.
//! * Fair-lock queues and semaphore permits are judged stale by the Redis server's clock only
//!   (Redisson's `RFairLock` uses client clocks for its queue deadlines, which drift).
//! * `try_acquire` returns `None` when another task of this process is queued for the key,
//!   without asking Redis (the fair lock always asks: its queue is in Redis).
//! * Every lock has fencing tokens and a lost-lock signal: Redisson keeps fencing tokens for a
//!   separate lock type (`RFencedLock`) and has no lost-lock signal.
//!
//! # Performance
//!
//! `cargo run --release --example bench` prints every figure as a ratio to a PING round trip
//! measured in the same run. On a 2-core VM against local Redis 7.0 (PING 47-61 µs hot,
//! 100-140 µs after 3 ms idle; the VM is noisy): uncontended acquire + release 3.4-4.1 RTT.
//! `cargo run --release --example cycle` shows where that goes: each of the two scripts costs
//! Redis 17-22 µs (a no-op script 2.5 µs, a lock without fencing tokens or a retry latch
//! 7-8 µs), so two no-op scripts alone take 2.1-2.2 RTT and the minimal lock 2.4-2.6. Handoff
//! from release to the next holder: 0.15-0.2 idle-PING RTT within one client (local handoff),
//! 2.7-3.2 across clients over pub/sub. 16 tasks on one key (GET n / SET n+1 inside the lock):
//! 12,200-13,300 ops/s with local handoff, 4,900-5,200 without (1.3-1.7 RTT per operation
//! instead of 4.1), no lost update, shared evenly (min/max 1.00/1.00 of the mean). 2 processes
//! x 8 tasks (`cargo run --release --example contend`): ~12,800 ops/s with handoff, each
//! process 0.50 of the operations and no acquire waiting longer than ~9 ms, against ~4,400
//! ops/s and a longest wait of about 1 s without. 10,000 waiters on 1,000 keys use 2
//! connections; each held lock is renewed 3 times per lease, and 1,000 held locks cost 6 renew
//! script calls per lease (500 keys a call).
//! Scripts as FCALL of the library against EVALSHA (`cycle`, two runs of 5 interleaved
//! rounds): the same cycle within the noise (medians 101-224 µs against 101-225 µs), Redis
//! 9.7-14.1 µs per call against 10.0-17.5. What FCALL buys is the failover: the first acquire
//! on a promoted replica is one FCALL, where EVALSHA cost two calls (NOSCRIPT, then EVAL). A replica-synced lock (`cargo run --release --example synced`, one
//! local replica) costs 0.9-1.4 RTT more per acquire + release than an unsynced one.
//!
//! Against peers (`cargo run --release --manifest-path perf/peers/Cargo.toml`: `rslock` and `distributed-lock`'s
//! Redis backend in the same process, sample by sample; two runs of 5 rounds, PING 70-105 µs
//! hot, medians of the rounds): a `#[distributed_lock]` call with an empty body on a fresh key
//! 1.86 RTT (rslock's `using` 2.25-2.31, distributed-lock 2.57-2.63; 3.18-3.30 before the
//! attribute returned once its release was written), since the call returns once the release
//! is written; its floor, the acquire's round trip plus both scripts' Redis time back to back,
//! is 1.21-2.04 (`cycle`, same session). Uncontended acquire + release with the release
//! awaited: 3.30 RTT against rslock's 2.34: Redis runs two Lua scripts where rslock runs a SET
//! and one script, and even two minimal lock scripts (no fencing token, no release latch) took
//! 2.27-2.51 RTT in `cycle`. Handoff across two clients, in idle-PING RTT: 2.40-2.44, fair
//! direct grant 1.97-2.14 (2.69-2.75 and 2.30-2.39 before the subscriber ran on the caller's
//! runtime); rslock's backing-off acquire takes ~450-530, distributed-lock's waiter, retrying at
//! once, 1.10-1.16. With `--in-task` (measured inside a spawned task, as a handler runs): the
//! call 1.81-1.85 RTT, handoffs 3.42-3.87 and fair 2.80-2.98 (4.68-4.87 and 3.79-3.90 before);
//! there a hot PING can take ~30 µs (the worker never parks), so every µs of script time
//! weighs three times as much: the cycle is 3.9-4.3 RTT against rslock's 1.9-2.2.
//! A later session (another VM of the same size), after the fair grant's first renewal stopped
//! waking the watchdog's thread: fair grant 1.65-1.70 (1.79-1.80 before, same session), 2.76-2.77
//! in a task (3.20-3.32); plain handoff unchanged at 2.35-2.37.
//! `cargo run --release --example handoff_floor` puts each handoff beside the same chain done
//! with plain redis-rs (a RESP3 push waking a task): a bare PUBLISH reaches a parked task in
//! 1.19-1.20 idle-PING RTT, a PING plus a script of the fair grant's 15 commands in 1.63-1.81
//! (dlock's fair grant 1.71-1.73 in the same runs), dlock's own plain release script and then
//! the woken waiter's acquire script in 2.50-2.55 (dlock's plain handoff 2.44-2.46): both
//! handoffs are at the floor of their scripts, whose Redis time, cold after the idle wait, is
//! what separates them from one and two round trips.
//! Against dlock before it had its own thread (e4dd27a; the same harness built at each commit
//! and run in turn, 3 x 4 rounds of 400 samples, one session): plain handoff 1.93-2.24
//! idle-PING RTT there, 2.37-2.50 now; cycle 2.42-2.66 there, 2.95-3.08 now; the attribute's
//! call 2.45-2.67 there, 1.80-1.88 now. Of the handoff's ~60 µs, ~20 µs is the scripts'
//! hardening since then (a token lifted to the server clock on every grant, type checks):
//! now with that commit's scripts swapped in, 2.27-2.38 and Redis 24.7 µs per call against
//! 28.3-30.1. Marks inside a scratch build place a plain handoff's time (p50 of each step,
//! 1,000 handoffs): the releaser's own work before its request is on the connection 6.5-6.8
//! µs; from there to the message reaching the waiter's channel 192-194 µs (an idle round trip
//! plus the release script, the floor measured above); the waiter woken, its acquire built and
//! on the connection 8 µs; the acquire's reply 124-126 µs (a round trip plus the script); the
//! waiter holding 7 µs later. dlock's own code is ~22 µs of a ~330 µs handoff; the rest is the
//! two Redis legs. The same marks in the uncontended cycle (3 x 3,000 cycles, hot PING
//! 74-81 µs): dlock's code before and after each request 6-9 µs in all, the acquire's round
//! trip 97-104 µs and the release's 96-102 µs, so each script call costs a quarter of a PING
//! more than a PING (its Redis time and larger messages), and the cycle's 2.5-2.8 RTT is those
//! two calls.
//!
//! The three stores side by side (`cargo run --release --features postgres,zookeeper
//! --example stores_cycle`: one throw-away server each, stores in turn within each round), as
//! ratios to a round trip to the same server in the same run (PING, `SELECT 1`, ZooKeeper's
//! `exists`); three rounds on a quiet 2-core VM: uncontended cycle Redis 2.49-2.68, PostgreSQL
//! 7.26-8.03, ZooKeeper 2.68-3.25 (create, list, delete: Curator's three requests);
//! cross-client handoff in idle round trips Redis 2.28-2.40, PostgreSQL 5.75-6.12, ZooKeeper
//! 2.07-3.00. Beside it on the same server, `zookeeper-client`'s own lock recipe (Curator's
//! node names too): cycle 1.71-4.68 (its release is a delete sent in the background when the
//! guard drops, so its cycle leaves that round trip out), handoff 1.69-2.36.
//!
//! ## How cost grows
//!
//! `cargo run --release --example scale` sweeps what grows in a service, on one Redis server
//! and a local 3-master cluster (`--features scale/postgres -- --stores redis,cluster,postgres`
//! adds PostgreSQL), prints a table per sweep and redraws the curves in `docs/scale/`
//! (`held.svg`, `waiters.svg`, `processes.svg`). The table is from one run on this project's
//! 2-core VM, shared with builds (load 4-8; figures move between runs by up to 2x, shapes do
//! not), with the rows that changed since measured again; the pictures are from a later run
//! with the cluster's waiters on their masters and PostgreSQL's set-based renewal:
//!
//! | sweep | grows how | where it bends |
//! |---|---|---|
//! | N held locks in one client (1k, 10k, 100k) | flat per hold: client heap 1.16-1.22 KB, Redis 216-361 B, PostgreSQL 552-565 B; server time per renewal flat on Redis (2.7-2.9 µs), 4-9 µs on PostgreSQL (7-20 µs before its renewal became one statement per table for a whole call, schema version 6; 10k holds on a 30 s lease cost the server 3.7 ms a second); the watchdog's tick linear in the holds due in it (Redis 5 ms, 55 ms, 150 ms p50) | one client renews on the order of 100k holds per second here: at a 3 s lease (a renewal a second) 100k holds took 27 % of a Redis core and ticks of 150-880 ms; in one run on a busier machine the ticks (p99 1.2 s) fell behind and 46k of the 100k holds were lost, a defect since fixed (the watchdog cut calls that were only queued; with three busy loops beside it, 5,500 and 50,672 lost before the fix, none after, ticks of 433-520 ms p50). At the default 30 s lease the same 100k cost a tenth of that |
//! | W tasks waiting in one client on K keys (W 10 to 10k, K 1, 10, 1k) | server connections constant in W (2 clients: 6 on one Redis, 4 on PostgreSQL; on the cluster 8 idle, and one more per master where the client waits: 9 with one key, 11 with keys on every master); client heap flat, 5.6-7.4 KB per waiter in the pictures, 4.6 KB of it the acquire future, since cut to 4.0 KB per waiter at W = 10k (the future 1.6 KB: an attempt, a subscribe and the rare paths are boxed while they run, which costs about 1,100 more client instructions per uncontended cycle, about 1 %); release to next holder p50 4-15 µs (tasks of one client hand over without the server) | the first wake across clients, p50: Redis 0.3-0.6 ms (3-6 PINGs: release script, message, acquire script) at every W and K; on PostgreSQL 2.5-6.4 ms up to K = 10, 69-165 ms at K = 1,000, where the waiting client's one command connection carries 1,000 acquires and releases in turn (more `connections` spread them) |
//! | P processes, one task each, on 1 key and on 16 (P 2 to 32) | 16 keys: throughput flat until the 2 cores are full (Redis 6.8k to 3.9k locks/s, PostgreSQL 3.1k to 1k), fair shares, server work per lock flat (Redis 12-16 commands, PostgreSQL 2.6-5.4 calls) | one key, plain lock: every release wakes every waiting process and each tries once, so the server's work per lock grows linearly with P (Redis 17 to 120 commands, PostgreSQL 4 to 60 calls), throughput falls 10-17x and p99 wait reaches 0.3-1.3 s. The fair lock grants the next in line: work per lock flat (Redis 41, PostgreSQL 8.5), 2.1k locks/s at P = 32 on Redis (plain 377), p99 23 ms (plain 321 ms). A key hot across many processes wants `fair_lock` |
//!
//! On the cluster the curves follow one server's (16 keys: plain 5.4k to 3.6k locks/s, fair
//! 2.6k to 3.2k). They did not before waiters listened on their key's master: wake-ups of
//! 40-47 ms recurred (fair lock, P = 2 on one key: 337 locks/s, p99 47 ms, where one server
//! did 4,035 and 0.8 ms; 10 waiters on 10 keys: p99 43 ms; p99 waits of 250-435 ms at P = 16-32
//! on 16 keys). They came from the cluster bus: a release's `PUBLISH` reached a subscriber
//! connected to another node over the bus between the nodes. Measured with one subscriber and a
//! `PUBLISH` every 10 ms on a local 3-master cluster (`perf/cluster-bus/publish_latency.py`):
//! across nodes 13 of 1,000 messages took 30-43 ms on Redis 7.0 and 5 of 1,000 on Valkey 8.1,
//! on one node none (max 1.2 ms). 30-43 ms is the signature of Nagle's algorithm meeting a
//! delayed ACK (40 ms on Linux), and Valkey's issue 1758 reports that the bus connections a node
//! opens lack TCP_NODELAY; Valkey 8.1 sets it (Valkey's pull request 1763) and still delayed 5
//! of 1,000, so Nagle may not be all of it. Now each waiter subscribes on the master that runs
//! its release (see "Deployments"), so the message never crosses the bus: fair lock at P = 2 on
//! one key 2,647 locks/s, p99 1.2 ms; 10 waiters on 10 keys, wake p99 1.5 ms; p99 waits at
//! P = 16-32 on 16 keys 11-55 ms. `examples/bench --cluster`, 500 handoffs across clients, old
//! and new builds interleaved (7 and 7 runs): 37-137 of 500 took over 10 ms before (p99
//! 39-40 ms), none after (p99 0.7-0.9 ms, max 0.8-3.5 ms); the fair lock's grants 2-6 of 500
//! before, none after. The waiting client keeps one more pub/sub connection per master with
//! waiters (8 server connections idle, 9-11 waiting, for two clients on 3 masters).
//!
//! ## Redis server time
//!
//! Every acquire and release is a script the Redis core runs alone, so script time sets how many
//! locks one server can serve. `cargo run --release --example server_cost` measures it per kind
//! through the real API (`INFO commandstats`, 20,000 calls a stretch, fresh keys; `-- --cluster` on
//! a local 3-master cluster); `perf/script_cost.sh` compares one script's old and new text
//! pipelined. Redis 7.0 on a 2-core VM shared with other builds (load 2.5-10), the build before
//! issue 39's cuts (207d087) and after them interleaved row by row, 7 runs each, medians and
//! ranges, µs per call (the cycle stretch runs acquire and release back to back; a run that landed
//! on a load spike shows in the ranges):
//!
//! | kind | acquire before / after | release before / after | cycle before / after | what the extra time buys |
//! |---|---|---|---|---|
//! | plain | 13.0 (10.7-24.3) / 10.9 (8.4-73.6) | 10.5 (9.5-20.8) / 9.8 (9.2-23.6) | 22.0 (18.3-33.4) / 22.3 (17.4-31.2) | a fencing token that never goes back (the server clock read, the counter written), the release latch, the late-acquire refusal |
//! | Redisson RLock kind | 7.7 (6.7-8.7) / 7.4 (6.0-15.1) | 8.1 (7.2-12.1) / 7.2 (6.9-8.8) | 16.0 (14.4-30.8) / 15.6 (13.0-31.5) | Java's layout, and the clock as its token |
//! | Redisson's own RLock scripts | 4.5 / 4.3 | 7.3 / 6.6 | 11.7 / 11.4 | no token |
//! | Redisson's own RFencedLock scripts | 5.8 / 5.5 | 8.1 / 7.0 | 16.6 / 16.2 | a token from a counter that never expires and goes back with the data |
//! | rslock (SET NX PX, compare-and-delete) | 1.2 / 1.2 | 2.2 / 2.2 | 2.3 / 2.3 | no re-entry, no token, no latch |
//!
//! The quietest pair of runs (load 2.5-3): plain 11.7 / 9.6 acquire, 10.0 / 10.0 release,
//! 18.5 / 17.9 cycle, against RFencedLock's 5.2, 6.5 and 14.7 (cycle 1.22x); the `RLock` kind
//! 8.0 / 7.2, 8.7 / 8.4, 16.1 / 17.0, against `RLock`'s own 3.8, 6.2 and 10.6.
//!
//! The other kinds' scripts are as issue 31 left them (cycle, µs, Redis 7.0, a quieter
//! machine): read-write read / write 23.2-25.6 / 21.3-24.0 (reader leases each with its own
//! deadline, the waiting writer's claim), fair 18.9-20.7 (the queue, skipped when nobody
//! waits), semaphore of 1 permit 15.5-16.4 (a deadline per permit), multi-lock of 2 plain
//! locks 28.7-30.8 (two plain locks, before these cuts).
//!
//! On a machine this loaded the time figures drift by tens of percent between runs, so the
//! cuts were chosen by instruction counts (Redis under callgrind, pipelined, a counter per
//! slot), which do not move with the load; instructions per acquire + release:
//!
//! | | before | after | peer | after / peer |
//! |---|---|---|---|---|
//! | plain | 158.2k (86.2k + 72.1k) | 135.2k (70.6k + 64.6k) | RFencedLock 115.4k (49.2k + 66.2k) | 1.17 |
//! | Redisson RLock kind | 124.5k (59.4k + 65.1k) | 109.6k (48.1k + 61.5k) | RLock 102.2k (36.2k + 66.1k) | 1.07 |
//!
//! The cuts (issue 39): a top-level acquire carries only what it needs (the plain lock's 4 keys
//! and 6 arguments became 3 and 2, the `RLock` kind's 2 and 5 became 1 and 2; re-entries have
//! scripts of their own with the marker and the hard-lease flag), since every key and argument
//! is parsed, turned into a Lua string and collected; no number is converted on the usual
//! paths (a Lua number sent to Redis is printed with `%.17g` and `tonumber` is `strtod`,
//! together more than the clock read itself): the clock and the counter stay text, compared
//! by length then text, and the latches and counts are written as text; the release tells
//! whether a latch is there with one `EXISTS` (reading them built a Lua table on every
//! release); the done latch is named by the owner id's unique part. Earlier (issue 31): no
//! `TYPE` calls, one `EXISTS` over every key that decides the usual path, the counter read and
//! written by one `SET .. GET`, one counter per cluster slot.
//!
//! What the plain lock still pays over RFencedLock, all of it for a guarantee: the clock read
//! (TIME, about 6k instructions: it is what keeps tokens rising after a restore or a failover that
//! lost the counter's last writes, which RFencedLock's tokens do not survive), the done latch in
//! the acquire's `EXISTS` and its own key (the late-acquire refusal), the counter's expiry and
//! `GET` in its write (RFencedLock's `INCR` never expires a key per lock name), the digit check of
//! the counter (a foreign value there is refused, not overwritten). In time the gap is wider than
//! in instructions (after / peer, medians of the runs above: the plain cycle 1.38x RFencedLock's,
//! its acquire + release 1.66x; the `RLock` kind's cycle 1.37x `RLock`'s, acquire + release 1.34x):
//! the extra keys (the slot's counter and its expiry, the done latch) are more cache misses, which
//! callgrind does not count, and the figures of this shared machine move by more than the gap
//! between the two counts.
//!
//! The whole server's work per cycle, in steady state: `perf/server_instructions.sh` runs four of
//! `server_cost`'s pipelined loads (all but rslock's) (keys reused, so the server's memory stays level) against a
//! Redis under callgrind, networking and reply writing included. Redis 7.0, three runs, the same
//! to 2 %: dlock plain 126.4-127.9k instructions per cycle against RFencedLock's own scripts
//! 110.2-112.0k (**1.14-1.15x**, target 1.25x); the `RLock` kind 106.9-109.0k against `RLock`'s
//! own 97.1-99.4k (**1.10-1.12x**, target 1.15x). Time on this machine cannot judge gaps that size:
//! `server_cost -- --ceiling-rounds 15` (server pinned to one core, the client to the other)
//! gave server CPU per cycle ratios of 1.04-1.65 (median 1.25) and 0.68-1.66 (median 1.31) round
//! by round, and 1.13 / 1.11 in a 12-round run an hour earlier. The per-call table (fresh keys,
//! held, so the server grows its tables as it goes; 15 rounds) puts the plain acquire at 1.67x
//! RFencedLock's when the scripts are sent raw, as the peers' are, and the release level
//! (13.0 / 12.6 µs); the `RLock` kind's scripts sent raw 1.12x `RLock`'s cycle. Through the API
//! the same scripts read 13-26 % more script time than sent raw (longer key names and owner
//! ids, and calls that arrive as the client's tasks make them; not traced further).
//!
//! One core's ceiling before issue 39's cuts (pipelined scripts from 4 connections, 3 s):
//! dlock plain 62-73k cycles/s, Redisson's own RLock scripts 110k, rslock's commands
//! 333-377k; through the API with 128 tasks on one client 37-42k (the client shares the 2
//! cores). On 3 masters with the client on the same 2 cores: plain 57k on one master, 82k on
//! all three (1.43x; Redisson's 1.70x, rslock's 1.43x), capped by the machine, not by Redis.
//!
//! What issue 31's cuts did not move is the caller's time: in `peers` (old and new builds
//! interleaved, two runs each) the uncontended cycle stayed 2.96-3.04 RTT (rslock 2.16-2.24:
//! 1.33-1.37x), the attribute's call 1.66-1.91 (below every peer), the cross-client handoff
//! 2.85-3.35 idle-PING RTT and the fair grant 2.22-2.46. A few µs of script time is lost in a round
//! trip of 50-90 µs and a thread wake-up on each side. `handoff_floor` puts the handoffs beside
//! their floors, the same round trips with nothing of dlock in them: plain 2.07-2.19 idle-PING RTT
//! against 1.93-2.06 for dlock's two scripts sent raw, fair 1.71-1.89 against 1.49-1.62 for a
//! grant-sized script and a PING. Measured again at the end of issue 39 (builds of 029d990 and
//! of that stop interleaved, two runs each): the uncontended cycle 3.9-4.2 RTT against rslock's
//! 2.65-2.72, 1.49-1.52x for both builds, with the connection driven on the caller's runtime
//! or through the client's own thread alike (1.35-1.51x); the attribute's call 0.88x the best
//! peer's (one run).
//!
//! Where the cycle's gap to rslock is: `peers` now ends with the cycle measured again with
//! Redis's own time beside each sample (`INFO commandstats` before and after it, the commands
//! the library sends itself; the libraries interleaved as in the rounds). Two runs of 1,000
//! cycles each, p50s in RTT of a hot PING of 111-121 µs: dlock 2.91-2.93 (rslock 2.26-2.28,
//! distributed-lock 2.60-2.63), of which Redis 0.39-0.41 (mean 51 µs a cycle, both scripts)
//! against rslock's 0.10 (12-13 µs: its SET and script) and distributed-lock's 0.10-0.11; the
//! cycle less Redis's time 2.48-2.50 against rslock's 2.16-2.17 and distributed-lock's
//! 2.48-2.52. So of the 0.65 RTT between dlock and rslock, Redis's part is 0.29-0.31 (the
//! scripts keep what rslock does not: the token that never goes back, the release latch,
//! re-entry; issue 39 judged their price against Redisson's `RFencedLock` instead, above), and
//! the rest, 0.32-0.34 RTT (35-40 µs), is on the wire and in the client, where dlock is level
//! with distributed-lock and rslock, which sends the shortest commands and parses the
//! simplest replies, is cheapest (with Redis's part at rslock's, the cycle would be
//! 1.15-1.16x rslock's). Through the client's own thread the same (2.85-2.88, Redis
//! 0.37-0.39). Not traced further: how much of those 35-40 µs is message size (dlock's
//! calls carry a library function name, hash-tagged keys, an owner id and a latch id) and
//! how much is the client's work.

//! # Operating
//!
//! * **Exit**: call [`LockClient::shutdown`] (or [`shutdown`] for the installed client) after
//!   the server stopped taking requests (`examples/service.rs`: axum's graceful shutdown on
//!   SIGTERM, then `shutdown()`): it releases what is still held and sends what is queued. The
//!   drop of a client's last handle sends what is queued too, for at most 2 s.
//! * **Metrics** (feature `metrics`, through the [`metrics`](https://docs.rs/metrics) facade:
//!   install the recorder you use): `dlock_acquires_total` and `dlock_acquire_wait_seconds`
//!   by lock, kind and outcome (acquired, timeout, busy, error), `dlock_hold_seconds`,
//!   `dlock_lost_total`, `dlock_local_handoffs_total` by lock and kind, and
//!   `dlock_renew_calls_total`, `dlock_renew_tick_seconds` (one watchdog tick, all its renewals),
//!   `dlock_reconnects_total`. The `lock` label is the *template*
//!   (`order:{id}` from `#[distributed_lock]`, [`Lock::label`] for a handle, else `other`),
//!   never the rendered key, so series stay bounded. `examples/service.rs` serves them on
//!   `/metrics`.
//! * **Spans**: `dlock.acquire` (lock, kind, outcome, token) around every acquire and
//!   `dlock.hold` (lock, kind, token) from the grant to the last release, at INFO level.
//! * **Stopping work on loss**: [`LockGuard::cancellation_token`] (and
//!   [`CurrentLock::cancellation_token`] in an attribute's body) is cancelled when the hold is
//!   lost; hand it to the tasks the body spawns.
//!
//! # Defaults
//!
//! TTL 30 s ([`DEFAULT_TTL`]), wait 10 s ([`DEFAULT_WAIT`]), key prefix `dlock:`, response
//! timeout 5 s. `wait(Duration::ZERO)` tries once; `wait(Duration::MAX)` waits as long as it
//! takes. A released plain lock goes to the next queued task of the same client without Redis
//! up to 32 times in a row and within 10 ms of the process taking it in Redis
//! ([`LockClientBuilder::local_handoffs`], [`LockClientBuilder::local_handoff_window`]; 0
//! handoffs turns it off). Out-of-range settings (zero, or above a day for timeouts and the release latch, or
//! above 100 years for a lease) are refused by `build()` with [`LockError::InvalidArgument`]
//! naming the setting. The subscriber connection is PINGed every 2 s and replaced when it does
//! not answer within a second.
//!
//! # Errors
//!
//! [`LockError`] names the lock and the cause: timeout (with the time waited), lost hold,
//! Redis failure (with the URL and the operation), WRONGTYPE naming the key and what dlock keeps
//! there (lock hash, fencing counter, stock segment), invalid argument
//! (empty name, zero TTL, both `ttl` and `lease`), no installed client, an acquire too few
//! replicas confirmed ([`LockError::NotSynced`], with replica-synced locks).

// docs.rs builds with nightly and `--cfg docsrs`: feature-gated items get their badge there;
// stable rustdoc has no `doc(cfg)`, so the crate docs also say it in words.
#![cfg_attr(docsrs, feature(doc_cfg))]

// The layers, bottom to top; each imports only the ones above it in this list (ARCHITECTURE.md
// at the repository root has the rules and the path of one acquire).
mod error;
mod handles;
mod machinery;
mod settings;
mod store;

#[cfg(feature = "testing")]
#[cfg_attr(docsrs, doc(cfg(feature = "testing")))]
pub mod testing;

pub use error::{LockError, StoreFault};
pub use handles::blocking;
pub use handles::builder::LockClientBuilder;
pub use handles::client::LockClient;
pub use handles::current::{current_lock, CurrentLock};
pub use handles::default_client::shutdown;
pub use handles::fence;
pub use handles::guard::LockGuard;
pub use handles::inspect;
pub use handles::lock::Lock;
pub use handles::multi::{MultiGuard, MultiLock};
pub use handles::rwlock::ReadWriteLock;
pub use handles::semaphore::{Permit, Semaphore};
pub use handles::stock;
pub use handles::stock::{SegmentLocks, SegmentedStock};
pub use settings::{DEFAULT_PREFIX, DEFAULT_TTL, DEFAULT_WAIT};
pub use store::redis::backend::names::KeyPart;
/// What [`LockGuard::cancellation_token`] returns (tokio-util's), re-exported so a crate
/// needs no dependency of its own to name it.
pub use tokio_util::sync::CancellationToken;

/// The redis-rs version dlock is built on, so your code can match it.
pub use redis;
