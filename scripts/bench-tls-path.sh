#!/usr/bin/env bash
# The real client path through Weir, against direct and the peers, in one run (issue #32):
#
#   1. a blind CONNECT tunnel moving TUNNEL_MIB (1 GiB) target → client: MB/s at the client,
#      and the proxy's CPU seconds per GiB (utime+stime from /proc/<pid>/stat, children too);
#      direct, Weir, tinyproxy;
#   2. new connections: CONNECT + TLS handshake, curl's time_appconnect p50 over RUNS runs;
#      direct, Weir (intercepted, its own CA), mitmproxy (when installed);
#   3. kept-alive intercepted requests, one connection, HTTP/1.1 and HTTP/2, a cache hit
#      (`GET /agents/sessions`, class `list`) and a pass-through (`other`): curl sends KEPT
#      requests on one connection; the proxy's CPU per request (all its threads' run time
#      from /proc/<pid>/task/*/schedstat, in ns) and the requests per second; mitmproxy too;
#   4. 32 concurrent connections (`hey -c 32`, when installed: apt-get install hey), h1 and
#      h2, hit and pass: req/s and the proxy's CPU per request; direct to the fake as well.
#
# PARTS (default "1 2 3 4") picks the parts to run, e.g. PARTS="3 4" for the kept-alive and
# 32-connection parts alone. CALLGRIND=1 runs Weir under valgrind's callgrind and adds, to each
# kept-alive Weir row of part 3, its user-space instructions per request (all threads; the
# steady measure on a loaded machine): `CALLGRIND=1 PARTS=3 KEPT=2000 scripts/bench-tls-path.sh`
# (needs valgrind; the CPU and req/s figures of such a run are valgrind's, not Weir's). The
# profiles are kept as out/bench/callgrind-tls-h{1.1,2}-{sessions,pass}.out (read them with
# `callgrind_annotate --inclusive=yes`). CPU figures are steady on a loaded machine only per request and
# roughly: wall-clock ones (MB/s, req/s, p50) move with whatever else runs.
#
# FLOOR=1 adds to part 3 the floor under the hit (#32 item 2): the same hit answered from
# memory by `weir-lab bare-tls` (hyper, hyper with streams in place, the h2 crate alone; LAB_BIN,
# default the release build) and by nginx, HTTP/1.1 and HTTP/2; with CALLGRIND=1 they run under
# callgrind too and a table of instructions per request ends the run. scripts/profile-h2-floor.sh
# is that run in one command.
#
#   scripts/bench-tls-path.sh                       # WEIR_BIN defaults to the release build
#   WEIR_BIN=target/release/weir TUNNEL_MIB=1024 RUNS=50 scripts/bench-tls-path.sh
#
# Needs: python3, curl, openssl; tinyproxy (apt-get install tinyproxy); mitmproxy is optional
# (MITMDUMP=/path/to/mitmdump, e.g. from `pip install mitmproxy` in a venv). Loopback only.
# Build Weir with `cargo build --release -p weir --all-features` first: figures are for it.
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
WEIR_BIN="${WEIR_BIN:-${CARGO_TARGET_DIR:-$ROOT/target}/release/weir}"
TUNNEL_MIB="${TUNNEL_MIB:-1024}"
RUNS="${RUNS:-50}"
PARTS="${PARTS:-1 2 3 4}"
KEPT="${KEPT:-4000}"      # requests per kept-alive measure (part 3)
HEY_N="${HEY_N:-20000}"   # requests per 32-connection measure (part 4)
part() { case " $PARTS " in *" $1 "*) return 0 ;; esac; return 1; }
MITMDUMP="${MITMDUMP:-$(command -v mitmdump || true)}"
TINYPROXY="${TINYPROXY:-$(command -v tinyproxy || true)}"
CALLGRIND="${CALLGRIND:-}"
FLOOR="${FLOOR:-}"
LAB_BIN="${LAB_BIN:-${CARGO_TARGET_DIR:-$ROOT/target}/release/weir-lab}"
HOST=api.githubcopilot.com
[ -x "$WEIR_BIN" ] || { echo "no weir at $WEIR_BIN: cargo build --release -p weir --all-features" >&2; exit 1; }
[ -z "$FLOOR" ] || [ -x "$LAB_BIN" ] || { echo "no weir-lab at $LAB_BIN: cargo build --release -p weir-lab" >&2; exit 1; }

# shellcheck source=scripts/lib-bench.sh
. "$ROOT/scripts/lib-bench.sh"
bench_tmp
WORK="$TMP"

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_port() { for _ in $(seq 600); do (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0; sleep 0.1; done; echo "port $1 never opened" >&2; exit 1; }
# utime+stime in clock ticks of a process and its children.
cpu_ticks() { local t; t="$(bench_cpu_ticks "$1")"; echo $((${t% *} + ${t#* })); }
HZ="$(getconf CLK_TCK)"

# ---- fixtures --------------------------------------------------------------------------------
# A source: every connection gets TUNNEL_MIB MiB, then EOF; the client reads to EOF (directly,
# or through a CONNECT proxy) and prints seconds taken (shared with bench-tunnel-wire.sh).
SRC_PORT="$(free_port)"
python3 "$ROOT/scripts/tunnel_source.py" 127.0.0.1 "$SRC_PORT" "$TUNNEL_MIB" &
PIDS+=($!)

# A TLS fake for HOST (a throwaway CA), for the handshakes.
openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=bench CA" -keyout "$WORK/ca.key" -out "$WORK/ca.pem" 2>/dev/null
openssl req -newkey rsa:2048 -nodes -subj "/CN=$HOST" -keyout "$WORK/leaf.key" -out "$WORK/leaf.csr" 2>/dev/null
printf 'subjectAltName=DNS:%s,IP:127.0.0.1\n' "$HOST" > "$WORK/san.ext"   # the IP for clients without --resolve (hey)
openssl x509 -req -in "$WORK/leaf.csr" -CA "$WORK/ca.pem" -CAkey "$WORK/ca.key" -CAcreateserial -days 2 -extfile "$WORK/san.ext" -out "$WORK/leaf.pem" 2>/dev/null
TLS_PORT="$(free_port)"
python3 - "$TLS_PORT" "$WORK/leaf.pem" "$WORK/leaf.key" <<'PY' &
import http.server, ssl, sys
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # Head and body leave in two writes: without this, Nagle holds the body for the client's
    # delayed ACK (40 ms per kept-alive request).
    disable_nagle_algorithm = True
    def do_GET(self):
        body = b'{"ok":true}'
        self.send_response(200); self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body))); self.end_headers(); self.wfile.write(body)
    def log_message(self, *a): pass
http.server.ThreadingHTTPServer.request_queue_size = 256   # 32 connections at once
srv = http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), H)
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER); ctx.load_cert_chain(sys.argv[2], sys.argv[3])
srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
srv.serve_forever()
PY
PIDS+=($!)

# ---- the proxies -----------------------------------------------------------------------------
WEIR_PORT="$(free_port)"
cat > "$WORK/weir.toml" <<EOF
listen = "127.0.0.1:$WEIR_PORT"
default_upstreams = false
allow_private_targets = true
watch_github_status = false

[[upstream]]
name = "copilot-api"
origin = "https://$HOST"
connect_to = "127.0.0.1:$TLS_PORT"
ca_file = "$WORK/ca.pem"

[network]
detect_os = false

# The kept-alive and 32-connection parts send thousands of requests a second from one
# identity: the per-client rate limit would answer most of them 429.
[rate_limit]
enabled = false
EOF
VG=()
[ -n "$CALLGRIND" ] && VG=(valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file="$WORK/callgrind.out")
WEIR_LOG=weir=warn "${VG[@]}" "$WEIR_BIN" serve --config "$WORK/weir.toml" --data-dir "$WORK/weir-data" >"$WORK/weir.log" 2>&1 &
WEIR_PID=$!; PIDS+=("$WEIR_PID")
wait_port "$WEIR_PORT"; wait_port "$SRC_PORT"; wait_port "$TLS_PORT"
WEIR_CA="$("$WEIR_BIN" ca path --config "$WORK/weir.toml" --data-dir "$WORK/weir-data")"

TINY_PID=""
if [ -n "$TINYPROXY" ]; then
  TINY_PORT="$(free_port)"
  printf 'Port %s\nListen 127.0.0.1\nTimeout 600\nMaxClients 100\nConnectPort %s\nLogLevel Error\n' \
    "$TINY_PORT" "$SRC_PORT" > "$WORK/tinyproxy.conf"
  "$TINYPROXY" -d -c "$WORK/tinyproxy.conf" >"$WORK/tinyproxy.log" 2>&1 &
  TINY_PID=$!; PIDS+=("$TINY_PID")
  wait_port "$TINY_PORT"
fi

MITM_PID=""
if [ -n "$MITMDUMP" ]; then
  MITM_PORT="$(free_port)"
  "$MITMDUMP" -q --listen-host 127.0.0.1 --listen-port "$MITM_PORT" --set confdir="$WORK/mitm" \
    --set connection_strategy=lazy --ssl-insecure >"$WORK/mitm.log" 2>&1 &
  MITM_PID=$!; PIDS+=("$MITM_PID")
  wait_port "$MITM_PORT"
  for _ in $(seq 50); do [ -f "$WORK/mitm/mitmproxy-ca-cert.pem" ] && break; sleep 0.1; done
fi

echo "# bench-tls-path $(date -u +%Y-%m-%dT%H:%MZ) on $(uname -sr), $(nproc) cores; weir $("$WEIR_BIN" --version 2>/dev/null | head -1)"
echo "# peers in this run: direct, weir${TINY_PID:+, tinyproxy $("$TINYPROXY" -v 2>&1 | awk '{print $2}')}${MITM_PID:+, mitmproxy $("$MITMDUMP" --version 2>/dev/null | awk '/Mitmproxy/ {print $2}')}"

if part 1; then
# ---- 1. blind tunnel -------------------------------------------------------------------------
tunnel() { # name proxy-addr pid
  local before after out secs bytes
  before="$( [ -n "$3" ] && cpu_ticks "$3" || echo 0)"
  out="$(python3 "$ROOT/scripts/tunnel_sink.py" "127.0.0.1:$SRC_PORT" "$2")"
  after="$( [ -n "$3" ] && cpu_ticks "$3" || echo 0)"
  secs="${out% *}"; bytes="${out#* }"
  [ "$bytes" -eq $((TUNNEL_MIB << 20)) ] || { echo "$1: got $bytes bytes" >&2; exit 1; }
  awk -v n="$1" -v s="$secs" -v b="$bytes" -v c=$((after - before)) -v hz="$HZ" -v p="$3" 'BEGIN {
    mbs = b / 1e6 / s; gib = b / 1073741824
    if (p == "") printf "tunnel %-10s %8.0f MB/s  %6.2f s wall\n", n, mbs, s
    else printf "tunnel %-10s %8.0f MB/s  %6.2f s wall  proxy CPU %.2f s/GiB\n", n, mbs, s, c / hz / gib }'
}
echo "## blind tunnel, $TUNNEL_MIB MiB target → client"
tunnel direct "" ""
tunnel weir "127.0.0.1:$WEIR_PORT" "$WEIR_PID"
[ -n "$TINY_PID" ] && tunnel tinyproxy "127.0.0.1:$TINY_PORT" "$TINY_PID"
fi

# ---- 2. new connections ----------------------------------------------------------------------
p50() { sort -n | awk '{ a[NR] = $1 } END { printf "%.2f", a[int((NR + 1) / 2)] * 1000 }'; }
appconnect() { # name curl-args...
  local name="$1"; shift
  local v
  v="$(for _ in $(seq "$RUNS"); do curl -s -o /dev/null -w '%{time_appconnect}\n' --http1.1 "$@"; done | p50)"
  printf 'new connection %-10s appconnect p50 %6s ms (%s runs)\n' "$name" "$v" "$RUNS"
}
if part 2; then
echo "## new connections: CONNECT + TLS handshake (curl time_appconnect)"
appconnect direct --cacert "$WORK/ca.pem" --resolve "$HOST:$TLS_PORT:127.0.0.1" "https://$HOST:$TLS_PORT/"
appconnect weir --cacert "$WEIR_CA" -x "http://127.0.0.1:$WEIR_PORT" "https://$HOST/agents/sessions"
if [ -n "$MITM_PID" ]; then
  appconnect mitmproxy --cacert "$WORK/mitm/mitmproxy-ca-cert.pem" -x "http://127.0.0.1:$MITM_PORT" "https://$HOST:$TLS_PORT/"
else
  echo "new connection mitmproxy  not measured: set MITMDUMP (pip install mitmproxy in a venv)"
fi
fi

# ---- 3. kept-alive intercepted requests ------------------------------------------------------
# Run time in ns of every thread of a process (schedstat's first field), finer than stat's ticks.
run_ns() {
  local t=0 f v
  for f in /proc/"$1"/task/*/schedstat; do
    read -r v _ <"$f" 2>/dev/null || continue
    t=$((t + v))
  done
  echo "$t"
}
# The callgrind output file of each process run under callgrind (Weir; the floor's servers).
declare -A CG_FILE=()
[ -n "$CALLGRIND" ] && CG_FILE[$WEIR_PID]="$WORK/callgrind.out"
# Instructions per request of each "name proto" row measured under callgrind (the floor's table).
declare -A INSTR=()
# name proto(1.1|2) url proxy-addr|direct:PORT pid cacert [n]
# direct:PORT sends the same requests straight to a TLS server on PORT (curl --connect-to: the
# same URL, SNI and Host as through a proxy's tunnel).
kept() {
  local name="$1" proto="$2" url="$3" proxy="$4" pid="$5" ca="$6" n="${7:-$KEPT}" before after t0 t1
  local route=(-x "http://$proxy")
  case "$proxy" in direct:*) route=(--connect-to "$HOST:443:127.0.0.1:${proxy#direct:}") ;; esac
  : >"$WORK/urls.cfg"
  for _ in $(seq "$n"); do printf 'url = "%s"\noutput = "/dev/null"\n' "$url"; done >"$WORK/urls.cfg"
  # Warm-up: the cache entry, the upstream pool, the leaf.
  curl -s -o /dev/null --cacert "$ca" "${route[@]}" -H 'Authorization: token gho_bench' "$url"
  local cg="${CG_FILE[$pid]:-}"
  # Callgrind counts from here to the dump only (instrumentation is off elsewhere).
  [ -n "$cg" ] && callgrind_control -i on "$pid" >/dev/null 2>&1
  before="$(run_ns "$pid")"; t0="$(date +%s%N)"
  curl -s --http"$proto" --cacert "$ca" "${route[@]}" -H 'Authorization: token gho_bench' \
    -K "$WORK/urls.cfg" -w '%{http_code}\n' >"$WORK/codes.txt"
  t1="$(date +%s%N)"; after="$(run_ns "$pid")"
  local instr=""
  if [ -n "$cg" ]; then
    callgrind_control -i off "$pid" >/dev/null 2>&1; callgrind_control -d "$pid" >/dev/null 2>&1; sleep 1
    local f t total=0 keep="callgrind-tls-h$proto-${url##*/}.out"
    [ "$name" = weir ] || keep="callgrind-tls-$name-h$proto.out"
    for f in "$cg".[0-9]*; do
      t="$(callgrind_annotate "$f" 2>/dev/null | awk '/PROGRAM TOTALS/ {gsub(",", "", $1); print $1}')"
      total=$((total + ${t:-0}))
      mv "$f" "$OUT/$keep"
    done
    INSTR["$name ${url##*/} $proto"]=$((total / n))
    instr="  $((total / n)) instructions/req (callgrind)"
  fi
  [ "$(grep -c '^200$' "$WORK/codes.txt")" -eq "$n" ] || { echo "kept $name: not all 200: $(sort "$WORK/codes.txt" | uniq -c | head -3)" >&2; return 1; }
  awk -v nm="$name" -v p="$proto" -v u="/${url#https://*/}" -v n="$n" -v c=$((after - before)) -v w=$((t1 - t0)) -v i="$instr" 'BEGIN {
    printf "kept-alive %-10s h%-3s %-18s %7.1f µs proxy CPU/req  %7.0f req/s (%d on one connection)%s\n", nm, p, u, c / n / 1000, n / (w / 1e9), n, i }'
}
HIT=/agents/sessions
PASS=/bench/pass
# ---- the floor (FLOOR=1): Weir's hit answered by servers with nothing of Weir's in them -----
# Every one answers each GET from memory with Weir's answer to the hit (its status line, header
# fields and body as curl reads them through Weir now; Age and X-Request-Id made per answer):
# `weir-lab bare-tls` with hyper (tasks per HTTP/2 stream, stock), hyper with each stream polled
# in place first (as Weir runs them), the h2 crate alone (HTTP/2 only); nginx (`return 200`
# and add_header, one worker). The client is the same curl, the same URL, SNI and request
# headers (straight to the server with --connect-to, where Weir's ran through the tunnel).
# All run under callgrind when CALLGRIND=1.
floor() {
  curl -s -D "$WORK/hit.head" -o "$WORK/hit.body" --http1.1 --cacert "$WEIR_CA" -x "http://127.0.0.1:$WEIR_PORT" \
    -H 'Authorization: token gho_bench' "https://$HOST$HIT"
  local fields=() line
  while IFS= read -r line; do
    line="${line%$'\r'}"
    # The last head only: curl -D writes the CONNECT's 200 first.
    case "$line" in HTTP/*) fields=(); continue ;; '') continue ;; esac
    fields+=("$line")
  done <"$WORK/hit.head"
  echo "# the floor's answer: Weir's hit, $(head -1 "$WORK/hit.head" | tr -d '\r'), $(wc -c <"$WORK/hit.body") body bytes, fields: $(printf '%s; ' "${fields[@]%%:*}")"
  # An ECDSA P-256 leaf for HOST from a throwaway CA, as Weir's own leaves are.
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 -subj "/CN=floor CA" \
    -keyout "$WORK/floor-ca.key" -out "$WORK/floor-ca.pem" 2>/dev/null
  openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=$HOST" \
    -keyout "$WORK/floor.key" -out "$WORK/floor.csr" 2>/dev/null
  openssl x509 -req -in "$WORK/floor.csr" -CA "$WORK/floor-ca.pem" -CAkey "$WORK/floor-ca.key" -CAcreateserial \
    -days 2 -extfile "$WORK/san.ext" -out "$WORK/floor.pem" 2>/dev/null
  local args=() f engine port pid proto vg
  for f in "${fields[@]}"; do args+=(--header "$f"); done
  for engine in hyper hyper-inline h2; do
    port="$(free_port)"; vg=()
    [ -n "$CALLGRIND" ] && vg=(valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file="$WORK/cg-$engine.out")
    "${vg[@]}" "$LAB_BIN" bare-tls --listen "127.0.0.1:$port" --cert "$WORK/floor.pem" --key "$WORK/floor.key" \
      --engine "$engine" "${args[@]}" --body-file "$WORK/hit.body" >"$WORK/bare-$engine.log" 2>&1 &
    pid=$!; PIDS+=("$pid")
    [ -n "$CALLGRIND" ] && CG_FILE[$pid]="$WORK/cg-$engine.out"
    wait_port "$port"
    for proto in 1.1 2; do
      [ "$engine" = h2 ] && [ "$proto" = 1.1 ] && continue   # the h2 crate speaks HTTP/2 only
      kept "bare-$engine" "$proto" "https://$HOST$HIT" "direct:$port" "$pid" "$WORK/floor-ca.pem"
    done
    kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null || true
  done
  if command -v nginx >/dev/null; then
    port="$(free_port)"; mkdir -p "$WORK/nginx/tmp"
    local adds="" type="application/octet-stream" name value q body
    for f in "${fields[@]}"; do
      name="${f%%:*}"; value="${f#*:}"; value="${value# }"
      case "${name,,}" in
        content-type) type="$value" ;;
        # nginx writes these itself (Keep-Alive from keepalive_timeout's second value).
        age|x-request-id|connection|keep-alive|content-length|date|server) ;;
        *) q="${value//\\/\\\\}"; adds+="      add_header $name '${q//\'/\\\'}' always;"$'\n' ;;
      esac
    done
    body="$(cat "$WORK/hit.body")"; body="${body//\\/\\\\}"; body="${body//\'/\\\'}"
    cat >"$WORK/nginx/nginx.conf" <<NGX
worker_processes 1;
master_process off;
daemon off;
pid $WORK/nginx/nginx.pid;
error_log $WORK/nginx/error.log warn;
events { worker_connections 256; }
http {
  access_log off;
  keepalive_requests 1000000;
  keepalive_timeout 75s 9s;
  client_body_temp_path $WORK/nginx/tmp/body;
  proxy_temp_path $WORK/nginx/tmp/proxy;
  fastcgi_temp_path $WORK/nginx/tmp/fastcgi;
  uwsgi_temp_path $WORK/nginx/tmp/uwsgi;
  scgi_temp_path $WORK/nginx/tmp/scgi;
  server {
    listen 127.0.0.1:$port ssl http2;
    server_name $HOST;
    ssl_certificate $WORK/floor.pem;
    ssl_certificate_key $WORK/floor.key;
    location / {
      default_type "$type";
$adds      add_header Age 0 always;
      add_header X-Request-Id \$request_id always;
      return 200 '$body';
    }
  }
}
NGX
    vg=(); [ -n "$CALLGRIND" ] && vg=(valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file="$WORK/cg-nginx.out")
    "${vg[@]}" nginx -p "$WORK/nginx" -c "$WORK/nginx/nginx.conf" >"$WORK/nginx.log" 2>&1 &
    pid=$!; PIDS+=("$pid")
    [ -n "$CALLGRIND" ] && CG_FILE[$pid]="$WORK/cg-nginx.out"
    wait_port "$port"
    for proto in 1.1 2; do
      kept nginx "$proto" "https://$HOST$HIT" "direct:$port" "$pid" "$WORK/floor-ca.pem"
    done
    kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null || true
  else
    echo "# nginx: not installed (apt-get install nginx)"
  fi
  [ -n "$CALLGRIND" ] || return 0
  # The table: instructions per request, h2 against h1 and against Weir's own whole h1 hit.
  local w1="${INSTR[weir sessions 1.1]:-0}" row a b
  echo "## the floor: instructions per kept-alive hit (callgrind, $KEPT on one connection)"
  printf '%-18s %10s %10s %8s %14s\n' server h1.1 h2 h2/h1 "h2 - weir h1"
  for row in weir bare-hyper bare-hyper-inline bare-h2 nginx; do
    a="${INSTR[$row sessions 1.1]:-}"; b="${INSTR[$row sessions 2]:-}"
    [ -n "$a$b" ] || continue
    awk -v r="$row" -v a="$a" -v b="$b" -v w="$w1" 'BEGIN {
      printf "%-18s %10s %10s %8s %+14d\n", r, (a == "" ? "-" : a), (b == "" ? "-" : b),
        (a == "" || b == "" ? "-" : sprintf("%.2f", b / a)), (b == "" ? 0 : b - w) }'
  done
}
if part 3; then
  echo "## kept-alive intercepted requests, one connection (curl -K, $KEPT requests each)"
  for proto in 1.1 2; do
    kept weir "$proto" "https://$HOST$HIT" "127.0.0.1:$WEIR_PORT" "$WEIR_PID" "$WEIR_CA"
    kept weir "$proto" "https://$HOST$PASS" "127.0.0.1:$WEIR_PORT" "$WEIR_PID" "$WEIR_CA"
  done
  [ -n "$FLOOR" ] && floor
  if [ -n "$MITM_PID" ]; then
    # mitmproxy caches nothing: its every request passes to the fake (named by IP, which it
    # reaches without DNS), with a quarter of the requests (it is ~20x slower per request).
    for proto in 1.1 2; do
      kept mitmproxy "$proto" "https://127.0.0.1:$TLS_PORT$PASS" "127.0.0.1:$MITM_PORT" "$MITM_PID" \
        "$WORK/mitm/mitmproxy-ca-cert.pem" $((KEPT / 4)) || true
    done
  fi
fi

# ---- 4. 32 concurrent connections ------------------------------------------------------------
# name h1|h2 url pid cacert [proxy]
conns32() {
  local name="$1" proto="$2" url="$3" pid="$4" ca="$5" proxy="${6:-}" before after rps flag=""
  [ "$proto" = h2 ] && flag="-h2"
  before="$( [ -n "$pid" ] && run_ns "$pid" || echo 0)"
  SSL_CERT_FILE="$ca" hey -n "$HEY_N" -c 32 $flag ${proxy:+-x "$proxy"} \
    -H 'Authorization: token gho_bench' "$url" >"$WORK/hey.txt" 2>&1 || true
  after="$( [ -n "$pid" ] && run_ns "$pid" || echo 0)"
  rps="$(awk '/Requests\/sec/ {print $2}' "$WORK/hey.txt")"
  ok="$(awk '/\[200\]/ {print $2; exit}' "$WORK/hey.txt")"
  [ "${ok:-0}" -eq "$HEY_N" ] || { echo "32 connections $name $proto $url: ${ok:-0}/$HEY_N answered 200 ($(grep -A3 -i 'error' "$WORK/hey.txt" | head -3))" >&2; }
  awk -v nm="$name" -v p="$proto" -v u="${url#https://*/}" -v r="${rps:-0}" -v n="$HEY_N" -v c=$((after - before)) -v pid="$pid" 'BEGIN {
    if (pid == "") printf "32 connections %-10s %s /%-17s %8.0f req/s\n", nm, p, u, r
    else printf "32 connections %-10s %s /%-17s %8.0f req/s  %6.1f µs proxy CPU/req\n", nm, p, u, r, c / n / 1000 }'
}
if part 4; then
  if command -v hey >/dev/null; then
    echo "## 32 concurrent connections (hey -c 32, $HEY_N requests each)"
    conns32 direct h1 "https://127.0.0.1:$TLS_PORT$PASS" "" "$WORK/ca.pem"
    for proto in h1 h2; do
      conns32 weir "$proto" "https://$HOST$HIT" "$WEIR_PID" "$WEIR_CA" "http://127.0.0.1:$WEIR_PORT"
      conns32 weir "$proto" "https://$HOST$PASS" "$WEIR_PID" "$WEIR_CA" "http://127.0.0.1:$WEIR_PORT"
    done
  else
    echo "## 32 concurrent connections: not measured (apt-get install hey)"
  fi
fi
curl -s "http://127.0.0.1:$WEIR_PORT/_weir/api/status" | python3 -c 'import json,sys; s=json.load(sys.stdin); print("# weir status: tunnels", s["tunnels"], "tunnel_bytes", s["tunnel_bytes"], "interception", s["interception"])'
