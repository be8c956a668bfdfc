#!/usr/bin/env python3
"""Soak driver for scripts/soak.sh (standard library only).

Runs, in one process:
  * a recording upstream on 127.0.0.1:--up-port that answers list/view/create like the
    agents API and whose behaviour rotates every --phase-secs between healthy, 5xx storm,
    slow, 429 + Retry-After and unreachable (listening socket closed, reopened on the same
    port afterwards);
  * clients sending mixed traffic through Weir as an HTTP proxy (absolute-form requests):
    lists and views from several identities, a few creates per minute with a unique
    problem_statement each;
  * a sampler that every --row-secs records elapsed, VmRSS and open fds of `weir serve`,
    cache bytes and queue counts from /_weir/api/status, and client answers by kind.
At the end the faults are healed, the queue is waited for (bounded), and creates are
reconciled: lost (client got 2xx/202, never created upstream) and doubled (created upstream
more than once for one problem_statement). Writes a markdown report to --out.
"""
import argparse
import collections
import http.client
import http.server
import json
import os
import random
import socket
import socketserver
import sys
import threading
import time

# The fault deck of tests/fault_matrix.rs (TLS and DNS failures need a TLS origin or a mount
# namespace; at the socket they look like `unreachable`), one phase each, healthy in between
# twice so the queue drains and the breakers close during the run.
PHASES = ["healthy", "storm_5xx", "blackhole", "slow", "rate_429", "healthy", "reset_mid_body",
          "trickle", "secondary_403", "unreachable"]

lock = threading.Lock()
stop = threading.Event()


# --------------------------------------------------------------------------------- upstream
class Upstream:
    def __init__(self, port, slow_ms, retry_after):
        self.port = port
        self.slow_ms = slow_ms
        self.retry_after = retry_after
        self.phase = "healthy"
        self.rng = random.Random(7)
        self.server = None
        self.thread = None
        # problem_statement -> list of (time, status, did_work)
        self.create_arrivals = collections.defaultdict(list)
        self.sessions = []  # created sessions: dicts for the repo_nwo list
        self.requests = collections.Counter()  # (route, status)

    def start(self):
        up = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def reply(self, status, body, extra=None):
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for k, v in (extra or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                up.handle(self, "GET")

            def do_POST(self):
                up.handle(self, "POST")

        class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
            daemon_threads = True
            allow_reuse_address = True

        self.server = Server(("127.0.0.1", self.port), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def shutdown(self):
        """Unreachable: stop listening (new connections are refused) and drop idle ones."""
        if self.server is None:
            return
        self.server.shutdown()
        self.server.server_close()
        self.server = None

    def set_phase(self, phase):
        if phase == "unreachable":
            self.phase = phase
            self.shutdown()
        else:
            if self.server is None:
                self.start()
            self.phase = phase

    def handle(self, h, method):
        path, _, query = h.path.partition("?")
        if path.startswith("http://"):
            path = "/" + path.split("/", 3)[3]
        body = b""
        n = int(h.headers.get("Content-Length") or 0)
        if n:
            body = h.rfile.read(n)
        if method == "POST" and path.startswith("/agents/swe/v1/jobs/"):
            route = "create"
        elif method == "GET" and "/session/" in path and path.startswith("/agents/swe/v1/jobs/"):
            route = "job"  # the in-doubt lookup reads the job behind a session
        elif method == "GET" and path.startswith("/agents/sessions"):
            route = "list" if path.rstrip("/") == "/agents/sessions" else "view"
        else:
            route = "other"
        phase = self.phase
        if phase == "unreachable":  # a connection accepted just before the socket closed
            h.close_connection = True
            return
        if phase == "slow":
            time.sleep(self.slow_ms / 1000.0)
        status, work = 200, True
        if phase == "rate_429":
            status, work = 429, False
        elif phase == "secondary_403":
            status, work = 403, False
        elif phase == "storm_5xx":
            with lock:
                r = self.rng.random()
            if r < 0.45:
                status, work = 500, False
            elif r < 0.70:
                status, work = 502, False
            elif r < 0.85:
                status, work = 503, False
            # else: 15 % get through
        if route == "create":
            try:
                stmt = json.loads(body or b"{}").get("problem_statement", "")
            except ValueError:
                stmt = ""
            repo = "/".join(path.split("/")[5:7])
            ok = status == 200
            with lock:
                self.create_arrivals[stmt].append((time.time(), 201 if ok else status, ok))
                if ok:
                    sid = "s-soak-%d" % len(self.sessions)
                    self.sessions.append({
                        "id": sid, "state": "queued", "repo": repo, "name": stmt,
                        "problem_statement": stmt,
                        "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                    })
        with lock:
            self.requests[(route, 201 if route == "create" and status == 200 else status)] += 1
        if status in (403, 429):
            return h.reply(status, {"message": "You have exceeded a secondary rate limit."},
                           {"Retry-After": str(self.retry_after)})
        if status >= 500:
            return h.reply(status, {"message": "Server Error"})
        if phase == "blackhole":
            # Read (a create is made), never answer; hold the connection until the phase ends.
            while self.phase == "blackhole" and not stop.is_set():
                time.sleep(0.2)
            h.close_connection = True
            return
        if route == "create":
            return self.answer(h, phase, 201, {"job_id": "job-" + sid, "session_id": sid})
        if route == "job":
            sid = path.rsplit("/", 1)[-1]
            with lock:
                s = next((s for s in self.sessions if s["id"] == sid), None)
            if s is None:
                return self.answer(h, phase, 404, {"message": "Not Found"})
            return self.answer(h, phase, 200, {"job_id": "job-" + sid, "session_id": sid,
                                               "problem_statement": s["problem_statement"]})
        if route == "list":
            if "repo_nwo=" in query:
                # Newest first, one page (the in-doubt lookup reads pages of 50).
                with lock:
                    page = list(reversed(self.sessions))[:50]
                return self.answer(h, phase, 200, {"sessions": page})
            return self.answer(h, phase, 200, {"sessions": [
                {"id": "s%04d" % i, "state": "in_progress", "repo": "octo/soak", "name": "task %d" % i}
                for i in range(12)]})
        if route == "view":
            return self.answer(h, phase, 200, {"id": path.rsplit("/", 1)[-1], "state": "in_progress",
                                               "repo": "octo/soak", "log": "x" * 600})
        return self.answer(h, phase, 200, {"ok": True})

    def answer(self, h, phase, status, body):
        """A 2xx/404 answer as the phase delivers it: whole, cut mid-body by an RST, or trickled."""
        if phase not in ("reset_mid_body", "trickle"):
            return h.reply(status, body)
        data = json.dumps(body).encode()
        if phase == "trickle":
            data += b" " * 200
        h.send_response(status)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(data) + (1000 if phase == "reset_mid_body" else 0)))
        h.end_headers()
        h.close_connection = True
        try:
            if phase == "reset_mid_body":
                h.wfile.write(data[:5])
                h.wfile.flush()
                # Linger 0: the close is an RST.
                h.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
                return
            for i in range(0, len(data), 8):
                time.sleep(0.1)
                h.wfile.write(data[i:i + 8])
                h.wfile.flush()
        except OSError:
            pass


# ---------------------------------------------------------------------------------- clients
answers = collections.Counter()  # since last row
answers_total = collections.Counter()
create_log = []  # (statement, client status, kind)


def classify(status, headers, body):
    if 200 <= status < 300:
        return "202" if status == 202 else "2xx"
    kind = ""
    if "problem+json" in (headers.get("Content-Type") or ""):
        try:
            kind = json.loads(body).get("kind", "")
        except ValueError:
            pass
    if status < 500:
        return "%d%s" % (status, ":" + kind if kind else "")
    return "5xx:" + (kind or str(status))


class Client:
    def __init__(self, weir_port, up_port, token):
        self.weir_port = weir_port
        self.base = "http://127.0.0.1:%d" % up_port
        self.auth = "Bearer " + token
        self.conn = None

    def request(self, method, path, body=None):
        hdrs = {"Authorization": self.auth, "User-Agent": "soak-driver/1", "Accept": "application/json"}
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            hdrs["Content-Type"] = "application/json"
        for attempt in (0, 1):
            if self.conn is None:
                self.conn = http.client.HTTPConnection("127.0.0.1", self.weir_port, timeout=60)
            try:
                self.conn.request(method, self.base + path, body=data, headers=hdrs)
                r = self.conn.getresponse()
                payload = r.read()
                if (r.getheader("Connection") or "").lower() == "close":
                    self.conn.close()
                    self.conn = None
                return r.status, r.headers, payload
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError) as e:
                self.conn.close()
                self.conn = None
                # A keep-alive connection closed by Weir between requests: reconnect once, for
                # GETs only (a create is never resent by this client).
                if attempt == 0 and method == "GET":
                    continue
                return None, {}, repr(e).encode()
            except (OSError, http.client.HTTPException) as e:
                self.conn.close()
                self.conn = None
                return None, {}, repr(e).encode()


def record(kind):
    with lock:
        answers[kind] += 1
        answers_total[kind] += 1


def reader(args, ident, seed):
    c = Client(args.weir_port, args.up_port, "soak-user-%d" % ident)
    rng = random.Random(seed)
    while not stop.is_set():
        if rng.random() < 0.5:
            path = "/agents/sessions"
        else:
            path = "/agents/sessions/s%04d" % rng.randrange(40)
        st, h, b = c.request("GET", path)
        record(("client_error:" + b.decode(errors="replace").split("(")[0]) if st is None else classify(st, h, b))
        stop.wait(args.read_interval)


def creator(args, run_id):
    clients = [Client(args.weir_port, args.up_port, "soak-user-%d" % i) for i in range(args.identities)]
    n = 0
    interval = 60.0 / args.creates_per_min
    next_at = time.time() + 2
    while not stop.is_set():
        if stop.wait(max(0, next_at - time.time())):
            break
        next_at += interval
        stmt = "soak %s create %04d: fix the flaky test" % (run_id, n)
        c = clients[n % len(clients)]
        n += 1
        # A new connection per create: creates are minutes apart per identity, longer than
        # Weir keeps an idle client connection (header_read_timeout), and a POST on a
        # connection the server already closed fails before Weir sees it (and is not resent).
        if c.conn is not None:
            c.conn.close()
            c.conn = None
        st, h, b = c.request("POST", "/agents/swe/v1/jobs/octo/soak",
                             {"problem_statement": stmt, "event_type": "soak"})
        c.conn.close() if c.conn is not None else None
        c.conn = None
        kind = ("client_error:" + b.decode(errors="replace").split("(")[0]) if st is None else classify(st, h, b)
        record("create " + kind)
        with lock:
            create_log.append((stmt, st, kind))


# ---------------------------------------------------------------------------------- sampler
def proc_rss_kb(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS"):
                return int(line.split()[1])
    return 0


def proc_fds(pid):
    return len(os.listdir("/proc/%d/fd" % pid))


def weir_status(port):
    try:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
        c.request("GET", "/_weir/api/status")
        r = c.getresponse()
        doc = json.loads(r.read())
        c.close()
        return doc
    except (OSError, ValueError, http.client.HTTPException):
        return {}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--weir-port", type=int, required=True)
    ap.add_argument("--weir-pid", type=int, required=True)
    ap.add_argument("--up-port", type=int, required=True)
    ap.add_argument("--minutes", type=float, default=10)
    ap.add_argument("--phase-secs", type=float, default=60)
    ap.add_argument("--row-secs", type=float, default=30)
    ap.add_argument("--identities", type=int, default=4)
    ap.add_argument("--readers", type=int, default=4)
    ap.add_argument("--read-interval", type=float, default=0.2)
    ap.add_argument("--creates-per-min", type=float, default=4)
    ap.add_argument("--slow-ms", type=int, default=3000)
    ap.add_argument("--retry-after", type=int, default=20)
    ap.add_argument("--drain-secs", type=float, default=240)
    ap.add_argument("--warmup-secs", type=float, default=120)
    ap.add_argument("--phases", default=",".join(PHASES),
                    help="comma-separated phases to rotate through (default: the whole deck), e.g. "
                         "healthy,trickle to find what one fault leaves behind")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    phases = [p.strip() for p in args.phases.split(",") if p.strip()]
    unknown_phases = [p for p in phases if p not in PHASES]
    if not phases or unknown_phases:
        ap.error("--phases: unknown %s (known: %s)" % (", ".join(unknown_phases) or "(empty)", ", ".join(sorted(set(PHASES)))))

    up = Upstream(args.up_port, args.slow_ms, args.retry_after)
    up.start()
    run_id = time.strftime("%H%M%S")
    threads = [threading.Thread(target=reader, args=(args, i % args.identities, i), daemon=True)
               for i in range(args.readers)]
    threads.append(threading.Thread(target=creator, args=(args, run_id), daemon=True))
    t0 = time.time()
    for t in threads:
        t.start()

    rows = []

    def sample(phase):
        st = weir_status(args.weir_port)
        q = st.get("queue", {})
        with lock:
            a = dict(answers)
            answers.clear()
        try:
            rss, fds = proc_rss_kb(args.weir_pid), proc_fds(args.weir_pid)
        except OSError:
            rss, fds = -1, -1
        row = {
            "t": round(time.time() - t0), "phase": phase, "rss_kb": rss, "fds": fds,
            "cache_bytes": st.get("cache", {}).get("bytes", -1),
            "queue": "%d/%d/%d/%d" % (q.get("queued", 0), q.get("replaying", 0), q.get("in_doubt", 0), q.get("done", 0)),
            "answers": a,
        }
        rows.append(row)
        ans = " ".join("%s=%d" % kv for kv in sorted(a.items()))
        print("%5ds %-11s rss=%6d KiB fds=%3d cache=%7d queue(q/r/d/done)=%s  %s" % (
            row["t"], phase, rss, fds, row["cache_bytes"], row["queue"], ans), flush=True)

    duration = args.minutes * 60
    next_row = t0 + args.row_secs
    phase_idx = -1
    while True:
        now = time.time()
        el = now - t0
        if el >= duration:
            break
        # Sample before switching, so a row is labelled with the phase of the window it counts.
        if now >= next_row:
            sample(phases[phase_idx])
            next_row += args.row_secs
        want = int(el // args.phase_secs) % len(phases)
        if want != phase_idx:
            phase_idx = want
            up.set_phase(phases[want])
            print("%5ds phase -> %s" % (int(el), phases[want]), flush=True)
        time.sleep(min(0.5, max(0.05, min(next_row, t0 + (phase_idx + 1) * args.phase_secs) - time.time())))

    # Heal, stop the clients, wait (bounded) for the queue to drain.
    up.set_phase("healthy")
    stop.set()
    for t in threads:
        t.join(timeout=70)
    print("%5ds healed; load stopped; waiting for the queue to drain (<= %ds)" % (time.time() - t0, args.drain_secs), flush=True)
    drain_start = time.time()
    drained = False
    while time.time() - drain_start < args.drain_secs:
        q = weir_status(args.weir_port).get("queue", {})
        if q and q.get("queued", 0) + q.get("replaying", 0) + q.get("in_doubt", 0) == 0:
            drained = True
            break
        time.sleep(2)
    drain_secs = time.time() - drain_start
    final_status = weir_status(args.weir_port)
    sample("drained" if drained else "not_drained")

    # Reconcile creates.
    with lock:
        arrivals = {k: list(v) for k, v in up.create_arrivals.items()}
        log = list(create_log)
    accepted = [(s, st, k) for s, st, k in log if k in ("2xx", "202")]
    lost = [s for s, st, k in accepted if not any(w for _, _, w in arrivals.get(s, []))]
    created_counts = {s: sum(1 for _, _, w in v if w) for s, v in arrivals.items()}
    doubled = {s: n for s, n in created_counts.items() if n > 1}
    rejected = [(s, k) for s, st, k in log if k not in ("2xx", "202")]
    rejected_but_created = [s for s, k in rejected if created_counts.get(s, 0) > 0]
    unknown = [s for s in arrivals if s not in {x[0] for x in log}]

    warm = next((r for r in rows if r["t"] >= args.warmup_secs), rows[0])
    last = rows[-1]
    growth = 100.0 * (last["rss_kb"] - warm["rss_kb"]) / max(1, warm["rss_kb"])
    fds_after = [r["fds"] for r in rows if r["t"] >= args.warmup_secs] or [r["fds"] for r in rows]
    fd_min, fd_max = min(fds_after), max(fds_after)

    kinds = sorted({k for r in rows for k in r["answers"]})
    out = []
    out.append("# Soak run (%s minutes, phases of %ds, rows every %ds)\n" % (args.minutes, args.phase_secs, args.row_secs))
    out.append("Phases rotate: %s. Readers: %d threads over %d identities, one GET every %.1f s each "
               "(half list, half view); creates: %.0f/min, each with a unique problem_statement. "
               "Upstream (the fault deck of tests/fault_matrix.rs): slow = %d ms per request, 429 and "
               "secondary-limit 403 with Retry-After: %d, 5xx storm = 85 %% 500/502/503, blackhole = "
               "request read (a create is made) and never answered, reset_mid_body = a create is made, "
               "then headers and 5 bytes and an RST, trickle = the body 8 bytes per 100 ms, "
               "unreachable = listening socket closed.\n" % (
                   ", ".join(phases), args.readers, args.identities, args.read_interval,
                   args.creates_per_min, args.slow_ms, args.retry_after))
    out.append("Each row counts client answers in the window ending at t; phase = the upstream's "
               "behaviour in that window. Queue column: queued/replaying/in_doubt/done at t "
               "(from `/_weir/api/status`).\n")
    out.append("| t (s) | phase | RSS (KiB) | fds | cache bytes | queue | " + " | ".join(kinds) + " |")
    out.append("|---:|---|---:|---:|---:|---|" + "---:|" * len(kinds))
    for r in rows:
        out.append("| %d | %s | %d | %d | %d | %s | %s |" % (
            r["t"], r["phase"], r["rss_kb"], r["fds"], r["cache_bytes"], r["queue"],
            " | ".join(str(r["answers"].get(k, 0)) for k in kinds)))
    out.append("")
    out.append("## Totals\n")
    out.append("- client answers: " + ", ".join("%s %d" % kv for kv in sorted(answers_total.items())))
    out.append("- upstream requests (route, status): " + ", ".join(
        "%s %s: %d" % (k[0], k[1], v) for k, v in sorted(up.requests.items())))
    out.append("- creates sent %d; answered 2xx/202 %d; refused/failed to the client %d (%s)" % (
        len(log), len(accepted), len(rejected),
        ", ".join("%s %d" % kv for kv in collections.Counter(k for _, k in rejected).items()) or "none"))
    out.append("- creates **lost** (2xx/202 to the client, never created upstream): **%d**%s" % (
        len(lost), (" — " + "; ".join(lost[:10])) if lost else ""))
    out.append("- creates **doubled** (created upstream more than once): **%d**%s" % (
        len(doubled), (" — " + "; ".join("%s ×%d" % kv for kv in list(doubled.items())[:10])) if doubled else ""))
    out.append("- refused to the client but created upstream anyway: %d" % len(rejected_but_created))
    out.append("- create arrivals upstream (incl. failed attempts): %d for %d statements; unknown statements: %d" % (
        sum(len(v) for v in arrivals.values()), len(arrivals), len(unknown)))
    out.append("- queue drain after healing: %s in %.0f s; final queue %s" % (
        "drained" if drained else "NOT drained", drain_secs,
        json.dumps(final_status.get("queue", {}))))
    out.append("- RSS after warm-up (t=%ds) %d KiB → last %d KiB: **%+.1f %%**" % (
        warm["t"], warm["rss_kb"], last["rss_kb"], growth))
    # RSS at the end of each pass through the phases: a one-time warm-up (allocator high-water
    # marks, pools filled once) shows as growth in the first pass and none after; a leak grows
    # in every pass.
    cycle_secs = len(phases) * args.phase_secs
    per_cycle = collections.OrderedDict()
    for r in rows[:-1]:  # the last row is the drain, after the load stopped
        per_cycle[int(max(0, r["t"] - 1) // cycle_secs) + 1] = r["rss_kb"]
    if per_cycle:
        ends = list(per_cycle.items())
        steps = ["%+d" % (b[1] - a[1]) for a, b in zip(ends, ends[1:])]
        out.append("- RSS at the end of each pass through the phases (%ds each): %s%s" % (
            cycle_secs, ", ".join("pass %d %d KiB" % kv for kv in ends),
            ("; change per pass after the first: " + ", ".join(steps) + " KiB") if steps else ""))
    # Open fds move with the connections in use (client and upstream keep-alive); "flat" means
    # no growth: the last row (load stopped, queue drained) is not above the warm-up row + 8.
    fd_flat = last["fds"] <= warm["fds"] + 8
    out.append("- fds: warm-up row %d, last row %d; range after warm-up %d–%d (%s)" % (
        warm["fds"], last["fds"], fd_min, fd_max, "flat" if fd_flat else "NOT flat: grew"))
    jobs = sum(v for k, v in up.requests.items() if k[0] == "job")
    lists = sum(v for k, v in up.requests.items() if k[0] == "list")
    out.append("- in-doubt lookups: %d job reads (all lists: %d) for %d creates sent" % (jobs, lists, len(log)))
    out.append("- errors_by_kind (Weir status): " + json.dumps(
        [u.get("errors_by_kind") for u in final_status.get("upstreams", [])]))
    text = "\n".join(out) + "\n"
    with open(args.out, "w") as f:
        f.write(text)
    print(text)
    summary = {"lost": len(lost), "doubled": len(doubled), "rss_growth_pct": round(growth, 1),
               "fd_min": fd_min, "fd_max": fd_max, "fd_flat": fd_flat, "drained": drained}
    print("SUMMARY " + json.dumps(summary), flush=True)
    os._exit(0)


if __name__ == "__main__":
    main()
