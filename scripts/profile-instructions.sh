#!/usr/bin/env bash
# User-space instructions per request (valgrind's callgrind) of `weir serve` on the pass-through
# path (`pass`) or the cache-hit path (`hit`), or of the hyper-only `weir-lab bare-proxy`
# (`bare`, the floor under any proxy built like Weir's), over one connection on loopback.
# Instruction counts hardly move with other load on the machine, unlike req/s, so two builds
# can be compared on a busy machine.
#
#   scripts/profile-instructions.sh [pass|hit|bare|direct|nginx|nginx-cache] [SECONDS]   (defaults: pass, 4)
#
# `nginx` is the pass-through peer: nginx as a plain reverse proxy of the same upstream, one
# worker. `nginx-cache` is the cache-hit peer: the same nginx with `proxy_cache` keyed per
# identity, as scripts/bench-overhead.sh configures it. `direct` profiles the lab upstream
# itself: hyper's server answering from memory, the floor under a cache hit.
#   WEIR_BIN=/path/to/weir LAB_BIN=/path/to/weir-lab scripts/profile-instructions.sh pass
#
# Prints "instructions per request" and writes the callgrind file to
# out/bench/callgrind-<mode>.out (read it with `callgrind_annotate --inclusive=yes`).
# Needs valgrind, wrk, curl (apt-get install valgrind wrk curl).
set -euo pipefail
source "$(dirname "$0")/lib-bench.sh"
MODE="${1:-pass}"
SECS="${2:-4}"
bench_need profile-instructions "apt-get install valgrind wrk curl" valgrind wrk curl callgrind_control
bench_bins
bench_tmp
CG="$OUT/callgrind-$MODE.out"
rm -f "$CG"*
# valgrind itself is the background job (not a shell function), so $! is the pid that
# callgrind_control talks to.
VG=(valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file="$CG")
if [ "$MODE" = direct ]; then
  # The lab upstream itself under callgrind: hyper's server answering from memory, the floor
  # under a cache hit of any proxy built on hyper.
  bench_upstream "${VG[@]}"
else
  bench_upstream
fi
if [ "$MODE" = direct ]; then
  PID="$UP_PID"
  PROXY="$UP"
elif [ "$MODE" = nginx ] || [ "$MODE" = nginx-cache ]; then
  # The peer: nginx as a reverse proxy (one worker, no master, so callgrind sees it all).
  PORT="$("$LAB" free-port)"
  mkdir -p "$TMP/nginx/tmp" "$TMP/nginx/cache"
  CACHE_PATH=""; CACHE_LOC=""
  if [ "$MODE" = nginx-cache ]; then
    CACHE_PATH="proxy_cache_path $TMP/nginx/cache levels=1:2 keys_zone=lab:10m max_size=64m inactive=60s use_temp_path=off;"
    CACHE_LOC="proxy_cache lab; proxy_cache_key \"\$request_uri|\$http_authorization\"; proxy_cache_valid 200 15s; proxy_cache_lock on;"
  fi
  cat >"$TMP/nginx/nginx.conf" <<NGX
worker_processes 1;
master_process off;
daemon off;
pid $TMP/nginx/nginx.pid;
error_log $TMP/nginx/error.log warn;
$( [ "$(id -u)" = 0 ] && echo "user root;" )
events { worker_connections 1024; }
http {
  access_log off;
  client_body_temp_path $TMP/nginx/tmp/body;
  proxy_temp_path $TMP/nginx/tmp/proxy;
  fastcgi_temp_path $TMP/nginx/tmp/fastcgi;
  uwsgi_temp_path $TMP/nginx/tmp/uwsgi;
  scgi_temp_path $TMP/nginx/tmp/scgi;
  $CACHE_PATH
  upstream lab { server $UP_HOSTPORT; keepalive 16; }
  server {
    listen 127.0.0.1:$PORT;
    location / { proxy_pass http://lab; proxy_http_version 1.1; proxy_set_header Connection ""; $CACHE_LOC }
  }
}
NGX
  "${VG[@]}" nginx -p "$TMP/nginx" -c "$TMP/nginx/nginx.conf" >"$TMP/proxy.out" 2>"$TMP/valgrind.err" &
  PID=$!
  PROXY="http://127.0.0.1:$PORT"
  for _ in $(seq 300); do curl -s -o /dev/null "$PROXY/agents/sessions" && break; sleep 0.2; done
elif [ "$MODE" = bare ]; then
  "${VG[@]}" "$LAB" bare-proxy >"$TMP/proxy.out" 2>"$TMP/valgrind.err" &
  PID=$!
  for _ in $(seq 300); do [ -s "$TMP/proxy.out" ] && break; sleep 0.2; done
  PROXY="$(head -1 "$TMP/proxy.out")"
else
  PORT="$("$LAB" free-port)"
  "$LAB" weir-config --upstream "$UP" --listen "127.0.0.1:$PORT" >"$TMP/weir.toml"
  WEIR_LOG=warn "${VG[@]}" "$WEIR" serve --config "$TMP/weir.toml" --data-dir "$TMP/data" >"$TMP/proxy.out" 2>"$TMP/valgrind.err" &
  PID=$!
  PROXY="http://127.0.0.1:$PORT"
  for _ in $(seq 300); do curl -s -o /dev/null "$PROXY/_weir/api/health" && break; sleep 0.2; done
fi
[ "$MODE" = direct ] || PIDS+=("$PID")
path="/repos/octo/lab"; case "$MODE" in hit|nginx-cache|direct) path="/agents/sessions" ;; esac
target="$UP$path"; case "$MODE" in nginx*|direct) target="$path" ;; esac   # nginx is a reverse proxy: origin form
bench_lua "$TMP/req.lua" "$target"
wrk -t1 -c1 -d2s -s "$TMP/req.lua" "$PROXY/" >/dev/null   # warm-up: pools, caches, baselines
callgrind_control -i on "$PID" >/dev/null
wrk -t1 -c1 -d"${SECS}s" -s "$TMP/req.lua" "$PROXY/" >"$TMP/wrk.txt"
callgrind_control -i off "$PID" >/dev/null
callgrind_control -d "$PID" >/dev/null
sleep 1
n="$(awk '/requests in/ {print $1}' "$TMP/wrk.txt")"
total=0
for f in "$CG".[0-9]*; do
  [ -e "$f" ] || { echo "profile-instructions: callgrind wrote no dump ($(tail -3 "$TMP/valgrind.err"))" >&2; exit 1; }
  t="$(callgrind_annotate "$f" 2>/dev/null | awk '/PROGRAM TOTALS/ {gsub(",", "", $1); print $1}')"
  total=$((total + ${t:-0}))
done
echo "$MODE: $n requests, $((total / n)) instructions per request (callgrind, user space, all threads)"
