# shellcheck shell=bash
# The lines scripts/bench-overhead.sh, scripts/profile-instructions.sh,
# scripts/profile-passthrough.sh, scripts/bench-tls-path.sh and scripts/bench-tunnel-wire.sh share: sourced by them (after `set -euo pipefail`), not run.
#
# Sourcing it moves to the repository root and sets TARGET_DIR (CARGO_TARGET_DIR or target) and
# OUT (out/bench, created). Then, in the order the scripts call them:
#   bench_install TOOL...     installs the missing ones with apt-get (sudo when not root), if
#                             apt-get is there (perf comes from linux-perf)
#   bench_need NAME HINT TOOL...
#                             exits 2 at the first missing one: "NAME: TOOL is not installed
#                             (HINT)"; an empty HINT says "apt-get install TOOL"
#   bench_bins                WEIR and LAB: WEIR_BIN and LAB_BIN when both are set, else a
#                             release build of weir and weir-lab in TARGET_DIR
#   bench_tmp                 TMP (a temporary dir) and PIDS; at exit every pid in PIDS is
#                             stopped and waited for and TMP removed
#   bench_cpu_ticks PID       "user system" clock ticks of PID and its children
#   bench_upstream [CMD...]   the lab upstream (`weir-lab upstream`, answers at once), under CMD
#                             when given (valgrind; its stderr to $TMP/valgrind.err): UP
#                             (http://127.0.0.1:PORT), UP_HOSTPORT, UP_PID (also in PIDS)
#   bench_lua FILE TARGET     a wrk script sending TARGET (absolute or origin form) with one
#                             identity (`wrk.path` is written as the request target as is)

cd "$(dirname "${BASH_SOURCE[0]}")/.."
TARGET_DIR="${CARGO_TARGET_DIR:-target}"
OUT=out/bench
mkdir -p "$OUT"

bench_install() {
  local missing=() tool
  for tool in "$@"; do
    command -v "$tool" >/dev/null && continue
    case "$tool" in perf) missing+=(linux-perf) ;; *) missing+=("$tool") ;; esac
  done
  if [ "${#missing[@]}" -gt 0 ] && command -v apt-get >/dev/null; then
    local sudo=""; [ "$(id -u)" -ne 0 ] && sudo="sudo"
    $sudo apt-get install -y --no-install-recommends "${missing[@]}" >/dev/null
  fi
}

bench_need() {
  local name="$1" hint="$2" tool
  shift 2
  for tool in "$@"; do
    command -v "$tool" >/dev/null || { echo "$name: $tool is not installed (${hint:-apt-get install $tool})" >&2; exit 2; }
  done
}

bench_bins() {
  # WEIR_BIN measures another build (e.g. an older commit's) against the same run's
  # baselines; with LAB_BIN too, nothing is built.
  if [ -z "${WEIR_BIN:-}" ] || [ -z "${LAB_BIN:-}" ]; then
    cargo build --release -q -p weir -p weir-lab
  fi
  WEIR="${WEIR_BIN:-$TARGET_DIR/release/weir}"
  LAB="${LAB_BIN:-$TARGET_DIR/release/weir-lab}"
}

bench_tmp() {
  TMP="$(mktemp -d)"
  PIDS=()
  trap bench_cleanup EXIT
}

bench_cleanup() {
  local pid
  for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
  rm -rf "$TMP"
}

bench_cpu_ticks() {
  # "user system": clock ticks of process $1 and its children (tinyproxy forks workers); the
  # fields after the `comm` field, so a name with spaces is read right.
  local u=0 s=0 p us
  for p in $1 $(pgrep -P "$1" || true); do
    [ -r "/proc/$p/stat" ] || continue
    us="$(awk '{ sub(/^.*\) /, ""); print $12, $13 }' "/proc/$p/stat")"
    u=$((u + ${us% *})); s=$((s + ${us#* }))
  done
  echo "$u $s"
}

bench_upstream() {
  if [ "$#" -gt 0 ]; then
    "$@" "$LAB" upstream --latency-ms 0 >"$TMP/up.out" 2>"$TMP/valgrind.err" &
  else
    "$LAB" upstream --latency-ms 0 >"$TMP/up.out" &
  fi
  UP_PID=$!
  PIDS+=("$UP_PID")
  # Up to a minute: under valgrind it starts slowly.
  local _
  for _ in $(seq 600); do [ -s "$TMP/up.out" ] && break; sleep 0.1; done
  UP="$(head -1 "$TMP/up.out")"
  UP_HOSTPORT="${UP#http://}"
}

bench_lua() {
  cat >"$1" <<EOF
wrk.path = "$2"
wrk.headers["Authorization"] = "token gho_bench"
wrk.headers["Accept"] = "application/json"
EOF
}
