-- The fair lock: lua/fair/*.lua with rows, with the same replies. The hold is the plain lock's
-- (one `holds` row for the holder), so renew, force_unlock and pttl are common.sql's; the
-- queue is `fair_queue`. Its table is created here, beside the only functions that use it.

-- One row per waiting owner of a fair lock. A row whose keep_until has passed counts as absent
-- everywhere (its waiter stopped coming back: its process died); the next op on its key
-- deletes it, and fair_sweep() deletes abandoned ones.
CREATE TABLE IF NOT EXISTS @schema@.fair_queue (
  key text NOT NULL,
  owner text NOT NULL,
  -- The server's clock in µs when it queued, rising strictly per key: the order of service,
  -- judged by the server's clock only (lua/fair's queue score).
  arrived bigint NOT NULL,
  -- The waiter comes back before this (every third of the keep-alive) or loses its place.
  keep_until timestamptz NOT NULL,
  -- The NOTIFY channel its grant is told on. The client names it (channel.rs hashes the
  -- owner's grant channel), so the server needs no hash function of dlock's.
  channel text NOT NULL,
  PRIMARY KEY (key, owner)
);
CREATE INDEX IF NOT EXISTS fair_queue_arrived ON @schema@.fair_queue (key, arrived);
CREATE INDEX IF NOT EXISTS fair_queue_keep_until ON @schema@.fair_queue (keep_until);

-- A new token for a free -> held transition: greatest(last + 1, clock in µs), stored (see
-- plain_acquire).
CREATE OR REPLACE FUNCTION @schema@.fair_token(p_fence text, p_now timestamptz) RETURNS bigint
LANGUAGE plpgsql SECURITY INVOKER SET search_path = pg_catalog, pg_temp
AS $body$
DECLARE
  v_token bigint;
BEGIN
  SELECT greatest(coalesce(max(f.last), 0) + 1, @schema@.micros(p_now)) INTO v_token
    FROM @schema@.fences f WHERE f.key = p_fence;
  INSERT INTO @schema@.fences AS f (key, last) VALUES (p_fence, v_token)
    ON CONFLICT (key) DO UPDATE SET last = excluded.last;
  RETURN v_token;
END
$body$;

-- Hands the free lock p_key to the first live waiter, if any, for p_grant_ms (the waiter
-- turns that into its own lease with a renewal; a waiter that died lets it expire), and tells
-- it on its own channel: `<owner> <token>`, delivered at commit, so it finds itself holding.
-- Returns true when somebody was granted. The caller holds the key's advisory lock.
CREATE OR REPLACE FUNCTION @schema@.fair_grant_next(p_key text, p_fence text,
  p_grant_ms bigint, p_now timestamptz) RETURNS boolean
LANGUAGE plpgsql SECURITY INVOKER SET search_path = pg_catalog, pg_temp
AS $body$
DECLARE
  v_head text;
  v_channel text;
  v_token bigint;
BEGIN
  -- Waiters that stopped keeping their place are skipped.
  DELETE FROM @schema@.fair_queue q WHERE q.key = p_key AND q.keep_until <= p_now;
  DELETE FROM @schema@.fair_queue q WHERE q.key = p_key AND q.owner = (
      SELECT o.owner FROM @schema@.fair_queue o WHERE o.key = p_key
      ORDER BY o.arrived LIMIT 1)
    RETURNING q.owner, q.channel INTO v_head, v_channel;
  IF v_head IS NULL THEN
    RETURN false;
  END IF;
  v_token := @schema@.fair_token(p_fence, p_now);
  INSERT INTO @schema@.holds AS h (key, owner, count, expires_at)
    VALUES (p_key, v_head, 1, p_now + p_grant_ms * interval '1 millisecond')
    ON CONFLICT (key, owner) DO UPDATE SET count = 1, expires_at = excluded.expires_at;
  PERFORM pg_notify(v_channel, v_head || ' ' || v_token);
  RETURN true;
END
$body$;

-- Deletes a few queue rows of any fair lock whose waiter stopped coming back (a lock nobody
-- touches again keeps them otherwise). Like sweep()'s latches: one op in eight, 32 rows at most, SKIP
-- LOCKED, at the very end of its caller. It runs without the rows' key's advisory lock, so it
-- leaves a minute's grace: an op of that key that has just read a row as live (its clock a
-- moment behind this one) never finds it gone under it.
CREATE OR REPLACE FUNCTION @schema@.fair_sweep(p_now timestamptz) RETURNS void
LANGUAGE plpgsql SECURITY INVOKER SET search_path = pg_catalog, pg_temp
AS $body$
BEGIN
  IF random() >= 0.125 THEN
    RETURN;
  END IF;
  DELETE FROM @schema@.fair_queue WHERE (key, owner) IN (
    SELECT q.key, q.owner FROM @schema@.fair_queue q
    WHERE q.keep_until < p_now - interval '1 minute'
    ORDER BY q.keep_until LIMIT 32 FOR UPDATE SKIP LOCKED);
END
$body$;

-- Take, re-enter, or queue (lua/fair/acquire.lua). p_marker: the re-entry marker id (NULL
-- for a top-level acquire); p_keep_ms: how long a queued waiter keeps its place without
-- coming back, and how long a grant lasts before its owner renews it; p_channel: this owner's
-- grant channel. Returns (holds, token) when p_owner holds afterwards (token 0 for a
-- re-entry), (0, ms until the caller must come back to keep its place) otherwise (also to an
-- owner that is done, which is neither granted nor queued).
CREATE OR REPLACE FUNCTION @schema@.fair_acquire(p_key text, p_fence text, p_marker text,
  p_lease_ms bigint, p_owner text, p_marker_ms bigint, p_hard boolean, p_keep_ms bigint,
  p_channel text, OUT held bigint, OUT detail bigint)
LANGUAGE plpgsql SECURITY INVOKER SET search_path = pg_catalog, pg_temp
AS $body$
DECLARE
  v_now timestamptz;
  v_count integer;
  v_last bigint;
  v_head text;
  v_queued boolean;
BEGIN
  PERFORM pg_advisory_xact_lock(hashtextextended(p_key, 0));
  v_now := clock_timestamp();
  DELETE FROM @schema@.holds WHERE key = p_key AND expires_at <= v_now;
  SELECT h.count INTO v_count FROM @schema@.holds h WHERE h.key = p_key AND h.owner = p_owner;
  IF FOUND THEN
    IF p_marker IS NOT NULL THEN
      -- The marker lets a cancelled re-entry be undone exactly once (fair_undo_reentry).
      INSERT INTO @schema@.markers AS m (id, expires_at)
        VALUES (p_marker, v_now + p_marker_ms * interval '1 millisecond')
        ON CONFLICT (id) DO UPDATE SET expires_at = excluded.expires_at;
      UPDATE @schema@.holds h SET count = h.count + 1,
          expires_at = CASE WHEN p_hard THEN h.expires_at
            ELSE v_now + p_lease_ms * interval '1 millisecond' END
        WHERE h.key = p_key AND h.owner = p_owner
        RETURNING h.count INTO v_count;
      held := v_count;
      detail := 0;
      RETURN;
    END IF;
    -- Granted to this waiter by a release (its message unheard or not trusted), or this
    -- request run twice: it holds, with its own lease from now on (a hard lease too: this is
    -- its first acquire), so the caller may count its lease from this request's send time.
    -- The fence row holds the token of that grant.
    UPDATE @schema@.holds h SET expires_at = v_now + p_lease_ms * interval '1 millisecond'
      WHERE h.key = p_key AND h.owner = p_owner;
    SELECT f.last INTO v_last FROM @schema@.fences f WHERE f.key = p_fence;
    held := 1;
    detail := coalesce(v_last, 0);
    RETURN;
  END IF;
  held := 0;
  detail := p_keep_ms / 3;
  -- This owner gave its last hold back, or its release found it holding nothing (its acquire
  -- ended without the lock and took its place back): this is a request of it that reached
  -- the server late, over a connection the client had given up on. Granting or queueing it
  -- would hold the lock, or a place ahead of others, for nobody.
  IF EXISTS (SELECT 1 FROM @schema@.latches l
             WHERE l.id = 'gone:' || p_owner AND l.expires_at > v_now) THEN
    RETURN;
  END IF;
  -- Waiters that stopped keeping their place (their process died) leave the queue.
  DELETE FROM @schema@.fair_queue q WHERE q.key = p_key AND q.keep_until <= v_now;
  v_queued := EXISTS (SELECT 1 FROM @schema@.fair_queue q
                      WHERE q.key = p_key AND q.owner = p_owner);
  IF NOT EXISTS (SELECT 1 FROM @schema@.holds h WHERE h.key = p_key) THEN
    SELECT q.owner INTO v_head FROM @schema@.fair_queue q WHERE q.key = p_key
      ORDER BY q.arrived LIMIT 1;
    IF v_head IS NULL OR v_head = p_owner THEN
      detail := @schema@.fair_token(p_fence, v_now);
      IF p_marker IS NOT NULL THEN
        INSERT INTO @schema@.markers AS m (id, expires_at)
          VALUES (p_marker, v_now + p_marker_ms * interval '1 millisecond')
          ON CONFLICT (id) DO UPDATE SET expires_at = excluded.expires_at;
      END IF;
      INSERT INTO @schema@.holds (key, owner, count, expires_at)
        VALUES (p_key, p_owner, 1, v_now + p_lease_ms * interval '1 millisecond');
      IF v_queued THEN
        DELETE FROM @schema@.fair_queue q WHERE q.key = p_key AND q.owner = p_owner;
      END IF;
      held := 1;
      PERFORM @schema@.fair_sweep(v_now);
      IF random() < 0.125 THEN
        PERFORM @schema@.sweep(v_now);
      END IF;
      RETURN;
    END IF;
    -- Free, but somebody came first (its holder expired without a release): its turn now.
    -- Not this owner (it is not the head), so its own place stays as read above.
    PERFORM @schema@.fair_grant_next(p_key, p_fence, p_keep_ms, v_now);
  END IF;
  -- Queue (first come, first served by the server's clock), or keep the place.
  IF v_queued THEN
    UPDATE @schema@.fair_queue q
      SET keep_until = v_now + p_keep_ms * interval '1 millisecond', channel = p_channel
      WHERE q.key = p_key AND q.owner = p_owner;
  ELSE
    INSERT INTO @schema@.fair_queue (key, owner, arrived, keep_until, channel)
      SELECT p_key, p_owner, greatest(@schema@.micros(v_now), coalesce(max(q.arrived), 0) + 1),
        v_now + p_keep_ms * interval '1 millisecond', p_channel
      FROM @schema@.fair_queue q WHERE q.key = p_key;
  END IF;
END
$body$;

-- Releases one hold, at most once per p_latch, handing a freed lock to the first live waiter
-- (lua/fair/release.lua). Also how a waiter leaves the queue: an owner that holds nothing is
-- taken out of it. p_channel: the release channel, told when nobody waits. Returns -1 when
-- p_owner holds nothing, else the holds it has left (0 = freed).
CREATE OR REPLACE FUNCTION @schema@.fair_release(p_key text, p_fence text, p_channel text,
  p_latch text, p_owner text, p_lease_ms bigint, p_latch_ms bigint, p_grant_ms bigint)
RETURNS bigint
LANGUAGE plpgsql SECURITY INVOKER SET search_path = pg_catalog, pg_temp
AS $body$
DECLARE
  v_now timestamptz;
  v_count integer;
  v_result bigint;
BEGIN
  PERFORM pg_advisory_xact_lock(hashtextextended(p_key, 0));
  v_now := clock_timestamp();
  -- A retry of a release that already ran (its reply lost to a timeout or reconnect), or any
  -- release of an owner that is done: the same answer again, nothing released twice.
  SELECT l.result INTO v_result FROM @schema@.latches l
    WHERE l.id IN (p_latch, 'gone:' || p_owner) AND l.expires_at > v_now LIMIT 1;
  IF FOUND THEN
    RETURN v_result;
  END IF;
  DELETE FROM @schema@.holds WHERE key = p_key AND expires_at <= v_now;
  SELECT h.count INTO v_count FROM @schema@.holds h WHERE h.key = p_key AND h.owner = p_owner;
  v_result := coalesce(v_count - 1, -1);
  IF v_result > 0 THEN
    -- Holds remain: the queue and the fence are not touched.
    UPDATE @schema@.holds h SET count = v_result,
        -- p_lease_ms 0: a hard lease, whose end a partial release must not move.
        expires_at = CASE WHEN p_lease_ms > 0
          THEN v_now + p_lease_ms * interval '1 millisecond' ELSE h.expires_at END
      WHERE h.key = p_key AND h.owner = p_owner;
    INSERT INTO @schema@.latches AS l (id, result, expires_at)
      VALUES (p_latch, v_result, v_now + p_latch_ms * interval '1 millisecond')
      ON CONFLICT (id) DO UPDATE SET result = excluded.result, expires_at = excluded.expires_at;
    RETURN v_result;
  END IF;
  DELETE FROM @schema@.fair_queue q WHERE q.key = p_key AND q.owner = p_owner;
  IF v_result = 0 THEN
    DELETE FROM @schema@.holds WHERE key = p_key;
  END IF;
  -- This owner is done: its answer is kept under its own name instead of p_latch, so that
  -- fair_acquire refuses a request of it that arrives later, and a retry finds it here.
  INSERT INTO @schema@.latches AS l (id, result, expires_at)
    VALUES ('gone:' || p_owner, v_result, v_now + p_latch_ms * interval '1 millisecond')
    ON CONFLICT (id) DO UPDATE SET expires_at = excluded.expires_at;
  IF v_result = 0 AND NOT @schema@.fair_grant_next(p_key, p_fence, p_grant_ms, v_now) THEN
    PERFORM pg_notify(p_channel, 'released');
  END IF;
  PERFORM @schema@.fair_sweep(v_now);
  IF random() < 0.125 THEN
    PERFORM @schema@.sweep(v_now);
  END IF;
  RETURN v_result;
END
$body$;

-- Undoes a re-entry whose caller was cancelled before it saw the reply, if its marker says it
-- ran (lua/fair/undo_reentry.lua); a freed lock goes to the first live waiter. Returns 1 when
-- undone, else 0.
CREATE OR REPLACE FUNCTION @schema@.fair_undo_reentry(p_key text, p_fence text, p_marker text,
  p_channel text, p_owner text, p_grant_ms bigint) RETURNS bigint
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
    IF NOT @schema@.fair_grant_next(p_key, p_fence, p_grant_ms, v_now) THEN
      PERFORM pg_notify(p_channel, 'released');
    END IF;
  END IF;
  RETURN 1;
END
$body$;
