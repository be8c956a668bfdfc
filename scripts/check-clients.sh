#!/usr/bin/env bash
# The client drift check (#29): do the real client packages still build only calls that Weir's
# route table and tests/corpus/calls.json know?
#
# Usage: scripts/check-clients.sh              the pinned versions (CI: scripts/test.sh runs it)
#        scripts/check-clients.sh --latest     the newest on npm (by hand: is there drift to look at?)
#        options: --copilot-api VERSION, --copilot-cli VERSION (check those versions instead);
#                 --cli-binary (also scan the Copilot CLI's platform binary, ~130 MB download;
#                 --latest implies it)
# Env: WEIR_BIN (default: $CARGO_TARGET_DIR or target, then debug/weir).
#
# What it does:
# 1. Installs into a temp dir @vscode/copilot-api (pinned: tests/node/package.json) and
#    @github/copilot (pinned: tests/copilot_cli.rs's VERSION) and reports any version that is not
#    the pinned one.
# 2. Builds every URL @vscode/copilot-api can build (check-clients/build-urls.mjs: every
#    RequestType, every AgentTask action read from the package's own switch, placeholder
#    arguments from the corpus's vars, a token naming the per-plan host
#    api.individual.githubcopilot.com). The package's licence limits its use to VS Code and
#    Code-OSS: the client is constructed without the licence string, as tests/node does, and
#    only builds URLs; nothing is sent.
# 3. For @github/copilot (a closed Node SEA binary in @github/copilot-linux-x64), with
#    --cli-binary: the /agents, /cmc_internal and /copilot_internal path fragments found in its
#    code (check-clients/cli-fragments.py), reported as seen, never classified.
# 4. Feeds `METHOD URL` lines to `weir routes --classify` (the binary's own table, default
#    config) and reports (check-clients/report.mjs).
#
# The rule: only the agent-API families are checked: paths under /agents, /cmc_internal and
# /copilot_internal on a host Weir manages. For each such URL it is drift when
#   - Weir classes it `other` and the corpus does not list that method and path as `other`
#     deliberately;
#   - the corpus does not list it (by method and path; the query is not compared), unless
#     check-clients/known.json acknowledges it, with its reason, as not a cloud-session call
#     (those must stay `other`);
#   - the corpus lists it with another class than Weir gives it.
# Every other URL the package builds (chat completions, embeddings, models, telemetry, snippy…)
# is classified and listed, never flagged. A new package version, a new RequestType, or a request
# type the package no longer builds with these arguments is drift too.
#
# Exit: 0 no drift; 1 drift (pinned: the corpus, the route table and the pinned packages
# disagree, fix it; --latest: newer clients to look at); 2 usage or set-up error.
set -euo pipefail
cd "$(dirname "$0")/.."
here=scripts/check-clients

latest=0 cli_binary=0 api_v="" cli_v=""
while [ $# -gt 0 ]; do
  case "$1" in
    --latest) latest=1; cli_binary=1 ;;
    --cli-binary) cli_binary=1 ;;
    --copilot-api) api_v="${2:?--copilot-api needs a version}"; shift ;;
    --copilot-cli) cli_v="${2:?--copilot-cli needs a version}"; shift ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "check-clients: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done
for t in node npm python3; do
  command -v "$t" >/dev/null || { echo "check-clients: $t is needed" >&2; exit 2; }
done

pinned_api=$(node -p "require('./tests/node/package.json').dependencies['@vscode/copilot-api']")
pinned_cli=$(sed -n 's/^const VERSION: &str = "\(.*\)";$/\1/p' tests/copilot_cli.rs)
[ -n "$pinned_api" ] && [ -n "$pinned_cli" ] || { echo "check-clients: pinned versions not found" >&2; exit 2; }
if [ "$latest" = 1 ]; then
  api_v=${api_v:-$(npm view @vscode/copilot-api version)}
  cli_v=${cli_v:-$(npm view @github/copilot version)}
fi
api_v=${api_v:-$pinned_api}
cli_v=${cli_v:-$pinned_cli}

weir=${WEIR_BIN:-${CARGO_TARGET_DIR:-$PWD/target}/debug/weir}
[ -x "$weir" ] || { echo "check-clients: no weir binary at $weir (cargo build -p weir --bin weir, or set WEIR_BIN)" >&2; exit 2; }

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "check-clients: @vscode/copilot-api $api_v, @github/copilot $cli_v (pinned $pinned_api, $pinned_cli)" >&2
# The loader package only (its platform binaries are optional dependencies): its version.
npm install --prefix "$tmp/pkgs" --no-audit --no-fund --silent --no-save --omit=optional \
  "@vscode/copilot-api@$api_v" "@github/copilot@$cli_v" >&2

node -p "JSON.stringify(require('./tests/corpus/calls.json').vars)" >"$tmp/vars.json"
node "$here/build-urls.mjs" "$tmp/pkgs" "$tmp/vars.json" >"$tmp/built.jsonl"
node -e '
  for (const l of require("fs").readFileSync(process.argv[1], "utf8").split("\n"))
    if (l.trim()) { const b = JSON.parse(l); if (b.url) console.log(`${b.method} ${b.url}`); }
' "$tmp/built.jsonl" | sort -u >"$tmp/requests.txt"
# The default table: an empty home and config dir, so a user's own config cannot hide drift.
mkdir -p "$tmp/home"
HOME="$tmp/home" XDG_CONFIG_HOME="$tmp/home/.config" XDG_DATA_HOME="$tmp/home/.local/share" \
  XDG_STATE_HOME="$tmp/home/.local/state" XDG_RUNTIME_DIR="$tmp/home" \
  "$weir" routes --classify <"$tmp/requests.txt" >"$tmp/classified.tsv"

fragments=""
if [ "$cli_binary" = 1 ]; then
  (cd "$tmp" && npm pack --silent "@github/copilot-linux-x64@$cli_v" >/dev/null)
  mkdir -p "$tmp/cli" && tar -xzf "$tmp"/github-copilot-linux-x64-*.tgz -C "$tmp/cli"
  python3 "$here/cli-fragments.py" "$tmp/cli/package/copilot" >"$tmp/fragments.txt"
  fragments="$tmp/fragments.txt"
fi

PINNED_API=$pinned_api PINNED_CLI=$pinned_cli FRAGMENTS=$fragments CLI_V=$cli_v node -e '
  const fs = require("fs");
  const [root] = process.argv.slice(1);
  const v = (n) => JSON.parse(fs.readFileSync(`${root}/node_modules/${n}/package.json`)).version;
  const newer = (a, b) => { const x = a.split(/[.-]/).map(Number), y = b.split(/[.-]/).map(Number);
    for (let i = 0; i < 3; i++) if ((x[i] || 0) !== (y[i] || 0)) return (x[i] || 0) > (y[i] || 0); return false; };
  const pk = (name, pinned) => { const installed = v(name); return { name, pinned, installed, newer: newer(installed, pinned) }; };
  const out = { packages: [pk("@vscode/copilot-api", process.env.PINNED_API), pk("@github/copilot", process.env.PINNED_CLI)], cli_version: process.env.CLI_V };
  if (process.env.FRAGMENTS) out.cli_fragments = fs.readFileSync(process.env.FRAGMENTS, "utf8").split("\n").filter(Boolean);
  else out.cli_note = "the platform binary was not scanned (pass --cli-binary; --latest does)";
  console.log(JSON.stringify(out));
' "$tmp/pkgs" >"$tmp/versions.json"

set +e
node "$here/report.mjs" "$tmp/built.jsonl" "$tmp/classified.tsv" tests/corpus/calls.json "$here/known.json" "$tmp/versions.json"
rc=$?
set -e
if [ "$rc" -ne 0 ]; then
  if [ "$latest" = 1 ]; then
    echo "check-clients: drift to look at: the newest clients differ from what the corpus and Weir's routes know (see above)." >&2
  elif [ "$api_v" != "$pinned_api" ] || [ "$cli_v" != "$pinned_cli" ]; then
    echo "check-clients: drift to look at in the versions asked for (see above)." >&2
  else
    echo "check-clients: DRIFT in the pinned versions: the corpus, Weir's route table and the pinned packages disagree (see above)." >&2
  fi
  exit 1
fi
echo "check-clients: no drift." >&2
