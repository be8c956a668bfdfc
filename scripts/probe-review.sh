#!/usr/bin/env bash
# The review's probes (issue #31, "Why"), run from outside against a release `weir serve`:
# each prints PASS (refused, as #31 asks) or FAIL (it got through), or SKIP with the reason.
#
#   scripts/probe-review.sh                 (builds the release binary if missing)
#   WEIR_BIN=/path/to/weir scripts/probe-review.sh
#
# Everything runs on 127.0.0.1 and is stopped at exit: `weir serve` with its own config and
# data dir, a fake upstream answering 503 to every create (an outage, so creates are queued)
# and a squatter on a free port. Needs python3 and curl. Exit status: the number of FAILs.
set -euo pipefail
cd "$(dirname "$0")/.."
TARGET_DIR="${CARGO_TARGET_DIR:-target}"
WEIR="${WEIR_BIN:-$TARGET_DIR/release/weir}"
[ -x "$WEIR" ] || cargo build --release -q -p weir
for tool in python3 curl; do
  command -v "$tool" >/dev/null || { echo "probe: $tool is not installed" >&2; exit 2; }
done

TMP="$(mktemp -d)"
PIDS=()
cleanup() {
  for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
  rm -rf "$TMP"
}
trap cleanup EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
UP_PORT="$(free_port)"; WEIR_PORT="$(free_port)"; SQUAT_PORT="$(free_port)"
FAILS=0
pass() { echo "PASS  $1"; }
fail() { echo "FAIL  $1"; FAILS=$((FAILS + 1)); }
skip() { echo "SKIP  $1"; }

# The upstream: every request answered 503 (creates are queued by Weir).
cat >"$TMP/up.py" <<'EOF'
import http.server, sys
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def log_message(self, *a): pass
    def answer(self):
        n = int(self.headers.get("Content-Length") or 0)
        if n: self.rfile.read(n)
        b = b'{"message":"unavailable"}'
        self.send_response(503); self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(b))); self.end_headers(); self.wfile.write(b)
    do_GET = do_POST = answer
http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
EOF
python3 "$TMP/up.py" "$UP_PORT" & PIDS+=($!)

cat >"$TMP/weir.toml" <<EOF
listen = "127.0.0.1:$WEIR_PORT"
watch_github_status = false

[[upstream]]
name = "copilot"
origin = "http://127.0.0.1:$UP_PORT"

# A managed https host, so that CONNECTs to it are intercepted (probe 5); never reached: every
# handshake the probe starts is refused or abandoned before a request. Its `connect_to` and
# `ca_file` are what a settings PUT must keep (probe 6).
[[upstream]]
name = "copilot-tls"
origin = "https://api.individual.githubcopilot.com"
connect_to = "127.0.0.1:9"
ca_file = "$TMP/corp-ca.pem"

[queue]
credentials = "memory"

[breaker]
minimum_calls = 100000
consecutive_failures = 0
EOF
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 1 -subj /CN=probe-corp-ca \
  -keyout "$TMP/corp-ca.key" -out "$TMP/corp-ca.pem" >/dev/null 2>&1
# No session bus: Weir keeps its secrets in files (probe 6 reads the control secret, as the
# developer's own tools would).
env -u DBUS_SESSION_BUS_ADDRESS WEIR_LOG=warn "$WEIR" serve --config "$TMP/weir.toml" --data-dir "$TMP/data" >"$TMP/weir.log" 2>&1 &
PIDS+=($!)
for _ in $(seq 100); do
  curl -s -o /dev/null "http://127.0.0.1:$WEIR_PORT/_weir/api/health" && break
  sleep 0.1
done
BASE="http://127.0.0.1:$WEIR_PORT"
create() { # $1: Authorization value ("" for none), $2: statement
  local auth=()
  [ -n "$1" ] && auth=(-H "Authorization: $1")
  curl -s -o /dev/null -w '%{http_code}' -x "$BASE" "${auth[@]}" -H 'Content-Type: application/json' \
    -d "{\"problem_statement\":\"$2\"}" "http://127.0.0.1:$UP_PORT/agents/swe/v1/jobs/octo/probe"
}

# 1. The policy view without the control secret.
code=$(curl -s -o "$TMP/policy.json" -w '%{http_code}' "$BASE/_weir/api/policy")
if [ "$code" = 200 ]; then fail "GET /_weir/api/policy without the secret answered 200"; else pass "GET /_weir/api/policy without the secret: $code"; fi

# 2. A create with no credential (a page's no-cors POST) is never queued.
code=$(create "" "probe no credential")
if [ "$code" = 201 ] || [ "$code" = 202 ]; then fail "a create without Authorization was queued ($code)"; else pass "a create without Authorization is not queued: $code"; fi

# 3. Filling the queue: 25 creates of one credential, then 210 with a new credential each.
one=0; for i in $(seq 25); do c=$(create "token probe-one" "probe one $i"); [ "$c" = 201 ] || [ "$c" = 202 ] && one=$((one + 1)); done
many=0; for i in $(seq 210); do c=$(create "token probe-rot-$i" "probe rot $i"); [ "$c" = 201 ] || [ "$c" = 202 ] && many=$((many + 1)); done
total=$((one + many))
if [ "$one" -le 20 ]; then pass "one credential: $one of 25 queued (cap 20 per credential)"; else fail "one credential: $one of 25 queued"; fi
if [ "$total" -le 200 ]; then pass "rotating credentials: $total queued in all (cap 200)"; else fail "rotating credentials: $total queued in all"; fi

# 4. A squatter on the port catching the control secret: it answers the health check with this
#    install's public id; `weir queue ls` pointed at it must send no secret.
ID=$(curl -s "$BASE/_weir/api/health" | python3 -c 'import json,sys; d=json.load(sys.stdin); print(d.get("install_id") or d.get("install",""))')
cat >"$TMP/squat.py" <<'EOF'
import http.server, json, sys
port, ident, log = int(sys.argv[1]), sys.argv[2], sys.argv[3]
class H(http.server.BaseHTTPRequestHandler):
    def log_message(self, *a): pass
    def do_GET(self):
        with open(log, "a") as f:
            f.write("%s %s\n" % (self.path, "SECRET" if self.headers.get("X-Weir-Secret") else "-"))
        b = json.dumps({"status": "ok", "install_id": ident, "proof": "00" * 32}).encode()
        self.send_response(200); self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(b))); self.end_headers(); self.wfile.write(b)
    do_POST = do_PUT = do_DELETE = do_GET
http.server.ThreadingHTTPServer(("127.0.0.1", port), H).serve_forever()
EOF
: >"$TMP/squat.log"
python3 "$TMP/squat.py" "$SQUAT_PORT" "$ID" "$TMP/squat.log" & PIDS+=($!)
sleep 0.5
WEIR_CONTROL_SECRET=probe-secret timeout 20 "$WEIR" queue ls --config "$TMP/weir.toml" --data-dir "$TMP/data" \
  --listen "127.0.0.1:$SQUAT_PORT" >"$TMP/cli.out" 2>&1 || true
if grep -q SECRET "$TMP/squat.log"; then fail "the squatter received X-Weir-Secret"; else pass "the squatter got $(wc -l <"$TMP/squat.log") request(s), no secret"; fi

# 5. Leaf CPU burn by SNI: CONNECT to the managed host, then ClientHellos naming 20 other
#    `*.githubcopilot.com` names. No leaf may be issued for a name that is not the CONNECT
#    target (each would cost a key); the one matching handshake after them issues one.
metric() { curl -s "$BASE/metrics" | awk -v m="$1" '$1 == m {print $2; found=1} END {if (!found) print 0}'; }
hello() { # $1: SNI
  timeout 5 openssl s_client -connect api.individual.githubcopilot.com:443 -proxy "127.0.0.1:$WEIR_PORT" \
    -servername "$1" </dev/null >/dev/null 2>&1 || true
}
if command -v openssl >/dev/null; then
  before=$(metric weir_tls_leaves_issued_total)
  for i in $(seq 20); do hello "burn-$i.githubcopilot.com"; done
  after=$(metric weir_tls_leaves_issued_total)
  mismatched=$(metric 'weir_tls_handshake_failures_total{cause="sni_mismatch"}')
  if [ "$after" = "$before" ] && [ "${mismatched%.*}" -ge 20 ]; then
    pass "20 ClientHellos naming other hosts: no leaf issued, $mismatched refused as sni_mismatch"
  else
    fail "20 ClientHellos naming other hosts: leaves $before -> $after, sni_mismatch $mismatched"
  fi
  hello api.individual.githubcopilot.com
  matched=$(metric weir_tls_leaves_issued_total)
  if [ "$matched" = "$((after + 1))" ]; then pass "the CONNECT target's own name: one leaf"; else fail "the CONNECT target's own name: leaves $after -> $matched"; fi
else
  skip "leaf CPU burn by SNI: openssl is not installed"
fi

# 6. A settings PUT that repeats the running upstreams (more than the file names: the built-in
#    ones run too) and changes one other key keeps every key of the file's `[[upstream]]`.
SECRET_FILE=$(find "$TMP/data/secrets" -name control-secret -type f 2>/dev/null | head -1)
if [ -n "$SECRET_FILE" ]; then
  SECRET=$(cat "$SECRET_FILE")
  curl -s -H "X-Weir-Secret: $SECRET" "$BASE/_weir/api/settings" >"$TMP/settings.json"
  python3 - "$TMP/settings.json" >"$TMP/patch.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
ups = [{"name": u["name"], "origin": u["origin"]} for u in s["effective"]["upstreams"]]
print(json.dumps({"upstreams": ups, "breaker": {"minimum_calls": 100001}}))
PY
  code=$(curl -s -o "$TMP/put.out" -w '%{http_code}' -X PUT -H "X-Weir-Secret: $SECRET" \
    -H 'Content-Type: application/json' --data @"$TMP/patch.json" "$BASE/_weir/api/settings")
  if grep -q '^connect_to = "127.0.0.1:9"' "$TMP/weir.toml" && grep -q "^ca_file = \"$TMP/corp-ca.pem\"" "$TMP/weir.toml" \
     && grep -q 'minimum_calls = 100001' "$TMP/weir.toml"; then
    pass "a settings PUT ($code) changed the breaker and kept the upstream's connect_to and ca_file"
  else
    fail "a settings PUT ($code, $(head -c 200 "$TMP/put.out")) lost a key: $(grep -c 'connect_to\|ca_file' "$TMP/weir.toml") left"
  fi
else
  skip "settings PUT: the control secret is in a keychain here, not in files"
fi

# Not scripted here (each has its integration test; see docs/reliability.md and #31):
skip "learned hosts from a client's GraphQL answer (needs a github-api fake answering copilotEndpoints; tests: real_hosts.rs, upstream/learned.rs units)"
echo "probes: $FAILS failed"
exit "$FAILS"
