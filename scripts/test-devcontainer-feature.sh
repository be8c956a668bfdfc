#!/usr/bin/env bash
# The dev container feature (packaging/devcontainer/weir) in a clean Debian bookworm root: its
# install.sh installs a .deb with apt, then the entrypoint it wrote starts `weir serve` as the
# container's user, trusts Weir's CA and points a login shell and VS Code's remote settings at
# it. No container engine is needed: the root is made by mmdebstrap and entered with chroot in a
# private mount namespace (root, network to deb.debian.org for the root and apt).
#
#   scripts/test-devcontainer-feature.sh [DEB]
#
# Without DEB a stand-in package is made from target/debug/weir (`cargo build -p weir`): the
# real binary, without the tray the released .deb also carries. Each check prints PASS/FAIL;
# exit 1 if any failed, 127 for a missing tool.
set -euo pipefail
cd "$(dirname "$0")/.."
for t in mmdebstrap dpkg-deb unshare chroot curl ss python3; do
  command -v "$t" >/dev/null || { echo "test-devcontainer-feature.sh: missing $t (apt-get install mmdebstrap)" >&2; exit 127; }
done
[ "$(id -u)" = 0 ] || { echo "test-devcontainer-feature.sh: run as root (chroot)" >&2; exit 1; }
FAILED=0
pass() { echo "PASS  $*"; }
fail() { echo "FAIL  $*"; FAILED=1; }
work=$(mktemp -d /tmp/weir-feature.XXXXXX)
R=$work/root
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
cleanup() {
  pid=$(ss -ltnp "sport = :$port" | grep -o 'pid=[0-9]*' | cut -d= -f2 || true)
  [ -n "$pid" ] && kill "$pid" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT

DEB=${1:-}
if [ -z "$DEB" ]; then
  bin=${CARGO_TARGET_DIR:-target}/debug/weir
  [ -x "$bin" ] || { echo "test-devcontainer-feature.sh: build $bin first (cargo build -p weir) or pass a .deb" >&2; exit 1; }
  mkdir -p "$work/pkg/DEBIAN" "$work/pkg/usr/bin"
  cp "$bin" "$work/pkg/usr/bin/weir"
  printf 'Package: weir\nVersion: 0.1.0\nArchitecture: amd64\nMaintainer: test <test@example.invalid>\nDepends: ca-certificates\nDescription: stand-in: the weir binary of this tree\n' >"$work/pkg/DEBIAN/control"
  DEB=$work/weir_0.1.0_amd64.deb
  dpkg-deb --build -Zgzip -z1 "$work/pkg" "$DEB" >/dev/null
fi
echo "test-devcontainer-feature.sh: making a clean bookworm root (mmdebstrap, minbase)"
mmdebstrap --quiet --variant=minbase --include=ca-certificates,curl,passwd bookworm "$work/root.tar" http://deb.debian.org/debian
mkdir -p "$R" && tar -C "$R" -xf "$work/root.tar"
cp /etc/resolv.conf "$R/etc/resolv.conf"
cp packaging/devcontainer/weir/install.sh "$R/tmp/install.sh"
cp "$DEB" "$R/tmp/weir.deb"
python3 -c 'import json, sys; f = json.load(open(sys.argv[1])); assert f["id"] == "weir" and f["entrypoint"] == "/usr/local/share/weir/start.sh", f' \
  packaging/devcontainer/weir/devcontainer-feature.json && pass "devcontainer-feature.json: id weir, entrypoint start.sh" || fail "devcontainer-feature.json"

# The dev container CLI runs install.sh as root with the options and _REMOTE_USER set, then the
# container starts through the feature's entrypoint.
inside="mount -t proc proc /proc && useradd -m -s /bin/bash dev && cd /tmp &&
  env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin DEB=/tmp/weir.deb PORT=$port _REMOTE_USER=dev _REMOTE_USER_HOME=/home/dev sh /tmp/install.sh &&
  env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin /usr/local/share/weir/start.sh sh -c 'echo CONTAINER-COMMAND-RAN' &&
  runuser -l dev -c 'echo PROXY=\$HTTPS_PROXY'"
if unshare -m --propagation private chroot "$R" /bin/sh -c "$inside" >"$work/inside.log" 2>&1; then
  pass "install.sh and the entrypoint ran"
else
  fail "install.sh or the entrypoint: $(tail -5 "$work/inside.log")"
fi
grep -q CONTAINER-COMMAND-RAN "$work/inside.log" && pass "the entrypoint runs the container's command" || fail "the container's command did not run"
curl -fsS --noproxy '*' "http://127.0.0.1:$port/_weir/api/health" | grep -q '"ok"' && pass "weir serve answers on 127.0.0.1:$port" || fail "weir serve does not answer"
dev_uid=$(chroot "$R" id -u dev)
[ "$(stat -c %u "$R/home/dev/.local/share/weir")" = "$dev_uid" ] && pass "the data dir is dev's" || fail "the data dir is not dev's"
s=$R/home/dev/.local/share/weir/secrets/weir
[ "$(stat -c %a "$s")" = 700 ] && [ "$(stat -c %a "$s/local-ca-key")" = 600 ] && pass "secrets are 0600 files in a 0700 dir ($(ls "$s" | tr '\n' ' '))" || fail "no file store at $s"
grep -q "is intercepted" "$R/home/dev/.local/state/weir/serve.log" && pass "HTTPS to managed hosts is intercepted" || fail "not intercepting: $(grep HTTPS "$R/home/dev/.local/state/weir/serve.log")"
[ -f "$R/usr/local/share/ca-certificates/weir-ca.crt" ] && pass "Weir's CA is in the container's system store" || fail "CA not trusted"
grep -q "PROXY=http://127.0.0.1:$port" "$work/inside.log" && pass "a login shell of dev has HTTPS_PROXY" || fail "login shell: $(grep PROXY= "$work/inside.log")"
grep -q "\"http.proxy\": \"http://127.0.0.1:$port\"" "$R/home/dev/.vscode-server/data/Machine/settings.json" 2>/dev/null &&
  pass "VS Code's remote Machine settings point at Weir" || fail "VS Code Machine settings"
exit $FAILED
