#!/usr/bin/env bash
# Every benchmark, in one run: the in-memory store against governor, the
# layer on an axum router against tower_governor, the Redis scripts against a
# minimal script, and the loopback HTTP run. Redis benches start their own
# redis-server; the HTTP run needs wrk. Results print as tables with ratios.
#
# Usage: bash bench/all.sh [HTTP_ROUNDS] [HTTP_SECONDS]
set -euo pipefail
cd "$(dirname "$0")/.."
cargo bench --no-run --all-features -q
cargo bench --all-features --bench store 2>&1 | sed -n '/ns per operation/,$p'
cargo bench --all-features --bench layer 2>&1 | sed -n '/ns per operation/,$p'
cargo bench --all-features --bench redis 2>&1 | grep -vE '^\s*(Compiling|Finished|Running)'
bash bench/http.sh "${1:-9}" "${2:-5}"
