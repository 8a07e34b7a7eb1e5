import { createHash } from "node:crypto";
import { readFile, stat } from "node:fs/promises";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

/**
 * What a new machine needs to become a host, served by the control plane at stable URLs
 * (GET /v1/install/install.sh and GET /v1/install/denvd.mjs) so that installing a host needs no
 * checkout of the repository: the install script, and the denvd bundle of this cp's version.
 * The cloud-init user data of a provisioned machine fetches both and joins with a single-use
 * join token minted for that machine.
 */

/** The single-file denvd build (packages/denvd/scripts/bundle.mjs writes it), beside this package. */
export const DEFAULT_DENVD_BUNDLE = join(
  dirname(fileURLToPath(import.meta.url)),
  "..",
  "..",
  "..",
  "denvd",
  "dist",
  "bundle",
  "denvd.mjs",
);

export interface Bundle {
  bytes: Buffer;
  sha256: string;
}

/** The bundle, read again when the file changed (a rebuild while the cp runs). */
export class BundleFile {
  private cached?: { mtimeMs: number; bundle: Bundle };

  constructor(readonly path: string) {}

  async read(): Promise<Bundle | undefined> {
    const st = await stat(this.path).catch(() => undefined);
    if (!st) return undefined;
    if (this.cached?.mtimeMs !== st.mtimeMs) {
      const bytes = await readFile(this.path);
      this.cached = {
        mtimeMs: st.mtimeMs,
        bundle: { bytes, sha256: createHash("sha256").update(bytes).digest("hex") },
      };
    }
    return this.cached.bundle;
  }
}

/** Single quotes for sh. */
function q(s: string): string {
  return `'${s.replaceAll("'", `'\\''`)}'`;
}

/**
 * The install script: Docker and Node.js from the distribution's packages, the denvd bundle from
 * this control plane (checked against the SHA-256 it was generated with), the systemd unit, the
 * join (the token from DENVD_TOKEN in the environment, never argv), then denvd started.
 */
export function installScript(o: { cpUrl: string; version: string; sha256: string }): string {
  return `#!/bin/sh
# denvd install, served by the denv control plane ${o.version} at ${o.cpUrl}/v1/install/install.sh
#   DENVD_TOKEN=JOIN_TOKEN [DENV_HOST_NAME=NAME] [DENV_HOST_LABELS=k=v,k2=v2] sh install.sh
set -eu
CP_URL=${q(o.cpUrl)}
SHA256=${q(o.sha256)}
BUNDLE=/usr/local/lib/denv/denvd.mjs
STATE_DIR=/var/lib/denvd
die() { echo "install.sh: $*" >&2; exit 1; }
[ "$(id -u)" = 0 ] || die "run as root (denvd drives iptables, loop mounts and the Docker socket)"
[ -n "\${DENVD_TOKEN:-}" ] || die "DENVD_TOKEN (a join token) is needed"
# The packages only when a tool is missing: an image that has them needs no package index.
missing=""
for tool in dockerd iptables mkfs.btrfs nsenter curl node; do
  command -v "$tool" >/dev/null || missing="$missing $tool"
done
if [ -n "$missing" ]; then
  command -v apt-get >/dev/null || die "missing:$missing (install Docker, iptables, btrfs-progs, util-linux, curl and Node.js 20 or later)"
  apt-get update
  DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \\
    docker.io iptables btrfs-progs util-linux ca-certificates curl nodejs
fi
command -v node >/dev/null || die "Node.js 20 or later is needed"
[ "$(node -p 'process.versions.node.split(".")[0]')" -ge 20 ] || die "Node.js $(node --version) is too old: denvd needs 20 or later"
engine_up() { curl -fsS --max-time 2 --unix-socket /var/run/docker.sock http://docker/_ping >/dev/null 2>&1; }
if [ -d /run/systemd/system ]; then
  systemctl enable --now docker.service
elif ! engine_up; then
  # No systemd (a container or a bare namespace): the engine runs in the background.
  nohup dockerd >/var/log/dockerd.log 2>&1 &
fi
i=0
until engine_up; do
  i=$((i + 1)); [ "$i" -le 60 ] || die "the Docker engine did not answer on /var/run/docker.sock within 60 s (see /var/log/dockerd.log)"
  sleep 1
done
install -d -m 0755 /usr/local/lib/denv
curl -fsSL "$CP_URL/v1/install/denvd.mjs" -o "$BUNDLE.part"
echo "$SHA256  $BUNDLE.part" | sha256sum -c - >/dev/null || die "the denvd bundle from $CP_URL does not match its SHA-256 $SHA256"
chmod 0755 "$BUNDLE.part" && mv "$BUNDLE.part" "$BUNDLE"
ln -sfn "$BUNDLE" /usr/local/bin/denvd
install -d -m 0700 "$STATE_DIR"
set -- join --url "$CP_URL" --state-dir "$STATE_DIR"
[ -n "\${DENV_HOST_NAME:-}" ] && set -- "$@" --name "$DENV_HOST_NAME"
case "$CP_URL" in http://*) set -- "$@" --insecure ;; esac
for l in $(echo "\${DENV_HOST_LABELS:-}" | tr ',' ' '); do set -- "$@" --label "$l"; done
[ -f "$STATE_DIR/host.json" ] || DENVD_TOKEN="$DENVD_TOKEN" /usr/local/bin/denvd "$@"
if [ -d /run/systemd/system ]; then
  cat >/etc/systemd/system/denvd.service <<'UNIT'
${DENVD_UNIT}UNIT
  case "$CP_URL" in http://*)
    install -d -m 0755 /etc/systemd/system/denvd.service.d
    printf '[Service]\\nEnvironment=DENVD_INSECURE=1\\n' >/etc/systemd/system/denvd.service.d/insecure.conf ;;
  esac
  systemctl daemon-reload
  systemctl enable --now denvd.service
else
  # No systemd (a container or a bare namespace): denvd runs in the background, started again
  # when it exits, as the unit's Restart=always does.
  insecure=$(case "$CP_URL" in http://*) echo --insecure ;; esac)
  DENVD_STATE_DIR="$STATE_DIR" nohup sh -c "while :; do node --max-semi-space-size=1 /usr/local/bin/denvd run $insecure; echo denvd exited with \\$?: starting it again in 2 s; sleep 2; done" >>/var/log/denvd.log 2>&1 &
fi
echo "denvd installed and joined to $CP_URL"
`;
}

/** The unit deploy/denvd.service holds, as the script writes it. */
const DENVD_UNIT = `[Unit]
Description=denv sidecar (denvd): runs denv environments on this host
After=docker.service network-online.target
Wants=network-online.target
Requires=docker.service

[Service]
Type=simple
Environment=DENVD_STATE_DIR=/var/lib/denvd
ExecStart=/usr/bin/env node --max-semi-space-size=1 /usr/local/bin/denvd run
User=root
StateDirectory=denvd
StateDirectoryMode=0700
Restart=always
RestartSec=2
KillMode=mixed
TimeoutStopSec=30
LimitNOFILE=1048576

[Install]
WantedBy=multi-user.target
`;

/** What the install script reads from its environment to join a provisioned machine. */
export function joinEnv(o: { joinToken: string; machine: string; labels: Record<string, string> }): {
  DENVD_TOKEN: string;
  DENV_HOST_NAME: string;
  DENV_HOST_LABELS: string;
} {
  const labels = Object.entries({ ...o.labels, "ai.denv.machine": o.machine })
    .map(([k, v]) => `${k}=${v}`)
    .join(",");
  return { DENVD_TOKEN: o.joinToken, DENV_HOST_NAME: o.machine, DENV_HOST_LABELS: labels };
}

/**
 * The install as one command for a machine reached through a provider's exec (no user data):
 * the script fetched to a file (so that a failed fetch fails the command), run as root (through
 * sudo where the exec's user is not), its exit status kept. The join settings come in its
 * environment (joinEnv), never in its text.
 */
export function installCommand(cpUrl: string): string {
  const f = "/tmp/denv-install.sh";
  const run = `if [ "$(id -u)" = 0 ]; then sh ${f}; else sudo -E sh ${f}; fi`;
  return `curl -fsSL ${q(`${cpUrl}/v1/install/install.sh`)} -o ${f} && { ${run}; rc=$?; rm -f ${f}; exit $rc; }`;
}

/**
 * A provisioned machine's cloud-init user data: the join token (single use, minted for this
 * machine) in a root-only file, then the cp's install script fetched and run with it.
 */
export function cloudInit(o: {
  cpUrl: string;
  joinToken: string;
  machine: string;
  labels: Record<string, string>;
}): string {
  const env = Object.entries(joinEnv(o)).map(([k, v]) => `${k}=${q(v)}`);
  return `#cloud-config
write_files:
  - path: /etc/denv/join.env
    permissions: "0600"
    owner: root:root
    content: |
${env.map((l) => `      ${l}`).join("\n")}
runcmd:
  - [sh, -c, ${JSON.stringify(`set -a; . /etc/denv/join.env; set +a; curl -fsSL ${q(`${o.cpUrl}/v1/install/install.sh`)} | sh && rm -f /etc/denv/join.env`)}]
`;
}
