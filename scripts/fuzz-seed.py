#!/usr/bin/env python3
"""Seeds fuzz/corpus/<target>/ from the test corpus (tests/corpus/*.json) and the docs' config
examples, for scripts/fuzz.sh when a target's corpus is empty. The fuzzer then grows and
minimizes the corpus; what is committed is its minimized form."""
import gzip, hashlib, json, os, re, sys, zlib

root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
out = os.path.join(root, "fuzz", "corpus")

def put(target, data):
    d = os.path.join(out, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "seed-" + hashlib.sha1(data).hexdigest()[:16]), "wb") as f:
        f.write(data)

calls = json.load(open(os.path.join(root, "tests/corpus/calls.json")))
answers = json.load(open(os.path.join(root, "tests/corpus/answers.json")))["answers"]
vars_ = calls["vars"]

def fill(s):
    return re.sub(r"\{(\w+)\}", lambda m: str(vars_.get(m.group(1), m.group(0))), s)

# http1: each client call as raw HTTP/1.1 to the fuzz engine's managed upstream (absolute
# form), the same with a chunked body, a CONNECT, and control API calls.
for c in calls["calls"]:
    pq = fill(c["path_and_query"])
    head = [f"{c['method']} http://127.0.0.1:9{pq} HTTP/1.1", "Host: 127.0.0.1:9"]
    head += [f"{k}: {fill(v)}" for k, v in c.get("headers", {}).items()]
    body = c.get("body")
    body = b"" if body is None else (body if isinstance(body, str) else json.dumps(body)).encode()
    put("http1", ("\r\n".join(head + [f"Content-Length: {len(body)}", "", ""])).encode() + body)
    if body:
        chunked = b"%x\r\n" % len(body) + body + b"\r\n0\r\n\r\n"
        put("http1", ("\r\n".join(head + ["Transfer-Encoding: chunked", "", ""])).encode() + chunked)
put("http1", b"CONNECT api.githubcopilot.com:443 HTTP/1.1\r\nHost: api.githubcopilot.com:443\r\n\r\n")
put("http1", b"GET /_weir/api/health?challenge=00 HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
put("http1", b"GET /_weir/api/status HTTP/1.1\r\nHost: localhost\r\n\r\nGET /metrics HTTP/1.1\r\nHost: localhost\r\n\r\n")
put("http1", b"POST http://127.0.0.1:9/agents/swe/v1/jobs/o/r HTTP/1.1\r\nHost: 127.0.0.1:9\r\nAuthorization: token x\r\nTransfer-Encoding: chunked\r\n\r\n5;ext=1\r\n{\"a\":\r\n3\r\n1}\n\r\n0\r\nTrailer: x\r\n\r\n")

# json_answer: every answer body (first byte: the token answer's Content-Encoding), the token
# answer gzip'd and deflated, gh's GraphQL announcement, a create's answer and a refusal.
for a in answers.values():
    b = a.get("text") or json.dumps(a.get("body"))
    put("json_answer", b"\x00" + b.encode())
tok = json.dumps(answers["copilot_token"]["body"]).encode()
put("json_answer", b"\x01" + gzip.compress(tok))
put("json_answer", b"\x02" + zlib.compress(tok))
put("json_answer", b"\x00" + json.dumps({"data": {"viewer": {"copilotEndpoints": {"api": "https://api.githubcopilot.com"}}}}).encode())
put("json_answer", b"\x00" + json.dumps({"job_id": 7, "session_id": "s", "pull_request": {"number": 1}}).encode())
put("json_answer", b"\x00" + json.dumps({"error": {"message": "no"}}).encode())

# config: the toml examples in the README and docs.
for doc in ["README.md"] + ["docs/" + f for f in os.listdir(os.path.join(root, "docs")) if f.endswith(".md")]:
    text = open(os.path.join(root, doc), encoding="utf-8").read()
    for block in re.findall(r"```toml\n(.*?)```", text, re.S):
        put("config", block.encode())

# queue_row: a valid row in the target's encoding (0xFF between fields; first byte of each:
# 0 text, 1 integer, 2 blob, 3 null), and one with a bad method and result.
def row(fields):
    enc = []
    for f in fields:
        if f is None: enc.append(b"\x03")
        elif isinstance(f, int): enc.append(b"\x01" + f.to_bytes(8, "big", signed=True))
        elif isinstance(f, bytes): enc.append(b"\x02" + f)
        else: enc.append(b"\x00" + f.encode())
    return b"\xff".join(enc)
ok = ["copilot", "POST", "/agents/swe/v1/jobs/o/r", '[["content-type","application/json"]]', b"{}", "id", "cred-1", "k1", "o/r", "fix", "queued", 1, 0, 2, None, None, '{"status":201,"job_id":"j"}', 3, 0, "p-job", "p-session"]
put("queue_row", row(ok))
put("queue_row", row(ok[:1] + ["GE T"] + ok[2:16] + ["{not json"] + ok[17:]))
print("seeded", out, file=sys.stderr)
