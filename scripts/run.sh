#!/usr/bin/env bash
# Runs Weir: the tray app where there is a display, else the headless `weir serve` (which
# prints the dashboard URL). Installs the Debian packages the tray needs when they are missing.
# Extra arguments go to the program (e.g. --config FILE, --listen ADDR, --data-dir DIR).
set -euo pipefail
cd "$(dirname "$0")/.."

if [ -n "${DISPLAY:-}${WAYLAND_DISPLAY:-}" ] && [ "${WEIR_HEADLESS:-0}" != 1 ]; then
  need=()
  for p in build-essential pkg-config libdbus-1-dev libwebkit2gtk-4.1-dev libjavascriptcoregtk-4.1-dev \
           libsoup-3.0-dev libayatana-appindicator3-dev librsvg2-dev libssl-dev; do
    dpkg -s "$p" >/dev/null 2>&1 || need+=("$p")
  done
  if [ "${#need[@]}" -gt 0 ] && command -v apt-get >/dev/null; then
    echo "run.sh: installing the tray's build packages: ${need[*]}"
    SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y --no-install-recommends "${need[@]}"
  fi
  echo "run.sh: starting the tray app (set WEIR_HEADLESS=1 for the headless proxy)"
  [ -x "${CARGO_TARGET_DIR:-target}/release/weir-tray" ] || echo "run.sh: first build of the tray: longer than the proxy's (it builds the WebKitGTK bindings too); cargo shows its progress below"
  exec cargo run --release -p weir-tray -- "$@"
fi

dpkg -s libdbus-1-dev >/dev/null 2>&1 || {
  command -v apt-get >/dev/null && { SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo";
    $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y --no-install-recommends pkg-config libdbus-1-dev; }
}
echo "run.sh: no display: starting the headless proxy (weir serve)"
[ -x "${CARGO_TARGET_DIR:-target}/release/weir" ] || echo "run.sh: first build of the release binary: about 5 minutes on 2 cores (longer on a busy machine); cargo shows its progress below"
exec cargo run --release -p weir -- serve "$@"
