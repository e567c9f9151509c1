#!/usr/bin/env bash
# Every benchmark, in one run: the in-memory store against governor, the
# layer on an axum router against tower_governor, the Redis scripts against a
# minimal script, the loopback HTTP run (RateLimit headers on, beside the
# bare router sending them as static text, then off),
# and instruction counts under
# callgrind (in process, and in redis-server per script call). Redis benches
# start their own redis-server; the HTTP run needs wrk, the counts valgrind
# (and python3 to drive redis-server). Results print as tables with ratios.
#
# Usage: bash bench/all.sh [HTTP_ROUNDS] [HTTP_SECONDS]
set -euo pipefail
cd "$(dirname "$0")/.."
# Only the features each bench needs: `metrics` and `tracing` would add
# their own cost (a label allocated per decision) to every figure.
cargo bench --no-run --features axum,redis -q
cargo bench --bench store 2>&1 | sed -n '/ns per operation/,$p'
cargo bench --features axum --bench layer 2>&1 | sed -n '/ns per operation/,$p'
cargo bench --features redis --bench redis 2>&1 | grep -vE '^\s*(Compiling|Finished|Running)'
REFERENCE=1 bash bench/http.sh "${1:-25}" "${2:-2}"
OURS=ours-noheaders bash bench/http.sh "${1:-25}" "${2:-2}"
bash bench/callgrind.sh
bash bench/redis-callgrind.sh
