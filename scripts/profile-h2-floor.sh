#!/usr/bin/env bash
# The HTTP/2 floor (#32 item 2), the whole table from one command: instructions per kept-alive
# intercepted cache hit (`GET /agents/sessions`, curl -K, KEPT requests on one connection,
# HTTP/1.1 then HTTP/2, user space, all threads, callgrind) for
#   - Weir (CONNECT + its own CA, the hit from its cache), and the servers with nothing of
#     Weir's in them, answering the same answer (status, header fields, body) from memory:
#   - bare-hyper: `weir-lab bare-tls --engine hyper`, hyper over tokio-rustls, HTTP/2 streams
#     spawned as tasks (a stock hyper server);
#   - bare-hyper-inline: the same with each stream polled in place first (as Weir runs them);
#   - bare-h2: the h2 crate's server without hyper (HTTP/2 only);
#   - nginx: `listen … ssl http2`, `return 200` plus add_header, one worker.
# It runs scripts/bench-tls-path.sh's part 3 with FLOOR=1 CALLGRIND=1 and ends with the table
# (h2 ÷ h1 per server, and each h2 against Weir's own whole h1 hit: the #32 bar).
#
#   WEIR_BIN=…/release/weir LAB_BIN=…/release/weir-lab scripts/profile-h2-floor.sh
#   KEPT=4000 scripts/profile-h2-floor.sh          # default KEPT=2000
#
# Needs valgrind, curl, openssl, python3, nginx (the nginx rows are skipped without it).
# Builds: `cargo build --release -p weir --all-features -p weir-lab`. Loopback only.
set -euo pipefail
export FLOOR=1 CALLGRIND=1 PARTS=3 KEPT="${KEPT:-2000}"
exec "$(dirname "$0")/bench-tls-path.sh"
