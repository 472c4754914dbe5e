#!/usr/bin/env bash
# Server time of single scripts, old and new side by side: each script is SCRIPT LOADed into
# one throw-away redis-server and driven with redis-benchmark (EVALSHA, fresh random keys,
# pipelined), `usec_per_call` read from INFO commandstats; TRIALS rounds interleaved, the
# minimum and median of each reported (the minimum is the least disturbed by other load).
#
#   perf/script_cost.sh [TRIALS] [REV]    REV: the git revision of the "old" scripts (HEAD)
#
# A tool for reading script changes (issue 31); examples/server_cost measures through the API.
set -euo pipefail
trials="${1:-7}"
rev="${2:-HEAD}"
root="$(cd "$(dirname "$0")/.." && pwd)"
lua="$root/dlock-runtime/lua"
server="${REDIS_SERVER_BIN:-redis-server}"
cli="${REDIS_CLI_BIN:-redis-cli}"
port=$((30000 + RANDOM % 20000))
dir="$(mktemp -d)"
"$server" --port "$port" --bind 127.0.0.1 --save '' --appendonly no --dir "$dir" --daemonize yes >/dev/null
trap '"$cli" -p "$port" shutdown nosave >/dev/null 2>&1 || true; rm -rf "$dir"' EXIT
for _ in $(seq 50); do "$cli" -p "$port" ping >/dev/null 2>&1 && break; sleep 0.1; done

# name | script path under lua/ | numkeys and keys and args (__rand_int__: fresh per call)
# [| the script and arguments of a REV from before issue 39's cut, when re-entries had no
# script of their own and a top-level acquire carried the re-entry marker and flags].
# A fresh counter is what a first acquire of a name met when each name had its own (before
# the counters were one per cluster slot); a shared one is what it meets now.
old_plain='|lock/acquire.lua|4 {k:__rand_int__} {k}:fence {k}:m {k}:done:__rand_int__ 600000 owner 5000 0 86400000 0'
old_redisson='|redisson/lock_acquire.lua|2 k:__rand_int__ m:x 600000 owner 5000 0 0'
cases=(
  "plain acquire, a fresh counter|lock/acquire.lua|3 {k:__rand_int__} {k}:fence:__rand_int__ {k}:done:__rand_int__ 600000 owner|lock/acquire.lua|4 {k:__rand_int__} {k}:fence:__rand_int__ {k}:m {k}:done:__rand_int__ 600000 owner 5000 0 86400000 0"
  "plain acquire, a shared counter|lock/acquire.lua|3 {k:__rand_int__} {k}:fence {k}:done:__rand_int__ 600000 owner${old_plain}"
  "plain re-entry of a free key|lock/reenter.lua|4 {k:__rand_int__} {k}:fence {k}:m {k}:done:__rand_int__ 600000 owner 5000 86400000 0|lock/acquire.lua|4 {k:__rand_int__} {k}:fence {k}:m {k}:done:__rand_int__ 600000 owner 5000 1 86400000 0"
  "plain release (held nothing)|lock/release.lua|4 {k:__rand_int__} {k}:chan {k}:latch:__rand_int__ {k}:done:__rand_int__ owner 600000 5000"
  "Redisson-kind acquire|redisson/lock_acquire.lua|1 k:__rand_int__ 600000 owner${old_redisson}"
  "Redisson-kind fenced acquire|redisson/fenced_lock_acquire.lua|3 k:__rand_int__ t:__rand_int__ m:x 600000 owner 5000 0 0"
)
[ -n "${ONLY:-}" ] && { mapfile -t cases < <(printf '%s\n' "${cases[@]}" | grep -- "$ONLY"); }

usec() {
  "$cli" -p "$port" FLUSHALL >/dev/null
  "$cli" -p "$port" CONFIG RESETSTAT >/dev/null
  # shellcheck disable=SC2086
  redis-benchmark -p "$port" -n "${CALLS:-100000}" -c 8 -P 16 -r 100000000 -q EVALSHA "$1" $2 >/dev/null
  "$cli" -p "$port" INFO commandstats | grep '^cmdstat_evalsha:' | sed 's/.*usec_per_call=\([0-9.]*\).*/\1/'
}
stats() { sort -n | awk '{a[NR]=$1} END {printf "min %5.2f  median %5.2f", a[1], a[int((NR+1)/2)]}'; }

for c in "${cases[@]}"; do
  IFS='|' read -r name path args old_path old_args <<<"$c"
  if git -C "$root" cat-file -e "$rev:dlock-runtime/lua/lock/reenter.lua" 2>/dev/null; then
    old_path='' old_args=''
  fi
  old_sha="$("$cli" -p "$port" SCRIPT LOAD "$(git -C "$root" show "$rev:dlock-runtime/lua/${old_path:-$path}")")"
  new_sha="$("$cli" -p "$port" SCRIPT LOAD "$(cat "$lua/$path")")"
  old=() new=()
  for _ in $(seq "$trials"); do
    old+=("$(usec "$old_sha" "${old_args:-$args}")")
    new+=("$(usec "$new_sha" "$args")")
  done
  printf '%-32s old %s   new %s  (us per call)\n' "$name" \
    "$(printf '%s\n' "${old[@]}" | stats)" "$(printf '%s\n' "${new[@]}" | stats)"
done
