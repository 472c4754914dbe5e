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

-- A schema migrated from version 2 by its owner has roles granted its tables then (`GRANT ...
-- ON ALL TABLES` covers only the tables that exist when it runs): without a grant on this
-- table, their long names and every op's sweep would be refused. So every role that may use
-- `holds` gets the same on this table. Idempotent; the tables are found through their row
-- types, so the schema's name never has to be written as a string literal.
DO $body$
DECLARE
  v_holds oid := (SELECT t.typrelid FROM pg_catalog.pg_type t
                  WHERE t.oid = pg_catalog.pg_typeof(NULL::@schema@.holds));
  v_names oid := (SELECT t.typrelid FROM pg_catalog.pg_type t
                  WHERE t.oid = pg_catalog.pg_typeof(NULL::@schema@.long_names));
  v_grant record;
BEGIN
  FOR v_grant IN
    SELECT DISTINCT a.grantee, a.privilege_type
      FROM pg_catalog.pg_class c, LATERAL pg_catalog.aclexplode(c.relacl) a
      WHERE c.oid = v_holds AND a.grantee <> c.relowner
        AND a.privilege_type IN ('SELECT', 'INSERT', 'UPDATE', 'DELETE')
  LOOP
    EXECUTE pg_catalog.format('GRANT %s ON TABLE %I.%I TO %s', v_grant.privilege_type,
      (SELECT n.nspname FROM pg_catalog.pg_class c
         JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = v_names),
      (SELECT c.relname FROM pg_catalog.pg_class c WHERE c.oid = v_names),
      CASE WHEN v_grant.grantee = 0 THEN 'PUBLIC'
        ELSE pg_catalog.quote_ident(pg_catalog.pg_get_userbyid(v_grant.grantee)) END);
  END LOOP;
END
$body$;
