//! # Stores: where the locks live
//!
//! Nothing to import: this module holds only this page. Which kind each store offers, for which
//! caller, is the table in the README ("Kinds, stores and callers").
//!
//! The URL picks the store; the rest of the API, the attribute included, stays the same.
//! `redis://` and `rediss://` keep locks in Redis: one server ([`LockClient::connect`](crate::LockClient::connect)), a
//! Redis Cluster ([`LockClient::cluster_builder`](crate::LockClient::cluster_builder)) or a Sentinel-managed primary
//! ([`LockClient::sentinel_builder`](crate::LockClient::sentinel_builder)). With the `postgres`
//! cargo feature, `postgres://` and `postgresql://` keep them in PostgreSQL
//! (`LockClient::connect("postgres://app@db:5432/app")`), and with the `zookeeper` feature
//! `zk://host:2181,host:2181,host:2181/chroot` keeps them in a ZooKeeper ensemble (over TLS:
//! `zk+tls://`, with the `zookeeper-tls` feature; see "ZooKeeper"); without the
//! feature nothing of a store is compiled, and its URL is refused when the client is built,
//! naming the feature to turn on.
//!
//! # PostgreSQL
//!
//! What the PostgreSQL store does, and why:
//!
//! * **Lease rows, not advisory locks.** A hold is a row `(key, owner, count, expires_at)` in
//!   dlock's schema, written by SQL functions that mirror the Redis scripts (each takes a
//!   transaction-scoped advisory lock on the key first, then reads `clock_timestamp()`). A
//!   plain lock is one row per lock in `plain_locks`, changed in place by every operation and
//!   kept while the lock is free (with its last token): its only index is the key, so each
//!   update is HOT and a hot key leaves no dead index entries for the next operation to walk
//!   (a row inserted and deleted per cycle, as the other kinds' `holds` rows are, made a hot
//!   key's cycle cost the server 0.6 ms after 2 s of cycles and 2.6 ms after 20 s). A
//!   session advisory lock would die with its connection (a frozen link keeps it for ever, a
//!   reconnect loses it) and does not survive a transaction-mode pooler; a lease row behaves as
//!   a Redis key with a PTTL does, so the watchdog, the lost signal, orphan clean-up and
//!   idempotent release retries are the same code for both stores.
//! * **The lease** is measured from the client's send time and ends on the server's clock; a
//!   holder that cannot renew reads lost when its validity ends, before the row expires.
//! * **Fencing tokens** are `greatest(last + 1, server clock in µs)`: they keep rising after a
//!   crash, after the token's row was deleted, and on a promoted standby that missed the last
//!   writes (as long as clocks do not step back).
//! * **Durability**: an acquire, a renewal and every other write wait for their WAL flush; a
//!   plain lock's release does not (`synchronous_commit` off for that one transaction), which
//!   halves the cycle with `fsync` on. A server crash (or a failover to a synchronous standby)
//!   can lose only a release not flushed yet, at most about three `wal_writer_delay`s old (with
//!   its latch): that lock stays held by its done owner until its lease ends (for a hard
//!   `lease`, its whole length), never by two owners, and the next acquire's flush writes the
//!   release first. A release that found nothing to release keeps its flush: the gone mark it
//!   writes refuses a late acquire of that owner, which may cross a restart queued in a pooler.
//! * **Waiters** are woken by `NOTIFY` from the release, heard on one `LISTEN` connection per
//!   client, however many tasks wait; a release wakes one waiter of each client. The client
//!   opens `connections` (default 1) connections for requests plus that one.
//! * **Poolers**: every lock operation is one statement, so the requests work through
//!   PgBouncer in transaction mode; LISTEN does not, so give the server's own address with
//!   [`LockClientBuilder::postgres_listen_url`](crate::LockClientBuilder::postgres_listen_url) there (without it, waiters wake at the holder's
//!   lease end). Calls go as their text by default;
//!   [`LockClientBuilder::postgres_prepared_statements`](crate::LockClientBuilder::postgres_prepared_statements) prepares each once per
//!   connection (a shorter cycle, below), only on a direct connection, a session-mode pool or
//!   PgBouncer 1.21 or later with `max_prepared_statements` above 0: behind another
//!   transaction-mode pooler a statement name may reach another client's statement.
//! * **Schema**: [`LockClientBuilder::postgres_schema`](crate::LockClientBuilder::postgres_schema) (default `dlock`), created with its
//!   tables and functions on first use, in one transaction, safely from many clients at once.
//!   A role without CREATE gets an error naming the statement an owner must run once. A
//!   newer dlock migrates at connect (as a role that may, once); a table it adds is granted to
//!   the roles that may use the lock rows. Version 5 (`plain_locks`) upgrades in place while
//!   locks are held: a plain lock's `holds` row moves into its new row when that is made, its
//!   first token starts from its `fences` row, and older clients keep working (they call the
//!   schema's functions), except that an older inspector lists no plain lock. The version is
//!   read again under the migration's lock, so a dlock never puts its functions over a schema a
//!   newer one migrated meanwhile. A call already running when a migration commits finishes
//!   with the old function, and in that narrow window a version-4 acquire can write a hold the
//!   new layout does not read, letting a second owner in for one lease: migrate before a
//!   fleet's clients are busy, as with every migration.
//! * **Names**: any text, as on Redis. PostgreSQL text cannot hold NUL and an index entry has
//!   at most 2704 bytes, so the store writes a name's NUL as `%00` and stores a key longer
//!   than 512 bytes as `sha256:<64 hex digits>` of it; the whole key of such a lock
//!   (`<prefix>{<percent-escaped name>}<kind suffix>`) is kept in the `long_names` table
//!   (`key` = the hash, `full_key` = that text) while the lock has rows. Shorter names are
//!   stored as they are, at no extra cost. A key prefix may not hold NUL on this store.
//! * **Kinds**: [`LockClient::lock`](crate::LockClient::lock), [`LockClient::read_write_lock`](crate::LockClient::read_write_lock),
//!   [`LockClient::semaphore`](crate::LockClient::semaphore), [`LockClient::multi_lock`](crate::LockClient::multi_lock), [`LockClient::fair_lock`](crate::LockClient::fair_lock) and the
//!   attribute's `kind`s for them. The fair lock's queue is a table of waiters ordered by the
//!   server's clock; a release grants the first live one and tells it by `NOTIFY` on a channel
//!   of its own, and a waiter that stops coming back (every 2/3 s) loses its place within 2 s,
//!   as on Redis. Refused at the acquire with an error naming the store and the kind: the
//!   Redisson kinds (they speak Redisson's protocol on Redis). Redis-only, refused the same way:
//!   `SegmentedStock` and `synced_replicas` (use `synchronous_commit` and
//!   `synchronous_standby_names` on the server).
//! * **TLS**: the URL's `sslmode` with libpq's meanings, through rustls (ring, as for
//!   `rediss://`), on every connection of the client (requests and LISTEN): `disable`;
//!   `prefer` (the default: TLS when the server offers it, else plain); `require` (TLS, the
//!   certificate not checked unless root certificates are given, then as `verify-ca`);
//!   `verify-ca` (signed by a trusted root, any host name); `verify-full` (and valid for the
//!   URL's host: `postgres://app@db.internal:5432/app?hostaddr=10.0.0.5` checks the name
//!   `db.internal` while connecting to the address). Trusted roots: [`LockClientBuilder::tls_root_certificates`](crate::LockClientBuilder::tls_root_certificates) (the same method as
//!   for `rediss://`) and `sslrootcert=<PEM file>` in the URL, both if given; without either,
//!   `verify-ca` and `verify-full` trust the system's store (`sslrootcert=system` asks for it
//!   explicitly, with `verify-full`, as in libpq 16). Unlike libpq, `~/.postgresql/root.crt` is
//!   not read, `sslmode=allow` and client certificates (`sslcert`, `sslkey`) are refused by
//!   name. As in libpq, `sslmode` does not apply to a Unix-domain socket (no TLS there). A refused handshake says why and what to change (a name the certificate does not
//!   list, an unknown CA, a server without TLS, a server that allows only TLS).
//! * **Inspecting**: `dlock::inspect::stored_locks` reads every lock of the schema (holders,
//!   leases by the server's clock, permit counts, waiting writers), and
//!   `dlock::inspect::force_unlock` works as on Redis; the `dlock` inspector uses both.
//! * **Versions**: PostgreSQL 15, as CI checks it (`tests/stores` runs every shared behaviour
//!   test against Redis, PostgreSQL and ZooKeeper from one body).
//! * **Performance** (`perf/pg-peers`, against `distributed-lock`'s session advisory locks on
//!   one throw-away server, `fsync=off` as the test harness runs it, 3 runs of the previous and
//!   this version interleaved on a loaded 2-core VM, load 4.9-5.5): the uncontended acquire +
//!   release cycle is 9.2-11.6 `SELECT 1` round trips against the peer's 9.5-12.1 in the same
//!   runs (0.83-1.07 of it; the layout of version 4 took 0.91-2.11 of it, growing with the
//!   key's dead rows), and costs the server 311-383 µs of CPU against the peer's 251-311 (was
//!   412-851). With `fsync=on`: 4.0 ms a cycle (was 8.0), one WAL flush, where the peer writes
//!   nothing (0.34 ms). The handoff (release -> the waiting client holds) is 5.5-5.8 round
//!   trips of a `SELECT 1` sent after the same idle time (5.4-6.5 before), the peer's 1.4-1.9:
//!   two server calls on connections that sat idle (the release, whose commit sends the
//!   NOTIFY, then the waiter's acquire) take 0.7 and 0.5 ms of the 1.4 ms; the waiter's wake
//!   between them, 0.05 ms. Schema version 7 sweeps the tables that fill at most a row an op
//!   (markers, intents, long names, counters) one op in 64 instead of one in eight, 128 rows
//!   at a time (two rows an op; latches, dead holders and unused plain locks as before): the
//!   server's time in the plain acquire and release 311-356 µs a cycle (median 336), was
//!   328-484 (median 387; pgbench with one client on 100 keys, `pg_stat_user_functions`, 7
//!   rounds of each interleaved); `perf/pg-peers` (2 runs of each interleaved, an earlier cut
//!   of this change) puts the handoff at 3.8-4.0 idle round trips (4.3-4.5 before)
//!   and the server's CPU per cycle at 1.7-1.9x the peer's (2.0-2.1x before; the runs above,
//!   of an earlier session, gave 1.0-1.5x: not traced).
//!
//!   Where the handoff can go: `perf/pg-peers` times the same chain with nothing of dlock in
//!   it. A bare `SELECT pg_notify(..)` until a task woken by it on another connection runs
//!   takes 1.3-1.5 idle round trips, and that task's `SELECT 1` on its own connection brings it
//!   to 1.8-2.1: the floor of any lock that wakes its waiter by NOTIFY, with nothing of a lease
//!   written. The peer's 1.5-1.7 is below it because its waiter blocks inside the server on a
//!   session advisory lock, which needs the lock held by a connection (no lease that outlives
//!   it, no transaction-mode pooler). The fair lock's release grants the waiter itself (no
//!   second call) and measures 3.7-4.3 against the plain lock's 3.8-4.5 in the same runs: the
//!   time is in the release's own call (2.4-3.1 idle round trips: an idle connection, the
//!   function, a row written and the commit that sends the NOTIFY), not in the waiter's call
//!   after it, so a direct grant for the plain lock would buy little. Two later runs of
//!   `perf/pg-peers` (schema version 7, `SELECT 1` 120-159 µs): the uncontended cycle 5.47 and
//!   4.04 round trips against the peer's 6.71 and 4.32 (0.82-0.94 of it), the server's CPU per
//!   cycle 1.39-1.55x the peer's, the handoff 4.5 and 3.9 idle round trips (the peer 1.8 and
//!   1.5; the NOTIFY + round trip floor 2.2 and 1.8).
//!
//!   Why each operation stays one call of a PL/pgSQL function rather than one plain SQL
//!   statement (`perf/pg_statement_vs_function.sh 3 6`: pgbench, one client on 100 keys, the
//!   plain acquire and then the release, whose usual path is also written as one statement: the
//!   row's UPDATE, the owner's gone mark in a data-modifying `WITH`, the NOTIFY and
//!   `synchronous_commit` in its select list). Sent as the store sends every call, unnamed (a
//!   transaction-mode pooler keeps no named prepared statement), the cycle took 0.68-0.70 ms
//!   with that statement against 0.55-0.65 with the function, though the statement's execution
//!   alone was 68 µs against the function's 109: an unnamed statement is parsed and planned on
//!   every call, and a function's statements keep their plans for the session. Prepared, the
//!   statement was level or a little faster (0.42-0.44 ms against 0.44-0.48). The gone mark
//!   (one `latches` row a release: it answers the release's retry and refuses the owner's late
//!   acquire) costs 16 µs of the release's execution (39 µs with it, 23 without, both without
//!   the sweep).
//!
//!   The same run showed the function's cycle 0.10-0.20 ms (18-30 %) cheaper sent as a named
//!   prepared statement than unnamed: `postgres_prepared_statements` (off by default, see
//!   Poolers) does that in the store. `perf/pg-peers` runs the plain lock both ways in every
//!   round; 3 runs (`SELECT 1` 106-160 µs): the uncontended cycle 4.20-5.55 round trips
//!   prepared against 4.94-7.03 as text (0.63-0.85 of it) and the peer's 5.75-6.96 (0.71-0.80
//!   of it); the server's CPU per cycle 430-675 µs against 561-1,100 (the peer's 323-766); the
//!   handoff 3.36-3.73 idle round trips against 3.95-4.05 (the peer's 1.49-1.61), its release
//!   call 2.11-2.32 against 2.45-2.49.

//! # ZooKeeper
//!
//! For when correctness must be absolute: ZooKeeper is a CP store (every write committed by a
//! quorum before it is answered), and the lock is Apache Curator's `InterProcessMutex` recipe
//! on the wire, so a Rust service can lock the same paths as Java services using Curator.
//!
//! * **Nodes**: the lock named `order:7` (default prefix) is the node `/dlock:{order:7}` under
//!   the URL's chroot (the key as on Redis, with `/` and the characters ZooKeeper refuses
//!   percent-escaped; a read-write lock's is `/dlock:{order:7}:rw`, its key), created as a
//!   container node. Each owner that asks creates one child,
//!   EPHEMERAL_SEQUENTIAL, named as Curator's protected mode names it:
//!   `_c_<uuid>-lock-<10-digit sequence>`, its data the owner id (client name and label). The
//!   child first by sequence holds the lock; every other waiter watches only the child just
//!   before its own (no herd), so the plain lock is first come, first served, and `fair_lock`
//!   is the same recipe. A Java `new InterProcessMutex(client, "/dlock:{order:7}")` locks the
//!   same lock: CI runs Apache Curator's own mutex (5.4) against a dlock client on one path,
//!   each excluding the other and each woken by the other's release
//!   (`tests/stores/curator.rs`). Where compatibility stops: re-entry is counted per JVM thread
//!   by Curator and along the call chain by dlock, each in its own process, so a Java thread and
//!   a Rust task never re-enter each other's hold. The read-write lock is Curator's
//!   `InterProcessReadWriteLock` the same way (`__READ__` and `__WRIT__` children in one line:
//!   a reader holds while no writer is ahead of it and watches the first one; a writer must be
//!   first; a writer's own read is granted at once, its child carrying the writer's sequence),
//!   also run against Curator's own in CI, as is the semaphore.
//! * **The lease is the session.** A holder's child lives as long as its client's session; a
//!   crashed or cut-off holder's child goes when the ensemble expires the session
//!   ([`LockClientBuilder::zookeeper_session_timeout`](crate::LockClientBuilder::zookeeper_session_timeout),
//!   default 30 s, clamped by the server to 2 to 20 of its ticks). A lock's `ttl` is not used
//!   on this store, and a hard `lease` is refused at the acquire (a child cannot outlive its
//!   session, nor be kept for a fixed time past it).
//! * **The lost signal comes first.** The server expires a session no earlier than one
//!   session timeout after the last request it received, and that request arrived after it was
//!   sent. A hold's validity is two thirds of the granted timeout past the send of its last
//!   answered request (the watchdog checks the child every third of that), so a holder that
//!   cannot reach the ensemble reads lost a third of a timeout before the server can free the
//!   lock. A hold read lost deletes its own child as soon as the ensemble answers, so a lock is
//!   never kept by an owner that believes it does not hold it (tested with a frozen link and
//!   a paused server, `tests/stores/frozen_link.rs`, `faults.rs`).
//! * **Fencing tokens** are the holder's child's creation zxid (times 1024, room for local
//!   handoffs, as every token): ZooKeeper never hands a zxid out twice, a new leader's zxids
//!   are above the old one's (its epoch is the high 32 bits), and children are granted in the
//!   order they were created, so tokens rise with every grant.
//! * **One session per client**, however many tasks wait: every request and watch of the
//!   client is pipelined on it. A session the ensemble expired is replaced; every waiter then
//!   asks again and every hold of the old session reads lost.
//! * **Cancelled and timed-out acquires leave nothing**: the waiter's child is deleted when
//!   its acquire ends without the lock, and a create whose reply was lost (the connection
//!   dropped) is found again by its protected name and deleted.
//! * **Re-entry** along the call chain is counted by the client (Curator counts it per JVM
//!   thread): one child however deep.
//! * **Kinds**: the plain lock, the fair lock, the read-write lock, the semaphore and
//!   multi-locks. The semaphore is Curator's `InterProcessSemaphoreV2`: a permit is a lease
//!   child `<node>/leases/_c_<uuid>-lease-<seq>`, taken under the mutex `<node>/locks` (waiters
//!   go in one at a time, in order, and only the head watches the leases); dlock also keeps the
//!   permit count as the node's data while it lives, so dlock clients that disagree on it are
//!   told (Curator keeps no count: its clients must agree by convention). Refused at the
//!   acquire naming the store and the kind: the Redisson kinds; `SegmentedStock` and `synced_replicas` are Redis's.
//! * **TLS** (feature `zookeeper-tls`): `zk+tls://host:2281,host:2281/chroot`, to the servers'
//!   `secureClientPort`, every host over TLS (rustls). The CA that signed the servers'
//!   certificates is required, given with
//!   [`tls_root_certificates`](crate::LockClientBuilder::tls_root_certificates) (ZooKeeper
//!   deployments sign with their own CA; the system's trust store is not read). A client
//!   certificate and key, which ZooKeeper's servers require by default (`ssl.clientAuth=need`),
//!   go with [`tls_client_certificate`](crate::LockClientBuilder::tls_client_certificate).
//!   Host names are always checked against the certificate's subjectAltName (ZooKeeper's own
//!   client checks them too, by default): the Rust client turns the check off only through an
//!   `unsafe fn`, and dlock forbids unsafe code. A refused handshake is an error naming the
//!   server and why (another CA, another host name, no TLS at that port, a client certificate
//!   wanted), within the connect timeout. The feature is separate from `zookeeper` because the
//!   ZooKeeper client's TLS compiles rustls's aws-lc-rs provider beside dlock's ring (AWS-LC's
//!   C sources: no cmake needed, a few minutes of CPU once); with two providers rustls picks
//!   none by itself, so dlock installs ring as rustls's process default when a `zk+tls://`,
//!   `rediss://` or Sentinel client connects, unless the application installed one before
//!   (then that one is used, by dlock's Redis and ZooKeeper TLS alike). An application with
//!   this feature that builds rustls configs of its own with `ClientConfig::builder()`, or
//!   that installs its own default (`install_default` fails once one is installed), should do
//!   so at start, before its first dlock client.
//! * **Inspecting**: `dlock::inspect::stored_locks` lists every lock node under the client's
//!   root (the URL's chroot), read from its live children in line order with plain reads that
//!   take and watch nothing: the holders are those the recipe grants now (a mutex's first
//!   child; a read-write lock's readers ahead of the first writer, or that writer when first;
//!   a semaphore's first `permits` leases, the count being its node's data), and the rest of
//!   the line is `queue`, first first, so every kind's waiters are visible (each child is a
//!   place). Owners are the children's data; a Curator client writes its host's address there,
//!   and its child is listed by its node name. A hold's `ttl_ms` is -1: its lease is its
//!   session, whose time left no other client can see; its count is 1 (re-entries are counted
//!   in the holder's client). The nodes are read one after another, not as one snapshot, each
//!   request bounded by the response timeout. `dlock::inspect::force_unlock` deletes the
//!   holders' children (a semaphore's every lease, a read-write lock's every child): the next
//!   in line is woken by its watch, and the holder reads its hold lost at its next check (a
//!   third of its lease later at most). The `dlock` inspector uses both (`--url zk://...`).
//! * **Authentication**: `zk://user:password@host:2181` sends ZooKeeper's digest scheme on
//!   every connect; the children are created with the open ACL, as Curator's default is.
//! * **Versions**: ZooKeeper 3.8 (Debian 12's 3.8.0), as CI checks it: `tests/stores` runs the
//!   shared behaviour tests of the kinds it offers on a standalone server, the others' refusals
//!   too.
