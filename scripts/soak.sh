#!/usr/bin/env bash
# Soak: `weir serve` under mixed traffic with rotating upstream faults, for a bounded time.
#
#   scripts/soak.sh [MINUTES]              (default 10; not run in CI)
#   WEIR_BIN=/path/to/weir scripts/soak.sh (soak that build instead)
#   SOAK_NO_BUILD=1 scripts/soak.sh 30     (use the release binaries already built)
#   SOAK_ARGS="--phases healthy,trickle" scripts/soak.sh 20   (rotate through some phases only)
#
# Starts (all on 127.0.0.1, all stopped at exit): `weir serve` (release, queue credentials in
# memory, GitHub Status watcher off, client rate limit off) and scripts/soak_driver.py, which
# runs a recording upstream on a fixed port (its behaviour rotates every 60 s: healthy, 5xx
# storm, blackhole, slow, 429 + Retry-After, healthy, reset mid-body, trickle, secondary-limit
# 403, unreachable — the fault deck of tests/fault_matrix.rs; unreachable closes the listening
# socket and reopens it on the same port), readers (lists and views from 4 identities) and a creator (4 creates/min, each
# with a unique problem_statement), all through Weir as an HTTP proxy. Every 30 s it prints a
# row: RSS and open fds of `weir serve`, cache bytes and queue counts from /_weir/api/status,
# client answers by kind. At the end faults are healed, the queue is waited for (at most
# 240 s), and creates are reconciled against what the upstream recorded: lost and doubled.
#
# Needs: python3, curl. Output: out/soak/soak.md (table + totals), out/soak/soak.log.
set -euo pipefail
cd "$(dirname "$0")/.."
# bench_tmp (sourced before OUT is set: the library sets its own).
# shellcheck source=scripts/lib-bench.sh
. scripts/lib-bench.sh
MINUTES="${1:-10}"
TARGET_DIR="${CARGO_TARGET_DIR:-target}"
OUT="${SOAK_OUT:-out/soak}"
mkdir -p "$OUT"
for tool in python3 curl; do
  command -v "$tool" >/dev/null || { echo "soak: $tool is not installed" >&2; exit 2; }
done

[ -n "${SOAK_NO_BUILD:-}" ] || cargo build --release -q -p weir -p weir-lab
WEIR="${WEIR_BIN:-$TARGET_DIR/release/weir}"
LAB="$TARGET_DIR/release/weir-lab"

# TMP and PIDS, stopped and removed at exit.
bench_tmp
trap 'exit 130' INT TERM

# With SOAK_NO_BUILD and no release weir-lab (building it rebuilds weir with other features),
# the ports come from python and the config is `weir-lab weir-config`'s, written out here.
free_port() {
  if [ -x "$LAB" ]; then "$LAB" free-port
  else python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; fi
}
lab_config() { # $1: upstream origin, $2: listen address
  if [ -x "$LAB" ]; then "$LAB" weir-config --upstream "$1" --listen "$2"; return; fi
  cat <<EOF
default_upstreams = false
listen = "$2"

[[upstream]]
name = "lab"
origin = "$1"

[limits]
max_connections = 30000
header_read_timeout = "30s"
drain_timeout = "1s"

[bulkhead]
max_in_flight = 4096
max_queue = 4096

[queue]
credentials = "memory"

[rate_limit]
enabled = false
EOF
}
UP_PORT="$(free_port)"
WEIR_PORT="$(free_port)"
while [ "$WEIR_PORT" = "$UP_PORT" ]; do WEIR_PORT="$(free_port)"; done

# The lab config already has `[queue] credentials = "memory"` and the rate limit off; the
# GitHub Status watcher (a top-level key) would poll the internet, so it is turned off.
{
  echo 'watch_github_status = false'
  lab_config "http://127.0.0.1:$UP_PORT" "127.0.0.1:$WEIR_PORT"
} >"$TMP/weir.toml"
grep -q 'credentials = "memory"' "$TMP/weir.toml" || printf '\n[queue]\ncredentials = "memory"\n' >>"$TMP/weir.toml"

WEIR_LOG=warn "$WEIR" serve --config "$TMP/weir.toml" --data-dir "$TMP/weir-data" >"$OUT/weir.log" 2>&1 &
WEIR_PID=$!
PIDS+=("$WEIR_PID")
for _ in $(seq 100); do
  curl -s -o /dev/null "http://127.0.0.1:$WEIR_PORT/_weir/api/status" && break
  kill -0 "$WEIR_PID" 2>/dev/null || { echo "soak: weir serve exited:" >&2; cat "$OUT/weir.log" >&2; exit 1; }
  sleep 0.1
done

# The driver stops by itself after MINUTES plus at most ~5 min of draining; `timeout` bounds it
# even if it hangs.
BOUND=$(python3 -c "print(int(float('$MINUTES')*60 + 420))")
timeout "$BOUND" python3 -u scripts/soak_driver.py \
  --weir-port "$WEIR_PORT" --weir-pid "$WEIR_PID" --up-port "$UP_PORT" \
  --minutes "$MINUTES" --out "$OUT/soak.md" ${SOAK_ARGS:-} 2>&1 | tee "$OUT/soak.log"
kill -0 "$WEIR_PID" 2>/dev/null || echo "soak: weir serve died during the run (see $OUT/weir.log)" >&2
echo "soak: wrote $OUT/soak.md"
