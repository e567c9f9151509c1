#!/usr/bin/env bash
# Loopback HTTP benchmark: the bare axum router against the same router
# behind the layer and behind tower_governor (and, with REFERENCE=1, the
# bare router sending the headers as static text). The servers run side by
# side for the whole benchmark, all pinned to core 0 (only the one under
# load is busy); wrk, pinned to core 1, loads them in turn, round after
# round, in short runs. Short interleaved runs keep a burst of other work on
# this shared machine from landing on one server and not its peers: each
# round's ratio compares runs seconds apart. Prints each round's requests
# per second, its ratios to the bare router and the median ratios.
#
# Usage: bash bench/http.sh [ROUNDS] [SECONDS]   (needs wrk: apt-get install wrk)
# OURS=ours-noheaders loads our layer with the RateLimit headers off instead.
# REFERENCE=1 also loads the bare router sending two RateLimit headers as
# long as ours (bench_server's bare-headers) as static text: what sending
# them costs any server, layer or not.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-25}
seconds=${2:-2}
command -v wrk >/dev/null || { echo "wrk is needed: apt-get install wrk" >&2; exit 1; }
cargo build --release -q --example bench_server --features axum
server=target/release/examples/bench_server
ours=${OURS:-ours}
modes=(bare "$ours" governor)
reference=${REFERENCE:-0}
if [[ $reference == 1 ]]; then modes+=(bare-headers); fi
count=${#modes[@]}
declare -A port=([bare]=3191 [$ours]=3192 [governor]=3193 [bare-headers]=3194)

pids=()
trap 'kill "${pids[@]}" 2>/dev/null || true' EXIT
for mode in "${modes[@]}"; do
  taskset -c 0 "$server" "$mode" "${port[$mode]}" &
  pids+=($!)
done
for mode in "${modes[@]}"; do
  for _ in $(seq 50); do (exec 3<>/dev/tcp/127.0.0.1/"${port[$mode]}") 2>/dev/null && break; sleep 0.1; done
done

rps() {  # mode -> requests/s
  taskset -c 1 wrk -t1 -c32 -d"${seconds}s" "http://127.0.0.1:${port[$1]}/" |
    awk '/Requests\/sec/ {print $2}'
}

median() { printf '%s\n' "$@" | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

# One untimed run each: connections, caches and the page cache warm up.
for mode in "${modes[@]}"; do rps "$mode" >/dev/null; done

ratio() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.3f", a / b}'; }

ours_ratios=()
governor_ratios=()
reference_ratios=()
for i in $(seq "$rounds"); do
  # A rotating order, so that no server always runs first in its round.
  declare -A got=()
  for offset in $(seq 0 $((count - 1))); do
    mode=${modes[$(((i + offset) % count))]}
    got[$mode]=$(rps "$mode")
  done
  ours_ratio=$(ratio "${got[$ours]}" "${got[bare]}")
  governor_ratio=$(ratio "${got[governor]}" "${got[bare]}")
  ours_ratios+=("$ours_ratio")
  governor_ratios+=("$governor_ratio")
  line="round $i (req/s): bare ${got[bare]}, ours ${got[$ours]} ($ours_ratio), tower_governor ${got[governor]} ($governor_ratio)"
  if [[ $reference == 1 ]]; then
    reference_ratios+=("$(ratio "${got[bare-headers]}" "${got[bare]}")")
    line+=", bare with static headers ${got[bare-headers]} (${reference_ratios[-1]})"
  fi
  echo "$line"
done
summary="median over $rounds rounds: ours/bare $(median "${ours_ratios[@]}"), tower_governor/bare $(median "${governor_ratios[@]}")"
if [[ $reference == 1 ]]; then
  summary+=", bare with static headers/bare $(median "${reference_ratios[@]}")"
fi
echo "$summary"
