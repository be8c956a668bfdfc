#!/usr/bin/env bash
# Tests Weir's AppImage (scripts/package.sh --appimage) on this machine.
#
#   scripts/test-appimage.sh [FILE]     (default: the newest target/package/Weir_*.AppImage)
#
# Steps (each prints PASS/FAIL; exit 1 if any failed, 127 for a missing tool):
#   1. the runtime answers `--appimage-offset`, and the image extracts with `--appimage-extract`
#      (what a user without FUSE does; this is how the image is read here);
#   2. the AppDir is what an AppImage needs: an executable AppRun, a desktop entry at the top
#      whose Exec is weir-tray, an icon and .DirIcon, and usr/bin/{weir,weir-tray};
#   3. the image's `weir --version` runs;
#   4. the whole tray smoke test (scripts/tray-smoke.sh) with the image's AppRun as the app and
#      its usr/bin/weir as the CLI: under Xvfb and a private session bus, tray icon and menu
#      over D-Bus, notifications, the dashboard window, Quit;
#   5. mounted with FUSE (`--appimage-mount`), and the tray smoke test again with the image
#      itself as the app, as a desktop starts it: only where libfuse2 and /dev/fuse work (SKIP
#      otherwise, with the reason).
# The image bundles no libraries (docs/install.md): this machine's WebKitGTK 4.1 and
# libayatana-appindicator3 run it.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
IMAGE=${1:-$(ls -t "$ROOT"/target/package/Weir_*.AppImage 2>/dev/null | head -1 || true)}
[ -n "$IMAGE" ] && [ -f "$IMAGE" ] || { echo "test-appimage.sh: no AppImage (scripts/package.sh --appimage)" >&2; exit 127; }
IMAGE=$(realpath "$IMAGE")
FAILED=0
pass() { echo "PASS  $*"; }
fail() { echo "FAIL  $*"; FAILED=1; }
started=$(date +%s)
work=$(mktemp -d /tmp/weir-appimage.XXXXXX)
trap 'rm -rf "$work"' EXIT
echo "test-appimage.sh: $(basename "$IMAGE"), $(du -k "$IMAGE" | cut -f1) KiB"

# --- 1. the runtime
offset=$("$IMAGE" --appimage-offset 2>&1) && [[ "$offset" =~ ^[0-9]+$ ]] &&
  pass "runtime: the squashfs image starts at byte $offset" || fail "runtime --appimage-offset: $offset"
(cd "$work" && "$IMAGE" --appimage-extract >/dev/null 2>"$work/extract.log") &&
  pass "--appimage-extract: $(find "$work/squashfs-root" -type f | wc -l) files" ||
  fail "--appimage-extract: $(tail -3 "$work/extract.log")"
root=$work/squashfs-root

# --- 2. the AppDir
[ -x "$root/AppRun" ] && pass "AppRun is executable" || fail "no executable AppRun"
desktop=$(ls "$root"/*.desktop 2>/dev/null | head -1 || true)
[ -n "$desktop" ] && grep -qx 'Exec=weir-tray' "$desktop" && pass "desktop entry $(basename "$desktop"): Exec=weir-tray" ||
  fail "no top-level desktop entry with Exec=weir-tray"
icon=$(sed -n 's/^Icon=//p' "${desktop:-/dev/null}" | head -1)
[ -n "$icon" ] && [ -f "$root/$icon.png" ] && [ -e "$root/.DirIcon" ] && pass "icon $icon.png and .DirIcon" ||
  fail "icon ${icon:-?}.png or .DirIcon missing"
for b in weir weir-tray; do
  [ -x "$root/usr/bin/$b" ] && pass "usr/bin/$b" || fail "no usr/bin/$b"
done

# --- 3. the CLI
v=$("$root/usr/bin/weir" --version 2>&1) && pass "weir --version: $v" || fail "weir --version: $v"

# --- 4. the tray, started through AppRun
if WEIR_TRAY_BIN="$root/AppRun" WEIR_CLI_BIN="$root/usr/bin/weir" WEIR_SMOKE_OUT="$work/out" \
  "$ROOT/scripts/tray-smoke.sh" >"$work/smoke.log" 2>&1; then
  pass "tray smoke test through AppRun: $(grep -c '^PASS' "$work/smoke.log") checks passed"
else
  fail "tray smoke test through AppRun:"; grep -E '^(FAIL|SKIP)' "$work/smoke.log" | head -20
fi

# --- 5. mounted with FUSE
if [ -e /dev/fuse ] && command -v fusermount >/dev/null && ldconfig -p | grep -q 'libfuse.so.2'; then
  # The file exists before the background job opens it: a `head` that ran first would
  # otherwise fail on a missing file and, under `set -e`, end the whole script.
  : >"$work/mount.out"
  "$IMAGE" --appimage-mount >"$work/mount.out" 2>&1 &
  mpid=$!
  mnt=""
  for _ in $(seq 50); do mnt=$(head -1 "$work/mount.out" || true); [ -n "$mnt" ] && break; sleep 0.1; done
  if [ -n "$mnt" ] && [ -x "$mnt/usr/bin/weir" ]; then
    pass "mounted at $mnt: $("$mnt/usr/bin/weir" --version)"
  else
    fail "--appimage-mount gave no usable mount point: $(head -3 "$work/mount.out")"
  fi
  kill "$mpid" 2>/dev/null || true
  wait "$mpid" 2>/dev/null || true
  # As a desktop starts it: the image itself, which mounts itself and runs AppRun.
  if WEIR_TRAY_BIN="$IMAGE" WEIR_CLI_BIN="$root/usr/bin/weir" WEIR_SMOKE_OUT="$work/out" \
    "$ROOT/scripts/tray-smoke.sh" >"$work/smoke-fuse.log" 2>&1; then
    pass "tray smoke test running the image itself (FUSE): $(grep -c '^PASS' "$work/smoke-fuse.log") checks passed"
  else
    fail "tray smoke test running the image itself (FUSE):"; grep -E '^(FAIL|SKIP)' "$work/smoke-fuse.log" | head -20
  fi
else
  echo "SKIP  FUSE mount: needs /dev/fuse, fusermount and libfuse2 (apt-get install fuse libfuse2); extraction above is the no-FUSE path"
fi

echo "test-appimage.sh: $( [ $FAILED = 0 ] && echo passed || echo FAILED ) in $(( $(date +%s) - started )) s"
exit $FAILED
