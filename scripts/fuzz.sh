#!/usr/bin/env bash
# Runs every libFuzzer target in BUILD_DIR for SECONDS each. Seeds come from
# tests/data (valid and malformed files of each format); new corpus entries go
# to fuzz/corpus-work/<target> (git-ignored). Crashes are copied into
# tests/data/fuzz-regress/<target>/ so the regression tests replay them.
set -euo pipefail
BUILD=${1:-build-fuzz}
SECONDS_EACH=${2:-60}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
for bin in "$BUILD"/fuzz_*; do
  [ -x "$bin" ] || continue
  name=$(basename "$bin")
  fmt=${name#fuzz_}
  work=fuzz/corpus-work/$name
  regress=tests/data/fuzz-regress/$fmt
  mkdir -p "$work" "$regress"
  seeds=()
  for d in tests/data/seeds/$fmt tests/data/malformed/$fmt "$regress"; do
    [ -d "$d" ] && seeds+=("$d")
  done
  echo "fuzz: $name for ${SECONDS_EACH}s"
  art=$(mktemp -d)
  set +e
  "$bin" -max_total_time="$SECONDS_EACH" -artifact_prefix="$art/" -print_final_stats=1 \
      "$work" "${seeds[@]}" 2>&1 | grep -E "stat::number_of_executed_units|ERROR|SUMMARY|Done"
  set -e
  for f in "$art"/*; do
    [ -f "$f" ] && cp "$f" "$regress/" && echo "fuzz: $name found $(basename "$f") -> $regress"
  done
  rm -rf "$art"
done
