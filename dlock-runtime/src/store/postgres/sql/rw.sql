-- The read-write lock: lua/rw/*.lua with rows instead of a hash. One holds row per side and
-- owner ('r:<owner>', 'w:<owner>'), each with its own deadline; the lock is in write mode while
-- a live 'w:' row exists, in read mode while only 'r:' rows do. `intents` is the first refused
-- writer, which keeps new readers out until it is in or its row expires.
-- Unlike Redis, where a writer's field lives as long as the hash (which readers extend), a
-- writer's row ends at its own deadline; a downgraded writer's read keeps only the read.

-- Takes or re-enters one side. p_side 'r' | 'w'; p_marker set (a re-entry, or a writer's own
-- read) makes a grant leave a marker, so an undo can tell it ran. Returns (holds, token) when
-- p_owner holds the side afterwards (token 0 for a re-entry, the writer's for its own read, a
-- new one for a reader joining others), (0, ms to wait) otherwise.
CREATE OR REPLACE FUNCTION @schema@.rw_acquire(p_key text, p_fence text, p_marker text,
  p_side text, p_owner text, p_lease_ms bigint, p_marker_ms bigint, p_hard boolean,
  p_intent_ms bigint, OUT held bigint, OUT detail bigint)
LANGUAGE plpgsql SECURITY INVOKER SET search_path = pg_catalog, pg_temp
AS $body$
DECLARE
  v_now timestamptz;
  v_field text := p_side || ':' || p_owner;
  v_until timestamptz := clock_timestamp();
  v_last bigint;
  v_count integer;
  v_any boolean;
  v_write boolean;
  v_waiting text;
  v_waiting_until timestamptz;
BEGIN
  PERFORM pg_advisory_xact_lock(hashtextextended(p_key, 0));
  v_now := clock_timestamp();
  v_until := v_now + p_lease_ms * interval '1 millisecond';
  -- Holders whose lease ran out (their process died) leave; the last one frees the lock.
  DELETE FROM @schema@.holds WHERE key = p_key AND expires_at <= v_now;
  DELETE FROM @schema@.intents WHERE key = p_key AND expires_at <= v_now;
  SELECT f.last INTO v_last FROM @schema@.fences f WHERE f.key = p_fence;
  v_last := coalesce(v_last, 0);
  SELECT count(*) > 0, coalesce(bool_or(h.owner LIKE 'w:%'), false) INTO v_any, v_write
    FROM @schema@.holds h WHERE h.key = p_key;
  SELECT i.owner, i.expires_at INTO v_waiting, v_waiting_until
    FROM @schema@.intents i WHERE i.key = p_key;
  -- A side of an owner whose release or undo already found it done (see plain_acquire): a
  -- top-level request of it that arrives late, over a connection the client gave up on, is
  -- refused, or the lock would be held by nobody until its lease ends. Only a top-level one
  -- (p_marker NULL), as lua/rw/acquire.lua skips its done latch for nested requests: a
  -- writer's reads share its owner, so one read given back leaves the mark that the writer's
  -- next read, in the same write scope, must not meet (issue 36).
  IF p_marker IS NULL
     AND EXISTS (SELECT 1 FROM @schema@.latches l
             WHERE l.id = 'gone:' || v_field AND l.expires_at > v_now)
     AND NOT EXISTS (SELECT 1 FROM @schema@.holds h WHERE h.key = p_key AND h.owner = v_field)
  THEN
    held := 0;
    detail := 1;
    RETURN;
  END IF;

  IF NOT v_any THEN
    IF p_side = 'r' AND v_waiting IS NOT NULL THEN
      -- Free only because the readers a waiting writer waited for have left: the lock is
      -- that writer's next. A reader queues behind it until its claim ends at the latest.
      held := 0;
      detail := @schema@.ms_until(v_waiting_until, v_now);
      RETURN;
    END IF;
    detail := greatest(v_last + 1, @schema@.micros(v_now));
    INSERT INTO @schema@.fences AS f (key, last) VALUES (p_fence, detail)
      ON CONFLICT (key) DO UPDATE SET last = excluded.last;
    IF p_marker IS NOT NULL THEN
      INSERT INTO @schema@.markers AS m (id, expires_at)
        VALUES (p_marker, v_now + p_marker_ms * interval '1 millisecond')
        ON CONFLICT (id) DO UPDATE SET expires_at = excluded.expires_at;
    END IF;
    INSERT INTO @schema@.holds (key, owner, count, expires_at) VALUES (p_key, v_field, 1, v_until);
    IF p_side = 'w' AND v_waiting = p_owner THEN
      DELETE FROM @schema@.intents WHERE key = p_key;
    END IF;
    held := 1;
    IF random() < 0.125 THEN
      PERFORM @schema@.sweep(v_now);
    END IF;
    RETURN;
  END IF;

  SELECT h.count INTO v_count FROM @schema@.holds h WHERE h.key = p_key AND h.owner = v_field;
  IF FOUND THEN
    IF p_marker IS NULL THEN
      -- The same top-level request run twice: answer as the first run did.
      held := 1;
      detail := v_last;
      RETURN;
    END IF;
    INSERT INTO @schema@.markers AS m (id, expires_at)
      VALUES (p_marker, v_now + p_marker_ms * interval '1 millisecond')
      ON CONFLICT (id) DO UPDATE SET expires_at = excluded.expires_at;
    -- One row may serve several holds of its owner, each counting its lease from its own
    -- request: a deadline only moves out. A hard lease leaves it alone.
    UPDATE @schema@.holds h SET count = h.count + 1,
        expires_at = CASE WHEN p_hard THEN h.expires_at ELSE greatest(h.expires_at, v_until) END
      WHERE h.key = p_key AND h.owner = v_field
      RETURNING h.count INTO v_count;
    held := v_count;
    detail := 0;
    RETURN;
  END IF;

  IF p_side = 'r' THEN
    IF (v_write AND EXISTS (SELECT 1 FROM @schema@.holds h
          WHERE h.key = p_key AND h.owner = 'w:' || p_owner))
       OR (NOT v_write AND v_waiting IS NULL)
    THEN
      IF p_marker IS NOT NULL THEN
        -- A writer's read (sent with a marker): an undo finds it.
        INSERT INTO @schema@.markers AS m (id, expires_at)
          VALUES (p_marker, v_now + p_marker_ms * interval '1 millisecond')
          ON CONFLICT (id) DO UPDATE SET expires_at = excluded.expires_at;
      END IF;
      INSERT INTO @schema@.holds (key, owner, count, expires_at)
        VALUES (p_key, v_field, 1, v_until);
      held := 1;
      IF v_write THEN
        -- A downgrade: the writer reads under its own token.
        detail := v_last;
        RETURN;
      END IF;
      -- A reader joining others gets a token of its own, lifted like a free -> held one.
      detail := greatest(v_last + 1, @schema@.micros(v_now));
      INSERT INTO @schema@.fences AS f (key, last) VALUES (p_fence, detail)
        ON CONFLICT (key) DO UPDATE SET last = excluded.last;
      RETURN;
    END IF;
    -- Behind a writer inside, or one waiting: retry when that one's time is up at the latest.
    held := 0;
    IF v_waiting IS NOT NULL AND NOT v_write THEN
      detail := @schema@.ms_until(v_waiting_until, v_now);
    ELSE
      SELECT @schema@.ms_until(max(h.expires_at), v_now) INTO detail
        FROM @schema@.holds h WHERE h.key = p_key;
    END IF;
    RETURN;
  END IF;

  -- A writer that cannot get in: the first one refused keeps new readers out until it is in.
  -- It must come back before its claim expires, so it waits at most half of it at a time.
  IF v_waiting IS NULL OR v_waiting = p_owner THEN
    INSERT INTO @schema@.intents AS i (key, owner, expires_at)
      VALUES (p_key, p_owner, v_now + p_intent_ms * interval '1 millisecond')
      ON CONFLICT (key) DO UPDATE SET owner = excluded.owner, expires_at = excluded.expires_at;
  END IF;
  held := 0;
  SELECT least(@schema@.ms_until(max(h.expires_at), v_now), p_intent_ms / 2) INTO detail
    FROM @schema@.holds h WHERE h.key = p_key;
END
$body$;

-- Gives back one hold of one side (p_mode 'latch': at most once per request id p_guard), or
-- undoes a cancelled re-entry (p_mode 'marker': only if the marker p_guard says it ran).
-- Returns -1 when p_owner holds no such side (or the re-entry never ran), else the holds it
-- has left on that side.
CREATE OR REPLACE FUNCTION @schema@.rw_release(p_key text, p_channel text, p_guard text,
  p_side text, p_owner text, p_lease_ms bigint, p_latch_ms bigint, p_mode text) RETURNS bigint
LANGUAGE plpgsql SECURITY INVOKER SET search_path = pg_catalog, pg_temp
AS $body$
DECLARE
  v_now timestamptz;
  v_field text := p_side || ':' || p_owner;
  v_result bigint;
  v_count integer;
  v_write boolean;
BEGIN
  PERFORM pg_advisory_xact_lock(hashtextextended(p_key, 0));
  v_now := clock_timestamp();
  IF p_mode = 'latch' THEN
    SELECT l.result INTO v_result FROM @schema@.latches l
      WHERE l.id = p_guard AND l.expires_at > v_now;
    IF FOUND THEN
      RETURN v_result;
    END IF;
  ELSE
    DELETE FROM @schema@.markers m WHERE m.id = p_guard AND m.expires_at > v_now;
    IF NOT FOUND THEN
      RETURN -1;
    END IF;
  END IF;
  DELETE FROM @schema@.holds WHERE key = p_key AND expires_at <= v_now;
  DELETE FROM @schema@.intents WHERE key = p_key AND expires_at <= v_now;
  SELECT coalesce(bool_or(h.owner LIKE 'w:%'), false) INTO v_write
    FROM @schema@.holds h WHERE h.key = p_key;
  -- A writer that leaves (or gives up: the clean-up of a refused attempt lands here too)
  -- stops keeping new readers out.
  IF p_side = 'w' THEN
    DELETE FROM @schema@.intents WHERE key = p_key AND owner = p_owner;
    IF FOUND AND NOT v_write THEN
      -- It gave up without the lock: the readers its claim kept out may go now.
      PERFORM pg_notify(p_channel, 'released');
    END IF;
  END IF;
  SELECT h.count INTO v_count FROM @schema@.holds h WHERE h.key = p_key AND h.owner = v_field;
  v_result := coalesce(v_count - 1, -1);
  IF p_mode = 'latch' THEN
    INSERT INTO @schema@.latches AS l (id, result, expires_at)
      VALUES (p_guard, v_result, v_now + p_latch_ms * interval '1 millisecond')
      ON CONFLICT (id) DO UPDATE SET result = excluded.result, expires_at = excluded.expires_at;
    IF v_result <= 0 THEN
      -- This side of the owner is done: a request of it that lands later is refused.
      INSERT INTO @schema@.latches AS l (id, result, expires_at)
        VALUES ('gone:' || v_field, v_result, v_now + p_latch_ms * interval '1 millisecond')
        ON CONFLICT (id) DO UPDATE SET expires_at = excluded.expires_at;
    END IF;
  END IF;
  IF v_result > 0 THEN
    UPDATE @schema@.holds h SET count = v_result,
        -- The holds left may have longer deadlines than this one's lease: only out.
        expires_at = CASE WHEN p_lease_ms > 0
          THEN greatest(h.expires_at, v_now + p_lease_ms * interval '1 millisecond')
          ELSE h.expires_at END
      WHERE h.key = p_key AND h.owner = v_field;
  ELSIF v_result = 0 THEN
    DELETE FROM @schema@.holds WHERE key = p_key AND owner = v_field;
    IF NOT EXISTS (SELECT 1 FROM @schema@.holds h WHERE h.key = p_key) THEN
      -- Nobody left inside: free, and one message wakes the waiters (a writer, or readers).
      PERFORM pg_notify(p_channel, 'released');
    ELSIF p_side = 'w' AND v_write THEN
      -- The writer leaves while it still reads (a downgrade): the lock turns read, and
      -- waiting readers may join.
      PERFORM pg_notify(p_channel, 'released');
    END IF;
    -- A reader leaving while others read (or while its own writer holds) wakes nobody.
  END IF;
  IF p_mode = 'latch' THEN
    IF random() < 0.125 THEN
      PERFORM @schema@.sweep(v_now);
    END IF;
  END IF;
  RETURN v_result;
END
$body$;
