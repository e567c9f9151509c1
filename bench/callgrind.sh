#!/usr/bin/env bash
# Instructions per decision (in-memory store) and per request (axum router),
# counted by callgrind: repeatable whatever else the machine is doing. Each
# workload first touches every key once (clocks calibrate, maps fill), then
# runs N calls inside one function, the only one counted; the total over N
# is the per-call cost. Prints each figure and its ratio to the peer in the
# same run.
#
# Usage: bash bench/callgrind.sh [N]   (needs valgrind: apt-get install valgrind)
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:-100000}
command -v valgrind >/dev/null || { echo "valgrind is needed: apt-get install valgrind" >&2; exit 1; }
cargo build --release -q --example instructions --features axum
bin=target/release/examples/instructions
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

per_call() {  # workload [keys] -> instructions per call
  if ! valgrind --tool=callgrind --toggle-collect='*instructions::measured*' \
    --callgrind-out-file="$out/cg" "$bin" "$1" "$n" "${2:-1}" >"$out/log" 2>&1; then
    echo "callgrind failed on $1:" >&2; tail -5 "$out/log" >&2; exit 1
  fi
  awk -v n="$n" '/^(summary|totals):/ {printf "%d\n", $2 / n; exit}' "$out/cg"
}

report() {  # title peer-name peer-value then name=value pairs
  local title=$1 peer=$2 base=$3
  shift 3
  echo "$title"
  printf '  %-22s %6d\n' "$peer" "$base"
  for pair in "$@"; do
    printf '  %-22s %6d  %.2fx\n' "${pair%%=*}" "${pair#*=}" "$(awk -v a="${pair#*=}" -v b="$base" 'BEGIN {print a / b}')"
  done
}

# With 100,000 keys the figure is for decisions about keys already held,
# spread over the whole map.
for keys in 1 100000; do
  governor=$(per_call governor "$keys")
  report "instructions per decision, $keys key(s)" "governor check_key" "$governor" \
    "ours counter=$(per_call counter "$keys")" \
    "ours counter, 2 limits=$(per_call counter2 "$keys")" \
    "ours fixed=$(per_call fixed "$keys")" \
    "ours log limit 100=$(per_call log "$keys")"
done

# Over 100k keys the time differs more than the instructions: the cost is in
# cache misses. callgrind's cache simulation with a 512 KiB last level (an
# L2's size) counts the data reads that miss it, per decision.
misses() {  # workload -> simulated last-level read misses per decision, 100k keys
  if ! valgrind --tool=callgrind --cache-sim=yes --LL=524288,8,64 \
    --toggle-collect='*instructions::measured*' --callgrind-out-file="$out/cgm" \
    "$bin" "$1" "$n" 100000 >"$out/log" 2>&1; then
    echo "callgrind failed on $1:" >&2; tail -5 "$out/log" >&2; exit 1
  fi
  awk -v n="$n" '/^events:/ {for (i = 2; i <= NF; i++) if ($i == "DLmr") col = i}
    /^totals:/ {printf "%.2f\n", $col / n; exit}' "$out/cgm"
}
echo "data reads missing a 512 KiB last-level cache, per decision, 100000 keys (simulated)"
printf '  %-22s %6s\n' "governor check_key" "$(misses governor)"
printf '  %-22s %6s\n' "ours counter" "$(misses counter)"
printf '  %-22s %6s\n' "ours fixed" "$(misses fixed)"
printf '  %-22s %6s\n' "ours log limit 100" "$(misses log)"

bare=$(per_call bare)
governor=$(per_call governor-layer)
on=$(per_call ours-on)
off=$(per_call ours-off)
wrapped_on=$(per_call ours-wrapped-on)
one_off=$(per_call ours-one-off)
governor_headers=$(per_call governor-layer-headers)
echo "instructions per request through an axum router (peer IP key, two limits unless said)"
printf '  %-30s %6d\n' "bare router" "$bare"
for pair in "tower_governor=$governor" "ours, headers on=$on" "ours, headers off=$off" \
  "ours, wrapped body, on=$wrapped_on" "ours, one limit, off=$one_off"; do
  value=${pair#*=}
  printf '  %-30s %6d  added %5d  %.2fx tower_governor'"'"'s added\n' "${pair%%=*}" "$value" $((value - bare)) \
    "$(awk -v a=$((value - bare)) -v b=$((governor - bare)) 'BEGIN {print a / b}')"
done
# For context, not the target's peer: tower_governor writing its own two
# headers (x-ratelimit-limit, x-ratelimit-remaining) on every response.
printf '  %-30s %6d  added %5d\n' "tower_governor, its headers" "$governor_headers" \
  $((governor_headers - bare))
for pair in "ours, headers on=$on" "ours, wrapped body, on=$wrapped_on"; do
  value=${pair#*=}
  printf '  %-30s %.2fx what tower_governor with its headers adds\n' "${pair%%=*}" \
    "$(awk -v a=$((value - bare)) -v b=$((governor_headers - bare)) 'BEGIN {print a / b}')"
done
