#!/usr/bin/env bash
# scripts/fuzz.sh [TARGET...]: runs each coverage-guided fuzz target (fuzz/, `cargo fuzz`,
# libFuzzer) for FUZZ_SECONDS (default 60) against its corpus in fuzz/corpus/<target>
# (seeded by scripts/fuzz-seed.py when empty), then minimizes the corpus (`cargo fuzz cmin`).
# Crashes land in fuzz/artifacts/<target>/; tests/fuzz_corpus.rs replays both directories as
# plain tests, so a crash input stays a regression test once fixed.
# Targets: http1 config json_answer queue_row (all by default).
#
# cargo fuzz needs nightly-only rustc flags; on a stable toolchain RUSTC_BOOTSTRAP=1 lets them
# through (set here). No sanitizer (`-s none`): the targets look for panics, hangs and runaway
# memory in safe Rust; debug assertions and overflow checks are on (`-a`).
set -euo pipefail
cd "$(dirname "$0")/.."
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(http1 config json_answer queue_row)
secs=${FUZZ_SECONDS:-60}
command -v cargo-fuzz >/dev/null || { echo "fuzz.sh: cargo-fuzz is missing: cargo install cargo-fuzz" >&2; exit 2; }
export RUSTC_BOOTSTRAP=1
td=${CARGO_TARGET_DIR:-target}/fuzz
flags=(-O -a -s none --fuzz-dir fuzz --target-dir "$td")
cargo fuzz build "${flags[@]}"
for t in "${targets[@]}"; do
    [ -n "$(ls -A "fuzz/corpus/$t" 2>/dev/null)" ] || python3 scripts/fuzz-seed.py
    mkdir -p "fuzz/artifacts/$t"
    echo "== $t: ${secs}s" >&2
    cargo fuzz run "${flags[@]}" "$t" -- -max_total_time="$secs" -timeout=10 \
        -rss_limit_mb=2048 -print_final_stats=1
    cargo fuzz cmin "${flags[@]}" "$t"
done
