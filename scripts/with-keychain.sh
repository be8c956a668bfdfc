#!/usr/bin/env bash
# with-keychain.sh CMD [ARGS...]
#
# Runs CMD against a private, throwaway, unlocked Secret Service (gnome-keyring) so that keychain
# tests are real but never touch the developer's own keyring:
#   1. creates a temp dir and points XDG_DATA_HOME / XDG_RUNTIME_DIR into it (HOME, RUSTUP_HOME and
#      CARGO_HOME keep pointing at the real toolchains);
#   2. re-executes itself under `dbus-run-session`, so there is a private session bus. The XDG
#      variables are exported *before* the bus starts because D-Bus-activated services (gnome-keyring
#      registers org.freedesktop.secrets for activation) inherit the bus daemon's environment, not ours:
#      set later, an activated daemon would open the real ~/.local/share/keyrings;
#   3. starts `gnome-keyring-daemon --unlock --components=secrets` with a fixed password, which
#      creates and unlocks a fresh "login" keyring, and waits until org.freedesktop.secrets answers;
#   4. runs CMD and exits with its status; the daemon, the bus and the temp dir go away afterwards.
#
# Needs: apt-get install -y --no-install-recommends dbus-x11 gnome-keyring libsecret-tools
# Example: scripts/with-keychain.sh cargo test -p weir-keychain
set -euo pipefail

die() {
    echo "with-keychain.sh: $*" >&2
    exit 127
}

if [[ $# -eq 0 ]]; then
    echo "usage: $0 CMD [ARGS...]   (runs CMD with a private, unlocked gnome-keyring)" >&2
    exit 2
fi

# Already inside a session this script set up (e.g. CMD calls the script again): nothing to do.
if [[ -n "${WEIR_KEYCHAIN_BUS:-}" && "${WEIR_KEYCHAIN_BUS}" == "${DBUS_SESSION_BUS_ADDRESS:-}" ]]; then
    exec "$@"
fi

if [[ "${WEIR_KEYCHAIN_STAGE:-}" != "inner" ]]; then
    for tool in dbus-run-session gnome-keyring-daemon dbus-send; do
        command -v "$tool" >/dev/null 2>&1 ||
            die "'$tool' not found; install: apt-get install -y --no-install-recommends dbus-x11 gnome-keyring libsecret-tools"
    done
    tmp="$(mktemp -d "${TMPDIR:-/tmp}/weir-keychain.XXXXXX")"
    trap 'rm -rf "$tmp"' EXIT
    mkdir -p "$tmp/data" "$tmp/runtime"
    chmod 700 "$tmp/runtime"
    # Pin the toolchain locations explicitly: they must not follow any other variable we change.
    export RUSTUP_HOME="${RUSTUP_HOME:-$HOME/.rustup}" CARGO_HOME="${CARGO_HOME:-$HOME/.cargo}"
    export XDG_DATA_HOME="$tmp/data" XDG_RUNTIME_DIR="$tmp/runtime"
    export WEIR_KEYCHAIN_STAGE=inner
    # Not `exec`: the trap must still remove the temp dir when the session ends.
    status=0
    dbus-run-session -- "$0" "$@" || status=$?
    exit "$status"
fi

unset WEIR_KEYCHAIN_STAGE
export WEIR_KEYCHAIN_BUS="$DBUS_SESSION_BUS_ADDRESS"

# --foreground keeps the daemon our child so we can stop it ourselves: left to itself it only exits
# when the bus goes away, and a daemon that had not finished registering was seen to outlive it.
# The password only protects this throwaway keyring in a temp dir.
printf '%s' "weir-test" | gnome-keyring-daemon --foreground --unlock --components=secrets >/dev/null &
daemon_pid=$!
trap 'kill "$daemon_pid" 2>/dev/null || true; wait "$daemon_pid" 2>/dev/null || true' EXIT

# Wait (up to ~5 s) for the daemon to own the Secret Service name, so the first call of CMD does
# not race it (or trigger D-Bus activation of a second, locked daemon).
ready=""
for _ in $(seq 1 50); do
    kill -0 "$daemon_pid" 2>/dev/null || die "gnome-keyring-daemon exited during start-up"
    if dbus-send --session --print-reply --dest=org.freedesktop.DBus /org/freedesktop/DBus \
        org.freedesktop.DBus.NameHasOwner string:org.freedesktop.secrets 2>/dev/null |
        grep -q 'boolean true'; then
        ready=1
        break
    fi
    sleep 0.1
done
[[ -n "$ready" ]] || die "gnome-keyring did not register org.freedesktop.secrets on the session bus"

status=0
"$@" || status=$?
exit "$status"
