#!/usr/bin/env bash
# The whole test suite, from a fresh machine: installs what it needs, then runs every test.
# Usage: scripts/test.sh          (run from anywhere inside the repository)
set -euo pipefail
cd "$(dirname "$0")/.."

# --- System packages (Debian/Ubuntu). Skipped when already present. -----------------------
need=()
have() { dpkg -s "$1" >/dev/null 2>&1; }
for p in pkg-config libdbus-1-dev gnome-keyring dbus-x11 libsecret-tools curl ca-certificates; do
  have "$p" || need+=("$p")
done
if [ "${#need[@]}" -gt 0 ]; then
  echo "test.sh: installing ${need[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y --no-install-recommends "${need[@]}"
fi

# The engine and its crates. (The Tauri tray, src-tauri, and the storm lab, crates/lab, are
# built and tested by their own commands; see README.)
pkgs=(-p weir -p weir-resilience -p weir-store -p weir-keychain -p weir-tls -p weir-status)

# --- Rust: formatting, then every crate's tests inside a real Secret Service. ------------
cargo fmt -p weir -p weir-resilience -p weir-store -p weir-keychain -p weir-tls -p weir-status -- --check
cargo build "${pkgs[@]}" --all-targets
scripts/with-keychain.sh cargo test "${pkgs[@]}" --all-targets
# The same engine with no keychain at all: creates are refused with a clear 503, not queued.
env -u DBUS_SESSION_BUS_ADDRESS WEIR_TEST_NO_KEYCHAIN=1 WEIR_SKIP_KEYCHAIN_TESTS=1 \
  cargo test -p weir --test queue without_a_keychain

# The dashboard's browser test (tests/browser, Debian chromium via playwright-core) is run on
# its own until it is part of this suite: see README.
