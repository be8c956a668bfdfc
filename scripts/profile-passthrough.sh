#!/usr/bin/env bash
# A CPU profile of `weir serve` (release) on the pass-through path (managed `other` class) or
# the cache-hit path, under a bounded wrk load on loopback: where Weir's time per request goes.
#
#   scripts/profile-passthrough.sh [pass|hit] [SECONDS]     (defaults: pass, 8)
#
# Prints `perf report` (self time, top symbols) and writes out/bench/profile-<mode>.txt.
# Needs perf (linux-perf), wrk, curl; installs them with apt-get when missing.
set -euo pipefail
cd "$(dirname "$0")/.."
MODE="${1:-pass}"
SECS="${2:-8}"
TARGET_DIR="${CARGO_TARGET_DIR:-target}"
OUT=out/bench
mkdir -p "$OUT"
for tool in perf wrk curl; do
  command -v "$tool" >/dev/null && continue
  pkg="$tool"; [ "$tool" = perf ] && pkg=linux-perf
  apt-get install -y --no-install-recommends "$pkg" >/dev/null
done
cargo build --release -q -p weir -p weir-lab
WEIR="$TARGET_DIR/release/weir"
LAB="$TARGET_DIR/release/weir-lab"
TMP="$(mktemp -d)"
PIDS=()
cleanup() {
  for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$TMP"
}
trap cleanup EXIT
"$LAB" upstream --latency-ms 0 >"$TMP/up.out" &
PIDS+=($!)
for _ in $(seq 100); do [ -s "$TMP/up.out" ] && break; sleep 0.1; done
UP="$(head -1 "$TMP/up.out")"
PORT="$("$LAB" free-port)"
"$LAB" weir-config --upstream "$UP" --listen "127.0.0.1:$PORT" >"$TMP/weir.toml"
WEIR_LOG=warn "$WEIR" serve --config "$TMP/weir.toml" --data-dir "$TMP/data" >"$TMP/weir.out" 2>&1 &
WEIR_PID=$!
PIDS+=("$WEIR_PID")
for _ in $(seq 100); do curl -s -o /dev/null "http://127.0.0.1:$PORT/_weir/api/health" && break; sleep 0.1; done
path="/repos/octo/lab"; [ "$MODE" = hit ] && path="/agents/sessions"
cat >"$TMP/req.lua" <<LUA
wrk.path = "$UP$path"
wrk.headers["Authorization"] = "token gho_bench"
wrk.headers["Accept"] = "application/json"
LUA
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
