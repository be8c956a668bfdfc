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
#   --appimage         also an AppImage of the tray (with the `weir` CLI inside): the .deb's
#                      files in an AppDir, squashed (squashfs-tools' mksquashfs) behind the
#                      AppImage runtime that packaging/appimage/runtime.toml names (fetched with
#                      cargo from crates.io, its digest checked). Tauri's own AppImage bundler is
#                      not used: it downloads linuxdeploy from GitHub, which this project's build
#                      machines cannot reach. The image bundles no libraries: it needs the
#                      system's WebKitGTK 4.1 and libayatana-appindicator3 (docs/install.md).
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
APPIMAGE=0
PROFILE=release
TAURI_CLI_VERSION=2.12.5 # the tauri crate's own version (Cargo.lock): CLI and crate in step
while [ $# -gt 0 ]; do
  case "$1" in
    --out) OUT=$2; shift 2 ;;
    --appimage) APPIMAGE=1; shift ;;
    --debug) PROFILE=debug; shift ;;
    -h|--help) sed -n '2,28p' "$0"; exit 0 ;;
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

# --- the AppImage (--appimage): the .deb's files behind the AppImage runtime ---------------
if [ $APPIMAGE = 1 ]; then
  need mksquashfs "apt-get install squashfs-tools"
  need sha256sum "apt-get install coreutils"
  conf=$ROOT/packaging/appimage/runtime.toml
  field() { sed -n "s/^$1 = \"\(.*\)\"$/\1/p" "$conf"; }
  crate=$(field crate) crate_version=$(field version) crate_file=$(field file) digest=$(field sha256)
  # A throwaway manifest that depends on the crate: cargo downloads it from crates.io (through
  # whatever registry set-up cargo has) and says where its source is.
  fetch=$ROOT/target/package/appimage-runtime
  mkdir -p "$fetch/src"
  printf '[package]\nname = "fetch-appimage-runtime"\nversion = "0.0.0"\nedition = "2021"\n[dependencies]\n%s = "=%s"\n[workspace]\n' \
    "$crate" "$crate_version" >"$fetch/Cargo.toml"
  : >"$fetch/src/lib.rs"
  (cd "$fetch" && cargo fetch -q)
  src=$(cd "$fetch" && cargo metadata --format-version 1 | python3 -c '
import json, os, sys
name, version = sys.argv[1], sys.argv[2]
for p in json.load(sys.stdin)["packages"]:
    if p["name"] == name and p["version"] == version:
        print(os.path.dirname(p["manifest_path"]))
' "$crate" "$crate_version")
  runtime=$src/$crate_file
  [ -f "$runtime" ] || { echo "package.sh: $crate $crate_version has no $crate_file" >&2; exit 1; }
  echo "$digest  $runtime" | sha256sum -c --quiet - ||
    { echo "package.sh: the AppImage runtime's digest is not the one in $conf" >&2; exit 1; }
  appdir=$ROOT/target/package/Weir.AppDir
  rm -rf "$appdir"
  mkdir -p "$appdir"
  dpkg-deb -x "$deb" "$appdir"
  install -m 0755 "$ROOT/packaging/appimage/AppRun" "$appdir/AppRun"
  desktop=$(grep -ls '^Exec=' "$appdir"/usr/share/applications/*.desktop | head -1)
  sed 's/^Exec=.*/Exec=weir-tray/; s/^Icon=.*/Icon=weir-tray/' "$desktop" >"$appdir/weir-tray.desktop"
  icon=$(ls "$appdir"/usr/share/icons/hicolor/128x128/apps/*.png | head -1)
  cp "$icon" "$appdir/weir-tray.png"
  ln -s weir-tray.png "$appdir/.DirIcon"
  image=$OUT/Weir_$(dpkg-deb -f "$deb" Version)_x86_64.AppImage
  mksquashfs "$appdir" "$appdir.squashfs" -root-owned -noappend -quiet -comp gzip >/dev/null
  cat "$runtime" "$appdir.squashfs" >"$image"
  chmod 0755 "$image"
  rm -f "$appdir.squashfs"
  echo "package.sh: $(basename "$image"): $(du -k "$image" | cut -f1) KiB (runtime: $crate $crate_version)"
fi
echo "package.sh: done in $(( $(date +%s) - started )) s: $deb"
