#!/usr/bin/env bash
# The release `weir`'s size and idle memory (#21), per cargo feature set: each binary is started
# as `weir serve` with no config file (a throwaway HOME and data dir, no keychain, loopback port
# 0), left idle, and read from /proc/PID/status and /proc/PID/smaps_rollup; the files it created
# in its data dir and its thread count are printed too.
#
# Usage: scripts/bench-weir-size.sh                 # builds the laptop default and --all-features
#        scripts/bench-weir-size.sh NAME=BIN ...    # measures binaries built elsewhere
# Env:   WAIT (seconds idle before reading, default 5)
set -euo pipefail
cd "$(dirname "$0")/.."
target="${CARGO_TARGET_DIR:-$PWD/target}"
wait_s="${WAIT:-5}"

bins=("$@")
if [ "${#bins[@]}" -eq 0 ]; then
  cargo build --release -p weir --bin weir
  cp "$target/release/weir" "$target/release/weir-default"
  cargo build --release -p weir --bin weir --all-features
  cp "$target/release/weir" "$target/release/weir-all"
  bins=("default=$target/release/weir-default" "all-features=$target/release/weir-all")
fi

kib() { awk -v k="$1" '$1 == k":" { print $2 }' "$2"; }
mib() { awk -v n="$1" 'BEGIN { printf "%.1f", n / 1024 }'; }

printf '| build | binary | idle VmRSS | RssAnon | RssFile | threads | files in the data dir |\n'
printf '|---|---|---|---|---|---|---|\n'
for entry in "${bins[@]}"; do
  name="${entry%%=*}"
  bin="${entry#*=}"
  home="$(mktemp -d)"
  env -i PATH="$PATH" HOME="$home" XDG_CONFIG_HOME="$home/cfg" XDG_DATA_HOME="$home/data" \
    DBUS_SESSION_BUS_ADDRESS="unix:path=/nonexistent/weir-bench-bus" \
    "$bin" serve --listen 127.0.0.1:0 --data-dir "$home/weir-data" >"$home/out" 2>&1 &
  pid=$!
  sleep "$wait_s"
  if ! kill -0 "$pid" 2>/dev/null; then
    echo "bench-weir-size: $name exited early:" >&2
    cat "$home/out" >&2
    exit 1
  fi
  st="/proc/$pid/status"
  rss="$(kib VmRSS "$st")"
  anon="$(kib RssAnon "$st")"
  file="$(kib RssFile "$st")"
  threads="$(kib Threads "$st")"
  files="$(cd "$home/weir-data" && find . -type f | sed 's|^\./||' | sort | tr '\n' ' ')"
  size="$(stat -c %s "$bin")"
  kill -TERM "$pid"
  wait "$pid" || true
  printf '| %s | %s MB | %s MiB | %s MiB | %s MiB | %s | %s|\n' "$name" \
    "$(awk -v n="$size" 'BEGIN { printf "%.1f", n / 1000000 }')" \
    "$(mib "$rss")" "$(mib "$anon")" "$(mib "$file")" "$threads" "$files"
  rm -rf "$home"
done
