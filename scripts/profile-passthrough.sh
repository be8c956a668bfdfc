#!/usr/bin/env bash
# A CPU profile of `weir serve` (release) on the pass-through path (managed `other` class) or
# the cache-hit path, under a bounded wrk load on loopback: where Weir's time per request goes.
#
#   scripts/profile-passthrough.sh [pass|hit] [SECONDS]     (defaults: pass, 8)
#   WEIR_BIN=/path/to/weir LAB_BIN=/path/to/weir-lab scripts/profile-passthrough.sh   (built already: no cargo)
#
# Prints `perf report` (self time, top symbols) and writes out/bench/profile-<mode>.txt.
# Needs perf (linux-perf), wrk, curl; installs them with apt-get when missing.
set -euo pipefail
source "$(dirname "$0")/lib-bench.sh"
MODE="${1:-pass}"
SECS="${2:-8}"
bench_install perf wrk curl
bench_need profile-passthrough "" perf wrk curl
bench_bins
bench_tmp
bench_upstream
PORT="$("$LAB" free-port)"
"$LAB" weir-config --upstream "$UP" --listen "127.0.0.1:$PORT" >"$TMP/weir.toml"
WEIR_LOG=warn "$WEIR" serve --config "$TMP/weir.toml" --data-dir "$TMP/data" >"$TMP/weir.out" 2>&1 &
WEIR_PID=$!
PIDS+=("$WEIR_PID")
for _ in $(seq 100); do curl -s -o /dev/null "http://127.0.0.1:$PORT/_weir/api/health" && break; sleep 0.1; done
path="/repos/octo/lab"; [ "$MODE" = hit ] && path="/agents/sessions"
bench_lua "$TMP/req.lua" "$UP$path"
wrk -t1 -c8 -d1s -s "$TMP/req.lua" "http://127.0.0.1:$PORT/" >/dev/null
wrk -t2 -c64 -d"$((SECS + 2))s" -s "$TMP/req.lua" "http://127.0.0.1:$PORT/" >"$TMP/wrk.txt" &
PIDS+=($!)
sleep 1
perf record -F 1999 -g -p "$WEIR_PID" -o "$TMP/perf.data" -- sleep "$SECS" 2>/dev/null
wait "${PIDS[-1]}" || true
{
  echo "# weir serve, $MODE path, wrk 2 threads x 64 connections"
  grep -E "Requests/sec" "$TMP/wrk.txt"
  perf report -i "$TMP/perf.data" --no-children --sort symbol --stdio 2>/dev/null | grep -E "^ +[0-9]" | sed -E "s/[[:space:]-]+$//" | head -45
  echo
  echo "# by shared object"
  perf report -i "$TMP/perf.data" --no-children --sort dso --stdio 2>/dev/null | grep -E "^ +[0-9]" | sed -E "s/[[:space:]-]+$//" | head -10
} | tee "$OUT/profile-$MODE.txt"
