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

# TMP and PIDS, stopped and removed at exit.
# shellcheck source=scripts/lib-bench.sh
. scripts/lib-bench.sh
bench_tmp
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
# handshake the probe starts is refused or abandoned before a request. Its connect_to and
# ca_file are what a settings PUT must keep (probe 6).
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
up=0
for _ in $(seq 100); do
  curl -s -o /dev/null "http://127.0.0.1:$WEIR_PORT/_weir/api/health" && { up=1; break; }
  sleep 0.1
done
# A probe against no Weir would "pass" (nothing answered 200): stop instead.
[ "$up" = 1 ] || { echo "probe: weir serve did not answer on 127.0.0.1:$WEIR_PORT:" >&2; cat "$TMP/weir.log" >&2; exit 2; }
BASE="http://127.0.0.1:$WEIR_PORT"
create() { # $1: Authorization value ("" for none), $2: statement
  local auth=()
  [ -n "$1" ] && auth=(-H "Authorization: $1")
  curl -s -o /dev/null -w '%{http_code}' -x "$BASE" "${auth[@]}" -H 'Content-Type: application/json' \
    -d "{\"problem_statement\":\"$2\"}" "http://127.0.0.1:$UP_PORT/agents/swe/v1/jobs/octo/probe"
}

# 1. The policy view without the control secret.
code=$(curl -s -o "$TMP/policy.json" -w '%{http_code}' "$BASE/_weir/api/policy")
if [ "$code" = 000 ]; then fail "GET /_weir/api/policy: no answer (could not probe)"
elif [ "$code" = 200 ]; then fail "GET /_weir/api/policy without the secret answered 200"; else pass "GET /_weir/api/policy without the secret: $code"; fi

# 2. A create with no credential (a page's no-cors POST) is never queued.
code=$(create "" "probe no credential")
if [ "$code" = 000 ]; then fail "a create without Authorization: no answer (could not probe)"
elif [ "$code" = 201 ] || [ "$code" = 202 ]; then fail "a create without Authorization was queued ($code)"; else pass "a create without Authorization is not queued: $code"; fi

# 3. Filling the queue: 25 creates of one credential, then 210 with a new credential each.
one=0; for i in $(seq 25); do c=$(create "token probe-one" "probe one $i"); [ "$c" = 201 ] || [ "$c" = 202 ] && one=$((one + 1)); done
many=0; for i in $(seq 210); do c=$(create "token probe-rot-$i" "probe rot $i"); [ "$c" = 201 ] || [ "$c" = 202 ] && many=$((many + 1)); done
total=$((one + many))
if [ "$one" = 0 ]; then fail "one credential: none of 25 queued (the upstream's 503 should queue up to the cap; could not probe)"
elif [ "$one" -le 20 ]; then pass "one credential: $one of 25 queued (cap 20 per credential)"; else fail "one credential: $one of 25 queued"; fi
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
if [ ! -s "$TMP/squat.log" ]; then fail "the CLI never reached the squatter (could not probe)"
elif grep -q SECRET "$TMP/squat.log"; then fail "the squatter received X-Weir-Secret"; else pass "the squatter got $(wc -l <"$TMP/squat.log") request(s), no secret"; fi

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

# 8. Learned hosts from a client's GraphQL answer. A second `weir serve` (its own data dir, a
#    file secret store, so a GitHub token can be stored for its new-task path) whose upstreams
#    are all loopback fakes behind `connect_to` and the probe CA (`ca_file`): `github-api`
#    (TLS, answers every `POST /graphql` with `copilotEndpoints.api` = what the probe wrote to
#    a file, and `GET /user` with an account per token), `copilot-api` (TLS, where a new task
#    goes with no announcement), `copilot-individual` (TLS, a per-plan host) and `attacker`
#    (plain http, a configured upstream no announcement may ever name). A client that holds
#    the developer's own token posts, through Weir's interception of api.github.com, queries
#    whose answers name those hosts; then the dashboard's new task (a Weir-own request with the
#    stored token) shows where Weir sends the account's agent calls. Refused: nothing learned,
#    the task goes to `copilot-api`, the attacker listener sees no request. The control (gh's
#    exact query) must move the next task and learn a host, so the probe can fail.
if command -v openssl >/dev/null; then
  openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj /CN=probe-upstreams \
    -keyout "$TMP/up.key" -out "$TMP/up.csr" >/dev/null 2>&1
  printf 'subjectAltName=DNS:api.github.com,DNS:api.githubcopilot.com,DNS:api.individual.githubcopilot.com\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n' >"$TMP/up.ext"
  openssl x509 -req -in "$TMP/up.csr" -CA "$TMP/corp-ca.pem" -CAkey "$TMP/corp-ca.key" -CAcreateserial \
    -days 1 -extfile "$TMP/up.ext" -out "$TMP/up.pem" >/dev/null 2>&1
  cat >"$TMP/fake.py" <<'PY'
import http.server, json, ssl, sys
role, port, log, announce = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
tls = sys.argv[5:]  # cert, key: TLS; none: plain http
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def log_message(self, *a): pass
    def answer(self):
        n = int(self.headers.get("Content-Length") or 0)
        if n: self.rfile.read(n)
        with open(log, "a") as f: f.write("%s %s\n" % (self.command, self.path))
        status, doc = 200, {}
        if role == "github" and self.path == "/graphql":
            api = open(announce).read().strip()
            doc = {"data": {"viewer": {"copilotEndpoints": {"api": api}}}}
        elif role == "github" and self.path == "/user":
            owner = "owner" in (self.headers.get("Authorization") or "")
            doc = {"login": "probe-owner" if owner else "probe-other", "id": 4201 if owner else 4202}
        elif self.command == "POST" and self.path.startswith("/agents/swe/v1/jobs/"):
            status, doc = 201, {"job_id": "job-probe", "session_id": "s-probe"}
        elif self.path.startswith("/agents/sessions"):
            doc = {"sessions": []}
        b = json.dumps(doc).encode()
        self.send_response(status); self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(b))); self.end_headers(); self.wfile.write(b)
    do_GET = do_POST = do_PUT = do_DELETE = answer
srv = http.server.ThreadingHTTPServer(("127.0.0.1", port), H)
if tls:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER); ctx.load_cert_chain(tls[0], tls[1])
    srv.socket = ctx.wrap_socket(srv.socket, server_side=True, do_handshake_on_connect=False)
srv.serve_forever()
PY
  GH_PORT="$(free_port)"; DEF_PORT="$(free_port)"; PLAN_PORT="$(free_port)"; ATT_PORT="$(free_port)"; W8_PORT="$(free_port)"
  for f in gh def plan att; do : >"$TMP/$f.log"; done
  echo '{}' >"$TMP/announce"
  python3 "$TMP/fake.py" github "$GH_PORT" "$TMP/gh.log" "$TMP/announce" "$TMP/up.pem" "$TMP/up.key" & PIDS+=($!)
  python3 "$TMP/fake.py" copilot "$DEF_PORT" "$TMP/def.log" - "$TMP/up.pem" "$TMP/up.key" & PIDS+=($!)
  python3 "$TMP/fake.py" copilot "$PLAN_PORT" "$TMP/plan.log" - "$TMP/up.pem" "$TMP/up.key" & PIDS+=($!)
  python3 "$TMP/fake.py" attacker "$ATT_PORT" "$TMP/att.log" - & PIDS+=($!)
  # Weir goes offline by itself when no managed upstream answers at start: the fakes listen first.
  for port in "$GH_PORT" "$DEF_PORT" "$PLAN_PORT" "$ATT_PORT"; do
    for _ in $(seq 100); do (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break; sleep 0.1; done
  done
  cat >"$TMP/weir8.toml" <<EOT
listen = "127.0.0.1:$W8_PORT"
watch_github_status = false

[[upstream]]
name = "github-api"
connect_to = "127.0.0.1:$GH_PORT"
ca_file = "$TMP/corp-ca.pem"

[[upstream]]
name = "copilot-api"
connect_to = "127.0.0.1:$DEF_PORT"
ca_file = "$TMP/corp-ca.pem"

[[upstream]]
name = "copilot-individual"
connect_to = "127.0.0.1:$PLAN_PORT"
ca_file = "$TMP/corp-ca.pem"

[[upstream]]
name = "attacker"
origin = "http://127.0.0.1:$ATT_PORT"

[[upstream]]
name = "copilot-business"
enabled = false

[[upstream]]
name = "copilot-enterprise"
enabled = false
EOT
  env -u DBUS_SESSION_BUS_ADDRESS WEIR_LOG=warn "$WEIR" serve --config "$TMP/weir8.toml" --data-dir "$TMP/data8" >"$TMP/weir8.log" 2>&1 &
  PIDS+=($!)
  B8="http://127.0.0.1:$W8_PORT"
  for _ in $(seq 100); do
    curl -s -o /dev/null "$B8/_weir/api/health" && [ -s "$TMP/data8/ca/weir-ca.pem" ] && break
    sleep 0.1
  done
  for _ in $(seq 100); do
    curl -s "$B8/_weir/api/status" | python3 -c 'import json,sys; sys.exit(json.load(sys.stdin)["mode"]["offline"] is not None)' 2>/dev/null && break
    sleep 0.1
  done
  S8=$(cat "$(find "$TMP/data8/secrets" -name control-secret -type f 2>/dev/null | head -1)" 2>/dev/null || true)
  stored=$(curl -s -o "$TMP/token.out" -w '%{http_code}' -X PUT -H "X-Weir-Secret: $S8" \
    -H 'Content-Type: application/json' -d '{"token":"gho_probeowner"}' "$B8/_weir/api/token")
  graphql() { # $1: token, $2: the request body, $3: what the answer names
    printf '%s' "$3" >"$TMP/announce"
    curl -s -o "$TMP/graphql.out" -w '%{http_code} ' --cacert "$TMP/data8/ca/weir-ca.pem" -x "$B8" \
      -H "Authorization: token $1" -H 'Content-Type: application/json' --data "$2" https://api.github.com/graphql
    [ "$(head -c 1 "$TMP/graphql.out")" = "{" ] && grep -q '"kind"' "$TMP/graphql.out" && cp "$TMP/graphql.out" "$TMP/graphql.problem"
    sleep 0.3 # the answer is read once passed on whole
  }
  new_task() { # the dashboard's new task: a Weir-own create with the stored token
    curl -s -o "$TMP/task.out" -w '%{http_code}' -X POST -H "X-Weir-Secret: $S8" -H 'Content-Type: application/json' \
      -d "{\"repository\":\"octo/probe\",\"problem_statement\":\"probe 8 $1\"}" "$B8/_weir/api/sessions"
  }
  creates() { grep -c '^POST /agents/swe/v1/jobs/' "$TMP/$1.log" || true; }
  learned() {
    curl -s "$B8/_weir/api/status" | python3 -c 'import json,sys; print(" ".join(u["name"] for u in json.load(sys.stdin)["upstreams"] if u["name"].startswith("learned:")) or "none")'
  }
  ALIAS='{"query":"query{viewer{copilotEndpoints:status{api:message}}}"}'
  GH='{"query":"query CopilotEndpoints{viewer{copilotEndpoints{api}}}"}'
  codes=""
  # Aliased queries with the developer's own token: a configured plain-http upstream, a
  # configured per-plan host, a new githubcopilot.com host.
  codes+=$(graphql gho_probeowner "$ALIAS" "http://127.0.0.1:$ATT_PORT")
  codes+=$(graphql gho_probeowner "$ALIAS" "https://api.individual.githubcopilot.com")
  codes+=$(graphql gho_probeowner "$ALIAS" "https://api.evil.githubcopilot.com")
  # gh's exact query naming the plain-http upstream (the domain check comes first).
  codes+=$(graphql gho_probeowner "$GH" "http://127.0.0.1:$ATT_PORT")
  # gh's exact query by another account naming the per-plan host (kept for that account only).
  codes+=$(graphql gho_probeother "$GH" "https://api.individual.githubcopilot.com")
  after_attacks=$(learned)
  task1=$(new_task attacked)
  def1=$(creates def); plan1=$(creates plan)
  # The control: gh's exact query with the developer's token moves the next task to the host
  # it names, and another account's names a new host that is learned (no request goes there).
  codes+=$(graphql gho_probeowner "$GH" "https://api.individual.githubcopilot.com")
  codes+=$(graphql gho_probeother "$GH" "https://api.learned-probe.githubcopilot.com")
  task2=$(new_task control)
  plan2=$(creates plan)
  after_control=$(learned)
  att=$(wc -l <"$TMP/att.log")
  gql=$(grep -c '^POST /graphql' "$TMP/gh.log" || true)
  seen="token PUT $stored, graphql answers ${codes% } ($gql reached github-api); after the attacks: learned $after_attacks, new task $task1 -> copilot-api $def1 / copilot-individual $plan1 creates; attacker listener $att request(s); control: task $task2 -> copilot-individual $plan2, learned $after_control"
  if [ "$gql" != 7 ] || [ "$stored" != 200 ]; then
    fail "learned hosts via GraphQL: the probe could not run as planned ($seen; $(head -c 300 "$TMP/graphql.problem" 2>/dev/null); $(grep -v 'secrets' "$TMP/weir8.log" | tail -3))"
  elif [ "$after_attacks" != none ] || [ "$att" != 0 ] || [ "$def1" != 1 ] || [ "$plan1" != 0 ]; then
    fail "learned hosts via GraphQL: an attack took ($seen)"
  elif [ "$plan2" != 1 ] || [ "$after_control" != learned:api.learned-probe.githubcopilot.com ]; then
    fail "learned hosts via GraphQL: the control did not take, so the probe sees nothing ($seen)"
  else
    pass "learned hosts via a client's GraphQL: 5 attacks learned nothing, moved nothing ($seen)"
  fi
else
  skip "learned hosts from a client's GraphQL answer: openssl is not installed"
fi
echo "probes: $FAILS failed"
exit "$FAILS"
