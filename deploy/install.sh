#!/usr/bin/env bash
# Installs denvd, the denv sidecar, on a Debian or Ubuntu host from this repository checkout:
# host packages (docker.io, iptables, btrfs-progs), denvd built as one file (the bundle,
# packages/denvd/dist/bundle/denvd.mjs) installed as /usr/local/lib/denvd/denvd.mjs and linked as
# /usr/local/bin/denvd, the systemd unit, and (with --url and --token) the join to a target.
# The installed denvd needs only Node.js: the checkout may be removed afterwards.
#
#   deploy/install.sh [--url URL --token JOIN_TOKEN] [--name NAME] [--label k=v]...
#                     [--state-dir DIR] [--insecure] [--dry-run]
#
# --insecure accepts a plain http:// control plane on another machine (join and run).
# --dry-run prints every step and changes nothing. The join token may also come from
# DENVD_TOKEN; it is handed to denvd through the environment (never argv) and never printed.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BIN=/usr/local/bin/denvd
BUNDLE=/usr/local/lib/denvd/denvd.mjs
UNIT=/etc/systemd/system/denvd.service
STATE_DIR=/var/lib/denvd
URL=""
TOKEN="${DENVD_TOKEN:-}"
NAME=""
LABELS=()
DRY_RUN=0
INSECURE=0

usage() { sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; }
die() { echo "install.sh: $*" >&2; exit 1; }

while [ $# -gt 0 ]; do
  case "$1" in
    --url) URL="${2:?--url needs a value}"; shift 2 ;;
    --token) TOKEN="${2:?--token needs a value}"; shift 2 ;;
    --name) NAME="${2:?--name needs a value}"; shift 2 ;;
    --label) LABELS+=("${2:?--label needs k=v}"); shift 2 ;;
    --state-dir) STATE_DIR="${2:?--state-dir needs a value}"; shift 2 ;;
    --insecure) INSECURE=1; shift ;;
    --dry-run) DRY_RUN=1; shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "install.sh: unknown argument '$1'" >&2; usage >&2; exit 2 ;;
  esac
done
if [ -n "$URL" ] && [ -z "$TOKEN" ]; then die "--url needs --token JOIN_TOKEN (or DENVD_TOKEN)"; fi
if [ -z "$URL" ] && [ -n "$TOKEN" ]; then die "--token needs --url URL"; fi

# Prints a step, then runs it (unless --dry-run). Arguments are printed shell-quoted.
step() {
  printf '+'; printf ' %q' "$@"; printf '\n'
  if [ "$DRY_RUN" = 0 ]; then "$@"; fi
}
note() { echo "# $*"; }

cd "$REPO"
note "denvd install from $REPO"
if [ "$DRY_RUN" = 0 ]; then
  [ "$(id -u)" = 0 ] || die "run as root (denvd drives iptables, loop mounts and the Docker socket)"
  command -v node >/dev/null || die "Node.js 20 or later is needed: install it first (e.g. apt-get install nodejs on Debian 13)"
  major=$(node -p 'process.versions.node.split(".")[0]')
  [ "$major" -ge 20 ] || die "Node.js $(node --version) is too old: denvd needs 20 or later"
fi
note "check: root, Node.js >= 20"

step apt-get update
step env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
  docker.io iptables btrfs-progs util-linux ca-certificates
if [ -d /run/systemd/system ] || [ "$DRY_RUN" = 1 ]; then
  step systemctl enable --now docker.service
fi

# Only what a host runs: spec and denvd (the control plane and the CLI are not needed here),
# bundled into one file with its dependencies. The .mjs name tells node it is an ES module; the
# link keeps it (node resolves a linked program to its real path).
step npm ci --no-audit --no-fund
step node scripts/build-info.mjs
step npx tsc -b packages/spec packages/denvd
step node packages/denvd/scripts/bundle.mjs
step install -D -m 0755 "$REPO/packages/denvd/dist/bundle/denvd.mjs" "$BUNDLE"
step ln -sfn "$BUNDLE" "$BIN"

step install -d -m 0700 "$STATE_DIR"
step install -m 0644 "$REPO/deploy/denvd.service" "$UNIT"
if [ "$INSECURE" = 1 ]; then
  # denvd run refuses a plain http:// control plane on another machine without it.
  step install -d -m 0755 "$UNIT.d"
  echo "+ write $UNIT.d/insecure.conf: [Service] Environment=DENVD_INSECURE=1"
  if [ "$DRY_RUN" = 0 ]; then printf '[Service]\nEnvironment=DENVD_INSECURE=1\n' >"$UNIT.d/insecure.conf"; fi
fi
if [ "$STATE_DIR" != /var/lib/denvd ]; then
  # A drop-in, so that the unit file stays the repository's.
  step install -d -m 0755 "$UNIT.d"
  echo "+ write $UNIT.d/state-dir.conf: [Service] Environment=DENVD_STATE_DIR=$STATE_DIR"
  if [ "$DRY_RUN" = 0 ]; then
    printf '[Service]\nEnvironment=DENVD_STATE_DIR=%s\n' "$STATE_DIR" >"$UNIT.d/state-dir.conf"
  fi
fi

joined=0
if [ -n "$URL" ]; then
  args=(join --url "$URL" --state-dir "$STATE_DIR")
  [ -n "$NAME" ] && args+=(--name "$NAME")
  [ "$INSECURE" = 1 ] && args+=(--insecure)
  for l in "${LABELS[@]}"; do args+=(--label "$l"); done
  if [ -f "$STATE_DIR/host.json" ]; then
    note "already joined ($STATE_DIR/host.json): skipping the join"
  else
    # The token travels in the environment: argv is readable by every user through /proc.
    printf '+ DENVD_TOKEN=***'; printf ' %q' "$BIN" "${args[@]}"; printf '\n'
    if [ "$DRY_RUN" = 0 ]; then DENVD_TOKEN="$TOKEN" "$BIN" "${args[@]}"; fi
  fi
  joined=1
elif [ -f "$STATE_DIR/host.json" ]; then
  joined=1
fi

step systemctl daemon-reload
step systemctl enable denvd.service
if [ "$joined" = 1 ]; then
  step systemctl restart denvd.service
else
  note "not joined yet: run 'denvd join --url URL --token JOIN_TOKEN', then 'systemctl start denvd'"
fi
step "$BIN" doctor --state-dir "$STATE_DIR"
note "done"
