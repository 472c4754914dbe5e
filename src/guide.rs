//! # Is a Redis lock enough?
//!
//! A guide to what a dlock lock promises, and what it does not. Nothing to import: this module
//! holds only this page.
//!
//! ## Efficiency or correctness
//!
//! Ask what happens if two holders ever overlap.
//!
//! * **Efficiency**: the lock saves work, and an occasional overlap costs a duplicate email, a
//!   report computed twice, a cache warmed twice. A Redis lock, dlock's included, is enough
//!   as it is.
//! * **Correctness**: an overlap corrupts data: money moved twice, stock sold twice, a file
//!   overwritten by a stale version. Then no lease-based lock alone is enough, whether on
//!   Redis, ZooKeeper or etcd, because the holder can be paused (GC, swap, a SIGSTOP, a
//!   saturated host) past its lease and go on writing after somebody else took over. What
//!   makes it safe is the resource refusing the late writer: **fencing**, below.
//!
//! ## Asynchronous replication and consensus
//!
//! Redis replicates asynchronously: a primary acknowledges a write (an acquire) before its
//! replicas have it. If the primary fails before the write reaches a replica and that replica
//! is promoted (Sentinel, Cluster), the lock is gone and a second client can take it while the
//! first still believes it holds it. Consensus systems (etcd, ZooKeeper, Consul) acknowledge a
//! write only once a majority has it, so a failover never loses a granted lock; they cost a
//! quorum round trip per operation. `WAIT` on Redis narrows the window but does not close it
//! (the write can still be lost, and `WAIT` does not roll anything back).
//!
//! ## When fencing is a must
//!
//! Whenever an overlap is a correctness bug. Every hold has a fencing token
//! (`LockGuard::fencing_token`, `current_lock().fencing_token()` in an annotated body) that
//! grows with every new holder. Pass it with each write, and make the resource keep the
//! highest token it has seen and refuse lower ones (`WHERE fence <= $token` in SQL, a
//! conditional put, a version column; [`crate::fence`] has the SQL pattern and
//! `fence::set_if_newer` for values kept in Redis). A paused former holder then fails instead
//! of overwriting. Tokens come from Redis: a failover that loses the acquire can repeat a token
//! (see the bounds below), so for data that must never be overwritten by a stale holder, check
//! tokens in a store with its own durability, or use a consensus system.
//!
//! ## The RedLock debate
//!
//! RedLock takes a lock on a majority of independent Redis primaries to survive the loss of
//! one without replication. Martin Kleppmann argued (2016) that it is neither: too heavy for
//! efficiency locks, where one Redis is enough, and unsafe for correctness locks, because it
//! relies on bounded pauses, network delays and clock drift, and offers no fencing tokens.
//! Salvatore Sanfilippo answered that the timing assumptions are realistic and that a random
//! unique value can serve where a token is needed. dlock takes the practical side of both: one
//! deployment (single, Sentinel or Cluster) rather than RedLock, monotonic fencing tokens for
//! the cases that need them, and a holder's view (`is_lost`, `lost()`) that turns "lost"
//! before anybody else can hold the lock, on a timer, not on a Redis reply.
//!
//! ## The bounds dlock gives
//!
//! * **A crash** of the holder's process: nobody renews the lease, the lock is free at most
//!   `ttl` (or `lease`) after the last renewal. Nothing else runs meanwhile.
//! * **A pause** of the holder (GC, SIGSTOP, an overloaded host) longer than its lease: the
//!   lock expires and another owner may take it. The paused holder's `is_lost()` reads true at
//!   its first look after the pause, and `lost()` completes, because the validity deadline
//!   is kept on the holder's clock with a drift margin, below the lease Redis applies. Code
//!   running between the pause and its next look is not stopped: fencing is what refuses it.
//! * **A failover** (Sentinel or Cluster promoting a replica) that lost the acquire or a
//!   renewal: a second owner can hold the lock at once. The first learns it at its next
//!   renewal, at most a third of the lease later, or at once if its connection broke. Fencing
//!   tokens keep rising across the failover while the promoted server's clock is not behind
//!   the old primary's by more than the token gap (tokens start from the server time in µs).
//! * **A restart** of Redis without persistence: every lock is gone; holders learn it within a
//!   reconnect and a round trip.
//!
//! ## Persistence settings that matter
//!
//! * No persistence (the cache default): a restart frees every lock at once. Fine for
//!   efficiency locks; for correctness locks rely on fencing.
//! * RDB snapshots: a restart brings back the locks of the last snapshot, some already
//!   released (they expire with their lease) and without the latest acquires (an overlap
//!   window, as without persistence).
//! * AOF with `appendfsync always`: every acknowledged acquire survives a restart; with
//!   `everysec` (the default), up to a second of acquires can be lost on a crash of the host.
//! * Replication: a failover loses what the promoted replica had not received, whatever the
//!   persistence; `min-replicas-to-write` limits how far a primary can run ahead of its
//!   replicas but does not make a failover lossless.
//!
//! ## Supported Redis versions and deployments
//!
//! Redis 6.2 or later (Redis 7.0 or later for one renewal call per Cluster node per tick; 6.2
//! renews with one call per slot). One server, a Redis Cluster, or a Sentinel-managed primary,
//! each over TCP or TLS (`rediss://`), with ACL users. See `LockClient::builder`,
//! `LockClient::cluster_builder` and `LockClient::sentinel_builder`.
