#!/usr/bin/env bash
# A blind tunnel across a wire (issue #32): the same 1 GiB download as bench-tls-path.sh's part
# 1, but the source sits on the far side of a veth link shaped to a wire's rate, as a registry,
# a git host or an image store does, instead of on loopback in the same two cores.
#
#   scripts/bench-tunnel-wire.sh                        # WEIR_BIN defaults to the release build
#   WIRE_RATES="1gbit 2500mbit" TUNNEL_MIB=1024 RUNS=3 scripts/bench-tunnel-wire.sh
#   WIRE_RATES="loopback 1gbit" scripts/bench-tunnel-wire.sh   # loopback: no wire, the source on 127.0.0.1
#
# Why a second measure: on loopback the source, the sink and the proxy are three processes
# competing for the same two cores, so a proxy's ratio to direct there measures the CPU the
# machine has left, not the tunnel. Across a wire the link sets the pace, and the question is
# the issue's: does a tunnel through Weir keep the wire's speed, and at what CPU per GiB.
#
# Everything runs in network namespaces this script makes itself (`unshare -rn`: an unprivileged
# user namespace with a network namespace of its own, and a second one for the far side); no
# address outside them is touched. Per rate and per run it reports, for direct, Weir,
# tinyproxy and HAProxy (each when installed): MB/s at the client and the proxy's CPU seconds
# per GiB (utime+stime from /proc/<pid>/stat, children too).
#
# HAProxy is the floor under any relay, not a CONNECT proxy: in `mode tcp` with `option
# splice-request` and `splice-response` (always, not `splice-auto`'s guess, which spent 3-4x the
# CPU here) it moves bytes socket → pipe → socket with splice(2), as Weir's tunnel does, and
# does nothing else (no CONNECT to read, no target to check). The client connects to it
# directly. What a proxy costs above it is its own; what HAProxy too cannot reach is the
# machine's (on loopback: a third process on the same cores, sending every byte once more). The link is `tc tbf` on both veth ends
# (RATE, burst 512 KiB, at most 50 ms queued). No delay is added: this kernel has no `netem`.
#
# Needs: python3, iproute2 (ip, tc), util-linux (unshare, nsenter); tinyproxy and haproxy are
# optional (HAPROXY=none or TINYPROXY=none skips one).
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
WEIR_BIN="${WEIR_BIN:-${CARGO_TARGET_DIR:-$ROOT/target}/release/weir}"
TUNNEL_MIB="${TUNNEL_MIB:-1024}"
RUNS="${RUNS:-3}"
WIRE_RATES="${WIRE_RATES:-1gbit}"
TINYPROXY="${TINYPROXY:-$(command -v tinyproxy || true)}"; [ "$TINYPROXY" = none ] && TINYPROXY=""  # none: skip it
HAPROXY="${HAPROXY:-$(command -v haproxy || true)}"; [ "$HAPROXY" = none ] && HAPROXY=""
[ -x "$WEIR_BIN" ] || { echo "no weir at $WEIR_BIN: cargo build --release -p weir" >&2; exit 1; }
for tool in python3 ip tc unshare nsenter; do
  command -v "$tool" >/dev/null || { echo "bench-tunnel-wire: $tool is not installed" >&2; exit 2; }
done

# Re-run inside a namespace of our own (root there, nobody outside).
if [ -z "${WEIR_WIRE_INNER:-}" ]; then
  exec unshare -rn env WEIR_WIRE_INNER=1 WEIR_BIN="$WEIR_BIN" TINYPROXY="${TINYPROXY:-none}" HAPROXY="${HAPROXY:-none}" "$0" "$@"
fi

# shellcheck source=scripts/lib-bench.sh
. "$ROOT/scripts/lib-bench.sh"
bench_tmp
WORK="$TMP"
HZ="$(getconf CLK_TCK)"
wait_port() { # host port [netns pid]
  for _ in $(seq 100); do
    if [ -n "${3:-}" ]; then
      nsenter -t "$3" -n bash -c "exec 3<>/dev/tcp/$1/$2" 2>/dev/null && return 0
    else
      (exec 3<>"/dev/tcp/$1/$2") 2>/dev/null && return 0
    fi
    sleep 0.1
  done
  echo "port $1:$2 never opened" >&2; exit 1
}

# The far side: a second network namespace, held open by a sleeper, joined by a veth pair.
ip link set lo up
unshare -n sleep infinity &
FAR=$!; PIDS+=("$FAR")
sleep 0.2
ip link add wnear type veth peer name wfar
ip link set wfar netns "/proc/$FAR/ns/net"
ip addr add 10.77.0.1/24 dev wnear; ip link set wnear up
nsenter -t "$FAR" -n sh -c 'ip link set lo up; ip addr add 10.77.0.2/24 dev wfar; ip link set wfar up'
SRC_PORT=9000
nsenter -t "$FAR" -n python3 "$ROOT/scripts/tunnel_source.py" 10.77.0.2 "$SRC_PORT" "$TUNNEL_MIB" &
PIDS+=($!)
wait_port 10.77.0.2 "$SRC_PORT"
# The loopback source (rate `loopback`, only when asked): the same source in this namespace, on
# the same cores.
case " $WIRE_RATES " in *" loopback "*)
  python3 "$ROOT/scripts/tunnel_source.py" 127.0.0.1 "$SRC_PORT" "$TUNNEL_MIB" &
  PIDS+=($!)
  wait_port 127.0.0.1 "$SRC_PORT" ;;
esac

WEIR_PORT=9101
cat > "$WORK/weir.toml" <<EOF
listen = "127.0.0.1:$WEIR_PORT"
default_upstreams = false
allow_private_targets = true
watch_github_status = false

[network]
detect_os = false
EOF
WEIR_LOG=weir=warn "$WEIR_BIN" serve --config "$WORK/weir.toml" --data-dir "$WORK/weir-data" >"$WORK/weir.log" 2>&1 &
WEIR_PID=$!; PIDS+=("$WEIR_PID")
wait_port 127.0.0.1 "$WEIR_PORT"

TINY_PID=""
if [ -n "$TINYPROXY" ]; then
  TINY_PORT=9102
  printf 'Port %s\nListen 127.0.0.1\nTimeout 600\nMaxClients 100\nConnectPort %s\nLogLevel Error\n' \
    "$TINY_PORT" "$SRC_PORT" > "$WORK/tinyproxy.conf"
  "$TINYPROXY" -d -c "$WORK/tinyproxy.conf" >"$WORK/tinyproxy.log" 2>&1 &
  TINY_PID=$!; PIDS+=("$TINY_PID")
  wait_port 127.0.0.1 "$TINY_PORT"
fi

HA_PID=""
if [ -n "$HAPROXY" ]; then
  HA_FAR=9103 HA_LO=9104   # one listener per source: a relay has no CONNECT to name its target
  cat > "$WORK/haproxy.cfg" <<EOF
global
  maxconn 100
defaults
  mode tcp
  option splice-request
  option splice-response
  timeout connect 5s
  timeout client 600s
  timeout server 600s
listen far
  bind 127.0.0.1:$HA_FAR
  server src 10.77.0.2:$SRC_PORT
listen lo
  bind 127.0.0.1:$HA_LO
  server src 127.0.0.1:$SRC_PORT
EOF
  "$HAPROXY" -db -f "$WORK/haproxy.cfg" >"$WORK/haproxy.log" 2>&1 &
  HA_PID=$!; PIDS+=("$HA_PID")
  wait_port 127.0.0.1 "$HA_FAR"
fi

shape() { # rate, both directions; `loopback` has no wire to shape
  [ "$1" = loopback ] && return 0
  tc qdisc replace dev wnear root tbf rate "$1" burst 512kb latency 50ms
  nsenter -t "$FAR" -n tc qdisc replace dev wfar root tbf rate "$1" burst 512kb latency 50ms
}

tunnel() { # name rate proxy-addr pid [relay-addr: connect there, no CONNECT]
  local before after out secs bytes src=10.77.0.2
  [ "$2" = loopback ] && src=127.0.0.1
  before="$( [ -n "$4" ] && bench_cpu_ticks "$4" || echo "0 0")"
  if [ -n "${5:-}" ]; then
    out="$(python3 "$ROOT/scripts/tunnel_sink.py" "$5")"
  else
    out="$(python3 "$ROOT/scripts/tunnel_sink.py" "$src:$SRC_PORT" "$3")"
  fi
  after="$( [ -n "$4" ] && bench_cpu_ticks "$4" || echo "0 0")"
  secs="${out% *}"; bytes="${out#* }"
  [ "$bytes" -eq $((TUNNEL_MIB << 20)) ] || { echo "$1: got $bytes bytes" >&2; exit 1; }
  awk -v n="$1" -v r="$2" -v s="$secs" -v b="$bytes" -v u=$((${after% *} - ${before% *})) \
      -v k=$((${after#* } - ${before#* })) -v hz="$HZ" -v p="$4" 'BEGIN {
    mbs = b / 1e6 / s; gib = b / 1073741824
    if (p == "") printf "wire %-8s tunnel %-10s %8.1f MB/s  %6.2f s wall\n", r, n, mbs, s
    else printf "wire %-8s tunnel %-10s %8.1f MB/s  %6.2f s wall  proxy CPU %.3f s/GiB (user %.3f, system %.3f)\n", r, n, mbs, s, (u + k) / hz / gib, u / hz / gib, k / hz / gib }'
}

echo "# bench-tunnel-wire $(date -u +%Y-%m-%dT%H:%MZ) on $(uname -sr), $(nproc) cores; weir $("$WEIR_BIN" --version 2>/dev/null | head -1)"
echo "# $TUNNEL_MIB MiB far side → client over veth shaped by tbf (loopback: no wire); $RUNS runs per rate, in turn"
[ -n "$HA_PID" ] && echo "# haproxy: $("$HAPROXY" -v | head -1); a tcp relay with splice, the client connects to it (no CONNECT)"
for rate in $WIRE_RATES; do
  shape "$rate"
  for _ in $(seq "$RUNS"); do
    tunnel direct "$rate" "" ""
    tunnel weir "$rate" "127.0.0.1:$WEIR_PORT" "$WEIR_PID"
    [ -n "$TINY_PID" ] && tunnel tinyproxy "$rate" "127.0.0.1:$TINY_PORT" "$TINY_PID"
    if [ -n "$HA_PID" ]; then
      ha=$HA_FAR; [ "$rate" = loopback ] && ha=$HA_LO
      tunnel haproxy "$rate" "" "$HA_PID" "127.0.0.1:$ha"
    fi
  done
done
