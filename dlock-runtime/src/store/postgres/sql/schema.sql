-- dlock's tables. `@schema@` is the quoted schema name, `$body$` a dollar-quote tag that does
-- not occur in it (schema.rs fills both in). Run inside the migration's single transaction,
-- after the transaction-scoped advisory lock that makes concurrent first uses wait in turn.
-- Logged tables on purpose: an unlogged table is emptied after a crash and never reaches a
-- standby, and both would let a lock or a fencing token go back. Checked table by table for
-- issue 39 (what could be lost on a crash without breaking a promise), none qualifies:
-- * plain_locks, holds, permits, intents, fair_queue: a lost hold lets a second owner in while
--   the first still believes it holds (its lost signal would come only at its next renewal);
--   a lost count or queue lets a semaphore over its permits or a waiter jump the line.
-- * fences (and plain_locks.last): tokens would survive by the clock term alone, but a hot
--   standby cannot read an unlogged table at all, and the rows live with the holds anyway.
-- * latches: a partial release retried after a crash that emptied them would be applied
--   twice (the count it decremented is logged).
-- * markers: likewise for an undone re-entry.
-- * gone marks (latches 'gone:<owner>'): a crash ends every connection, so the late request
--   they refuse cannot cross it; but they share the latch row of the release's retry above.
-- What is lighter instead: a plain release commits without waiting for its WAL flush
-- (plain_release says why that breaks no promise: a release lost in a crash keeps the lock
-- until its lease ends).

-- One row per (lock, owner): a semaphore one row per permit, a read-write lock one row per
-- side and owner (owner 'r:<id>' / 'w:<id>'), a fair lock one for its holder (a plain lock's
-- hold is in plain_locks; a schema migrated from version 4 may still have one here until its
-- key's row there is made, which takes it over: plain_row in plain.sql). A row
-- whose expires_at has passed counts as absent everywhere; the next op on its key deletes it,
-- and sweep() deletes abandoned ones.
CREATE TABLE IF NOT EXISTS @schema@.holds (
  key text NOT NULL,
  owner text NOT NULL,
  count integer NOT NULL,
  expires_at timestamptz NOT NULL,
  PRIMARY KEY (key, owner)
);
CREATE INDEX IF NOT EXISTS holds_expires_at ON @schema@.holds (expires_at);

-- A plain lock: one row per key, kept while the lock is free, changed in place by every op.
-- Measured (issue 39): a row per (key, owner), inserted by each acquire and deleted by each
-- release as holds' are, leaves a dead row and two dead index entries per cycle on one key,
-- and every later op on that key walks them until a vacuum: a hot key's uncontended cycle
-- cost the server 0.6 ms after 2 s of cycles and 2.6 ms after 20 s. Here no indexed column
-- changes (the key is the only index), so every update is HOT: no index entry is added, and
-- a page's dead versions are pruned when it fills (fillfactor leaves room for them).
-- owner NULL: free, expires_at then the release's time; a row whose expires_at has passed
-- counts as free everywhere. last: the last fencing token handed out (the fences row of the
-- older layout is read once, when the row is made). latched_until: until when a latch of a
-- partial release of this key may still answer a retry (the latest such latch's expiry; only
-- before it does a release look for one). It is never cleared when the owner changes: an
-- owner whose hold expired may be granted the key again later, and a retry of its partial
-- release must still be answered from its latch, not applied to the new hold.
-- Logged, as every table here (see above).
CREATE TABLE IF NOT EXISTS @schema@.plain_locks (
  key text PRIMARY KEY,
  owner text,
  count integer NOT NULL,
  expires_at timestamptz NOT NULL,
  last bigint NOT NULL,
  latched_until timestamptz NOT NULL
) WITH (fillfactor = 50);

-- The last fencing token handed out per lock (kinds other than the plain lock). Tokens are greatest(last + 1, clock in µs), so a
-- row lost (crash, promoted async standby, swept) never lets them go back.
CREATE TABLE IF NOT EXISTS @schema@.fences (
  key text PRIMARY KEY,
  last bigint NOT NULL
);
CREATE INDEX IF NOT EXISTS fences_last ON @schema@.fences (last);

-- Release request ids and their answers: a retried release is applied once. A plain lock's
-- last release (or one that found nothing) is kept under 'gone:<owner>' alone, its request id
-- in `request`: that one row both answers the release's retry and refuses the owner's late
-- acquire (plain_release), where two rows were written before.
CREATE TABLE IF NOT EXISTS @schema@.latches (
  id text PRIMARY KEY,
  result bigint NOT NULL,
  expires_at timestamptz NOT NULL
);
ALTER TABLE @schema@.latches ADD COLUMN IF NOT EXISTS request text;
CREATE INDEX IF NOT EXISTS latches_expires_at ON @schema@.latches (expires_at);

-- Re-entry markers: a cancelled re-entry is undone at most once.
CREATE TABLE IF NOT EXISTS @schema@.markers (
  id text PRIMARY KEY,
  expires_at timestamptz NOT NULL
);
CREATE INDEX IF NOT EXISTS markers_expires_at ON @schema@.markers (expires_at);

-- A semaphore's permit count while it has holders (Redis keeps it beside the holders too).
CREATE TABLE IF NOT EXISTS @schema@.permits (
  key text PRIMARY KEY,
  permits integer NOT NULL
);

-- A read-write lock's waiting writer: new readers queue behind it until it is in or this
-- expires (lua/rw/acquire.lua's writer-waiting marker).
CREATE TABLE IF NOT EXISTS @schema@.intents (
  key text PRIMARY KEY,
  owner text NOT NULL,
  expires_at timestamptz NOT NULL
);

CREATE TABLE IF NOT EXISTS @schema@.meta (
  version integer NOT NULL
);
INSERT INTO @schema@.meta (version) SELECT 0 WHERE NOT EXISTS (SELECT 1 FROM @schema@.meta);
