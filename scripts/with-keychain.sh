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
# Restart on demand: gnome-keyring 42 has an upstream race (GNOME/gnome-keyring#190, #196, #199:
# "gkd_secret_service_get_pkcs11_session: assertion 'client' failed") that aborts the daemon when
# clients connect, ask and disconnect quickly, which the suite does thousands of times. A desktop's
# systemd unit restarts it; here the private bus does: its config puts a service directory of ours
# first, whose org.freedesktop.secrets / org.gnome.keyring entries start the daemon again with the
# same password, so the next caller gets the same keyring, unlocked (the stock entry would start a
# *locked* daemon that asks for a password on a display there is none of). Each restart is reported
# on stderr at the end; a CI run once lost its daemon ~15 minutes in and then failed a keychain test.
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
    export WEIR_KEYCHAIN_STAGE=inner WEIR_KEYCHAIN_TMP="$tmp"
    # The password only protects this throwaway keyring in a temp dir.
    (umask 077 && printf '%s' "weir-test" >"$tmp/password")
    # How the daemon is started, first by us and then by the bus whenever it is gone. `exec` keeps
    # the pid, which is recorded so the end of the session can stop every daemon it started.
    cat >"$tmp/keyring-daemon.sh" <<SCRIPT
#!/bin/sh
echo "\$\$" >>"$tmp/daemons"
exec gnome-keyring-daemon --foreground --unlock --components=secrets <"$tmp/password"
SCRIPT
    chmod 700 "$tmp/keyring-daemon.sh"
    mkdir -p "$tmp/services"
    for name in org.freedesktop.secrets org.gnome.keyring; do
        printf '[D-BUS Service]\nName=%s\nExec=%s\n' "$name" "$tmp/keyring-daemon.sh" \
            >"$tmp/services/$name.service"
    done
    # The stock session bus, with our service directory first: the first directory naming a
    # service wins, so the stock (locked) gnome-keyring entries are shadowed and the rest (the
    # prompter, notifications) still activate as usual.
    cat >"$tmp/bus.conf" <<CONF
<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <servicedir>$tmp/services</servicedir>
  <include>/usr/share/dbus-1/session.conf</include>
</busconfig>
CONF
    # Not `exec`: the trap must still remove the temp dir when the session ends.
    status=0
    dbus-run-session --config-file="$tmp/bus.conf" -- "$0" "$@" || status=$?
    exit "$status"
fi

unset WEIR_KEYCHAIN_STAGE
export WEIR_KEYCHAIN_BUS="$DBUS_SESSION_BUS_ADDRESS"

# --foreground keeps the daemon our child so we can stop it ourselves: left to itself it only exits
# when the bus goes away, and a daemon that had not finished registering was seen to outlive it.
# Daemons the bus started again after a crash are stopped through the pids they recorded.
tmp="$WEIR_KEYCHAIN_TMP"
unset WEIR_KEYCHAIN_TMP
"$tmp/keyring-daemon.sh" >/dev/null &
daemon_pid=$!
stop_daemons() {
    local started restarts
    started="$(wc -l <"$tmp/daemons" 2>/dev/null || echo 1)"
    restarts=$((started - 1))
    if ((restarts > 0)); then
        echo "with-keychain.sh: gnome-keyring-daemon went away $restarts time(s) during the run and was started again on demand (see the header of $0)" >&2
    fi
    while read -r pid; do kill "$pid" 2>/dev/null || true; done <"$tmp/daemons" 2>/dev/null || true
    wait "$daemon_pid" 2>/dev/null || true
}
trap stop_daemons EXIT

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
