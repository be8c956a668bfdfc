#!/usr/bin/env bash
# Installs Weir's .deb on a clean Debian bookworm and starts Weir from it, then uninstalls it
# and checks that nothing it installed is left.
#
#   scripts/test-package.sh [--deb FILE] [--quick] [--cache DIR] [--keep]
#
#   --deb FILE   the package to test (default: build it with scripts/package.sh)
#   --quick      the bounded form for CI: install, `weir --version`, `weir serve` answering
#                /_weir/api/health, uninstall and the file-list comparison; no tray under Xvfb
#   --cache DIR  where the debootstrap tree and apt's downloaded packages are kept between runs
#                (default /var/cache/weir-package-test, outside the repository)
#   --keep       leave the run's tree mounted for inspection (printed at the end)
#
# Steps (each prints PASS/FAIL; exit 1 if any failed, 2 for bad usage, 127 for a missing tool):
#   1. a clean bookworm (debootstrap --variant=minbase, cached; each run gets a fresh overlay on
#      top of it, so runs never see each other's changes), a user `dev` with a config file whose
#      `listen` is a free loopback port, and the list of every file in the tree;
#   2. `apt-get install ./weir.deb` in a chroot: apt resolves the dependencies from the Debian
#      mirror; timed from there to the first answer of `weir serve` on /_weir/api/health;
#   3. `weir --version`, the man page and completions are where the package says;
#   4. (full mode) the tray started from the desktop entry's Exec line, as user `dev`, under an
#      Xvfb and a private session bus run by this script (the harness, as a desktop session would
#      be): its StatusNotifierItem must appear on the bus and its menu be readable
#      (com.canonical.dbusmenu.GetLayout) with Weir's items;
#   5. `apt-get purge weir` then `apt-get autoremove --purge`: every path `dpkg -L weir` listed is
#      gone, no path that was there before is gone and no new path names weir (apt's state and
#      logs and the user's ~/.local aside; the few paths the purged dependencies' own scripts
#      leave, e.g. systemd's /var/lib/systemd/coredump, are listed), and the user's data dir
#      (~/.local/share/weir) is still there.
# Needs (host, root): debootstrap, mount (overlayfs), curl, python3; full mode also Xvfb,
# dbus-daemon, gdbus (libglib2.0-bin), setpriv.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
CACHE=/var/cache/weir-package-test
DEB="" QUICK=0 KEEP=0
MIRROR=${WEIR_DEBIAN_MIRROR:-http://deb.debian.org/debian}
while [ $# -gt 0 ]; do
  case "$1" in
    --deb) DEB=$(realpath "$2"); shift 2 ;;
    --quick) QUICK=1; shift ;;
    --cache) CACHE=$2; shift 2 ;;
    --keep) KEEP=1; shift ;;
    -h|--help) sed -n '2,31p' "$0"; exit 0 ;;
    *) echo "test-package.sh: unknown option $1 (try --help)" >&2; exit 2 ;;
  esac
done
[ "$(id -u)" = 0 ] || { echo "test-package.sh: needs root (chroot, mounts)" >&2; exit 127; }
tools="debootstrap mount chroot curl python3"
[ $QUICK = 1 ] || tools="$tools Xvfb dbus-daemon gdbus setpriv"
for t in $tools; do
  command -v "$t" >/dev/null || { echo "test-package.sh: missing $t" >&2; exit 127; }
done
started=$(date +%s)
FAILED=0
pass() { echo "PASS  $*"; }
fail() { echo "FAIL  $*"; FAILED=1; }
die() { echo "FAIL  $*"; exit 1; }
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# --- the package
if [ -z "$DEB" ]; then
  "$ROOT/scripts/package.sh"
  DEB=$(ls -t "$ROOT"/target/package/*.deb | head -1)
fi
[ -f "$DEB" ] || die "no package at $DEB"
echo "package: $DEB ($(du -k "$DEB" | cut -f1) KiB)"

# --- 1. the clean tree: a cached debootstrap, a fresh overlay per run
mkdir -p "$CACHE/apt-archives/partial"
if [ ! -f "$CACHE/base/.weir-base-complete" ]; then
  echo "debootstrap bookworm into $CACHE/base (once)"
  rm -rf "$CACHE/base.tmp"
  debootstrap --variant=minbase bookworm "$CACHE/base.tmp" "$MIRROR" >"$CACHE/debootstrap.log" 2>&1 ||
    die "debootstrap failed: $(tail -3 "$CACHE/debootstrap.log")"
  rm -rf "$CACHE/base"
  mv "$CACHE/base.tmp" "$CACHE/base"
  touch "$CACHE/base/.weir-base-complete"
fi
RUN=$(mktemp -d "$CACHE/run.XXXXXX")
# mktemp makes it 0700: user `dev` (the session bus daemon below, run from the host) must be
# able to reach the tree's /tmp through it.
chmod 755 "$RUN"
T=$RUN/root
mkdir -p "$RUN/upper" "$RUN/work" "$T" "$RUN/log"
PIDS=()
cleanup() {
  local p
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  if [ $KEEP = 1 ]; then echo "kept: $T (umount -R $T; rm -rf $RUN)"; return; fi
  for m in var/cache/apt/archives dev/shm dev/pts dev proc ""; do
    mountpoint -q "$T/$m" 2>/dev/null && umount -l "$T/$m"
  done
  rm -rf "$RUN"
}
trap cleanup EXIT
mount -t overlay overlay -o "lowerdir=$CACHE/base,upperdir=$RUN/upper,workdir=$RUN/work" "$T"
mount -t proc proc "$T/proc"
mount --bind /dev "$T/dev"
mount --bind /dev/pts "$T/dev/pts"
mount -t tmpfs -o mode=1777 tmpfs "$T/dev/shm"
mount --bind "$CACHE/apt-archives" "$T/var/cache/apt/archives"
cp /etc/resolv.conf "$T/etc/resolv.conf"
in_root() { chroot "$T" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 "$@"; }
# A command as user `dev` in the tree (an array, so `"${AS_DEV[@]}" cmd &` gives cmd's own pid).
AS_DEV=(chroot --userspec=1000:1000 "$T" /usr/bin/env -i PATH=/usr/bin:/bin HOME=/home/dev USER=dev
  LANG=C.UTF-8 XDG_RUNTIME_DIR=/tmp/dev-runtime)
in_root useradd --create-home --uid 1000 --shell /bin/bash dev
# A booted system has a machine id (libdbus and GLib read it); a debootstrap tree has none.
python3 -c 'import uuid; print(uuid.uuid4().hex)' >"$T/etc/machine-id"
PORT=$(free_port)
mkdir -p "$T/home/dev/.config/weir" "$T/tmp/dev-runtime"
printf 'listen = "127.0.0.1:%s"\n' "$PORT" >"$T/home/dev/.config/weir/config.toml"
chown -R 1000:1000 "$T/home/dev/.config" "$T/tmp/dev-runtime"
chmod 700 "$T/tmp/dev-runtime"
in_root apt-get update -qq >"$RUN/log/apt-update.log" 2>&1 || die "apt-get update: $(tail -3 "$RUN/log/apt-update.log")"
# Every file, directory and link outside the pseudo file systems, apt's state, caches and logs.
snapshot() {
  (cd "$T" && find . -xdev \( -path ./proc -o -path ./dev -o -path ./tmp -o -path ./run \
      -o -path ./var/cache -o -path ./var/lib/apt -o -path ./var/lib/dpkg -o -path ./var/log \
      -o -path ./home/dev/.local -o -path ./home/dev/.cache \) -prune -o -print | sort)
}
snapshot >"$RUN/before.txt"

# --- 2. install with apt, time to the first answer
cp "$DEB" "$T/tmp/weir.deb"
t0=$(date +%s.%N)
if in_root apt-get install -y -q --no-install-recommends /tmp/weir.deb >"$RUN/log/install.log" 2>&1; then
  pass "apt-get install ./$(basename "$DEB") ($(grep -c '^Setting up' "$RUN/log/install.log") packages set up)"
else
  die "apt-get install: $(tail -5 "$RUN/log/install.log")"
fi
t1=$(date +%s.%N)
"${AS_DEV[@]}" weir serve >"$RUN/log/serve.log" 2>&1 &
PIDS+=($!)
SERVE=$!
health=""
for _ in $(seq 300); do
  health=$(curl -fsS --noproxy '*' "http://127.0.0.1:$PORT/_weir/api/health" 2>/dev/null) && break
  sleep 0.1
done
t2=$(date +%s.%N)
if [ -n "$health" ]; then
  pass "weir serve (installed) answers /_weir/api/health: $health"
  python3 -c "import sys; a,b,c = map(float, sys.argv[1:]); print(f'install-to-first-answer: {c-a:.1f} s (apt-get install {b-a:.1f} s, weir serve to first answer {c-b:.1f} s)')" "$t0" "$t1" "$t2"
else
  fail "weir serve did not answer on 127.0.0.1:$PORT: $(tail -5 "$RUN/log/serve.log")"
fi
kill -TERM "$SERVE" 2>/dev/null || true
wait "$SERVE" 2>/dev/null && pass "weir serve stopped on SIGTERM with status 0" || fail "weir serve exit status on SIGTERM"
grep -q '^weir: stopped' "$RUN/log/serve.log" || fail "weir serve did not say it stopped"

# --- 3. what the package put where
v=$("${AS_DEV[@]}" weir --version) && [ "$v" = "weir $(dpkg-deb -f "$DEB" Version)" ] && pass "weir --version: $v" ||
  fail "weir --version: $v"
in_root sh -c 'command -v weir-tray' >/dev/null && pass "weir-tray on the PATH" || fail "no weir-tray on the PATH"
for f in /usr/share/man/man1/weir.1.gz /usr/share/man/man1/weir-serve.1.gz \
  /usr/share/bash-completion/completions/weir /usr/share/zsh/vendor-completions/_weir \
  /usr/share/fish/vendor_completions.d/weir.fish /usr/lib/systemd/user/weir.service \
  /usr/share/weir/autostart/weir-tray.desktop; do
  [ -s "$T$f" ] && pass "installed $f" || fail "missing $f"
done
grep -qs '^ExecStart=/usr/bin/weir serve$' "$T/usr/lib/systemd/user/weir.service" &&
  pass "systemd user unit runs /usr/bin/weir serve" || fail "systemd user unit ExecStart"
[ ! -e "$T/etc/systemd/user/default.target.wants/weir.service" ] && [ ! -e "$T/home/dev/.config/systemd" ] &&
  pass "the unit is not enabled by the package" || fail "the package enabled the unit"
desktop=$(grep -ls '^Exec=' "$T"/usr/share/applications/*.desktop | head -1 || true)
[ -n "$desktop" ] && pass "desktop entry ${desktop#"$T"}" || fail "no desktop entry in /usr/share/applications"

# --- 4. the tray from the desktop entry, under Xvfb and a private bus
if [ $QUICK = 0 ] && [ -n "$desktop" ]; then
  exec_line=$(sed -n 's/^Exec=//p' "$desktop" | head -1 | sed 's/ *%[fFuUdDnNickvm]//g')
  echo "tray: Exec=$exec_line"
  Xvfb -displayfd 3 -screen 0 1280x800x24 -nolisten tcp 3>"$RUN/display" 2>"$RUN/log/xvfb.log" &
  PIDS+=($!)
  for _ in $(seq 50); do [ -s "$RUN/display" ] && break; sleep 0.1; done
  DISPLAY_NUM=$(head -1 "$RUN/display")
  # The bus socket inside the tree, so the chrooted app and this script reach the same bus;
  # the daemon runs as `dev`, the user whose session it stands for.
  setpriv --reuid=1000 --regid=1000 --clear-groups dbus-daemon --session --nofork \
    --address="unix:path=$T/tmp/dev-runtime/bus" >"$RUN/log/bus.log" 2>&1 &
  PIDS+=($!)
  for _ in $(seq 50); do [ -S "$T/tmp/dev-runtime/bus" ] && break; sleep 0.1; done
  [ -S "$T/tmp/dev-runtime/bus" ] || fail "the private session bus did not start: $(tail -3 "$RUN/log/bus.log")"
  host_bus() { setpriv --reuid=1000 --regid=1000 --clear-groups env DBUS_SESSION_BUS_ADDRESS="unix:path=$T/tmp/dev-runtime/bus" "$@"; }
  bus() { host_bus gdbus call --session --dest org.freedesktop.DBus --object-path /org/freedesktop/DBus --method "org.freedesktop.DBus.$1" "${@:2}"; }
  # shellcheck disable=SC2086 # the Exec line is split into words as a desktop would.
  "${AS_DEV[@]}" DISPLAY=":$DISPLAY_NUM" DBUS_SESSION_BUS_ADDRESS=unix:path=/tmp/dev-runtime/bus \
    NO_AT_BRIDGE=1 GTK_A11Y=none $exec_line >"$RUN/log/tray.log" 2>&1 &
  PIDS+=($!)
  CHROOT_PID=$!
  DEST="" ITEM=""
  for _ in $(seq 150); do
    kill -0 "$CHROOT_PID" 2>/dev/null || break
    for name in $(bus ListNames 2>/dev/null | grep -o "':[0-9.]*'" | tr -d "'"); do
      for node in $(host_bus gdbus introspect --session --dest "$name" --object-path /org/ayatana/NotificationItem 2>/dev/null |
        sed -n 's/^ *node \([^ ]*\) {.*/\1/p'); do
        path=/org/ayatana/NotificationItem/$node
        host_bus gdbus introspect --session --dest "$name" --object-path "$path" 2>/dev/null |
          grep -q org.kde.StatusNotifierItem && DEST=$name ITEM=$path
      done
    done
    [ -n "$DEST" ] && break
    sleep 0.2
  done
  if [ -n "$DEST" ]; then
    pass "tray icon registered: $DEST $ITEM"
    layout=$(host_bus gdbus call --session --dest "$DEST" --object-path "$ITEM/Menu" \
      --method com.canonical.dbusmenu.GetLayout -- 0 -1 '["label"]' 2>&1) || true
    for label in "Open dashboard" "Set up" "Quit"; do
      grep -q "$label" <<<"$layout" && pass "tray menu has '$label'" || fail "tray menu lacks '$label': ${layout:0:300}"
    done
    health=$(curl -fsS --noproxy '*' "http://127.0.0.1:$PORT/_weir/api/health" 2>/dev/null) &&
      pass "the tray's engine answers /_weir/api/health" || fail "the tray's engine does not answer"
  else
    fail "no StatusNotifierItem from the tray within 30 s: $(tail -5 "$RUN/log/tray.log")"
  fi
  kill -TERM "$CHROOT_PID" 2>/dev/null || true
  for _ in $(seq 100); do kill -0 "$CHROOT_PID" 2>/dev/null || break; sleep 0.1; done
  kill -KILL "$CHROOT_PID" 2>/dev/null || true
fi

# --- 5. uninstall: nothing the package installed is left; the user's data is
in_root dpkg -L weir >"$RUN/installed.txt"
in_root apt-get purge -y -q weir >"$RUN/log/purge.log" 2>&1 && pass "apt-get purge weir" || fail "apt-get purge: $(tail -3 "$RUN/log/purge.log")"
in_root apt-get autoremove --purge -y -q >"$RUN/log/autoremove.log" 2>&1 &&
  pass "apt-get autoremove --purge ($(grep -c '^Removing' "$RUN/log/autoremove.log") dependencies removed)" ||
  fail "apt-get autoremove"
left=0
while read -r f; do
  [ -e "$T$f" ] && [ ! -d "$T$f" ] && { echo "  left: $f"; left=$((left + 1)); }
done <"$RUN/installed.txt"
[ $left = 0 ] && pass "none of the $(wc -l <"$RUN/installed.txt") paths of the package is left" ||
  fail "$left files of the package are left"
snapshot >"$RUN/after.txt"
# Paths that appeared: the dependencies' own maintainer scripts (systemd's, when apt pulled it
# in) leave a few behind after their purge; the package has no scripts, so any path naming
# weir would be its own.
comm -13 "$RUN/before.txt" "$RUN/after.txt" >"$RUN/new.txt"
comm -23 "$RUN/before.txt" "$RUN/after.txt" >"$RUN/gone.txt"
if [ -s "$RUN/gone.txt" ]; then fail "paths that were there before install are gone:"; head -20 "$RUN/gone.txt"; fi
if grep -i weir "$RUN/new.txt"; then
  fail "paths naming weir are left after uninstall (above)"
elif [ -s "$RUN/new.txt" ]; then
  pass "file list after uninstall: nothing of weir's; $(wc -l <"$RUN/new.txt") paths left by the purged dependencies' scripts: $(tr '\n' ' ' <"$RUN/new.txt")"
else
  pass "file list after uninstall equals the one before install ($(wc -l <"$RUN/before.txt") paths)"
fi
[ -d "$T/home/dev/.local/share/weir" ] && pass "the user's data dir ~/.local/share/weir is kept" ||
  fail "the user's data dir is gone"

echo "test-package.sh: $( [ $FAILED = 0 ] && echo passed || echo FAILED ) in $(( $(date +%s) - started )) s ($( [ $QUICK = 1 ] && echo quick || echo full ))"
exit $FAILED
