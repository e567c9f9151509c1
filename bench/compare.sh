#!/usr/bin/env bash
# Benchmarks an earlier revision against the working tree in one run: each
# bench runs on the old code, then on the new, before the next bench, so
# that both meet the same machine. Only the paired rounds run (criterion's
# part is skipped): compare each contender's ratio to its peers, which is
# what travels between the two builds.
#
# Usage: bash bench/compare.sh REV   (e.g. a commit before a refactor)
set -euo pipefail
cd "$(dirname "$0")/.."
rev=${1:?usage: bash bench/compare.sh REV}
old=$(mktemp -d /tmp/tsw-compare.XXXXXX)
trap 'git worktree remove --force "$old"' EXIT
git worktree add --detach -q "$old" "$rev"
export CARGO_TARGET_DIR_OLD="$old/target"
(cd "$old" && CARGO_TARGET_DIR="$CARGO_TARGET_DIR_OLD" cargo bench --no-run -q --features axum,redis)
cargo bench --no-run -q --features axum,redis
skip_criterion=no-criterion-benchmark-matches-this
for bench in "store" "layer --features axum" "redis --features redis"; do
  for side in old new; do
    echo "=== $side ($([ $side = old ] && echo "$rev" || echo working tree)): $bench"
    if [ $side = old ]; then
      (cd "$old" && CARGO_TARGET_DIR="$CARGO_TARGET_DIR_OLD" cargo bench -q --bench $bench -- "$skip_criterion")
    else
      cargo bench -q --bench $bench -- "$skip_criterion"
    fi
  done
done
