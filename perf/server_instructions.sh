#!/usr/bin/env bash
# Instructions the Redis server spends per lock cycle (acquire + release) for each ceiling load
# of examples/server_cost: dlock's plain and RLock-kind scripts beside Redisson's own RFencedLock
# and RLock scripts, sent the same way (pipelined EVALSHA, keys reused, so memory stays level).
#
#   perf/server_instructions.sh [SHORT_SECS] [LONG_SECS]     (defaults 3 and 10)
#
# Why instructions: on a shared 2-core VM the server's time per cycle moved by 0.7-1.7x from one
# round to the next (issue 39), far more than the gaps being judged; callgrind's count is the
# same whatever else the machine does. Each load runs twice against a fresh redis-server under
# callgrind, for SHORT_SECS and LONG_SECS; the difference of the two totals over the difference
# of the cycles done leaves out everything both runs share (start-up, connections, library and
# script loads, the per-call rows). Cache misses are not counted: this is the scripts' work,
# not their time.
#
# Needs valgrind, redis-server and redis-cli, and the example built with
# `cargo build --release --example server_cost` (SERVER_COST: its path, else target/release).
set -euo pipefail
short="${1:-3}"
long="${2:-10}"
root="$(cd "$(dirname "$0")/.." && pwd)"
bin="${SERVER_COST:-${CARGO_TARGET_DIR:-$root/target}/release/examples/server_cost}"
server="${REDIS_SERVER_BIN:-redis-server}"
cli="${REDIS_CLI_BIN:-redis-cli}"
[ -x "$bin" ] || { echo "build it first: cargo build --release --example server_cost ($bin)" >&2; exit 2; }
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

# One run: prints "<cycles> <instructions>".
run() {
  local load="$1" secs="$2" dir="$work/$RANDOM" port=$((30000 + RANDOM % 20000))
  mkdir -p "$dir"
  valgrind --tool=callgrind --callgrind-out-file="$dir/callgrind.out" "$server" --port "$port" \
    --bind 127.0.0.1 --save '' --appendonly no --dir "$dir" >"$dir/valgrind.log" 2>&1 &
  local vg=$!
  for _ in $(seq 300); do "$cli" -p "$port" ping >/dev/null 2>&1 && break; sleep 0.2; done
  REDIS_URL="redis://127.0.0.1:$port" "$bin" --only SET --calls 64 --tasks 4 --ceiling-secs "$secs" \
    --ceiling-only "$load" --api-tasks 0 --workers 2 --depth 32 >"$dir/out.txt" 2>"$dir/err.txt"
  "$cli" -p "$port" shutdown nosave >/dev/null 2>&1 || kill "$vg" 2>/dev/null || true
  wait "$vg" || true
  local cycles ir
  cycles="$(sed -n 's/.*(\([0-9]*\) cycles).*/\1/p' "$dir/err.txt" | head -n 1)"
  ir="$(sed -n 's/.*Collected : \([0-9]*\).*/\1/p' "$dir/valgrind.log")"
  [ -n "$cycles" ] && [ -n "$ir" ] || { echo "run of '$load' failed: $dir" >&2; cat "$dir/err.txt" >&2; exit 1; }
  echo "$cycles $ir"
}

loads=("dlock plain" "Redisson's own RFencedLock" "dlock RLock kind" "Redisson's own RLock")
per_cycle=()
for load in "${loads[@]}"; do
  # A failed run must stop the script: `read` of an empty line would go on with zeros.
  first="$(run "$load" "$short")" || exit 1
  second="$(run "$load" "$long")" || exit 1
  read -r c1 i1 <<<"$first"
  read -r c2 i2 <<<"$second"
  [ "$c2" -gt "$c1" ] || { echo "the long run of '$load' did no more cycles than the short one" >&2; exit 1; }
  per_cycle+=($(( (i2 - i1) / (c2 - c1) )))
  printf '%-28s %8d instructions per cycle (%d and %d cycles)\n' "$load" "${per_cycle[-1]}" "$c1" "$c2"
done
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.3f", a / b }'; }
echo "dlock plain / RFencedLock: $(ratio "${per_cycle[0]}" "${per_cycle[1]}")x (target 1.25x)"
echo "dlock RLock kind / RLock: $(ratio "${per_cycle[2]}" "${per_cycle[3]}")x (target 1.15x)"
