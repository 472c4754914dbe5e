-- Lock keys stored hashed (store/postgres/names.rs): a key longer than 512 bytes once NUL is
-- written `%00` is stored everywhere (holds, fences, permits, intents) as `sha256:<64 hex>`.
-- This table keeps the whole text of each such lock key for whoever reads the tables (the
-- inspector): `full_key` is `<prefix>{<name>}<kind suffix>`, the name percent-escaped (`%25`
-- for `%`, `%7B` `{`, `%7D` `}`, `%00` NUL), and `key` is its hash, the value of `holds.key`.
-- Written only for hashed keys, by each acquire of one (remember_name, just before it), and
-- swept a minute after the last acquire once the key has no holds row left (sweep()).
CREATE TABLE IF NOT EXISTS @schema@.long_names (
  key text PRIMARY KEY,
  full_key text NOT NULL,
  written_at timestamptz NOT NULL
);
CREATE INDEX IF NOT EXISTS long_names_written_at ON @schema@.long_names (written_at);

-- Keeps p_full as the whole text of the hashed key p_key. Its time moves on each call, so
-- the sweep leaves it to the acquire that follows.
CREATE OR REPLACE FUNCTION @schema@.remember_name(p_key text, p_full text) RETURNS void
LANGUAGE sql SECURITY INVOKER SET search_path = pg_catalog, pg_temp
AS $body$
  INSERT INTO @schema@.long_names AS n (key, full_key, written_at)
    VALUES (p_key, p_full, clock_timestamp())
    ON CONFLICT (key) DO UPDATE SET written_at = excluded.written_at
$body$;
