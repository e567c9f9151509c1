#!/usr/bin/env bash
# Instructions redis-server spends per script call, counted by callgrind:
# the scripts in src/store/redis against the minimal GET/GET/INCR/PEXPIRE
# script of benches/redis.rs. A private redis-server runs under valgrind;
# bench/redis_load.py first calls each script 2,000 times untimed (keys
# exist, the script is cached), then instrumentation is switched on for N
# calls. The figure covers all the server's work for a call: reading and
# parsing the command, the script, and writing the reply. Time comes from
# the client here, except in the last row, which reads Redis's TIME as the
# store does by default.
#
# Usage: bash bench/redis-callgrind.sh [N]   (needs valgrind, python3, redis-server)
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:-20000}
port=6411
for tool in valgrind callgrind_control python3 redis-server redis-cli; do
  command -v "$tool" >/dev/null || { echo "$tool is needed" >&2; exit 1; }
done
cargo build --release -q --features redis --example redis_script
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

per_call() {  # which -> instructions per call
  valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file="$out/cg" \
    redis-server --port "$port" --save '' --appendonly no >"$out/log" 2>&1 &
  local pid=$!
  for _ in $(seq 100); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.2; done
  python3 bench/redis_load.py "$port" "$1" 2000
  callgrind_control -i on "$pid" >/dev/null 2>&1
  python3 bench/redis_load.py "$port" "$1" "$n"
  callgrind_control -i off "$pid" >/dev/null 2>&1
  redis-cli -p "$port" shutdown nosave >/dev/null 2>&1 || true
  wait "$pid" || true
  awk -v n="$n" '/^totals:/ {printf "%d\n", $2 / n; exit}' "$out/cg"
}

baseline=$(per_call baseline)
echo "redis-server instructions per script call ($n calls, time from the client)"
printf '  %-34s %7d\n' "baseline GET/GET/INCR/PEXPIRE" "$baseline"
for pair in "ours counter, 2 limits=counter" "ours counter, 1 limit=counter1" \
  "ours counter, 2 limits, small counts²=counter-small" "ours log, 2 limits (100, 1000)³=log" \
  "ours log, steady clients⁴=log-steady" "ours log, limit 100, full⁵=log-100" \
  "ours token bucket, 1 limit=bucket" "ours token bucket, 2 limits=bucket2" \
  "ours counter, 2 limits, TIME¹=counter-time"; do
  value=$(per_call "${pair#*=}")
  printf '  %-34s %7d  %.2fx\n' "${pair%%=*}" "$value" "$(awk -v a="$value" -v b="$baseline" 'BEGIN {print a / b}')"
done
echo "  ¹ the time read from Redis's TIME, as by default; windows of 1 min and 1 h"
echo "  ² limits of 30 a second and 100 a minute"
echo "  ³ 100 a millisecond and 1,000 in 10 ms over 1,000 keys, which expire between calls under valgrind: fresh keys"
echo "  ⁴ 500 in 5 s and 5,000 in 1,000 s over 10 keys, 5 ms apart: 100 stamps in the 5 s window, 5,000 in the key"
echo "  ⁵ 100 in 4 s over 10 keys, 5 ms apart: one limit of 100, 80 stamps in the window and the key"
