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
//! (`LockClient::connect("postgres://app@db:5432/app")`); without the feature nothing of it is
//! compiled, and such a URL is refused when the client is built.
//!
//! What the PostgreSQL store does, and why:
//!
//! * **Lease rows, not advisory locks.** A hold is a row `(key, owner, count, expires_at)` in
//!   dlock's schema, written by SQL functions that mirror the Redis scripts (each takes a
//!   transaction-scoped advisory lock on the key first, then reads `clock_timestamp()`). A
//!   session advisory lock would die with its connection (a frozen link keeps it for ever, a
//!   reconnect loses it) and does not survive a transaction-mode pooler; a lease row behaves as
//!   a Redis key with a PTTL does, so the watchdog, the lost signal, orphan clean-up and
//!   idempotent release retries are the same code for both stores.
//! * **The lease** is measured from the client's send time and ends on the server's clock; a
//!   holder that cannot renew reads lost when its validity ends, before the row expires.
//! * **Fencing tokens** are `greatest(last + 1, server clock in µs)`: they keep rising after a
//!   crash, after the token's row was deleted, and on a promoted standby that missed the last
//!   writes (as long as clocks do not step back).
//! * **Waiters** are woken by `NOTIFY` from the release, heard on one `LISTEN` connection per
//!   client, however many tasks wait; a release wakes one waiter of each client. The client
//!   opens `connections` (default 1) connections for requests plus that one.
//! * **Poolers**: every lock operation is one statement, so the requests work through
//!   PgBouncer in transaction mode; LISTEN does not, so give the server's own address with
//!   [`LockClientBuilder::postgres_listen_url`](crate::LockClientBuilder::postgres_listen_url) there (without it, waiters wake at the holder's
//!   lease end).
//! * **Schema**: [`LockClientBuilder::postgres_schema`](crate::LockClientBuilder::postgres_schema) (default `dlock`), created with its
//!   tables and functions on first use, in one transaction, safely from many clients at once.
//!   A role without CREATE gets an error naming the statement an owner must run once. A
//!   newer dlock migrates at connect (as a role that may, once); a table it adds is granted to
//!   the roles that may use the lock rows.
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
//!   test against Redis and PostgreSQL from one body).
//!
