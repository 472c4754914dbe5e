#!/usr/bin/env bash
# The PostgreSQL store's plain release as it is (one call of the PL/pgSQL function
# plain_release) against its usual path written as one SQL statement (the row's UPDATE, the
# owner's gone mark in a data-modifying WITH, the NOTIFY and synchronous_commit in its select
# list), each after the same plain_acquire call, under pgbench with one client on 100 keys.
#
#   perf/pg_statement_vs_function.sh [ROUNDS] [SECS]     (defaults 3 and 8)
#
# Each round runs both, interleaved, sent unnamed (`-M extended`, how the store sends every
# call: a transaction-mode pooler keeps no named prepared statement) and prepared (`-M
# prepared`); then the mean execution time of each statement (pg_stat_statements, planning
# left out), with the one-statement release also run without its sweep, with and without the
# gone mark: what that row costs. The store's docs (src/stores.rs, "Performance") give what
# `perf/pg_statement_vs_function.sh 3 6` printed.
#
# Needs PostgreSQL's server binaries (PG_BIN_DIR, else `pg_config --bindir`, else the newest
# /usr/lib/postgresql/*/bin) with pg_stat_statements, and pgbench and psql. As root, the server
# runs as the `postgres` user.
set -euo pipefail
rounds="${1:-3}"
secs="${2:-8}"
root="$(cd "$(dirname "$0")/.." && pwd)"
if [ -n "${PG_BIN_DIR:-}" ]; then
  bin="$PG_BIN_DIR"
else
  bin="$(pg_config --bindir 2>/dev/null || true)"
  [ -x "$bin/initdb" ] || bin="$(dirname "$(printf '%s\n' /usr/lib/postgresql/*/bin/initdb | sort -V | tail -n 1)")"
fi
[ -x "$bin/initdb" ] || { echo "no initdb in $bin (set PG_BIN_DIR)" >&2; exit 2; }
export PATH="$bin:$PATH"
work="$(mktemp -d)"
stop() { "${as_owner[@]}" pg_ctl -D "$work/data" stop -m fast >/dev/null 2>&1 || true; rm -rf "$work"; }
as_owner=(env)
trap stop EXIT
if [ "$(id -u)" -eq 0 ]; then
  chown postgres "$work"
  as_owner=(setpriv --reuid=postgres --regid=postgres --init-groups env "PATH=$PATH")
fi
port=$((30000 + RANDOM % 20000))
"${as_owner[@]}" initdb -D "$work/data" -A trust -U postgres >/dev/null
"${as_owner[@]}" pg_ctl -D "$work/data" -l "$work/log" -w start -o "-p $port -k $work \
  -c listen_addresses=127.0.0.1 -c fsync=off -c shared_preload_libraries=pg_stat_statements \
  -c pg_stat_statements.track=top" >/dev/null
export PGHOST=127.0.0.1 PGPORT=$port PGUSER=postgres PGDATABASE=postgres
export PGOPTIONS='-c client_min_messages=warning'
psql -qc "CREATE EXTENSION pg_stat_statements"
# The store's schema as `dlock`, the files in the order dlock-runtime/src/store/postgres/schema.rs
# applies them.
sql="$root/dlock-runtime/src/store/postgres/sql"
{
  echo "CREATE SCHEMA dlock;"
  for f in schema names common plain semaphore rw fair grants; do cat "$sql/$f.sql"; done
} | sed 's/@schema@/dlock/g' | psql -q -v ON_ERROR_STOP=1 >/dev/null

# Each release tagged with a comment, so pg_stat_statements' rows say which is which.
acquire="SELECT held, detail FROM dlock.plain_acquire('k' || :k, 'f' || :k, NULL, 30000, 'o' || :o, 0, false);"
head='\set k random(1, 100)
\set o random(1, 1000000000000)'
write() { printf '%s\n%s\n%s\n' "$head" "$acquire" "$2" >"$work/$1.sql"; }
write function "/* function */ SELECT remaining, listeners FROM dlock.plain_release('k' || :k, 'ch', 'l' || :o, 'o' || :o, 30000, 60000);"
# The release's usual path (the owner's only hold, no partial release before it) in one
# statement; the sweep one call in eight, as the function does.
freed="WITH freed AS (UPDATE dlock.plain_locks l SET owner = NULL, count = 0, expires_at = clock_timestamp() FROM (SELECT pg_advisory_xact_lock(hashtextextended('k' || :k, 0))) a WHERE l.key = 'k' || :k AND l.owner = 'o' || :o AND l.count = 1 AND l.expires_at > clock_timestamp() AND l.latched_until <= clock_timestamp() RETURNING l.expires_at AS now)"
gone=", gone AS (INSERT INTO dlock.latches AS g (id, result, expires_at, request) SELECT 'gone:' || 'o' || :o, 0, f.now + 60000 * interval '1 millisecond', 'l' || :o FROM freed f ON CONFLICT (id) DO UPDATE SET result = CASE WHEN g.expires_at > clock_timestamp() THEN g.result ELSE excluded.result END, request = CASE WHEN g.expires_at > clock_timestamp() THEN g.request ELSE excluded.request END, expires_at = excluded.expires_at)"
notify=" SELECT set_config('synchronous_commit', 'off', true), pg_notify('ch', 'released')"
sweep=", CASE WHEN random() < 0.125 THEN dlock.sweep(f.now) END"
write statement "/* statement */ $freed$gone$notify$sweep FROM freed f;"
# The gone mark's own cost: the statement with and without it, both without the sweep (whose
# occasional 0.3-0.8 ms would swamp a 20 µs difference).
write no_sweep "/* statement, no sweep */ $freed$gone$notify FROM freed f;"
write no_sweep_no_gone_mark "/* statement, no sweep, no gone mark */ $freed$notify FROM freed f;"

latency() {
  local out
  out="$(pgbench -n -M "$1" -c 1 -T "$secs" -f "$work/$2.sql" 2>&1)" || { echo "pgbench $2 failed: $out" >&2; exit 1; }
  sed -n 's/^latency average = //p' <<<"$out"
}
for script in function statement no_sweep no_sweep_no_gone_mark; do latency extended "$script" >/dev/null; done
psql -qAtc "SELECT pg_stat_statements_reset()" >/dev/null
echo "acquire + release per cycle (pgbench latency average, one client, ${secs} s each):"
for round in $(seq "$rounds"); do
  for mode in extended prepared; do
    f="$(latency "$mode" function)"
    st="$(latency "$mode" statement)"
    echo "  round $round, $mode: function $f, one statement $st"
  done
  latency prepared no_sweep >/dev/null
  latency prepared no_sweep_no_gone_mark >/dev/null
done
echo "mean execution time per statement (planning left out):"
psql -qAtc "SELECT round((mean_exec_time * 1000)::numeric, 1) || ' us, ' || calls || ' calls: ' ||
  left(regexp_replace(query, '\s+', ' ', 'g'), 48) FROM pg_stat_statements WHERE calls > 100
  ORDER BY calls DESC"
