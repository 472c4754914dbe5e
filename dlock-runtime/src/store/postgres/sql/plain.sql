-- The plain reentrant lock: lua/lock/*.lua with one row per lock (plain_locks, schema.sql),
-- with the same replies. Every op changes the key's row in place (the usual acquire and
-- release in one UPDATE each); the row stays when the lock is free, keeping the last fencing
-- token.

-- The row of p_key, made if missing (first use, or swept after a day unused), free and with
-- no token yet (last 0: plain_acquire then starts from the key's fences row, where a schema of
-- version 4 kept it). A live hold of version 4's layout (a holds row of p_key, written before
-- the migration) moves into it, so an upgrade in place keeps every lock held. Making the row
-- is the rare case, so neither look costs the usual op anything. The caller holds the key's
-- advisory lock.
CREATE OR REPLACE FUNCTION @schema@.plain_row(p_key text, p_now timestamptz)
  RETURNS @schema@.plain_locks
LANGUAGE plpgsql SECURITY INVOKER SET search_path = pg_catalog, pg_temp
AS $body$
DECLARE
  v_row @schema@.plain_locks;
  v_owner text;
  v_count integer;
  v_until timestamptz;
BEGIN
  -- A plain lock has at most one owner: the live row, if any (older ones only ended).
  WITH moved AS (
    DELETE FROM @schema@.holds h WHERE h.key = p_key RETURNING h.owner, h.count, h.expires_at)
  SELECT m.owner, m.count, m.expires_at INTO v_owner, v_count, v_until FROM moved m
    ORDER BY m.expires_at DESC LIMIT 1;
  IF v_until IS NULL OR v_until <= p_now THEN
    v_owner := NULL;
    v_count := 0;
    v_until := p_now;
  END IF;
  -- A hold moved in from version 4 counts as latched for a day (the longest a latch may live):
  -- a partial release of it may have run there, its latch under its request id, and a retry of
  -- it must be answered from that latch, not applied again (the one-UPDATE release skips the
  -- look only when no latch can be live).
  INSERT INTO @schema@.plain_locks AS l (key, owner, count, expires_at, last, latched_until)
    VALUES (p_key, v_owner, v_count, v_until, 0,
      CASE WHEN v_owner IS NULL THEN p_now ELSE p_now + interval '1 day' END)
    RETURNING l.* INTO v_row;
  RETURN v_row;
END
$body$;

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
  v_row @schema@.plain_locks;
BEGIN
  PERFORM pg_advisory_xact_lock(hashtextextended(p_key, 0));
  v_now := clock_timestamp();
  IF p_marker IS NULL THEN
    -- The usual case in one statement: a top-level acquire takes a free lock of a known token
    -- (each statement of a function costs more than its index lookup). It grants exactly when
    -- the steps below would: free, not re-entered, the owner not done; token as below.
    UPDATE @schema@.plain_locks l SET owner = p_owner, count = 1,
        expires_at = v_now + p_lease_ms * interval '1 millisecond',
        last = greatest(l.last + 1, (extract(epoch FROM v_now) * 1000000)::bigint)
      WHERE l.key = p_key AND (l.owner IS NULL OR l.expires_at <= v_now) AND l.last > 0
        AND NOT EXISTS (SELECT 1 FROM @schema@.latches g
                        WHERE g.id = 'gone:' || p_owner AND g.expires_at > v_now)
      RETURNING l.last INTO detail;
    IF FOUND THEN
      held := 1;
      IF random() < 0.125 THEN
        PERFORM @schema@.sweep(v_now);
      END IF;
      RETURN;
    END IF;
  END IF;
  SELECT l.* INTO v_row FROM @schema@.plain_locks l WHERE l.key = p_key;
  IF NOT FOUND THEN
    v_row := @schema@.plain_row(p_key, v_now);
  END IF;
  IF v_row.owner IS NOT NULL AND v_row.expires_at > v_now THEN
    IF v_row.owner <> p_owner THEN
      held := 0;
      detail := @schema@.ms_until(v_row.expires_at, v_now);
      RETURN;
    END IF;
    IF p_marker IS NULL THEN
      -- A top-level acquire finds its own fresh owner id: the same request run twice (re-sent
      -- after a dropped connection). Answer as the first run did, changing nothing.
      IF v_row.last = 0 THEN
        -- Granted under version 4's layout, which kept its token in fences.
        SELECT f.last INTO v_row.last FROM @schema@.fences f WHERE f.key = p_fence;
      END IF;
      held := 1;
      detail := coalesce(v_row.last, 0);
      RETURN;
    END IF;
    -- The marker lets a cancelled re-entry be undone exactly once (plain_undo_reentry).
    INSERT INTO @schema@.markers AS m (id, expires_at)
      VALUES (p_marker, v_now + p_marker_ms * interval '1 millisecond')
      ON CONFLICT (id) DO UPDATE SET expires_at = excluded.expires_at;
    UPDATE @schema@.plain_locks l SET count = l.count + 1,
        -- A hard lease ends where the first acquire set it.
        expires_at = CASE WHEN p_hard THEN l.expires_at
          ELSE v_now + p_lease_ms * interval '1 millisecond' END
      WHERE l.key = p_key
      RETURNING l.count INTO held;
    detail := 0;
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
  IF v_row.last = 0 THEN
    -- The row's first grant: version 4 kept the token in fences.
    SELECT f.last INTO v_row.last FROM @schema@.fences f WHERE f.key = p_fence;
  END IF;
  -- micros() written out: a function with its own search_path is never inlined, and the call
  -- cost more than the arithmetic.
  detail := greatest(coalesce(v_row.last, 0) + 1, (extract(epoch FROM v_now) * 1000000)::bigint);
  IF p_marker IS NOT NULL THEN
    INSERT INTO @schema@.markers AS m (id, expires_at)
      VALUES (p_marker, v_now + p_marker_ms * interval '1 millisecond')
      ON CONFLICT (id) DO UPDATE SET expires_at = excluded.expires_at;
  END IF;
  UPDATE @schema@.plain_locks l SET owner = p_owner, count = 1,
      -- latched_until stays: the latches of an owner's partial releases outlive its hold (it
      -- may have expired and be granted again, after others: a retry of one must still be
      -- answered from its latch).
      expires_at = v_now + p_lease_ms * interval '1 millisecond', last = detail
    WHERE l.key = p_key;
  held := 1;
  IF random() < 0.125 THEN
    PERFORM @schema@.sweep(v_now);
  END IF;
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
  v_row @schema@.plain_locks;
  v_request text;
  v_freed boolean := false;
BEGIN
  PERFORM pg_advisory_xact_lock(hashtextextended(p_key, 0));
  -- A release that freed or decreased a live hold is committed without waiting for its WAL
  -- flush (set below, for this transaction only, which ends with this call): with fsync on, the flush was half of a cycle's time (4 ms here, against 0.05 ms for
  -- a SELECT 1) and sat between a release and its waiter's grant. A crash can lose only a
  -- release not flushed yet, and with it its latch and gone mark (the WAL is one sequence):
  -- the lock is then held by its done owner until its lease ends (its watchdog stopped before
  -- the release was sent), never by two owners, and a retry finds the hold and releases it
  -- once. The acquire that takes the lock next waits for its own flush, which writes this
  -- release's first. An acquire never skips its flush: a grant lost in a crash would let a
  -- second owner in while the first still holds. A release that found nothing keeps its
  -- flush: its gone mark must survive a crash, since the late acquire it refuses may cross a
  -- restart queued in a pooler.
  v_now := clock_timestamp();
  -- The usual case in one statement: the owner's only hold, no partial release before it.
  UPDATE @schema@.plain_locks l SET owner = NULL, count = 0, expires_at = v_now
    WHERE l.key = p_key AND l.owner = p_owner AND l.count = 1 AND l.expires_at > v_now
      AND l.latched_until <= v_now;
  IF FOUND THEN
    remaining := 0;
    v_freed := true;
  ELSE
    SELECT l.* INTO v_row FROM @schema@.plain_locks l WHERE l.key = p_key;
    IF NOT FOUND THEN
      v_row := @schema@.plain_row(p_key, v_now);
    END IF;
    IF v_row.owner = p_owner AND v_row.expires_at > v_now THEN
      IF v_row.latched_until > v_now THEN
        -- A retry of a partial release of this hold that already ran: the same answer.
        SELECT l.result INTO remaining FROM @schema@.latches l
          WHERE l.id = p_latch AND l.expires_at > v_now;
        IF FOUND THEN
          RETURN;
        END IF;
      END IF;
      remaining := v_row.count - 1;
    END IF;
  END IF;
  IF remaining >= 0 THEN
    PERFORM set_config('synchronous_commit', 'off', true);
  END IF;
  IF remaining > 0 THEN
    UPDATE @schema@.plain_locks l SET count = remaining,
        latched_until = greatest(l.latched_until, v_now + p_latch_ms * interval '1 millisecond'),
        -- p_lease_ms 0: a hard lease, whose end a partial release must not move.
        expires_at = CASE WHEN p_lease_ms > 0
          THEN v_now + p_lease_ms * interval '1 millisecond' ELSE l.expires_at END
      WHERE l.key = p_key;
    -- Under the request id: the hold goes on, and its owner may release again.
    INSERT INTO @schema@.latches AS l (id, result, expires_at)
      VALUES (p_latch, remaining, v_now + p_latch_ms * interval '1 millisecond')
      ON CONFLICT (id) DO UPDATE SET result = excluded.result, expires_at = excluded.expires_at;
  ELSIF remaining = 0 THEN
    IF NOT v_freed THEN
      UPDATE @schema@.plain_locks l SET owner = NULL, count = 0, expires_at = v_now
        WHERE l.key = p_key;
    END IF;
    -- Delivered at commit, so a woken waiter finds the lock free.
    PERFORM pg_notify(p_channel, 'released');
    listeners := -2;
  END IF;
  IF remaining IS NULL THEN
    -- Not held by p_owner: a retry of its last release, answered from the latch that release
    -- left; or a release of an acquire that gave up (its request may not have arrived yet).
    SELECT l.result, l.request INTO remaining, v_request FROM @schema@.latches l
      WHERE l.id = 'gone:' || p_owner AND l.expires_at > v_now;
    IF FOUND AND v_request = p_latch THEN
      listeners := NULL;
      RETURN;
    END IF;
    -- A partial release's latch (its hold has ended since), or version 4's latch.
    SELECT l.result INTO remaining FROM @schema@.latches l
      WHERE l.id = p_latch AND l.expires_at > v_now;
    IF FOUND THEN
      RETURN;
    END IF;
    remaining := -1;
  END IF;
  IF remaining <= 0 THEN
    -- This owner is done (released, or given up on an acquire that may not have landed yet):
    -- one row answers this release's retry (`request`) and refuses a request of the owner
    -- that arrives later (plain_acquire).
    INSERT INTO @schema@.latches AS l (id, result, expires_at, request)
      VALUES ('gone:' || p_owner, remaining, v_now + p_latch_ms * interval '1 millisecond',
        p_latch)
      -- A live mark keeps the answer of the release that made it: a later release of a done
      -- owner finds nothing (-1), and its own retry is answered so without a row of its own.
      ON CONFLICT (id) DO UPDATE SET
        result = CASE WHEN l.expires_at > v_now THEN l.result ELSE excluded.result END,
        request = CASE WHEN l.expires_at > v_now THEN l.request ELSE excluded.request END,
        expires_at = excluded.expires_at;
  END IF;
  IF random() < 0.125 THEN
    PERFORM @schema@.sweep(v_now);
  END IF;
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
  v_row @schema@.plain_locks;
  v_marked boolean;
BEGIN
  PERFORM pg_advisory_xact_lock(hashtextextended(p_key, 0));
  v_now := clock_timestamp();
  SELECT l.* INTO v_row FROM @schema@.plain_locks l WHERE l.key = p_key;
  IF NOT FOUND THEN
    v_row := @schema@.plain_row(p_key, v_now);
  END IF;
  DELETE FROM @schema@.markers m WHERE m.id = p_marker RETURNING m.expires_at > v_now
    INTO v_marked;
  IF NOT coalesce(v_marked, false) OR v_row.owner IS DISTINCT FROM p_owner
     OR v_row.expires_at <= v_now THEN
    RETURN 0;
  END IF;
  IF v_row.count > 1 THEN
    UPDATE @schema@.plain_locks l SET count = l.count - 1 WHERE l.key = p_key;
  ELSE
    UPDATE @schema@.plain_locks l SET owner = NULL, count = 0, expires_at = v_now
      WHERE l.key = p_key;
    PERFORM pg_notify(p_channel, 'released');
  END IF;
  RETURN 1;
END
$body$;
