#!/usr/bin/env bash
# The whole test suite, from a fresh machine: installs what it needs, then runs every test.
# Usage: scripts/test.sh          (run from anywhere inside the repository)
set -euo pipefail
cd "$(dirname "$0")/.."

# --- System packages (Debian/Ubuntu). Skipped when already present. -----------------------
need=()
have() { dpkg -s "$1" >/dev/null 2>&1; }
# Engine: keychain (Secret Service), real clients (curl, chromium + NSS tools), namespaces.
# Team (#15): nats-server and PostgreSQL, started by the tests in temp dirs on loopback.
# Tray (Tauri v2): WebKitGTK & co. to build it; Xvfb, dunst, ImageMagick, gdbus for its smoke test.
for p in pkg-config libdbus-1-dev gnome-keyring dbus-x11 libsecret-tools curl ca-certificates \
         util-linux chromium libnss3-tools \
         build-essential libwebkit2gtk-4.1-dev libjavascriptcoregtk-4.1-dev libsoup-3.0-dev \
         libayatana-appindicator3-dev librsvg2-dev libssl-dev \
         xvfb xauth imagemagick dunst x11-utils libglib2.0-bin python3 \
         nats-server postgresql squashfs-tools; do
  have "$p" || need+=("$p")
done
# Node for the real-client and browser tests: Debian's own (bookworm's is 18.19), unless an
# npm is already on PATH (nvm, NodeSource).
command -v npm >/dev/null || need+=(nodejs npm)
if [ "${#need[@]}" -gt 0 ]; then
  echo "test.sh: installing ${need[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y --no-install-recommends "${need[@]}"
fi

# The engine, its crates and the storm lab (its tests check counts, never wall-clock time).
pkgs=(-p weir -p weir-resilience -p weir-store -p weir-keychain -p weir-tls -p weir-status -p weir-lab)

# --- Node packages for the real-client tests (undici's ProxyAgent for Node's fetch). ------
command -v npm >/dev/null || { echo "test.sh: npm (Node.js 18.17+) is needed" >&2; exit 1; }
npm ci --prefix tests/node --no-audit --no-fund --silent

# --- Rust: formatting, then every crate's tests inside a real Secret Service. ------------
scripts/module-deps.sh   # the module graph: fails on an import cycle, or layout docs that are not the graph
# The crates' own docs (--no-deps): any rustdoc warning fails, such as a link to a private item.
RUSTDOCFLAGS="-D warnings" cargo doc "${pkgs[@]}" --no-deps --all-features
cargo fmt -p weir -p weir-resilience -p weir-store -p weir-keychain -p weir-tls -p weir-status -p weir-lab -p weir-tray -- --check
# Optional parts are cargo features (Cargo.toml [features]). The whole suite runs once, with
# every feature; the laptop default and the bare engine get their library tests, a `weir`
# build and the test that runs that binary with tables it was built without.
cargo build "${pkgs[@]}" --all-targets --all-features
# The client drift check on the pinned packages (a few seconds): every agent-API URL the real
# @vscode/copilot-api builds is in the corpus with the class debug/weir gives it.
scripts/check-clients.sh
# --no-fail-fast: one failing binary must not hide the others from the report.
scripts/with-keychain.sh cargo test "${pkgs[@]}" --all-targets --all-features --no-fail-fast
# The same engine with no keychain at all and nowhere to keep secrets: creates are refused
# with a clear 503, not queued.
# (No keychain and no file store: `secrets` in the data dir is a plain file.)
env -u DBUS_SESSION_BUS_ADDRESS WEIR_TEST_NO_KEYCHAIN=1 WEIR_SKIP_KEYCHAIN_TESTS=1 \
  cargo test -p weir --all-features --test queue without_a_keychain
# A headless box with default settings: secrets in files, and Weir intercepts, caches,
# persists and queues across kill -9 as with a keychain (#30).
env -u DBUS_SESSION_BUS_ADDRESS cargo test -p weir --all-features --test headless
for set in "" "--no-default-features"; do
  # shellcheck disable=SC2086 # an empty $set is no argument
  cargo build -p weir --bin weir $set
  scripts/with-keychain.sh cargo test -p weir --lib $set
  cargo test -p weir --test features $set
done
# The dashboard test below runs debug/weir: the one with every feature again.
cargo build -p weir --bin weir --all-features

# The tray app next to it, so the Set up view's "Start at login" step can be done (it writes
# the autostart entry that starts the tray, and only offers it when there is a tray to start).
cargo build -p weir-tray

# --- The dashboard in a real browser (Debian's chromium driven by playwright-core). -------
weir_bin="${CARGO_TARGET_DIR:-$PWD/target}/debug/weir"
(cd tests/browser && npm ci --no-audit --no-fund --silent && WEIR_BIN="$weir_bin" WEIR_EXPECT_TRAY=1 node --test)

# --- The tray app: mock-runtime tests, then the real app under Xvfb + a private session bus
#     (menu read and clicked over D-Bus, notifications seen at a real notification server,
#     a screenshot of the dashboard window in out/).
scripts/with-keychain.sh cargo test -p weir-tray
scripts/tray-smoke.sh

# --- The packages (#23), bounded: the .deb and the AppImage built from this tree (debug builds;
#     the tray is built once more with the bundler's feature), the .deb installed with dpkg into
#     a throwaway root, run and purged, and the AppImage's tray smoke test through its AppRun.
#     Last, because it relinks target/debug/weir and weir-tray. The full package test (apt into
#     a clean Debian bookworm, ~230 packages) is by hand:
#     scripts/package.sh --debug && sudo scripts/test-package.sh --deb target/package/Weir_*.deb
scripts/package.sh --debug --appimage
scripts/test-deb-here.sh target/package/Weir_0.1.0_amd64.deb
scripts/test-appimage.sh target/package/Weir_0.1.0_x86_64.AppImage
