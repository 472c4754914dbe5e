-- dlock's tables. `@schema@` is the quoted schema name, `$body$` a dollar-quote tag that does
-- not occur in it (schema.rs fills both in). Run inside the migration's single transaction,
-- after the transaction-scoped advisory lock that makes concurrent first uses wait in turn.
-- Logged tables on purpose: an unlogged table is emptied after a crash and never reaches a
-- standby, and both would let a lock or a fencing token go back.

-- One row per (lock, owner): a plain lock has at most one live owner, a semaphore one row per
-- permit, a read-write lock one row per side and owner (owner 'r:<id>' / 'w:<id>'). A row
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

-- The last fencing token handed out per lock. Tokens are greatest(last + 1, clock in µs), so a
-- row lost (crash, promoted async standby, swept) never lets them go back.
CREATE TABLE IF NOT EXISTS @schema@.fences (
  key text PRIMARY KEY,
  last bigint NOT NULL
);
CREATE INDEX IF NOT EXISTS fences_last ON @schema@.fences (last);

-- Release request ids and their answers: a retried release is applied once.
CREATE TABLE IF NOT EXISTS @schema@.latches (
  id text PRIMARY KEY,
  result bigint NOT NULL,
  expires_at timestamptz NOT NULL
);
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
