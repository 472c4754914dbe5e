-- Functions every kind shares. Every function: SECURITY INVOKER (it runs with the caller's
-- rights, nothing more) and an empty-of-user-schemas search_path, so no object a user creates
-- can stand in for one of pg_catalog's; dlock's own objects are always schema-qualified.
-- Every op is one call in autocommit, so it works through a transaction-mode pooler; ops that
-- change a lock first take a transaction-scoped advisory lock on its key (released at commit,
-- never left behind on a pooled connection), then read clock_timestamp(): the server's clock
-- now, not the transaction's start.

-- The server clock in µs, the clock term of every fencing token.
CREATE OR REPLACE FUNCTION @schema@.micros(p_at timestamptz) RETURNS bigint
LANGUAGE sql STABLE SECURITY INVOKER SET search_path = pg_catalog, pg_temp
AS $body$ SELECT (extract(epoch FROM p_at) * 1000000)::bigint $body$;

-- Whole ms from p_now until p_until, never negative (Redis's PTTL of a live key).
CREATE OR REPLACE FUNCTION @schema@.ms_until(p_until timestamptz, p_now timestamptz) RETURNS bigint
LANGUAGE sql STABLE SECURITY INVOKER SET search_path = pg_catalog, pg_temp
AS $body$ SELECT greatest(0, floor(extract(epoch FROM (p_until - p_now)) * 1000))::bigint $body$;

-- Deletes a few expired rows of any lock. Called at the end of one in eight acquires that took
-- a free lock and releases, so the tables stay bounded by the op rate without a background task
-- in every client (and without a timer that a pooler or a paused client would skip). SKIP
-- LOCKED, advisory locks taken only without waiting, and the position at the very end of the
-- caller (nothing waited for after it) keep it from ever blocking or deadlocking an op; LIMIT
-- bounds its cost. One op in eight, at an eighth of the cost (measured: a sweep on every op was
-- a fifth of an uncontended cycle's server time); the caller draws the eighth, which saves the
-- other seven a function call and its search_path switch (issue 39). Latches (up to two a
-- release), plain locks (a row a new name) and dead holders' rows are swept on every call, up
-- to 32 rows or keys each, four an op; the tables that fill more slowly on one call in eight
-- (see below). Each statement costs its 10-80 us and plpgsql's own time even when it deletes
-- nothing: sweeping every table on every call was 430-850 us a call, a quarter of an
-- uncontended cycle's server time, now 320-420 (pg_stat_user_functions, issue 39).
CREATE OR REPLACE FUNCTION @schema@.sweep(p_now timestamptz) RETURNS void
LANGUAGE plpgsql SECURITY INVOKER SET search_path = pg_catalog, pg_temp
AS $body$
DECLARE
  v_keys text[];
  v_size bigint;
BEGIN
  DELETE FROM @schema@.latches WHERE id IN (
    SELECT l.id FROM @schema@.latches l WHERE l.expires_at < p_now
    ORDER BY l.expires_at LIMIT 32 FOR UPDATE SKIP LOCKED);
  -- Plain locks unused for a day: their row says nothing then that the clock term of the
  -- next token does not (as for fences below). The table has no index but its key, so every
  -- update of a row stays HOT (schema.sql), and rows are found by sampling about two of its
  -- pages at random (a sampled page costs its rows' reads; a table of any size is covered in
  -- time, and one growing by an op's row is shrunk by up to 32 rows a sweep). Only keys whose
  -- advisory lock this takes without waiting, as for holds below.
  -- The table found through its row type: the schema's name is never written as a literal.
  SELECT pg_relation_size(t.typrelid) INTO v_size FROM pg_type t
    WHERE t.oid = pg_typeof(NULL::@schema@.plain_locks);
  IF v_size > 0 THEN
    SELECT array_agg(c.key) INTO v_keys FROM (
      SELECT l.key FROM @schema@.plain_locks l
        TABLESAMPLE SYSTEM (least(100, 200.0 * 8192 / greatest(v_size, 8192)))
      WHERE l.expires_at < p_now - interval '1 day'
        AND l.last < @schema@.micros(p_now) - 86400000000
      LIMIT 32) c
    WHERE pg_try_advisory_xact_lock(hashtextextended(c.key, 0));
    IF v_keys IS NOT NULL THEN
      DELETE FROM @schema@.plain_locks l WHERE l.key = ANY (v_keys)
        AND l.expires_at < p_now - interval '1 day'
        AND l.last < @schema@.micros(p_now) - 86400000000;
    END IF;
  END IF;
  -- Holds of locks nobody touched since they expired (their holder died): a minute's grace
  -- leaves the fresh ones to their own key's next op. Only keys whose advisory lock this
  -- takes without waiting (a busy key is left to its own op, which deletes them itself): an op
  -- on the key may be under way, its rows not committed yet, and a semaphore's count deleted
  -- with the holders this statement sees could be the count of a permit that op is granting
  -- (a later acquire with another count would then be let in). Holding the lock, the deletes
  -- below (each a statement with a new snapshot) see every op on those keys committed. At
  -- most 32 keys, so at most 32 advisory locks more, held until the caller's commit.
  SELECT array_agg(DISTINCT c.key) INTO v_keys FROM (
    SELECT h.key FROM @schema@.holds h
    WHERE h.expires_at < p_now - interval '1 minute'
    ORDER BY h.expires_at LIMIT 32) c
  WHERE pg_try_advisory_xact_lock(hashtextextended(c.key, 0));
  IF v_keys IS NOT NULL THEN
    DELETE FROM @schema@.holds h WHERE h.key = ANY (v_keys)
      AND h.expires_at < p_now - interval '1 minute';
    DELETE FROM @schema@.permits p WHERE p.key = ANY (v_keys)
      AND NOT EXISTS (SELECT 1 FROM @schema@.holds h WHERE h.key = p.key);
  END IF;
  -- The tables below fill with at most one row an op (a re-entry's marker, a writer's intent,
  -- a long name, a read-write or fair key's counter): one call in eight (one op in 64), 128
  -- rows each, two an op.
  IF random() >= 0.125 THEN
    RETURN;
  END IF;
  DELETE FROM @schema@.markers WHERE id IN (
    SELECT m.id FROM @schema@.markers m WHERE m.expires_at < p_now
    ORDER BY m.expires_at LIMIT 128 FOR UPDATE SKIP LOCKED);
  DELETE FROM @schema@.intents WHERE key IN (
    SELECT i.key FROM @schema@.intents i WHERE i.expires_at < p_now
    LIMIT 128 FOR UPDATE SKIP LOCKED);
  -- The whole text of hashed keys (names.sql) whose locks are gone: a minute after their last
  -- acquire, so one that is about to take its lock keeps it.
  DELETE FROM @schema@.long_names WHERE key IN (
    SELECT n.key FROM @schema@.long_names n
    WHERE n.written_at < p_now - interval '1 minute'
      AND NOT EXISTS (SELECT 1 FROM @schema@.holds h WHERE h.key = n.key)
      AND NOT EXISTS (SELECT 1 FROM @schema@.plain_locks l
                      WHERE l.key = n.key AND l.owner IS NOT NULL)
    ORDER BY n.written_at LIMIT 128 FOR UPDATE SKIP LOCKED);
  -- A counter more than a day behind the clock gives nothing the clock term does not: the
  -- next token is greatest(last + 1, clock) either way, unless the clock steps back a day.
  DELETE FROM @schema@.fences WHERE key IN (
    SELECT f.key FROM @schema@.fences f
    WHERE f.last < @schema@.micros(p_now) - 86400000000
    ORDER BY f.last LIMIT 128 FOR UPDATE SKIP LOCKED);
END
$body$;

-- Renews many holds in one call (the watchdog's tick): one entry per hold, 1 renewed, 0 no
-- longer ours (gone, expired, taken). p_grow: a deadline only moves out (the read-write lock,
-- where one row may serve several holds) instead of being set to now + lease.
-- Set-based: one UPDATE per table for the whole call, each finding its rows by key through the
-- index, where a statement per hold and table (a plain hold probed `holds` first) cost the
-- server 7-20 us per renewal, against 4-9 us now (examples/scale --sweeps held, 1k-100k
-- holds). A hold's row is in `holds` or in `plain_locks` (a plain lock's, plain.sql), never
-- both: owner ids are made fresh for every hold. An owner named twice in one call (one row
-- serving several holds) gets the longest of its leases.
CREATE OR REPLACE FUNCTION @schema@.renew(p_keys text[], p_owners text[], p_leases bigint[],
  p_grow boolean) RETURNS bigint[]
LANGUAGE plpgsql SECURITY INVOKER SET search_path = pg_catalog, pg_temp
AS $body$
DECLARE
  v_lock bigint;
  v_now timestamptz;
  v_out bigint[];
BEGIN
  -- In ascending order: two renewals of overlapping keys never wait for each other in a
  -- circle.
  FOR v_lock IN
    SELECT DISTINCT s.h FROM (SELECT hashtextextended(k, 0) AS h FROM unnest(p_keys) k) s
    ORDER BY s.h
  LOOP
    PERFORM pg_advisory_xact_lock(v_lock);
  END LOOP;
  v_now := clock_timestamp();
  WITH req AS (
    SELECT r.key, r.owner, max(r.lease) AS lease
      FROM unnest(p_keys, p_owners, p_leases) AS r(key, owner, lease)
      GROUP BY r.key, r.owner
  ), held AS (
    UPDATE @schema@.holds h
      SET expires_at = CASE
        WHEN p_grow THEN greatest(h.expires_at, v_now + req.lease * interval '1 millisecond')
        ELSE v_now + req.lease * interval '1 millisecond' END
      FROM req
      WHERE h.key = req.key AND h.owner = req.owner AND h.expires_at > v_now
      RETURNING h.key, h.owner
  ), plain AS (
    UPDATE @schema@.plain_locks l
      SET expires_at = CASE
        WHEN p_grow THEN greatest(l.expires_at, v_now + req.lease * interval '1 millisecond')
        ELSE v_now + req.lease * interval '1 millisecond' END
      FROM req
      WHERE l.key = req.key AND l.owner = req.owner AND l.expires_at > v_now
      RETURNING l.key, l.owner
  ), renewed AS (
    SELECT key, owner FROM held UNION SELECT key, owner FROM plain
  )
  SELECT array_agg((d.key IS NOT NULL)::integer::bigint ORDER BY r.i) INTO v_out
    FROM unnest(p_keys, p_owners) WITH ORDINALITY AS r(key, owner, i)
    LEFT JOIN renewed d ON d.key = r.key AND d.owner = r.owner;
  RETURN coalesce(v_out, '{}');
END
$body$;

-- Deletes a lock whoever holds it and wakes its waiters: 1 when it was held, 0 when free.
CREATE OR REPLACE FUNCTION @schema@.force_unlock(p_key text, p_channel text) RETURNS bigint
LANGUAGE plpgsql SECURITY INVOKER SET search_path = pg_catalog, pg_temp
AS $body$
DECLARE
  v_now timestamptz;
  v_live bigint;
BEGIN
  PERFORM pg_advisory_xact_lock(hashtextextended(p_key, 0));
  v_now := clock_timestamp();
  SELECT count(*) INTO v_live FROM @schema@.holds h WHERE h.key = p_key AND h.expires_at > v_now;
  DELETE FROM @schema@.holds WHERE key = p_key;
  -- A plain lock's row stays, free, keeping its token.
  UPDATE @schema@.plain_locks l SET owner = NULL, count = 0, expires_at = v_now
    WHERE l.key = p_key AND l.owner IS NOT NULL AND l.expires_at > v_now;
  IF FOUND THEN
    v_live := v_live + 1;
  END IF;
  DELETE FROM @schema@.permits WHERE key = p_key;
  DELETE FROM @schema@.intents WHERE key = p_key;
  IF v_live = 0 THEN
    RETURN 0;
  END IF;
  PERFORM pg_notify(p_channel, 'released');
  RETURN 1;
END
$body$;

-- Ms until the last live hold of a lock ends, -2 when it is free (Redis's PTTL). Read only:
-- no advisory lock, it answers from the last committed state.
CREATE OR REPLACE FUNCTION @schema@.pttl(p_key text) RETURNS bigint
LANGUAGE plpgsql STABLE SECURITY INVOKER SET search_path = pg_catalog, pg_temp
AS $body$
DECLARE
  v_now timestamptz := clock_timestamp();
  v_until timestamptz;
BEGIN
  SELECT max(u.t) INTO v_until FROM (
    SELECT h.expires_at AS t FROM @schema@.holds h WHERE h.key = p_key AND h.expires_at > v_now
    UNION ALL
    SELECT l.expires_at FROM @schema@.plain_locks l
      WHERE l.key = p_key AND l.owner IS NOT NULL AND l.expires_at > v_now) u;
  IF v_until IS NULL THEN
    RETURN -2;
  END IF;
  RETURN @schema@.ms_until(v_until, v_now);
END
$body$;
