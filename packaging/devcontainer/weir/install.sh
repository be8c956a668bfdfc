#!/bin/sh
# Dev container feature: installs Weir's .deb and the start script the container's entrypoint
# runs (weir serve as the container's user, started when the container starts: a feature's
# install.sh runs while the image is built, where nothing may keep running).
#
# Options arrive as environment variables (devcontainer spec: the option id upper-cased):
# DEB, PORT, TRUSTCA, VSCODE. The dev container CLI also sets _REMOTE_USER and
# _REMOTE_USER_HOME. For a test outside a container, WEIR_FEATURE_ROOT prefixes every path
# written (the .deb still goes through dpkg/apt of the running system's root).
set -eu

DEB=${DEB:-}
PORT=${PORT:-9347}
TRUSTCA=${TRUSTCA:-true}
VSCODE=${VSCODE:-true}
ROOT=${WEIR_FEATURE_ROOT:-}
USER_NAME=${_REMOTE_USER:-root}
if [ -z "${_REMOTE_USER_HOME:-}" ]; then
  _REMOTE_USER_HOME=$(getent passwd "$USER_NAME" | cut -d: -f6)
fi
USER_HOME=${_REMOTE_USER_HOME:-/root}

say() { echo "weir feature: $*"; }
die() { echo "weir feature: $*" >&2; exit 1; }

case "$PORT" in
  ''|*[!0-9]*) die "port must be a number, not '$PORT'" ;;
esac
[ -n "$DEB" ] || die "set the 'deb' option to the URL or path of Weir's .deb (scripts/package.sh makes it)"
[ "$(id -u)" = 0 ] || die "install.sh runs as root (the dev container CLI runs it so)"

# --- 1. The package, with its dependencies from the image's apt sources.
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
case "$DEB" in
  http://*|https://*)
    command -v curl >/dev/null || { apt-get update -qq; DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends curl ca-certificates; }
    curl -fsSL -o "$tmp/weir.deb" "$DEB" || die "cannot download $DEB"
    deb="$tmp/weir.deb" ;;
  /*) [ -f "$DEB" ] || die "no such file: $DEB"; deb="$DEB" ;;
  *) die "the 'deb' option must be an https:// URL or an absolute path, not '$DEB'" ;;
esac
if [ -z "$ROOT" ]; then
  apt-get update -qq
  # apt resolves the package's dependencies; ./ makes it a file, not a package name.
  DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "$deb" curl ca-certificates
  rm -rf /var/lib/apt/lists/*
fi
weir_bin=$ROOT/usr/bin/weir
[ -x "$weir_bin" ] || die "the package did not install /usr/bin/weir"
say "installed $("$weir_bin" --version)"

# --- 2. The start script (the feature's entrypoint) with this container's user baked in.
mkdir -p "$ROOT/usr/local/share/weir"
cat >"$ROOT/usr/local/share/weir/start.sh" <<START
#!/bin/sh
# Written by Weir's dev container feature: starts weir serve as $USER_NAME once per container
# start, trusts its CA and points VS Code's remote settings at it, then runs the container's
# command. Its log: $USER_HOME/.local/state/weir/serve.log
USER_NAME='$USER_NAME'
USER_HOME='$USER_HOME'
PORT='$PORT'
TRUSTCA='$TRUSTCA'
VSCODE='$VSCODE'
START
cat >>"$ROOT/usr/local/share/weir/start.sh" <<'START'
as_user() {
  if [ "$(id -u)" = 0 ] && [ "$USER_NAME" != root ]; then
    runuser -u "$USER_NAME" -- env HOME="$USER_HOME" "$@"
  else
    env HOME="$USER_HOME" "$@"
  fi
}
health() { curl -fsS --noproxy '*' "http://127.0.0.1:$PORT/_weir/api/health" >/dev/null 2>&1; }
if [ "$(id -u)" = 0 ] || [ "$(id -un)" = "$USER_NAME" ]; then
  if ! health; then
    as_user mkdir -p "$USER_HOME/.local/state/weir"
    # shellcheck disable=SC2016 # $1 and $HOME are the user's shell's, not this one's
    as_user sh -c 'nohup weir serve --listen "127.0.0.1:$1" >>"$HOME/.local/state/weir/serve.log" 2>&1 &' weir "$PORT"
    i=0
    while [ $i -lt 100 ] && ! health; do sleep 0.1; i=$((i + 1)); done
  fi
  ca="$USER_HOME/.local/share/weir/ca/weir-ca.pem"
  if [ "$TRUSTCA" = true ] && [ "$(id -u)" = 0 ] && [ -f "$ca" ]; then
    # Root reads the user's data dir: the service is the user's default one (`weir`), which
    # root's own default would not give (namespaces are per the running user's default dir).
    WEIR_KEYCHAIN_SERVICE=weir weir ca install --apply --data-dir "$USER_HOME/.local/share/weir" >/dev/null 2>&1 ||
      echo "weir feature: could not add Weir's CA to the system store; run: sudo WEIR_KEYCHAIN_SERVICE=weir weir ca install --apply --data-dir $USER_HOME/.local/share/weir" >&2
  fi
  if [ "$VSCODE" = true ]; then
    as_user weir setup vscode --apply --listen "127.0.0.1:$PORT" \
      --settings "$USER_HOME/.vscode-server/data/Machine/settings.json" >/dev/null 2>&1 || true
  fi
fi
exec "$@"
START
chmod 0755 "$ROOT/usr/local/share/weir/start.sh"

# --- 3. Login shells (a terminal, `docker exec -it … bash -l`) point their tools at Weir while
# it answers.
mkdir -p "$ROOT/etc/profile.d"
cat >"$ROOT/etc/profile.d/weir.sh" <<PROFILE
# Weir's dev container feature: command-line tools use Weir while it answers.
if command -v weir >/dev/null 2>&1; then eval "\$(weir env --if-running --listen 127.0.0.1:$PORT)"; fi
PROFILE
say "weir serve starts as $USER_NAME on 127.0.0.1:$PORT when the container starts (/usr/local/share/weir/start.sh)"
