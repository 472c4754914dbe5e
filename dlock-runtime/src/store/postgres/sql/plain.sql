-- The plain reentrant lock: lua/lock/*.lua row for row, with the same replies.

-- Acquire or re-enter. p_marker: the re-entry marker id (NULL for a top-level acquire).
-- Returns (hold count, token) when p_owner holds it afterwards ((count, 0) for a re-entry: the
-- holder knows its token), (0, pttl) otherwise.
CREATE OR REPLACE FUNCTION @schema@.plain_acquire(p_key text, p_fence text, p_marker text,
  p_lease_ms bigint, p_owner text, p_marker_ms bigint, p_hard boolean,
  OUT held bigint, OUT detail bigint)
LANGUAGE plpgsql SECURITY INVOKER SET search_path = pg_catalog, pg_temp
AS $body$
DECLARE
  v_now timestamptz;
  v_count integer;
  v_until timestamptz;
  v_last bigint;
BEGIN
  PERFORM pg_advisory_xact_lock(hashtextextended(p_key, 0));
  v_now := clock_timestamp();
  DELETE FROM @schema@.holds WHERE key = p_key AND expires_at <= v_now;
  SELECT h.count INTO v_count FROM @schema@.holds h WHERE h.key = p_key AND h.owner = p_owner;
  IF NOT FOUND THEN
    SELECT max(h.expires_at) INTO v_until FROM @schema@.holds h WHERE h.key = p_key;
    IF v_until IS NOT NULL THEN
      held := 0;
      detail := @schema@.ms_until(v_until, v_now);
      RETURN;
    END IF;
    -- An owner whose release or undo already found it holding nothing (it gave up) is a
    -- request that reached the server late, over a connection the client had given up on:
    -- granting it would leave the lock held by nobody until its lease ends.
    IF EXISTS (SELECT 1 FROM @schema@.latches l
               WHERE l.id = 'gone:' || p_owner AND l.expires_at > v_now) THEN
      held := 0;
      detail := 1;
      RETURN;
    END IF;
    -- Free -> held: the token is greatest(last + 1, clock in µs); the clock term keeps tokens
    -- rising when the row went back or away (see schema.sql).
    SELECT f.last INTO v_last FROM @schema@.fences f WHERE f.key = p_fence;
    detail := greatest(coalesce(v_last, 0) + 1, @schema@.micros(v_now));
    INSERT INTO @schema@.fences AS f (key, last) VALUES (p_fence, detail)
      ON CONFLICT (key) DO UPDATE SET last = excluded.last;
    IF p_marker IS NOT NULL THEN
      INSERT INTO @schema@.markers AS m (id, expires_at)
        VALUES (p_marker, v_now + p_marker_ms * interval '1 millisecond')
        ON CONFLICT (id) DO UPDATE SET expires_at = excluded.expires_at;
    END IF;
    INSERT INTO @schema@.holds (key, owner, count, expires_at)
      VALUES (p_key, p_owner, 1, v_now + p_lease_ms * interval '1 millisecond');
    held := 1;
    PERFORM @schema@.sweep(v_now);
    RETURN;
  END IF;
  IF p_marker IS NULL THEN
    -- A top-level acquire finds its own fresh owner id: the same request run twice (re-sent
    -- after a dropped connection). Answer as the first run did, changing nothing.
    SELECT f.last INTO v_last FROM @schema@.fences f WHERE f.key = p_fence;
    held := 1;
    detail := coalesce(v_last, 0);
    RETURN;
  END IF;
  -- The marker lets a cancelled re-entry be undone exactly once (plain_undo_reentry).
  INSERT INTO @schema@.markers AS m (id, expires_at)
    VALUES (p_marker, v_now + p_marker_ms * interval '1 millisecond')
    ON CONFLICT (id) DO UPDATE SET expires_at = excluded.expires_at;
  UPDATE @schema@.holds h SET count = h.count + 1,
      -- A hard lease ends where the first acquire set it.
      expires_at = CASE WHEN p_hard THEN h.expires_at
        ELSE v_now + p_lease_ms * interval '1 millisecond' END
    WHERE h.key = p_key AND h.owner = p_owner
    RETURNING h.count INTO v_count;
  held := v_count;
  detail := 0;
END
$body$;

-- Releases one hold, at most once per p_latch. Returns (-1, NULL) when p_owner holds nothing,
-- (holds left, NULL) while holds remain, (0, -2) when this freed the lock: -2 listeners means
-- "unknown" (PostgreSQL cannot count a channel's listeners), so the caller assumes someone may
-- listen. A retry answered from the latch returns the bare count, as on Redis.
CREATE OR REPLACE FUNCTION @schema@.plain_release(p_key text, p_channel text, p_latch text,
  p_owner text, p_lease_ms bigint, p_latch_ms bigint, OUT remaining bigint, OUT listeners bigint)
LANGUAGE plpgsql SECURITY INVOKER SET search_path = pg_catalog, pg_temp
AS $body$
DECLARE
  v_now timestamptz;
  v_count integer;
BEGIN
  PERFORM pg_advisory_xact_lock(hashtextextended(p_key, 0));
  v_now := clock_timestamp();
  SELECT l.result INTO remaining FROM @schema@.latches l
    WHERE l.id = p_latch AND l.expires_at > v_now;
  IF FOUND THEN
    -- A retry of a release that already ran: the same answer, nothing released twice.
    RETURN;
  END IF;
  DELETE FROM @schema@.holds WHERE key = p_key AND expires_at <= v_now;
  SELECT h.count INTO v_count FROM @schema@.holds h WHERE h.key = p_key AND h.owner = p_owner;
  remaining := coalesce(v_count - 1, -1);
  IF remaining = 0 THEN
    DELETE FROM @schema@.holds WHERE key = p_key;
    -- Delivered at commit, so a woken waiter finds the lock free.
    PERFORM pg_notify(p_channel, 'released');
    listeners := -2;
  ELSIF remaining > 0 THEN
    UPDATE @schema@.holds h SET count = remaining,
        -- p_lease_ms 0: a hard lease, whose end a partial release must not move.
        expires_at = CASE WHEN p_lease_ms > 0
          THEN v_now + p_lease_ms * interval '1 millisecond' ELSE h.expires_at END
      WHERE h.key = p_key AND h.owner = p_owner;
  END IF;
  INSERT INTO @schema@.latches AS l (id, result, expires_at)
    VALUES (p_latch, remaining, v_now + p_latch_ms * interval '1 millisecond')
    ON CONFLICT (id) DO UPDATE SET result = excluded.result, expires_at = excluded.expires_at;
  IF remaining <= 0 THEN
    -- This owner is done (released, or given up on an acquire that may not have landed
    -- yet): a request of it that arrives later is refused (plain_acquire).
    INSERT INTO @schema@.latches AS l (id, result, expires_at)
      VALUES ('gone:' || p_owner, remaining, v_now + p_latch_ms * interval '1 millisecond')
      ON CONFLICT (id) DO UPDATE SET expires_at = excluded.expires_at;
  END IF;
  PERFORM @schema@.sweep(v_now);
END
$body$;

-- Undoes a re-entry whose caller was cancelled before it saw the reply, if its marker says
-- it ran (sent on the acquire's own connection, so it runs after that acquire if at all).
-- Frees the lock like a release when it was the last hold. Returns 1 when undone, else 0.
CREATE OR REPLACE FUNCTION @schema@.plain_undo_reentry(p_key text, p_marker text,
  p_channel text, p_owner text) RETURNS bigint
LANGUAGE plpgsql SECURITY INVOKER SET search_path = pg_catalog, pg_temp
AS $body$
DECLARE
  v_now timestamptz;
  v_count integer;
  v_marked boolean;
BEGIN
  PERFORM pg_advisory_xact_lock(hashtextextended(p_key, 0));
  v_now := clock_timestamp();
  DELETE FROM @schema@.holds WHERE key = p_key AND expires_at <= v_now;
  DELETE FROM @schema@.markers m WHERE m.id = p_marker RETURNING m.expires_at > v_now
    INTO v_marked;
  UPDATE @schema@.holds h SET count = h.count - 1
    WHERE coalesce(v_marked, false) AND h.key = p_key AND h.owner = p_owner
    RETURNING h.count INTO v_count;
  IF v_count IS NULL THEN
    RETURN 0;
  END IF;
  IF v_count <= 0 THEN
    DELETE FROM @schema@.holds WHERE key = p_key;
    PERFORM pg_notify(p_channel, 'released');
  END IF;
  RETURN 1;
END
$body$;
