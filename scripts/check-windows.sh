#!/usr/bin/env bash
# Type-checks and lints the engine (and, with --tray, the tray app) for Windows from this Linux
# machine: every `cfg(target_os = "windows")` path (the metered-network reader, the keychain's
# Windows backend, paths) compiles, and clippy has nothing to say. Nothing runs: there is no
# Windows here. Not part of scripts/test.sh: it needs rustup to download the target's standard
# library, and CI may have no network for that.
#
#   scripts/check-windows.sh [--tray]
#
# Needs: rustup, and MinGW's C compiler for the C dependencies' build scripts
# (apt-get install gcc-mingw-w64-x86-64; installed here when missing).
set -euo pipefail
cd "$(dirname "$0")/.."
TARGET=x86_64-pc-windows-gnu
if ! command -v x86_64-w64-mingw32-gcc >/dev/null && command -v apt-get >/dev/null; then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y --no-install-recommends gcc-mingw-w64-x86-64 >/dev/null
fi
rustup target list --installed | grep -qx "$TARGET" || rustup target add "$TARGET"
# A target dir of its own: a Windows check must not invalidate the Linux builds.
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-target}/check-windows"
# Every feature: the Windows metered-network reader is behind `metered`.
cargo clippy -p weir --lib --bins --all-features --target "$TARGET" -- -D warnings
if [ "${1:-}" = "--tray" ]; then
  cargo check -p weir-tray --target "$TARGET"
fi
echo "check-windows: the engine${1:+ and the tray} type-check for $TARGET"
