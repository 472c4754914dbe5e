-- Grants on the tables added since version 2. Runs last in the migration.
--
-- A schema migrated from version 2 by its owner has roles granted its tables then (`GRANT ...
-- ON ALL TABLES` covers only the tables that exist when it runs): without a grant on the new
-- tables (`long_names`, `fair_queue`, `plain_locks`), their long names, fair locks, plain locks
-- and every op's sweep would be refused. So every role that may use `holds` gets the same on each. Idempotent; the
-- tables are found through their row types, so the schema's name never has to be written as
-- a string literal.
DO $body$
DECLARE
  v_holds oid := (SELECT t.typrelid FROM pg_catalog.pg_type t
                  WHERE t.oid = pg_catalog.pg_typeof(NULL::@schema@.holds));
  v_new oid[] := ARRAY[
    (SELECT t.typrelid FROM pg_catalog.pg_type t
      WHERE t.oid = pg_catalog.pg_typeof(NULL::@schema@.long_names)),
    (SELECT t.typrelid FROM pg_catalog.pg_type t
      WHERE t.oid = pg_catalog.pg_typeof(NULL::@schema@.fair_queue)),
    (SELECT t.typrelid FROM pg_catalog.pg_type t
      WHERE t.oid = pg_catalog.pg_typeof(NULL::@schema@.plain_locks))];
  v_table oid;
  v_grant record;
BEGIN
  FOREACH v_table IN ARRAY v_new LOOP
    FOR v_grant IN
      SELECT DISTINCT a.grantee, a.privilege_type
        FROM pg_catalog.pg_class c, LATERAL pg_catalog.aclexplode(c.relacl) a
        WHERE c.oid = v_holds AND a.grantee <> c.relowner
          AND a.privilege_type IN ('SELECT', 'INSERT', 'UPDATE', 'DELETE')
    LOOP
      EXECUTE pg_catalog.format('GRANT %s ON TABLE %I.%I TO %s', v_grant.privilege_type,
        (SELECT n.nspname FROM pg_catalog.pg_class c
           JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = v_table),
        (SELECT c.relname FROM pg_catalog.pg_class c WHERE c.oid = v_table),
        CASE WHEN v_grant.grantee = 0 THEN 'PUBLIC'
          ELSE pg_catalog.quote_ident(pg_catalog.pg_get_userbyid(v_grant.grantee)) END);
    END LOOP;
  END LOOP;
END
$body$;
