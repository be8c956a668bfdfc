#!/usr/bin/env bash
# The bounded package test CI runs: Weir's .deb installed with dpkg into a throwaway root on
# this machine (no debootstrap, no apt, no network), run from there, purged, and the tree
# compared. scripts/test-package.sh is the full test (a clean Debian bookworm, apt resolving the
# dependencies, the tray under Xvfb); this one checks the package's own payload and scripts in
# seconds, against this machine's libraries.
#
#   scripts/test-deb-here.sh DEB
#
# Steps (each prints PASS/FAIL; exit 1 if any failed, 127 for a missing tool):
#   1. `dpkg --root=R --force-depends -i DEB` into an empty root R (an empty dpkg database; the
#      dependencies are this machine's, so they are not installed into R);
#   2. the files the package promises are there, and it has no maintainer scripts;
#   3. R/usr/bin/weir --version, `weir completions bash`, and `weir serve` from R answering
#      /_weir/api/health on a free loopback port (HOME and the data dir in a temp dir);
#   4. `dpkg --root=R -P weir`: every path the package listed is gone and R holds what it held
#      before the install (dpkg's own database aside).
set -euo pipefail
DEB=${1:?usage: scripts/test-deb-here.sh DEB}
DEB=$(realpath "$DEB")
for t in dpkg dpkg-deb curl python3; do
  command -v "$t" >/dev/null || { echo "test-deb-here.sh: missing $t" >&2; exit 127; }
done
FAILED=0
pass() { echo "PASS  $*"; }
fail() { echo "FAIL  $*"; FAILED=1; }
started=$(date +%s)
work=$(mktemp -d /tmp/weir-deb-here.XXXXXX)
R=$work/root
serve_pid=""
cleanup() { [ -n "$serve_pid" ] && kill "$serve_pid" 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT
mkdir -p "$R/var/lib/dpkg/info" "$R/var/lib/dpkg/updates" "$R/var/lib/dpkg/triggers" "$R/tmp"
: >"$R/var/lib/dpkg/status"
: >"$R/var/lib/dpkg/available"
tree() { (cd "$R" && find . -path ./var/lib/dpkg -prune -o -print | sort); }
tree >"$work/before.txt"
echo "test-deb-here.sh: $(basename "$DEB"), $(du -k "$DEB" | cut -f1) KiB"

# --- 1. install
# --force-script-chrootless: the package has no maintainer scripts (checked below), so nothing
# would run in R; the option only spares dpkg looking for a shell inside the empty root.
if dpkg --root="$R" --force-depends --force-script-chrootless --force-not-root -i "$DEB" >"$work/install.log" 2>&1; then
  pass "dpkg -i into an empty root ($(dpkg --root="$R" -L weir | wc -l) paths)"
else
  fail "dpkg -i: $(tail -5 "$work/install.log")"
fi

# --- 2. what it put where
for f in usr/bin/weir usr/bin/weir-tray usr/lib/systemd/user/weir.service \
  usr/share/weir/autostart/weir-tray.desktop usr/share/man/man1/weir.1.gz \
  usr/share/bash-completion/completions/weir usr/share/zsh/vendor-completions/_weir \
  usr/share/fish/vendor_completions.d/weir.fish usr/share/doc/weir/copyright; do
  [ -e "$R/$f" ] && pass "/$f" || fail "/$f is missing"
done
ls "$R"/usr/share/applications/*.desktop >/dev/null 2>&1 && pass "a desktop entry in /usr/share/applications" ||
  fail "no desktop entry"
scripts=$(ls "$R/var/lib/dpkg/info/" | grep -E '\.(preinst|postinst|prerm|postrm)$' || true)
[ -z "$scripts" ] && pass "no maintainer scripts" || fail "maintainer scripts: $scripts"

# --- 3. run from the installed tree
v=$("$R/usr/bin/weir" --version 2>&1) && pass "weir --version: $v" || fail "weir --version: $v"
"$R/usr/bin/weir" completions bash | grep -q 'complete' && pass "weir completions bash" || fail "weir completions bash"
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
mkdir -p "$work/home"
HOME=$work/home XDG_CONFIG_HOME=$work/home/.config XDG_DATA_HOME=$work/home/.local/share \
  DBUS_SESSION_BUS_ADDRESS=unix:path=/nonexistent/weir-deb-test WEIR_LOG=warn \
  "$R/usr/bin/weir" serve --listen "127.0.0.1:$port" >"$work/serve.log" 2>&1 &
serve_pid=$!
ok=""
for _ in $(seq 100); do
  if curl -fsS --noproxy '*' "http://127.0.0.1:$port/_weir/api/health" 2>/dev/null | grep -q '"ok"'; then ok=1; break; fi
  kill -0 "$serve_pid" 2>/dev/null || break
  sleep 0.1
done
[ -n "$ok" ] && pass "weir serve from the package answers /_weir/api/health" ||
  fail "weir serve did not answer: $(tail -5 "$work/serve.log")"
kill -TERM "$serve_pid" 2>/dev/null || true
wait "$serve_pid" 2>/dev/null || true
serve_pid=""

# --- 4. purge
dpkg --root="$R" -L weir >"$work/listed.txt" 2>/dev/null || true
if dpkg --root="$R" --force-script-chrootless --force-not-root -P weir >"$work/purge.log" 2>&1; then
  pass "dpkg -P weir"
else
  fail "dpkg -P: $(tail -3 "$work/purge.log")"
fi
left=0
while read -r f; do
  [ -e "$R$f" ] && [ ! -d "$R$f" ] && { echo "  left: $f"; left=$((left + 1)); }
done <"$work/listed.txt"
[ $left = 0 ] && pass "none of the $(wc -l <"$work/listed.txt") paths is left" || fail "$left files are left"
tree >"$work/after.txt"
if cmp -s "$work/before.txt" "$work/after.txt"; then
  pass "the root holds what it held before the install"
else
  fail "the root differs after the purge:"; diff "$work/before.txt" "$work/after.txt" | head -20
fi
echo "test-deb-here.sh: $( [ $FAILED = 0 ] && echo passed || echo FAILED ) in $(( $(date +%s) - started )) s"
exit $FAILED
