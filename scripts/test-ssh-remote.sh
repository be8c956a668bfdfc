#!/usr/bin/env bash
# Weir on an SSH remote, tried through a real SSH session (issue #30): a real sshd on loopback,
# a fresh user with Debian's skeleton dot-files, and every step a developer would take over
# `ssh box` — no session bus, no keychain — as docs/install.md ("An SSH remote") says.
#
#   scripts/test-ssh-remote.sh            # builds target/debug/weir if needed
#   WEIR_BIN=target/release/weir scripts/test-ssh-remote.sh
#
# Needs root (it adds and removes a user, and starts sshd on 127.0.0.1:$SSH_PORT) and Debian's
# openssh-server (installed if missing). Not run by CI: it changes the machine's users.
set -euo pipefail
cd "$(dirname "$0")/.."

SSH_PORT="${SSH_PORT:-2222}"
USER_NAME="${USER_NAME:-weir-ssh-test}"
if [ "$(id -u)" != 0 ]; then
    echo "error: run as root (it adds a user and starts sshd on 127.0.0.1:$SSH_PORT)" >&2
    exit 2
fi
if [ ! -x /usr/sbin/sshd ]; then
    echo "== installing openssh-server (Debian's)"
    DEBIAN_FRONTEND=noninteractive apt-get install -y openssh-server >/dev/null
fi
WEIR_BIN="${WEIR_BIN:-target/debug/weir}"
if [ ! -x "$WEIR_BIN" ]; then
    echo "== building $WEIR_BIN"
    cargo build -p weir --bin weir
fi

work="$(mktemp -d /tmp/weir-ssh.XXXXXX)"
home="$work/home"
sshd_pid=""
cleanup() {
    pkill -u "$USER_NAME" 2>/dev/null || true
    [ -n "$sshd_pid" ] && kill "$sshd_pid" 2>/dev/null || true
    sleep 0.5
    userdel "$USER_NAME" 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT
[ -n "${KEEP:-}" ] && trap - EXIT

echo "== a fresh user ($USER_NAME) with Debian's skeleton files, and a key"
userdel "$USER_NAME" 2>/dev/null || true
useradd -m -d "$home" -k /etc/skel -s /bin/bash "$USER_NAME"
# A key-only account: no password, but not locked (sshd refuses a locked account).
usermod -p '*' "$USER_NAME"
chmod 755 "$work"
install -d -m 755 "$work/bin"
install -m 755 "$WEIR_BIN" "$work/bin/weir"
ssh-keygen -q -t ed25519 -N '' -f "$work/client_key"
ssh-keygen -q -t ed25519 -N '' -f "$work/host_key"
install -d -m 700 -o "$USER_NAME" "$home/.ssh"
install -m 600 -o "$USER_NAME" "$work/client_key.pub" "$home/.ssh/authorized_keys"
# The weir binary on the user's PATH from the first line, as the .deb puts it in /usr/bin.
sed -i "1i export PATH=\"$work/bin:\$PATH\"" "$home/.profile"

cat >"$work/sshd_config" <<EOF
Port $SSH_PORT
ListenAddress 127.0.0.1
HostKey $work/host_key
PidFile $work/sshd.pid
AuthorizedKeysFile .ssh/authorized_keys
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
AllowUsers $USER_NAME
EOF
install -d -m 755 /run/sshd
/usr/sbin/sshd -f "$work/sshd_config" -E "$work/sshd.log"
for _ in $(seq 50); do [ -s "$work/sshd.pid" ] && break; sleep 0.1; done
sshd_pid="$(cat "$work/sshd.pid")"

ssh_box() {
    ssh -q -i "$work/client_key" -p "$SSH_PORT" -o BatchMode=yes -o StrictHostKeyChecking=no \
        -o UserKnownHostsFile=/dev/null "$USER_NAME@127.0.0.1" "$@"
}
fails=0
check() { # name, then a command that must succeed
    local name="$1"
    shift
    if "$@"; then echo "PASS $name"; else echo "FAIL $name"; fails=$((fails + 1)); fi
}

echo "== over ssh: no session bus, no keychain"
bus="$(ssh_box 'bash -lc "echo \${DBUS_SESSION_BUS_ADDRESS:-none}"')"
check "the SSH session has no session bus" test "$bus" = none

echo "== step 1: start weir serve (as a user unit would; here in the background)"
ssh_box 'bash -lc "mkdir -p ~/.vscode-server && (setsid weir serve >~/weir.log 2>&1 </dev/null &)"'
up=""
for _ in $(seq 100); do
    up="$(ssh_box 'bash -lc "weir env --if-running"' || true)"
    [ -n "$up" ] && break
    sleep 0.3
done
check "weir serve answers (weir env --if-running prints the variables)" test -n "$up"
log="$(ssh_box 'cat ~/weir.log')"
check "weir serve says at start that its secrets are in files" \
    grep -qi "secrets are kept in files\|file store\|secrets.*file" <<<"$log"

echo "== step 2: weir setup vscode --apply writes the remote machine's settings"
ssh_box 'bash -lc "weir setup vscode --apply"' >"$work/setup.out" 2>&1 || true
machine="$(ssh_box 'cat ~/.vscode-server/data/Machine/settings.json 2>/dev/null' || true)"
check "the Machine settings name Weir's proxy" grep -q '"http.proxy": *"http://127.0.0.1:' <<<"$machine"

echo "== step 2: the login shell gets the proxy and the CA"
# An interactive login shell, as \`ssh box\` and VS Code's terminal start: Debian's ~/.bashrc
# stops at its first lines in a non-interactive one (\`ssh box cmd\`).
ssh_box "echo 'eval \"\$(weir env --if-running)\"' >> ~/.bashrc"
ssh_box 'bash -lc "weir ca install --apply"' >"$work/ca.out" 2>&1 || true
proxy="$(ssh_box 'bash -ilc "echo \$HTTPS_PROXY" 2>/dev/null')"
check "a login shell over ssh has HTTPS_PROXY on loopback" grep -q '^http://127.0.0.1:[0-9]*$' <<<"$proxy"
bundle="$(ssh_box 'bash -ilc "echo \${NODE_EXTRA_CA_CERTS:-}" 2>/dev/null')"
check "and NODE_EXTRA_CA_CERTS names Weir's CA" ssh_box "grep -q 'BEGIN CERTIFICATE' '$bundle'"
health="$(ssh_box "bash -ilc 'curl -sS --noproxy \"*\" \"\$HTTPS_PROXY/_weir/api/health\"' 2>/dev/null" || true)"
check "Weir answers its health on that address" grep -q '"install_id"\|install' <<<"$health"
doctor="$(ssh_box 'bash -lc "weir doctor"' 2>&1 || true)"
check "weir doctor says where the secrets are" grep -qi "file" <<<"$doctor"
files="$(ssh_box 'stat -c "%a %n" ~/.local/share/weir/secrets ~/.local/share/weir/secrets/* 2>/dev/null' || true)"
check "the secrets are owner-only (0700 dir, 0600 files)" \
    bash -c '! grep -vqE "^(700|600) " <<<"$1" && test -n "$1"' _ "$files"

echo
echo "sshd log: $work/sshd.log (removed on exit); weir log:"
sed -n '1,12p' <<<"$log"
if [ "$fails" != 0 ]; then
    echo "$fails check(s) failed"
    exit 1
fi
echo "every check passed"
