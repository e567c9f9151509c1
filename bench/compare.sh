#!/usr/bin/env bash
# Benchmarks an earlier revision against the working tree in one run: each
# bench runs on the old code, then on the new, before the next bench, so
# that both meet the same machine. Only the paired rounds run (criterion's
# part is skipped): compare each contender's ratio to its peers, which is
# what travels between the two builds. A bench the old revision lacks is
# copied in from the working tree (it must build against the old API);
# with SAME_BENCH=1 every bench named is, so that rows added since REV run
# on both sides.
#
# Usage: [SAME_BENCH=1] bash bench/compare.sh REV [BENCH...]   (default: every bench)
set -euo pipefail
cd "$(dirname "$0")/.."
rev=${1:?usage: bash bench/compare.sh REV [BENCH...]}
shift
benches=("$@")
[ ${#benches[@]} -gt 0 ] || benches=(store tenants layer redis)
old=$(mktemp -d /tmp/tsw-compare.XXXXXX)
trap 'git worktree remove --force "$old"' EXIT
git worktree add --detach -q "$old" "$rev"
for bench in "${benches[@]}"; do
  if [ "${SAME_BENCH:-0}" = 1 ] && [ -e "$old/benches/$bench.rs" ]; then
    cp "benches/$bench.rs" "benches/report.rs" "$old/benches/"
  elif [ ! -e "$old/benches/$bench.rs" ]; then
    cp "benches/$bench.rs" "$old/benches/$bench.rs"
    printf '\n[[bench]]\nname = "%s"\nharness = false\n' "$bench" >> "$old/Cargo.toml"
  fi
done
export CARGO_TARGET_DIR_OLD="$old/target"
(cd "$old" && CARGO_TARGET_DIR="$CARGO_TARGET_DIR_OLD" cargo bench --no-run -q --features axum,redis)
cargo bench --no-run -q --features axum,redis
skip_criterion=no-criterion-benchmark-matches-this
for bench in "${benches[@]}"; do
  for side in old new; do
    echo "=== $side ($([ $side = old ] && echo "$rev" || echo working tree)): $bench"
    if [ $side = old ]; then
      (cd "$old" && CARGO_TARGET_DIR="$CARGO_TARGET_DIR_OLD" cargo bench -q --features axum,redis --bench "$bench" -- "$skip_criterion")
    else
      cargo bench -q --features axum,redis --bench "$bench" -- "$skip_criterion"
    fi
  done
done
