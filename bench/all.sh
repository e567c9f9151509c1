#!/usr/bin/env bash
# Runs the benchmarks that judge the crate against its peers and writes
# BENCHMARKS.md from their tables: the text around them comes from
# bench/benchmarks-head.md, the figures only from this run. The Redis bench
# starts its own redis-server.
#
# Usage: bash bench/all.sh
set -euo pipefail
cd "$(dirname "$0")/.."
tables=$(mktemp)
trap 'rm -f "$tables"' EXIT
# Only the features each bench needs: `metrics` and `tracing` would add
# their own cost to every figure.
cargo bench --no-run --features axum,redis -q
# The tables come from the paired rounds alone: a filter matching no
# criterion benchmark skips criterion's part (run `cargo bench` without it
# for criterion's absolute times and spread).
skip_criterion=no-criterion-benchmark-matches-this
BENCH_TABLES="$tables" cargo bench --bench store -- "$skip_criterion"
BENCH_TABLES="$tables" cargo bench --bench tenants
BENCH_TABLES="$tables" cargo bench --bench keys
BENCH_TABLES="$tables" cargo bench --features axum --bench layer -- "$skip_criterion"
BENCH_TABLES="$tables" cargo bench --features redis --bench redis -- "$skip_criterion"
BENCH_TABLES="$tables" cargo bench --features redis --bench quota

cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1)
machine="$(nproc) CPUs ($cpu), $(free -g | awk '/^Mem:/ {print $2}') GiB, $(rustc --version | cut -d' ' -f1-2), Redis $(redis-server --version | cut -d' ' -f3 | sed 's/^v=//')"
revision="$(git rev-parse --short HEAD)$(git diff --quiet HEAD -- src benches || echo ' with uncommitted changes')"
{
  sed -e "s|@MACHINE@|$machine|" -e "s|@REVISION@|$revision|" -e "s|@DATE@|$(date -u +%Y-%m-%d)|" \
    bench/benchmarks-head.md
  cat "$tables"
} > BENCHMARKS.md
echo "BENCHMARKS.md written from this run"
