#!/usr/bin/env bash
# Idle wakeups of `weir serve` (#32, "idle means asleep"): voluntary context switches and CPU
# time over N idle minutes, in three set-ups, side by side in one run.
#
#   scripts/bench-idle.sh                        (release build, 5 idle minutes)
#   IDLE_MINUTES=1 scripts/bench-idle.sh         (shorter)
#   WEIR_BIN=/path/to/weir scripts/bench-idle.sh (measure that build; nothing is built)
#   WEIR_BEFORE=/path/to/old/weir scripts/bench-idle.sh   (also measure an older build, same run)
#   scripts/with-keychain.sh scripts/bench-idle.sh        (with a real keychain, as on a laptop)
#   IDLE_STRACE=120 scripts/bench-idle.sh        (then what wakes: see "Tracing" below)
#   IDLE_TEAM=1 scripts/with-keychain.sh scripts/bench-idle.sh   (also `[team]`, needs nats-server)
#
# The set-ups, each its own `weir serve` with its own data dir, HOME and XDG dirs (nothing of
# the user's is read), listening on a free loopback port:
#   nothing   no config file, a fresh data dir;
#   queue     no config file, a data dir holding a queue file left by one create that was
#             queued (a loopback fake answered 503) and replayed (then 201) by an earlier
#             `weir serve` on that data dir with a config managing the fake;
#   all       the queue file too, plus a config file (watched), `[local_agent]`, the GitHub
#             Status watcher (on by default) and, with a keychain, a stored GitHub token (the
#             sessions poller). Parts this build lacks or this machine cannot run (`[team]`
#             needs the `team` feature and a NATS server, `[network] detect_os` the `metered`
#             feature and a system bus, gateway mode PostgreSQL and TLS) are left out.
# With IDLE_TEAM=1 (a keychain for the team key, and `nats-server` on PATH), two more, each
# with a config holding only `[team]` and a team key made with `weir team set-key --generate`:
#   team-up   the link to a loopback nats-server (one for every team set-up), connected;
#   team-down the link to a loopback port nothing listens on (NATS unreachable: a laptop away
#             from the team's network).
# All of them (and WEIR_BEFORE's) run at the same time; each is left alone for 15 s after it
# answers its status (start-up done, tokio's blocking threads from start-up gone), then
# measured for IDLE_MINUTES. Nothing but loopback: the default
# upstreams' hosts may be unreachable, which is what an idle laptop offline looks like.
#
# Wakeups are voluntary context switches (`voluntary_ctxt_switches` of /proc/PID/task/*/status),
# summed over the process's threads from one sampler that reads them every second (reading
# /proc wakes no one): a thread born during the window counts from 0, one that ends keeps its
# last sample (tokio's blocking threads live at least 10 s). CPU is utime + stime of
# /proc/PID/stat (the whole process, ended threads included). Also the window's last minute
# alone (with IDLE_MINUTES > 1): what backs off while idle (the team link with NATS
# unreachable) shows its settled rate there. Output: out/bench/idle.md.
#
# Tracing (IDLE_STRACE=SECONDS): after the measured window, each process is traced with
# `strace -f -tt` for that long, all of them at once (ptrace's stops are switches too, so this
# never overlaps the measurement), and what woke is summed up by thread (its comm name) and by
# the call it returned from (epoll_wait, futex, clock_nanosleep...), with each wake's times:
# out/bench/idle-trace-LABEL.txt, the raw trace beside it (.strace).
set -euo pipefail
source "$(dirname "$0")/lib-bench.sh"
MINUTES="${IDLE_MINUTES:-5}"

bench_need bench-idle "" curl python3
if [ -z "${WEIR_BIN:-}" ]; then
  cargo build --release -q -p weir
fi
WEIR="${WEIR_BIN:-$TARGET_DIR/release/weir}"
bench_tmp

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_for() { # URL: until it answers (at most 30 s)
  for _ in $(seq 300); do curl -s -o /dev/null "$1" && return 0; sleep 0.1; done
  echo "bench-idle: $1 did not come up" >&2; exit 1
}
# Runs BIN serve in set-up dir DIR (HOME and XDG dirs inside it) with the rest as arguments;
# its pid in SERVED.
serve() {
  local bin="$1" dir="$2"; shift 2
  mkdir -p "$dir/home" "$dir/config" "$dir/cache"
  HOME="$dir/home" XDG_CONFIG_HOME="$dir/config" XDG_CACHE_HOME="$dir/cache" WEIR_LOG=warn \
    "$bin" serve --data-dir "$dir/data" "$@" >"$dir/weir.out" 2>&1 &
  SERVED=$!
  PIDS+=("$SERVED")
}

# --- a loopback fake upstream: 503 to creates until $TMP/heal exists, then 201 ----------------
cat >"$TMP/fake.py" <<'PY'
import http.server, json, os, sys
heal, log = sys.argv[1], sys.argv[2]
class H(http.server.BaseHTTPRequestHandler):
    def _answer(self, status, body):
        b = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(b)))
        self.end_headers()
        self.wfile.write(b)
    def do_POST(self):
        self.rfile.read(int(self.headers.get("content-length", 0)))
        ok = os.path.exists(heal)
        with open(log, "a") as f:
            f.write(("201" if ok else "503") + " " + self.path + "\n")
        if ok:
            self._answer(201, {"job_id": "j1", "session_id": "s1"})
        else:
            self._answer(503, {"message": "unavailable"})
    def do_GET(self):
        self._answer(200, [])
    def log_message(self, *a):
        pass
s = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
print(s.server_address[1], flush=True)
s.serve_forever()
PY
python3 "$TMP/fake.py" "$TMP/heal" "$TMP/fake.log" >"$TMP/fake.port" &
PIDS+=("$!")
for _ in $(seq 100); do [ -s "$TMP/fake.port" ] && break; sleep 0.1; done
FAKE="http://127.0.0.1:$(head -1 "$TMP/fake.port")"

# --- the queue file: one create queued, then replayed --------------------------------------
# Made with WEIR (the build measured); every set-up with a queue file gets a copy.
make_queue_file() { # DIR
  local dir="$1" port
  port="$(free_port)"
  mkdir -p "$dir"
  cat >"$dir/queue.toml" <<TOML
default_upstreams = false
listen = "127.0.0.1:$port"
[[upstream]]
name = "fake"
origin = "$FAKE"
[queue]
credentials = "memory"
[breaker]
minimum_calls = 1000
consecutive_failures = 0
TOML
  rm -f "$TMP/heal" "$TMP/fake.log"
  serve "$WEIR" "$dir" --config "$dir/queue.toml"
  local pid="$SERVED"
  wait_for "http://127.0.0.1:$port/_weir/api/status"
  local answer
  answer="$(curl -s -x "http://127.0.0.1:$port" -H 'authorization: token gho_bench' \
    -H 'content-type: application/json' -d '{"problem_statement":"idle bench","event_type":"bench"}' \
    "$FAKE/agents/swe/v1/jobs/octo/repo" -D -)"
  if ! grep -qi '^location: /_weir/api/queue/' <<<"$answer"; then
    echo "bench-idle: the create was not queued:" >&2; echo "$answer" >&2; exit 1
  fi
  touch "$TMP/heal"
  for _ in $(seq 600); do grep -q '^201' "$TMP/fake.log" 2>/dev/null && break; sleep 0.1; done
  grep -q '^201' "$TMP/fake.log" || { echo "bench-idle: the queued create was not replayed" >&2; exit 1; }
  sleep 1
  kill "$pid"; wait "$pid" 2>/dev/null || true
  python3 - "$dir/data/queue.sqlite3" <<'PY'
import sqlite3, sys
rows = sqlite3.connect(sys.argv[1]).execute("SELECT state, COUNT(*) FROM queue_items GROUP BY state").fetchall()
assert rows == [("done", 1)], rows
PY
  cp -a "$dir/data" "$TMP/queue-data"
  rm -rf "$dir"
}
make_queue_file "$TMP/seed"

# --- the set-ups --------------------------------------------------------------------------------
SETUPS=(nothing queue all)
if [ -n "${IDLE_TEAM:-}" ]; then
  bench_need bench-idle "the NATS server, e.g. its release binary on PATH" nats-server
  NATS_PORT="$(free_port)"
  nats-server -a 127.0.0.1 -p "$NATS_PORT" >"$TMP/nats.log" 2>&1 &
  PIDS+=("$!")
  SETUPS+=(team-up team-down)
fi
declare -A PID_OF PORT_OF
start_setup() { # LABEL BIN SETUP
  local label="$1" bin="$2" setup="$3" dir="$TMP/$1" port
  port="$(free_port)"
  mkdir -p "$dir"
  local args=(--listen "127.0.0.1:$port")
  # A config file sits in its own directory (`$dir/config`, XDG_CONFIG_HOME), as on a laptop:
  # the config watcher watches that directory, and beside `weir.out` every log line woke it.
  mkdir -p "$dir/config"
  case "$setup" in
    nothing) ;;
    queue) cp -a "$TMP/queue-data" "$dir/data" ;;
    all)
      cp -a "$TMP/queue-data" "$dir/data"
      mkdir -p "$dir/src/octo/app/.git"
      cat >"$dir/config/weir.toml" <<TOML
[local_agent]
command = ["true", "{problem_statement}"]
checkouts = { "octo/app" = "$dir/src/octo/app" }
TOML
      args+=(--config "$dir/config/weir.toml")
      if [ -n "${DBUS_SESSION_BUS_ADDRESS:-}" ]; then
        # The sessions poller runs with a stored token (a keychain is needed to store one).
        mkdir -p "$dir/home"
        echo gho_bench_idle_token | HOME="$dir/home" "$bin" token set --data-dir "$dir/data" >/dev/null 2>&1 \
          || echo "bench-idle: no token stored for $label (no keychain?)" >&2
      fi
      ;;
    team-up | team-down)
      local nats="127.0.0.1:$NATS_PORT"
      [ "$setup" = team-down ] && nats="127.0.0.1:$(free_port)"
      printf '[team]\nnats_url = "nats://%s"\n' "$nats" >"$dir/config/weir.toml"
      args+=(--config "$dir/config/weir.toml")
      mkdir -p "$dir/home"
      HOME="$dir/home" "$bin" team set-key --generate --data-dir "$dir/data" --config "$dir/config/weir.toml" >/dev/null 2>&1 \
        || echo "bench-idle: no team key stored for $label (no keychain?)" >&2
      ;;
  esac
  serve "$bin" "$dir" "${args[@]}"
  PID_OF[$label]="$SERVED"
  PORT_OF[$label]="$port"
}

LABELS=()
for setup in "${SETUPS[@]}"; do
  start_setup "after-$setup" "$WEIR" "$setup"; LABELS+=("after-$setup")
  if [ -n "${WEIR_BEFORE:-}" ]; then
    start_setup "before-$setup" "$WEIR_BEFORE" "$setup"; LABELS+=("before-$setup")
  fi
done
for l in "${LABELS[@]}"; do wait_for "http://127.0.0.1:${PORT_OF[$l]}/_weir/api/status"; done
sleep 15

# One sampler for every process: per thread, the switches seen at the first and last sample
# (a thread born during the window counts from 0; one that ended keeps its last sample).
cat >"$TMP/sample.py" <<'PY'
import glob, os, sys, time
secs, pids = float(sys.argv[1]), sys.argv[2:]
HZ = os.sysconf("SC_CLK_TCK")
def threads(pid):
    out = {}
    for f in glob.glob(f"/proc/{pid}/task/*/status"):
        try:
            for line in open(f):
                if line.startswith("voluntary_ctxt_switches"):
                    out[f.split("/")[4]] = int(line.split()[1])
        except OSError:
            pass
    return out
def cpu(pid):
    v = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return int(v[11]) + int(v[12])
first = {p: threads(p) for p in pids}
last = {p: dict(first[p]) for p in pids}
born = {p: set() for p in pids}
cpu0 = {p: cpu(p) for p in pids}
end = time.monotonic() + secs
mark = None  # per process, every thread's count a minute before the end
while True:
    for p in pids:
        for tid, n in threads(p).items():
            if tid not in first[p]:
                born[p].add(tid)
            last[p][tid] = n
    if mark is None and secs > 60 and time.monotonic() >= end - 60:
        mark = {p: dict(last[p]) for p in pids}
    if time.monotonic() >= end:
        break
    time.sleep(min(1.0, max(0.0, end - time.monotonic())))
for p in pids:
    cs = sum(n - (0 if tid in born[p] else first[p].get(tid, 0)) for tid, n in last[p].items())
    # A thread born after the mark counts from 0.
    cs_last = sum(n - mark[p].get(tid, 0) for tid, n in last[p].items()) if mark else "-"
    alive = len(glob.glob(f"/proc/{p}/task/*"))
    print(p, cs, round((cpu(p) - cpu0[p]) * 1000 / HZ), alive, cs_last)
PY
ALL_PIDS=()
for l in "${LABELS[@]}"; do ALL_PIDS+=("${PID_OF[$l]}"); done
python3 "$TMP/sample.py" "$((MINUTES * 60))" "${ALL_PIDS[@]}" >"$TMP/sampled"
{
  echo "# Idle wakeups of weir serve ($MINUTES idle minute(s), $(date -u +%Y-%m-%dT%H:%MZ))"
  echo
  echo "Keychain: $([ -n "${DBUS_SESSION_BUS_ADDRESS:-}" ] && echo "yes (session bus)" || echo no)."
  echo "after: $WEIR${WEIR_BEFORE:+; before: $WEIR_BEFORE}"
  echo
  echo "| build | set-up | wakeups (voluntary switches) / min | last minute | CPU ms / min | threads at the end | mode, sessions poller at the end |"
  echo "|---|---|---|---|---|---|---|"
  for l in "${LABELS[@]}"; do
    pid="${PID_OF[$l]}"
    kill -0 "$pid" 2>/dev/null || { echo "bench-idle: $l exited; see $TMP/$l/weir.out" >&2; cat "$TMP/$l/weir.out" >&2; exit 1; }
    read -r _ cs cpu threads cs_last < <(grep "^$pid " "$TMP/sampled")
    state="$(curl -s "http://127.0.0.1:${PORT_OF[$l]}/_weir/api/status" | python3 -c '
import json, sys
d = json.load(sys.stdin)
m = d["mode"]
print(m["mode"] + ", " + str(d["sessions"]["poller"]))')"
    printf '| %s | %s | %s | %s | %s | %s | %s |\n' "${l%%-*}" "${l#*-}" \
      "$(python3 -c "print(round($cs / $MINUTES, 1))")" "$cs_last" \
      "$(python3 -c "print(round($cpu / $MINUTES, 1))")" "$threads" "$state"
  done
} | tee "$OUT/idle.md"

if [ -n "${IDLE_STRACE:-}" ]; then
  bench_need bench-idle "" strace
  TRACERS=()
  for l in "${LABELS[@]}"; do
    pid="${PID_OF[$l]}"
    # The threads' names now (a thread born during the trace is named by strace's own lines).
    for t in /proc/"$pid"/task/*; do echo "${t##*/} $(cat "$t/comm" 2>/dev/null)"; done >"$OUT/idle-trace-$l.comm"
    timeout -s INT "$IDLE_STRACE" strace -f -tt -qq -o "$OUT/idle-trace-$l.strace" -p "$pid" 2>/dev/null &
    TRACERS+=("$!")
  done
  for t in "${TRACERS[@]}"; do wait "$t" || true; done
  for l in "${LABELS[@]}"; do
    python3 - "$OUT/idle-trace-$l.strace" "$OUT/idle-trace-$l.comm" "$IDLE_STRACE" <<'PY' >"$OUT/idle-trace-$l.txt"
import collections, re, sys
trace, comm, secs = sys.argv[1], sys.argv[2], float(sys.argv[3])
names = dict(l.split(" ", 1) for l in open(comm).read().splitlines() if " " in l)
# A wake is a blocking call returning: the calls a parked thread sleeps in.
BLOCKING = ("epoll_wait", "epoll_pwait", "futex", "clock_nanosleep", "nanosleep", "poll", "ppoll")
wakes = collections.defaultdict(list)
born = []  # (time, parent tid): a thread started (tokio's blocking pool, a library's own)
line_re = re.compile(r"^(\d+)\s+(\S+)\s+(?:<\.\.\. (\w+) resumed>|(\w+)\()(.*)$")
for line in open(trace, errors="replace"):
    m = line_re.match(line)
    if not m:
        continue
    tid, at, resumed, call, rest = m.groups()
    name = resumed or call
    if name in ("clone", "clone3") and not resumed:
        born.append((at[:8], tid))
    if name not in BLOCKING or "<unfinished ...>" in rest:
        continue
    if name == "futex" and "FUTEX_WAKE" in rest:
        continue
    wakes[(tid, name)].append(at)
per_min = 60.0 / secs
print(f"# wakes (blocking calls returned) per thread, {secs:.0f} s traced")
print(f"threads started: {len(born)} ({' '.join(f'{a} by {t}' for a, t in born[:12])})")
for (tid, name), ats in sorted(wakes.items(), key=lambda kv: -len(kv[1])):
    who = names.get(tid, "(born during the trace)")
    print(f"{len(ats) * per_min:7.1f}/min  tid {tid} {who:<18} {name:<16} at {' '.join(a[:8] for a in ats[:12])}{' ...' if len(ats) > 12 else ''}")
PY
    echo "bench-idle: what woke $l: $OUT/idle-trace-$l.txt"
  done
fi
