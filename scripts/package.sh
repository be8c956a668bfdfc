#!/usr/bin/env bash
# Builds Weir's Linux package from the repository: one .deb with the tray app (tauri's own
# bundler), the `weir` CLI on the PATH, the desktop entry, an optional autostart entry, a
# systemd user unit for a headless `weir serve`, the man pages (written by build.rs with
# clap_mangen) and the shell completions (`weir completions`).
#
#   scripts/package.sh [--out DIR] [--appimage] [--debug]
#
#   --out DIR          where the packages are copied (default: target/package/)
#   --debug            package debug builds (stripped): much quicker to build on a slow shared
#                      machine, for testing the packaging itself; releases use the default
#   --appimage         also ask tauri for an AppImage. Its bundler downloads linuxdeploy and
#                      its plugins from GitHub at bundle time: that needs a machine that may
#                      reach GitHub (not this project's build machines; see docs/install.md).
#
# A second run rebuilds only what changed (cargo and tauri decide); the bundling itself takes
# seconds.
#
# The bundle layout is in src-tauri/tauri.conf.json (`bundle.linux.deb.files`); this script
# stages the generated parts in target/package/stage/ where that map expects them. The
# package has no maintainer scripts: installing touches no trust store, shell profile or
# user's file; removing it leaves the users' data dirs and keychain entries (docs/install.md).
#
# Environment: CARGO_TARGET_DIR (default target/), TAURI_CLI (a `tauri` executable; default:
# @tauri-apps/cli installed from npm into target/package/tauri-cli/), NICE (default 19).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
STAGE=$ROOT/target/package/stage
OUT=$ROOT/target/package
BUNDLES=deb
PROFILE=release
TAURI_CLI_VERSION=2.12.5 # the tauri crate's own version (Cargo.lock): CLI and crate in step
while [ $# -gt 0 ]; do
  case "$1" in
    --out) OUT=$2; shift 2 ;;
    --appimage) BUNDLES=deb,appimage; shift ;;
    --debug) PROFILE=debug; shift ;;
    -h|--help) sed -n '2,24p' "$0"; exit 0 ;;
    *) echo "package.sh: unknown option $1 (try --help)" >&2; exit 2 ;;
  esac
done
export CARGO_TARGET_DIR=$TARGET
NICE="nice -n ${NICE:-19}"
started=$(date +%s)

need() { command -v "$1" >/dev/null || { echo "package.sh: $1 is needed ($2)" >&2; exit 1; }; }
need cargo "rustup"
need python3 "apt-get install python3"
need dpkg-deb "apt-get install dpkg"
need gzip "apt-get install gzip"

# --- the weir CLI and the tray, and where weir's build script wrote the man pages -------------------------
# One cargo run for the CLI and the tray, with the feature `tauri build` adds (the dashboard
# served from the binary, not a dev server): the dependencies resolve to the same features for
# both, so they are compiled once.
echo "package.sh: building the weir CLI and the tray ($PROFILE)"
messages=$(mktemp)
trap 'rm -f "$messages"' EXIT
release_flag=(); [ $PROFILE = release ] && release_flag=(--release)
$NICE cargo build "${release_flag[@]}" --locked -p weir -p weir-tray --bins --features tauri/custom-protocol \
  --message-format=json-render-diagnostics >"$messages"
man_dir=$(python3 - "$messages" <<'EOF'
import json, sys
# The build script's OUT_DIR as cargo reports it: no guessing at target/release/build/weir-HASH.
out = None
for line in open(sys.argv[1]):
    try:
        m = json.loads(line)
    except ValueError:
        continue
    if m.get("reason") != "build-script-executed":
        continue
    frag = m["package_id"].rsplit("#", 1)[-1]
    name = frag.split("@")[0] if "@" in frag else m["package_id"].split("#")[0].rstrip("/").rsplit("/", 1)[-1]
    if name == "weir":
        out = m["out_dir"]
print(out or "")
EOF
)
[ -n "$man_dir" ] && [ -f "$man_dir/man/weir.1" ] || {
  echo "package.sh: cargo did not report weir's build-script output (man pages)" >&2; exit 1; }

rm -rf "$STAGE"
mkdir -p "$STAGE/man1" "$STAGE/completions"
install -m 0755 "$TARGET/$PROFILE/weir" "$STAGE/weir"
if command -v strip >/dev/null; then strip --strip-unneeded "$STAGE/weir"; fi
for page in "$man_dir"/man/*.1; do
  gzip -9n <"$page" >"$STAGE/man1/$(basename "$page").gz"
done
"$STAGE/weir" completions bash >"$STAGE/completions/weir.bash"
"$STAGE/weir" completions zsh >"$STAGE/completions/_weir"
"$STAGE/weir" completions fish >"$STAGE/completions/weir.fish"

# --- the tray and the package, by tauri's bundler -------------------------------------------
tauri=${TAURI_CLI:-}
if [ -z "$tauri" ]; then
  tauri=$ROOT/target/package/tauri-cli/node_modules/.bin/tauri
  if ! [ -x "$tauri" ] || ! "$tauri" --version | grep -q "$TAURI_CLI_VERSION"; then
    need npm "apt-get install npm"
    echo "package.sh: installing @tauri-apps/cli@$TAURI_CLI_VERSION from npm"
    npm install --prefix "$ROOT/target/package/tauri-cli" --no-audit --no-fund --silent \
      "@tauri-apps/cli@$TAURI_CLI_VERSION"
  fi
fi
echo "package.sh: bundling ($BUNDLES) with $("$tauri" --version)"
# `tauri bundle`: the bundler alone, over the tray cargo built above (`tauri build` would run
# cargo again under its own environment and may relink the tray for nothing).
# The tray binary is stripped where cargo left it, as the bundler copies it from there (cargo
# relinks it on the next change; a stripped binary is what cargo's release profile would make
# with `strip = true`).
if command -v strip >/dev/null; then strip --strip-unneeded "$TARGET/$PROFILE/weir-tray"; fi
debug_flag=(); [ $PROFILE = debug ] && debug_flag=(--debug)
(cd "$ROOT/src-tauri" && $NICE "$tauri" bundle "${debug_flag[@]}" --ci --bundles "$BUNDLES")

mkdir -p "$OUT"
bundle=$TARGET/$PROFILE/bundle
deb=$(ls -t "$bundle"/deb/*.deb | head -1)
cp "$deb" "$OUT/"
deb=$OUT/$(basename "$deb")
if [ "$BUNDLES" != deb ]; then cp "$bundle"/appimage/*.AppImage "$OUT/"; fi

# --- what was made ----------------------------------------------------------------------------
echo "package.sh: $(basename "$deb"): $(du -k "$deb" | cut -f1) KiB," \
  "$(dpkg-deb -f "$deb" Installed-Size) KiB installed, $(dpkg-deb -c "$deb" | grep -vc '/$') files"
dpkg-deb -f "$deb" Package Version Architecture Depends
for f in usr/bin/weir usr/bin/weir-tray usr/share/applications/ usr/lib/systemd/user/weir.service \
  usr/share/weir/autostart/weir-tray.desktop usr/share/man/man1/weir.1.gz \
  usr/share/bash-completion/completions/weir usr/share/zsh/vendor-completions/_weir \
  usr/share/fish/vendor_completions.d/weir.fish; do
  dpkg-deb -c "$deb" | awk '{print $NF}' | sed 's|^\./||; s|/$||' | grep -qx "${f%/}" ||
    { echo "package.sh: $f is missing from the package" >&2; exit 1; }
done
if dpkg-deb --ctrl-tarfile "$deb" | tar -t | grep -Eq 'preinst|postinst|prerm|postrm'; then
  echo "package.sh: the package has maintainer scripts; it must not (docs/install.md)" >&2; exit 1
fi
echo "package.sh: done in $(( $(date +%s) - started )) s: $deb"
