-- The semaphore with expiring permits: lua/semaphore/*.lua, one holds row per permit (its own
-- owner id and deadline), the permit count in `permits` while there are holders.

-- The error a semaphore in use with another permit count answers, as Redis's
-- `ERR DLOCK_PERMITS <count>`: SQLSTATE DLK01, message `DLOCK_PERMITS <count>`.
CREATE OR REPLACE FUNCTION @schema@.sem_check(p_key text, p_permits integer, p_now timestamptz)
RETURNS bigint
LANGUAGE plpgsql STABLE SECURITY INVOKER SET search_path = pg_catalog, pg_temp
AS $body$
DECLARE
  v_live bigint;
  v_stored integer;
BEGIN
  SELECT count(*) INTO v_live FROM @schema@.holds h WHERE h.key = p_key AND h.expires_at > p_now;
  SELECT p.permits INTO v_stored FROM @schema@.permits p WHERE p.key = p_key;
  -- The stored count only binds while someone holds a permit.
  IF v_live > 0 AND v_stored IS NOT NULL AND v_stored <> p_permits THEN
    RAISE EXCEPTION USING ERRCODE = 'DLK01', MESSAGE = 'DLOCK_PERMITS ' || v_stored;
  END IF;
  RETURN v_live;
END
$body$;

-- Takes one permit. Returns (1, 0) when p_owner holds a permit afterwards, (0, ms until the
-- earliest holder's deadline, at least 1) when every permit is taken.
CREATE OR REPLACE FUNCTION @schema@.sem_acquire(p_key text, p_lease_ms bigint, p_owner text,
  p_permits integer, OUT held bigint, OUT detail bigint)
LANGUAGE plpgsql SECURITY INVOKER SET search_path = pg_catalog, pg_temp
AS $body$
DECLARE
  v_now timestamptz;
  v_live bigint;
  v_first timestamptz;
BEGIN
  PERFORM pg_advisory_xact_lock(hashtextextended(p_key, 0));
  v_now := clock_timestamp();
  v_live := @schema@.sem_check(p_key, p_permits, v_now);
  DELETE FROM @schema@.holds WHERE key = p_key AND expires_at <= v_now;
  IF NOT EXISTS (SELECT 1 FROM @schema@.holds h WHERE h.key = p_key AND h.owner = p_owner)
    AND (v_live >= p_permits
      -- An owner that gave its permit back or gave up: a late request of it (see
      -- plain_acquire) must not take a permit nobody holds.
      OR EXISTS (SELECT 1 FROM @schema@.latches l
                 WHERE l.id = 'gone:' || p_owner AND l.expires_at > v_now))
  THEN
    SELECT min(h.expires_at) INTO v_first FROM @schema@.holds h WHERE h.key = p_key;
    held := 0;
    detail := greatest(@schema@.ms_until(v_first, v_now), 1);
    RETURN;
  END IF;
  -- A fresh owner id already present is the same request run twice: the same permit, its
  -- deadline set again.
  INSERT INTO @schema@.holds AS h (key, owner, count, expires_at)
    VALUES (p_key, p_owner, 1, v_now + p_lease_ms * interval '1 millisecond')
    ON CONFLICT (key, owner) DO UPDATE SET expires_at = excluded.expires_at;
  INSERT INTO @schema@.permits AS p (key, permits) VALUES (p_key, p_permits)
    ON CONFLICT (key) DO UPDATE SET permits = excluded.permits;
  held := 1;
  detail := 0;
  IF random() < 0.125 THEN
    PERFORM @schema@.sweep(v_now);
  END IF;
END
$body$;

-- Gives back one permit, at most once per p_latch: -1 when p_owner holds none (never
-- granted, given back, or past its deadline: it may be someone else's by now), 0 when it gave
-- one back (and notified).
CREATE OR REPLACE FUNCTION @schema@.sem_release(p_key text, p_channel text, p_latch text,
  p_owner text, p_latch_ms bigint) RETURNS bigint
LANGUAGE plpgsql SECURITY INVOKER SET search_path = pg_catalog, pg_temp
AS $body$
DECLARE
  v_now timestamptz;
  v_result bigint;
BEGIN
  PERFORM pg_advisory_xact_lock(hashtextextended(p_key, 0));
  v_now := clock_timestamp();
  SELECT l.result INTO v_result FROM @schema@.latches l
    WHERE l.id = p_latch AND l.expires_at > v_now;
  IF FOUND THEN
    RETURN v_result;
  END IF;
  DELETE FROM @schema@.holds WHERE key = p_key AND expires_at <= v_now;
  DELETE FROM @schema@.holds WHERE key = p_key AND owner = p_owner;
  v_result := CASE WHEN FOUND THEN 0 ELSE -1 END;
  INSERT INTO @schema@.latches AS l (id, result, expires_at)
    VALUES (p_latch, v_result, v_now + p_latch_ms * interval '1 millisecond')
    ON CONFLICT (id) DO UPDATE SET result = excluded.result, expires_at = excluded.expires_at;
  IF v_result = 0 THEN
    PERFORM pg_notify(p_channel, 'released');
  END IF;
  -- This owner is done: a request of it that arrives later is refused (sem_acquire).
  INSERT INTO @schema@.latches AS l (id, result, expires_at)
    VALUES ('gone:' || p_owner, v_result, v_now + p_latch_ms * interval '1 millisecond')
    ON CONFLICT (id) DO UPDATE SET expires_at = excluded.expires_at;
  -- The count goes with the last holder.
  IF NOT EXISTS (SELECT 1 FROM @schema@.holds h WHERE h.key = p_key) THEN
    DELETE FROM @schema@.permits WHERE key = p_key;
  END IF;
  IF random() < 0.125 THEN
    PERFORM @schema@.sweep(v_now);
  END IF;
  RETURN v_result;
END
$body$;

-- The permits free now (read only; holders past their deadline count as free).
CREATE OR REPLACE FUNCTION @schema@.sem_available(p_key text, p_permits integer) RETURNS bigint
LANGUAGE plpgsql STABLE SECURITY INVOKER SET search_path = pg_catalog, pg_temp
AS $body$
BEGIN
  RETURN greatest(p_permits - @schema@.sem_check(p_key, p_permits, clock_timestamp()), 0);
END
$body$;
