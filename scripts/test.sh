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

# --- Rust: formatting, lints, and every crate's tests inside a real Secret Service. -------
cargo fmt --all -- --check
cargo build --workspace --all-targets
scripts/with-keychain.sh cargo test --workspace --all-targets
