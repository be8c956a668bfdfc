#!/usr/bin/env bash
# Chaos on the team gateway: a seeded, randomized fault schedule (issue #22), not run in CI.
#
#   scripts/chaos-gateway.sh [--seed N] [--seconds S] [--plan]   (defaults: seed 6, 600 s)
#
# --plan prints the schedule the seed names and runs nothing.
#
# Runs tests/chaos_gateway.rs for S seconds: 3 `weir serve --gateway` replicas on one real
# PostgreSQL (initdb/pg_ctl in a temp dir) with team signals on over a real nats-server (one
# login per replica, stored with `weir team` in a private gnome-keyring), 5 identities listing
# and creating through them against a loopback fake upstream in the real clients' shapes, and
# faults drawn from the seed: kill -9 of a replica (restarted), PostgreSQL restart, PostgreSQL
# unreachable for 20 s (SIGSTOP), NATS server restart, upstream 5xx storm, blackhole, slow
# trickle, 429 + Retry-After. It prints the seed, the schedule as planned and as applied,
# creates by answer, lost / doubled, invalid answers, the queue after the drain, each replica's
# team link (connected, messages, teammates seen) and its RSS and fds at start and end; it
# fails on any loss, double or invalid answer, or a team link that is not back with both
# teammates heard. The same test runs for 60 s (seed 16) in CI, inside scripts/test.sh.
#
# Needs PostgreSQL (/usr/lib/postgresql/*/bin), nats-server and gnome-keyring (scripts/test.sh
# installs them). Output: out/chaos/chaos-<seed>-<S>s.log.
set -euo pipefail
cd "$(dirname "$0")/.."
SEED=6
SECONDS_=600
while [ $# -gt 0 ]; do
  case "$1" in
    --seed) SEED="${2:?--seed needs a number}"; shift 2 ;;
    --seconds) SECONDS_="${2:?--seconds needs a number}"; shift 2 ;;
    --plan) export WEIR_CHAOS_PLAN_ONLY=1; shift ;;
    -h|--help) sed -n '2,22p' "$0"; exit 0 ;;
    *) echo "chaos-gateway: unknown argument $1 (use --seed N, --seconds S)" >&2; exit 2 ;;
  esac
done
case "$SEED$SECONDS_" in *[!0-9]*) echo "chaos-gateway: --seed and --seconds take whole numbers" >&2; exit 2 ;; esac
ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || {
  echo "chaos-gateway: PostgreSQL is not installed (apt-get install postgresql)" >&2; exit 2; }
OUT=out/chaos
mkdir -p "$OUT"
LOG="$OUT/chaos-$SEED-${SECONDS_}s.log"
WEIR_CHAOS_SEED="$SEED" WEIR_CHAOS_SECONDS="$SECONDS_" scripts/with-keychain.sh \
  cargo test -p weir --all-features --test chaos_gateway -- --nocapture --test-threads 1 2>&1 | tee "$LOG"
status="${PIPESTATUS[0]}"
echo "chaos-gateway: log in $LOG"
exit "$status"
