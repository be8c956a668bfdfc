#!/usr/bin/env bash
# The storm lab: every scenario of `weir-lab` (release build), results into out/lab/; the full
# run also copies its charts to docs/bench/ for BENCHMARKS.md.
#
#   scripts/bench-lab.sh                  # the full run: 1,000 clients × 30 s per row
#   scripts/bench-lab.sh 100 5            # a quick run (CI-sized): 100 clients × 5 s
#   scripts/bench-lab.sh 1000 30 --scenario fleet   # extra arguments go to `weir-lab run`
#
# Fleets run in a child process (`weir-lab fleet-worker`) so that a 1,000-client buggy fleet's
# ~10,000 sockets and the upstream's ~10,000 do not share one process's open-files limit;
# weir-lab raises its soft limit to the hard one itself (`ulimit -Hn` must be ≥ 12,000 for
# 1,000 clients).
set -euo pipefail
cd "$(dirname "$0")/.."
CLIENTS="${1:-1000}"
SECONDS_PER_ROW="${2:-30}"
shift $(( $# > 2 ? 2 : $# ))
TARGET_DIR="${CARGO_TARGET_DIR:-target}"

cargo build --release -q -p weir-lab
"$TARGET_DIR/release/weir-lab" run --clients "$CLIENTS" --seconds "$SECONDS_PER_ROW" --out out/lab "$@"
# Only the full run replaces the charts BENCHMARKS.md shows.
if [ "$CLIENTS" = 1000 ] && [ "$SECONDS_PER_ROW" = 30 ] && [ $# -eq 0 ]; then
  mkdir -p docs/bench
  cp out/lab/*.svg docs/bench/
  echo "charts copied to docs/bench/"
fi
