#!/usr/bin/env bash
# Overhead of Weir against a direct connection and against nginx, in one run, on loopback.
#
#   scripts/bench-overhead.sh [SECONDS]        (default 10 s per throughput run)
#   WEIR_BIN=/path/to/weir scripts/bench-overhead.sh    (measure that build instead)
#   WEIR_BIN=… LAB_BIN=/path/to/weir-lab scripts/bench-overhead.sh    (built already: no cargo)
#   WEIR_BEFORE=/path/to/old/weir scripts/bench-overhead.sh   (also measure an older build, same run)
#   PIN=1 scripts/bench-overhead.sh     (every server on the last CPU, wrk on the others)
#
# Starts (all on 127.0.0.1, all stopped at exit): the lab upstream (`weir-lab upstream`, answers
# at once), `weir serve` (release) managing it, nginx 1.22 with its own temporary config as a
# caching reverse proxy (proxy_cache) and as a plain reverse proxy, `weir-lab bare-proxy` (hyper's
# server and hyper-util's pooled client with nothing of Weir's between them: the floor under any
# proxy built like Weir), and HAProxy 2.6 as a plain
# reverse proxy (its cache keys by URL only, so it cannot keep one identity's answer from
# another and is not compared as a cache). Then, per target, wrk measures throughput
# (2 threads, 64 connections) and unloaded latency (1 connection).
#
# Why wrk with Lua: wrk writes whatever `wrk.path` holds as the request target, so a script that
# sets `wrk.path = "http://127.0.0.1:UP/agents/sessions"` makes wrk send absolute-form requests
# to the address on its command line, which is exactly what a tool with HTTP_PROXY sends to
# Weir. The same C load generator then measures every target, and it costs less CPU than any
# client we would write (everything shares 2 cores here).
#
# PIN=1: on a machine with few cores, wrk's threads and the server's share them, and which one
# the scheduler favours moves one run's req/s by ±10 % (BENCHMARKS.md, Session 23). Pinned,
# every server (the upstream, each proxy) runs on the last CPU and wrk on the others, so a
# target's req/s is what one core of it serves, and the ratio between targets follows their
# CPU per request. nginx and HAProxy then get one worker each (`nproc` after pinning), as
# Weir's runtime sizes itself to the CPUs it may use. Unpinned stays the default (it is how a laptop runs them).
#
# Memory: VmRSS of `weir serve` idle, holding 1,000 open keep-alive client connections
# (`weir-lab hold`), and after the load runs.
#
# Needs: wrk, nginx, haproxy, curl (apt-get install wrk nginx haproxy curl); missing ones are
# installed when apt-get is there. Output: out/bench/overhead.md.
set -euo pipefail
source "$(dirname "$0")/lib-bench.sh"
SECS="${1:-10}"
WRK=(wrk)
if [ "${PIN:-}" = 1 ]; then
  command -v taskset >/dev/null || { echo "bench-overhead: PIN=1 needs taskset (util-linux)" >&2; exit 2; }
  last=$(($(nproc --all) - 1))
  [ "$last" -ge 1 ] || { echo "bench-overhead: PIN=1 needs at least 2 CPUs" >&2; exit 2; }
  # This shell and every server it starts inherit the last CPU; wrk is moved to the others.
  taskset -p -c "$last" $$ >/dev/null
  WRK=(taskset -c "0-$((last - 1))" wrk)
fi
# One worker per CPU the servers may use, as Weir's runtime sizes itself (two unpinned here).
WORKERS="$(nproc)"

bench_install wrk nginx haproxy curl
bench_need bench-overhead "" wrk nginx haproxy curl
bench_bins
bench_tmp

wait_for() { # URL: until it answers (at most 10 s)
  for _ in $(seq 100); do curl -s -o /dev/null "$1" && return 0; sleep 0.1; done
  echo "bench-overhead: $1 did not come up" >&2; exit 1
}
rss_kb() { awk '/^VmRSS/ {print $2}' "/proc/$1/status"; }

# --- the upstream -------------------------------------------------------------------------
bench_upstream
wait_for "$UP/agents/sessions"

# --- Weir -------------------------------------------------------------------------------------
WEIR_PORT="$("$LAB" free-port)"
"$LAB" weir-config --upstream "$UP" --listen "127.0.0.1:$WEIR_PORT" >"$TMP/weir.toml"
WEIR_LOG=warn "$WEIR" serve --config "$TMP/weir.toml" --data-dir "$TMP/weir-data" >"$TMP/weir.out" 2>&1 &
WEIR_PID=$!
PIDS+=("$WEIR_PID")
wait_for "http://127.0.0.1:$WEIR_PORT/_weir/api/status"
sleep 1
RSS_IDLE="$(rss_kb "$WEIR_PID")"

# --- an older build, measured in the same run (WEIR_BEFORE) ----------------------------------
if [ -n "${WEIR_BEFORE:-}" ]; then
  OLD_PORT="$("$LAB" free-port)"
  "$LAB" weir-config --upstream "$UP" --listen "127.0.0.1:$OLD_PORT" >"$TMP/weir-old.toml"
  WEIR_LOG=warn "$WEIR_BEFORE" serve --config "$TMP/weir-old.toml" --data-dir "$TMP/weir-old-data" >"$TMP/weir-old.out" 2>&1 &
  OLD_PID=$!
  PIDS+=("$OLD_PID")
  wait_for "http://127.0.0.1:$OLD_PORT/_weir/api/status"
fi

# --- the floor: a forward proxy of hyper alone (`weir-lab bare-proxy`) -------------------------
# The same hyper server and hyper-util pooled client as Weir's pass-through, with nothing of
# Weir's between them: what any proxy built this way costs before it does anything.
"$LAB" bare-proxy >"$TMP/bare.out" &
BARE_PID=$!
PIDS+=("$BARE_PID")
for _ in $(seq 100); do [ -s "$TMP/bare.out" ] && break; sleep 0.1; done
BARE="$(head -1 "$TMP/bare.out")"

# --- nginx ------------------------------------------------------------------------------------
NGX_CACHE="$("$LAB" free-port)"
NGX_PLAIN="$("$LAB" free-port)"
mkdir -p "$TMP/nginx/cache" "$TMP/nginx/tmp"
cat >"$TMP/nginx/nginx.conf" <<EOF
worker_processes $WORKERS;
daemon off;
pid $TMP/nginx/nginx.pid;
error_log $TMP/nginx/error.log warn;
$( [ "$(id -u)" = 0 ] && echo "user root;" )
events { worker_connections 4096; }
http {
  access_log off;
  client_body_temp_path $TMP/nginx/tmp/body;
  proxy_temp_path $TMP/nginx/tmp/proxy;
  fastcgi_temp_path $TMP/nginx/tmp/fastcgi;
  uwsgi_temp_path $TMP/nginx/tmp/uwsgi;
  scgi_temp_path $TMP/nginx/tmp/scgi;
  proxy_cache_path $TMP/nginx/cache levels=1:2 keys_zone=lab:10m max_size=64m inactive=60s use_temp_path=off;
  upstream lab { server $UP_HOSTPORT; keepalive 64; }
  server {
    listen 127.0.0.1:$NGX_CACHE;
    location / {
      proxy_pass http://lab;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_cache lab;
      # Per identity, as Weir keys its cache.
      proxy_cache_key "\$request_uri|\$http_authorization";
      proxy_cache_valid 200 15s;
      proxy_cache_lock on;
    }
  }
  server {
    listen 127.0.0.1:$NGX_PLAIN;
    location / {
      proxy_pass http://lab;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
    }
  }
}
EOF
nginx -p "$TMP/nginx" -c "$TMP/nginx/nginx.conf" &
NGX_PID=$!
PIDS+=("$NGX_PID")
wait_for "http://127.0.0.1:$NGX_PLAIN/agents/sessions"

# --- HAProxy (plain reverse proxy, keep-alive to the upstream) ------------------------------
HAP_PLAIN="$("$LAB" free-port)"
cat >"$TMP/haproxy.cfg" <<EOF
global
  nbthread $WORKERS
  maxconn 8192
defaults
  mode http
  timeout connect 5s
  timeout client 30s
  timeout server 30s
  http-reuse always
frontend plain
  bind 127.0.0.1:$HAP_PLAIN
  default_backend lab
backend lab
  server up $UP_HOSTPORT
EOF
haproxy -f "$TMP/haproxy.cfg" -db >"$TMP/haproxy.out" 2>&1 &
HAP_PID=$!
PIDS+=("$HAP_PID")
wait_for "http://127.0.0.1:$HAP_PLAIN/agents/sessions"

# --- wrk scripts ---------------------------------------------------------------------------
bench_lua "$TMP/proxy-hit.lua" "$UP/agents/sessions"
bench_lua "$TMP/proxy-pass.lua" "$UP/repos/octo/lab"
bench_lua "$TMP/origin-hit.lua" "/agents/sessions"
bench_lua "$TMP/origin-pass.lua" "/repos/octo/lab"

to_us() { # "123.45us" | "1.23ms" | "1.01s" -> microseconds
  awk -v v="$1" 'BEGIN { n = v + 0; if (v ~ /us$/) print n; else if (v ~ /ms$/) print n * 1000; else if (v ~ /s$/) print n * 1000000; else print n }'
}
# CPU time (user + system, clock ticks) of a process and its children (nginx's workers): what
# one request costs the machine, whatever else shares it.
cpu_ticks() {
  local t=0 p
  for p in "$1" $(pgrep -P "$1" || true); do
    t=$((t + $(awk '{print $14 + $15}' "/proc/$p/stat" 2>/dev/null || echo 0)))
  done
  echo "$t"
}
HZ="$(getconf CLK_TCK)"
measure() { # LABEL URL SCRIPT PID: prints "label|rps|p50us|p99us|lat_p50us|lat_p99us|non2xx|cpu_us_per_req"
  local label="$1" url="$2" script="$TMP/$3.lua" pid="$4"
  "${WRK[@]}" -t1 -c8 -d2s -s "$script" "$url" >/dev/null   # warm-up (fills caches, pools)
  local c0 c1
  c0="$(cpu_ticks "$pid")"
  "${WRK[@]}" -t2 -c64 -d"${SECS}s" --latency -s "$script" "$url" >"$TMP/tp.txt"
  c1="$(cpu_ticks "$pid")"
  "${WRK[@]}" -t1 -c1 -d5s --latency -s "$script" "$url" >"$TMP/lat.txt"
  local rps p50 p99 l50 l99 non2xx
  rps="$(awk '/^Requests\/sec/ {print $2}' "$TMP/tp.txt")"
  p50="$(to_us "$(awk '$1 == "50%" {print $2}' "$TMP/tp.txt")")"
  p99="$(to_us "$(awk '$1 == "99%" {print $2}' "$TMP/tp.txt")")"
  l50="$(to_us "$(awk '$1 == "50%" {print $2}' "$TMP/lat.txt")")"
  l99="$(to_us "$(awk '$1 == "99%" {print $2}' "$TMP/lat.txt")")"
  non2xx="$(awk '/Non-2xx/ {s += $5} END {print s + 0}' "$TMP/tp.txt" "$TMP/lat.txt")"
  local n cpu
  n="$(awk '/requests in/ {print $1}' "$TMP/tp.txt")"
  cpu="$(awk -v d="$((c1 - c0))" -v hz="$HZ" -v n="$n" 'BEGIN { printf "%.1f", d * 1000000 / hz / n }')"
  echo "$label|$rps|$p50|$p99|$l50|$l99|${non2xx:-0}|$cpu"
}

W="http://127.0.0.1:$WEIR_PORT"
{
  measure "direct (list path)" "$UP/" origin-hit "$UP_PID"
  measure "Weir, cache hit (list)" "$W/" proxy-hit "$WEIR_PID"
  if [ -n "${WEIR_BEFORE:-}" ]; then measure "Weir before (WEIR_BEFORE), cache hit" "http://127.0.0.1:$OLD_PORT/" proxy-hit "$OLD_PID"; fi
  measure "nginx proxy_cache, hit" "http://127.0.0.1:$NGX_CACHE/" origin-hit "$NGX_PID"
  measure "direct (pass-through path)" "$UP/" origin-pass "$UP_PID"
  measure "Weir, pass-through (other)" "$W/" proxy-pass "$WEIR_PID"
  if [ -n "${WEIR_BEFORE:-}" ]; then measure "Weir before (WEIR_BEFORE), pass-through" "http://127.0.0.1:$OLD_PORT/" proxy-pass "$OLD_PID"; fi
  measure "bare hyper proxy (the floor under Weir)" "$BARE/" proxy-pass "$BARE_PID"
  measure "nginx plain reverse proxy" "http://127.0.0.1:$NGX_PLAIN/" origin-pass "$NGX_PID"
  measure "HAProxy plain reverse proxy" "http://127.0.0.1:$HAP_PLAIN/" origin-pass "$HAP_PID"
} >"$TMP/results.txt"
RSS_AFTER="$(rss_kb "$WEIR_PID")"

# --- memory with 1,000 open client connections -------------------------------------------
"$LAB" hold --proxy "127.0.0.1:$WEIR_PORT" --url "$UP/agents/sessions" --conns 1000 --seconds 30 >"$TMP/hold.out" &
HOLD_PID=$!
PIDS+=("$HOLD_PID")
for _ in $(seq 300); do grep -q '^held' "$TMP/hold.out" 2>/dev/null && break; sleep 0.1; done
sleep 1
HELD="$(awk '/^held/ {print $2}' "$TMP/hold.out")"
RSS_HELD="$(rss_kb "$WEIR_PID")"
kill "$HOLD_PID" 2>/dev/null || true

# --- report -----------------------------------------------------------------------------------
{
  echo "| target | req/s (2 threads, 64 conns, ${SECS} s) | p50 | p99 | unloaded p50 (1 conn) | unloaded p99 | added unloaded p50 vs direct | non-2xx | CPU per request (that process) |"
  echo "|---|--:|--:|--:|--:|--:|--:|--:|--:|"
  base=""
  while IFS='|' read -r label rps p50 p99 l50 l99 non2xx cpu; do
    case "$label" in direct*) base="$l50" ;; esac
    added="$(awk -v a="$l50" -v b="$base" 'BEGIN { printf "%+.0f µs", a - b }')"
    [ "${label#direct}" != "$label" ] && added="—"
    printf "| %s | %s | %.0f µs | %.0f µs | %.0f µs | %.0f µs | %s | %s | %s µs |\n" \
      "$label" "$(printf '%.0f' "$rps")" "$p50" "$p99" "$l50" "$l99" "$added" "$non2xx" "$cpu"
  done <"$TMP/results.txt"
  awk -F'|' '/^Weir, pass-through/ {w = $2} /^nginx plain/ {n = $2} /^Weir, cache hit/ {wh = $2}
    /^nginx proxy_cache/ {nh = $2}
    /^bare hyper proxy/ {b = $2}
    END { printf "\nPass-through: %.2f× nginx plain reverse proxy (the bare hyper proxy: %.2f×); cache hit: %.2f× nginx proxy_cache (same run).\n", w / n, b / n, wh / nh }' "$TMP/results.txt"
  echo
  echo "| weir serve (release) | VmRSS |"
  echo "|---|--:|"
  echo "| idle, just started | $((RSS_IDLE / 1024)) MiB ($RSS_IDLE kB) |"
  echo "| after the load runs above | $((RSS_AFTER / 1024)) MiB ($RSS_AFTER kB) |"
  echo "| holding ${HELD:-0} open client connections | $((RSS_HELD / 1024)) MiB ($RSS_HELD kB) |"
  echo
  echo "Machine: $(nproc --all) CPUs ($(awk -F': ' '/model name/ {print $2; exit}' /proc/cpuinfo)), Linux $(uname -r), $(rustc --version), $(nginx -v 2>&1 | sed 's/^nginx version: //'), HAProxy $(haproxy -v 2>&1 | awk 'NR==1 {print $3}'), $(wrk --version 2>&1 | head -1 | awk '{print $1, $2}').$([ "${PIN:-}" = 1 ] && echo " Pinned (PIN=1): the servers on CPU $last, wrk on the others.")"
} | tee "$OUT/overhead.md"
