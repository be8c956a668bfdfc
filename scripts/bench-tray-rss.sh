#!/usr/bin/env bash
# bench-tray-rss.sh: how much memory the tray app (weir-tray) holds idle, with the dashboard
# open, and after the dashboard is closed again; headless, bounded, stops by itself.
#
#   1. builds the release tray (or uses $WEIR_TRAY_BIN), then re-runs itself under
#      scripts/with-keychain.sh (private session bus, throwaway unlocked gnome-keyring, XDG dirs
#      in temp dirs), as scripts/tray-smoke.sh does;
#   2. starts Xvfb on a free display and weir-tray with a config that listens on a free port,
#      watches no GitHub Status page and has one upstream nobody calls;
#   3. finds the tray item on D-Bus, waits until the memory of the whole process tree (the
#      tray and its WebKitWebProcess / WebKitNetworkProcess children) is stable: "idle";
#   4. for each of $WEIR_BENCH_CYCLES cycles: clicks "Open dashboard" (dbusmenu Event), waits
#      for the page to paint and the memory to settle: "open N"; closes the window the way a
#      window manager does (a WM_DELETE_WINDOW client message to it, sent with libX11 through
#      python3's ctypes), waits until the window is gone or unmapped and the memory settles:
#      "closed N";
#   5. clicks "Quit Weir" and prints a table: per phase the processes, the summed RSS (VmRSS
#      from /proc/PID/status) and PSS (Pss from /proc/PID/smaps_rollup, which shares the pages
#      of common libraries fairly between processes).
#
# Needs (Debian): xvfb xauth imagemagick dbus-x11 gnome-keyring x11-utils libglib2.0-bin
#   python3 libx11-6 (+ Tauri's build packages to build).
# Env: WEIR_TRAY_BIN=path        measure this binary instead of `cargo build -p weir-tray --release`
#      WEIR_BENCH_CYCLES=2       open/close cycles
#      WEIR_BENCH_SETTLE=30      max seconds to wait for the memory to settle in each phase
#      WEIR_BENCH_KEEP=1         keep the temp dir (logs)
#      WEIR_DASHBOARD_WEBKIT=…   the dashboard's WebKit settings to measure (src-tauri/src/
#                                webkit_memory.rs): unset = the tray's default, `none` = WebKit's
#                                own, or a comma-separated list such as `cache-model,no-gl`
# Example: scripts/bench-tray-rss.sh
#          WEIR_TRAY_BIN=/tmp/old/weir-tray scripts/bench-tray-rss.sh
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

if [[ -z "${WEIR_BENCH_IN_SESSION:-}" ]]; then
    for tool in dbus-run-session gnome-keyring-daemon Xvfb gdbus import identify xwininfo python3; do
        command -v "$tool" >/dev/null || { echo "bench-tray-rss.sh: missing $tool (see the header for packages)" >&2; exit 127; }
    done
    if [[ -z "${WEIR_TRAY_BIN:-}" ]]; then
        echo "bench-tray-rss.sh: building weir-tray (release)"
        (cd "$ROOT" && cargo build -p weir-tray --release)
        target=$(cd "$ROOT" && cargo metadata --format-version 1 --no-deps |
            python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')
        WEIR_TRAY_BIN="$target/release/weir-tray"
    fi
    [[ -x "$WEIR_TRAY_BIN" ]] || { echo "bench-tray-rss.sh: $WEIR_TRAY_BIN is not an executable" >&2; exit 127; }
    WEIR_TRAY_BIN=$(cd "$(dirname "$WEIR_TRAY_BIN")" && pwd)/$(basename "$WEIR_TRAY_BIN")
    export WEIR_TRAY_BIN WEIR_BENCH_IN_SESSION=1
    exec "$ROOT/scripts/with-keychain.sh" bash "${BASH_SOURCE[0]}" "$@"
fi

# ---------------------------------------------------------------- inside the private session
TMP=$(mktemp -d /tmp/weir-tray-bench.XXXXXX)
PIDS=()
cleanup() {
    local pid
    for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
    wait 2>/dev/null || true
    if [[ -n "${WEIR_BENCH_KEEP:-}" ]]; then echo "logs kept in $TMP"; else rm -rf "$TMP"; fi
}
trap cleanup EXIT
die() {
    echo "bench-tray-rss.sh: $*" >&2
    echo "----- app log (last 30 lines) -----" >&2; tail -n 30 "$TMP/app.log" >&2 2>/dev/null || true
    exit 1
}
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
CYCLES=${WEIR_BENCH_CYCLES:-2}
SETTLE=${WEIR_BENCH_SETTLE:-30}

export XDG_CONFIG_HOME=$TMP/xdg-config XDG_CACHE_HOME=$TMP/xdg-cache
mkdir -p "$XDG_CONFIG_HOME" "$XDG_CACHE_HOME" "$TMP/home"
export NO_AT_BRIDGE=1 GTK_A11Y=none WEIR_LOG=${WEIR_LOG:-weir=warn,weir_tray=info}

Xvfb -displayfd 3 -screen 0 1280x800x24 -nolisten tcp 3>"$TMP/display" 2>"$TMP/xvfb.log" &
PIDS+=($!)
for _ in $(seq 50); do [[ -s "$TMP/display" ]] && break; sleep 0.1; done
[[ -s "$TMP/display" ]] || die "Xvfb did not start: $(cat "$TMP/xvfb.log")"
export DISPLAY=":$(head -n1 "$TMP/display")"

PORT=$(free_port)
cat >"$TMP/config.toml" <<EOF
listen = "127.0.0.1:$PORT"
watch_github_status = false

[[upstream]]
name = "copilot-api"
origin = "http://127.0.0.1:9"
EOF
# Not a first start: the first start opens the Set up view (a dashboard process), and "idle"
# is the tray alone.
mkdir -p "$TMP/weir-data"
: >"$TMP/weir-data/setup-seen"
HOME=$TMP/home "$WEIR_TRAY_BIN" --config "$TMP/config.toml" --data-dir "$TMP/weir-data" >"$TMP/app.log" 2>&1 &
APP_PID=$!
PIDS+=("$APP_PID")

# --- memory of the process tree rooted at the app
cat >"$TMP/mem.py" <<'PY'
import os, sys
root = int(sys.argv[1])
parent, name = {}, {}
for d in os.listdir("/proc"):
    if not d.isdigit():
        continue
    try:
        with open(f"/proc/{d}/stat") as f:
            stat = f.read()
    except OSError:
        continue
    name[int(d)] = stat[stat.index("(") + 1 : stat.rindex(")")]
    parent[int(d)] = int(stat[stat.rindex(")") + 2 :].split()[1])
tree, todo = [], [root]
while todo:
    p = todo.pop()
    if p in name:
        tree.append(p)
        todo.extend(c for c, pp in parent.items() if pp == p)
def field(path, key):
    try:
        with open(path) as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0
rss = pss = 0
names = []
for p in sorted(tree):
    r, s = field(f"/proc/{p}/status", "VmRSS"), field(f"/proc/{p}/smaps_rollup", "Pss")
    rss, pss = rss + r, pss + s
    names.append(f"{name[p]}={r // 1024}M")
print(rss, pss, " ".join(names))
PY
mem() { python3 "$TMP/mem.py" "$APP_PID"; }
# settle: sample once a second until two samples in a row differ by < 1 % (at most $SETTLE s,
# at least 3 s); prints the last sample.
settle() {
    local prev=0 cur line i
    sleep 3
    for i in $(seq "$SETTLE"); do
        line=$(mem)
        cur=${line%% *}
        if [[ "$prev" -gt 0 ]] && (( cur * 100 >= prev * 99 && cur * 100 <= prev * 101 )); then break; fi
        prev=$cur
        sleep 1
    done
    echo "$line"
}
ROWS=()
record() { # PHASE
    local line
    line=$(settle)
    read -r rss pss procs <<<"$line"
    ROWS+=("$(awk -v p="$1" -v r="$rss" -v s="$pss" -v n="$procs" 'BEGIN { printf "%-10s %8.1f %8.1f   %s", p, r / 1024, s / 1024, n }')")
    echo "  $1: RSS $((rss / 1024)) MB, PSS $((pss / 1024)) MB ($procs)"
}

# --- the tray item on D-Bus (as in tray-smoke.sh)
bus() { gdbus call --session --dest org.freedesktop.DBus --object-path /org/freedesktop/DBus --method "org.freedesktop.DBus.$1" "${@:2}"; }
DEST="" ITEM=""
for _ in $(seq 100); do
    kill -0 "$APP_PID" 2>/dev/null || die "weir-tray exited early"
    for name in $(bus ListNames | grep -o "':[0-9.]*'" | tr -d "'"); do
        pid=$(bus GetConnectionUnixProcessID "$name" 2>/dev/null | grep -o '[0-9]\+' | tail -n1) || continue
        [[ "$pid" == "$APP_PID" ]] || continue
        for node in $(gdbus introspect --session --dest "$name" --object-path /org/ayatana/NotificationItem 2>/dev/null |
            sed -n 's/^ *node \([^ ]*\) {.*/\1/p'); do
            path=/org/ayatana/NotificationItem/$node
            gdbus introspect --session --dest "$name" --object-path "$path" 2>/dev/null |
                grep -q org.kde.StatusNotifierItem && DEST=$name ITEM=$path
        done
    done
    [[ -n "$DEST" ]] && break
    sleep 0.2
done
[[ -n "$DEST" ]] || die "no tray item exported by weir-tray within 20 s"
MENU=$ITEM/Menu
cat >"$TMP/labels.py" <<'PY'
import re, sys
text = sys.stdin.read()
for item in re.finditer(r"\((\d+), \{([^{}]*)\}", text):
    m = re.search(r"'label': <'((?:[^'\\]|\\.)*)'>", item.group(2))
    if m:
        print(item.group(1) + "\t" + m.group(1))
PY
click() {
    local id
    id=$(gdbus call --session --dest "$DEST" --object-path "$MENU" --method com.canonical.dbusmenu.GetLayout -- 0 -1 '["label"]' |
        python3 "$TMP/labels.py" | awk -F'\t' -v p="$1" 'index($2, p) == 1 { print $1; exit }')
    [[ -n "$id" ]] || die "no menu item starting with '$1'"
    gdbus call --session --dest "$DEST" --object-path "$MENU" --method com.canonical.dbusmenu.Event -- "$id" clicked '<0>' 0 >/dev/null
}

# --- closing a window as a window manager would: WM_DELETE_WINDOW (scripts/x11-close-window.py)
# The dashboard window's id once it is viewable (bounded wait), else empty.
viewable_window() {
    local wid
    for _ in $(seq 100); do
        for wid in $(xwininfo -root -tree 2>/dev/null | awk '/"Weir"/ { print $1 }'); do
            xwininfo -id "$wid" 2>/dev/null | grep -q 'IsViewable' && { echo "$wid"; return 0; }
        done
        sleep 0.2
    done
}

echo "weir-tray pid $APP_PID ($WEIR_TRAY_BIN), DISPLAY=$DISPLAY"
record idle
for cycle in $(seq "$CYCLES"); do
    click 'Open dashboard'
    wid=$(viewable_window)
    [[ -n "$wid" ]] || die "no viewable window titled Weir after 'Open dashboard'"
    colours=0
    for _ in $(seq 60); do
        import -window "$wid" "$TMP/window.png" 2>/dev/null &&
            colours=$(identify -format '%k' "$TMP/window.png" 2>/dev/null || echo 0)
        [[ "$colours" -gt 64 ]] && break
        sleep 1
    done
    [[ "$colours" -gt 64 ]] || die "the dashboard did not paint within 60 s ($colours colours)"
    record "open $cycle"
    python3 "$ROOT/scripts/x11-close-window.py" "$wid" || die "cannot send WM_DELETE_WINDOW to $wid"
    gone=""
    for _ in $(seq 50); do
        xwininfo -id "$wid" 2>/dev/null | grep -q 'IsViewable' || { gone=1; break; }
        sleep 0.2
    done
    [[ -n "$gone" ]] || die "the dashboard window is still viewable 10 s after WM_DELETE_WINDOW"
    xwininfo -id "$wid" >/dev/null 2>&1 && how="hidden" || how="destroyed"
    echo "  window $wid $how"
    record "closed $cycle"
done
click 'Quit Weir'
for _ in $(seq 100); do kill -0 "$APP_PID" 2>/dev/null || break; sleep 0.2; done

echo
echo "weir-tray memory, whole process tree ($(nproc) cores, $(. /etc/os-release && echo "$PRETTY_NAME"))"
echo "dashboard WebKit settings: WEIR_DASHBOARD_WEBKIT=${WEIR_DASHBOARD_WEBKIT-(unset: the default)}"
printf '%-10s %8s %8s   %s\n' phase "RSS MB" "PSS MB" "processes (RSS)"
printf '%s\n' "${ROWS[@]}"
