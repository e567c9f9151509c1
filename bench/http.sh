#!/usr/bin/env bash
# Loopback HTTP benchmark: the bare axum router against the same router
# behind the layer and behind tower_governor, in rounds (bare, ours,
# tower_governor; PAIRS times), with the
# server pinned to core 0 and wrk to core 1. Prints each pair's ratio
# ours/bare in requests per second and the median.
#
# Usage: bash bench/http.sh [PAIRS] [SECONDS]   (needs wrk: apt-get install wrk)
set -euo pipefail
cd "$(dirname "$0")/.."
pairs=${1:-5}
seconds=${2:-5}
command -v wrk >/dev/null || { echo "wrk is needed: apt-get install wrk" >&2; exit 1; }
cargo build --release -q --example bench_server --features axum
server=target/release/examples/bench_server
port=3191

rps() {  # mode -> requests/s
  taskset -c 0 "$server" "$1" "$port" &
  local pid=$!
  for _ in $(seq 50); do (exec 3<>/dev/tcp/127.0.0.1/$port) 2>/dev/null && break; sleep 0.1; done
  local out
  out=$(taskset -c 1 wrk -t1 -c32 -d"${seconds}s" "http://127.0.0.1:$port/")
  kill "$pid"; wait "$pid" 2>/dev/null || true
  echo "$out" | awk '/Requests\/sec/ {print $2}'
}

median() { printf '%s\n' "$@" | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

ours_ratios=()
governor_ratios=()
for i in $(seq "$pairs"); do
  bare=$(rps bare)
  ours=$(rps ours)
  governor=$(rps governor)
  ours_ratio=$(awk -v o="$ours" -v b="$bare" 'BEGIN {printf "%.3f", o / b}')
  governor_ratio=$(awk -v g="$governor" -v b="$bare" 'BEGIN {printf "%.3f", g / b}')
  ours_ratios+=("$ours_ratio")
  governor_ratios+=("$governor_ratio")
  echo "round $i: bare $bare, ours $ours ($ours_ratio), tower_governor $governor ($governor_ratio) req/s"
done
echo "median over $pairs rounds: ours/bare $(median "${ours_ratios[@]}"), tower_governor/bare $(median "${governor_ratios[@]}")"
