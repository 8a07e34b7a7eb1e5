import { execFile } from "node:child_process";
import { existsSync, mkdirSync, readFileSync, renameSync, rmSync, writeFileSync } from "node:fs";
import path from "node:path";
import { promisify } from "node:util";
import { cleanEnv, type Proc, startProc, waitUntil } from "./fixture-procs.js";
import { makeNamespace } from "./hosts-engines.js";
import type { Hosts } from "./hosts-fixture.js";
import { LIB_ROOT, PREFIX } from "./hosts-teardown.js";
import { openMirrors } from "./machine-mirrors.js";
import { type RunResult, repo, run } from "./stack.js";

/**
 * A fresh machine for the tests of provisioned targets, booted from a cloud's user data the way
 * a cloud VM boots: the root filesystem of deploy/machine-image (Debian 13 with Docker, Node.js
 * and cloud-init; nothing of denv), an overlay of its own over it, and cloud-init running the
 * user data the control plane generated (its NoCloud seed). The machine is a network namespace
 * on a hosts fixture's bridge (it reaches the control plane, with `mirrors` its package mirrors
 * too, and nothing else) plus mount, pid, UTS and IPC namespaces, its root pivoted to that
 * filesystem: its own Docker engine, its own denvd
 * (the install script starts both, with no systemd), its own /etc and /var. Privileged
 * containers cannot run on these machines, so this is the container.
 *
 * Layout (inside the fixture, so that its teardown removes it all: processes by the boot
 * script's path, the namespace, the veth pair, the folders, loop devices):
 *   netns `dvt<id>-<name>`, eth0 10.252.<k>.<100+i>/24 (veth `dvt<id>v<100+i>`)
 *   /var/lib/dvt/<id>/<name>/{upper,work,root}   the overlay and its mount point
 *   /var/lib/dvt/<id>/<name>/{docker,denvd}      the engine's data root, denvd's state dir
 *   /var/lib/dvt/<id>/<name>/share               /mnt/share inside (files handed in)
 */

const MACHINE_IMAGE = "denv-machine:trixie";
/** The machine image's root filesystem, unpacked once per image id (read only: the lower layer). */
const ROOTFS_CACHE = "/var/lib/denv-machine";

const sh = promisify(execFile);

export interface Machine {
  name: string;
  address: string;
  /** cloud-init's output and the install script's, as the machine wrote them. */
  logs(): string;
  /** A command in the machine (its namespaces and root), e.g. ["curl", ...]. */
  exec(argv: string[], opts?: { input?: string | Buffer; timeoutMs?: number }): Promise<RunResult>;
  /** Loads an image of this machine's engine (`docker save` output) into the machine's engine. */
  loadImage(image: string): Promise<void>;
  /** SIGKILL to every process of the machine (the fixture's close removes the rest). */
  kill(): Promise<void>;
}

/** Builds the machine image (deploy/machine-image, idempotent) and unpacks its root filesystem once. */
export async function machineRootfs(): Promise<string> {
  const built = await run(path.join(repo, "deploy/machine-image"), ["--tag", MACHINE_IMAGE], process.env, {
    timeoutMs: 900_000,
  });
  if (built.code !== 0) throw new Error(`deploy/machine-image failed: ${built.stderr}`);
  const id = (await sh("docker", ["image", "inspect", "-f", "{{.Id}}", MACHINE_IMAGE])).stdout
    .trim()
    .replace(/^sha256:/, "")
    .slice(0, 16);
  const dir = path.join(ROOTFS_CACHE, id);
  if (existsSync(path.join(dir, ".complete"))) return dir;
  rmSync(ROOTFS_CACHE, { recursive: true, force: true }); // an older image's
  const part = `${dir}.part`;
  mkdirSync(part, { recursive: true });
  const container = (
    await sh("docker", ["create", "--label", "ai.denv.test=machine-rootfs", MACHINE_IMAGE])
  ).stdout.trim();
  try {
    await sh("sh", ["-c", `docker export ${container} | tar -C '${part}' -xf -`], { maxBuffer: 1 << 20 });
  } finally {
    await sh("docker", ["rm", "-f", container]);
  }
  writeFileSync(path.join(part, ".complete"), `${MACHINE_IMAGE} ${id}\n`);
  renameSync(part, dir);
  return dir;
}

/** The script the machine's namespaces start with: mounts, the seed, then cloud-init's four stages. */
function bootScript(dir: string, lower: string): string {
  return `#!/bin/sh
set -eu
M='${dir}'
mount --make-rprivate /
mount -t overlay overlay -o "lowerdir=${lower},upperdir=$M/upper,workdir=$M/work" "$M/root"
mount -t proc proc "$M/root/proc"
mount --rbind /sys "$M/root/sys"
mount --rbind /dev "$M/root/dev"
mount -t tmpfs -o mode=0755 tmpfs "$M/root/run"
mount -t tmpfs -o mode=1777 tmpfs "$M/root/tmp"
for d in var/lib/docker var/lib/denvd mnt/share var/lib/cloud/seed/nocloud .oldroot; do mkdir -p "$M/root/$d"; done
mount --bind "$M/docker" "$M/root/var/lib/docker"
mount --bind "$M/denvd" "$M/root/var/lib/denvd"
mount --bind "$M/share" "$M/root/mnt/share"
cp "$M/user-data" "$M/meta-data" "$M/root/var/lib/cloud/seed/nocloud/"
# pivot_root, not a bare chroot: the machine's root must be the root of its mount namespace, as
# on a VM. Under a chroot, runc's exec lands at the namespace's root, outside the container.
cd "$M/root"
pivot_root . .oldroot
exec chroot . /bin/sh -c '
  umount -l /.oldroot && rmdir /.oldroot
  for stage in "init --local" "init" "modules --mode=config" "modules --mode=final"; do
    cloud-init $stage >>/var/log/cloud-init-output.log 2>&1 || echo "cloud-init $stage exited $?" >>/var/log/cloud-init-output.log
  done
  echo booted >/run/booted
  exec sleep infinity'
`;
}

/**
 * Boots machine `name` (index `i`, 0-89) on `hosts`' bridge with `userData` as its cloud-init
 * user data, and returns once cloud-init has run every stage (the user data's commands done).
 */
export async function bootMachine(
  hosts: Hosts,
  o: {
    name: string;
    index: number;
    userData: string;
    lower: string;
    /** Package mirrors (host names) the machine may reach (machine-mirrors.ts), so that it can build images. */
    mirrors?: readonly string[];
  },
): Promise<Machine> {
  const { id } = hosts;
  const gateway = new URL(hosts.url).hostname;
  const address = gateway.replace(/\.1$/, `.${100 + o.index}`);
  const netns = `${PREFIX}${id}-${o.name}`;
  const veth = `${PREFIX}${id}v${100 + o.index}`;
  const peer = `${PREFIX}${id}p${100 + o.index}`;
  const dir = path.join(LIB_ROOT, id, o.name);
  for (const d of ["upper", "work", "root", "docker", "denvd", "share"])
    mkdirSync(path.join(dir, d), { recursive: true, mode: 0o700 });
  writeFileSync(path.join(dir, "user-data"), o.userData, { mode: 0o600 });
  writeFileSync(path.join(dir, "meta-data"), `instance-id: ${o.name}\nlocal-hostname: ${o.name}\n`);
  const boot = path.join(dir, "boot.sh");
  writeFileSync(boot, bootScript(dir, o.lower), { mode: 0o700 });

  await makeNamespace({ netns, veth, peer, bridge: `${PREFIX}${id}`, address });
  if (o.mirrors?.length)
    await openMirrors({
      id,
      netns,
      address,
      gateway,
      hosts: o.mirrors,
      lower: o.lower,
      upper: path.join(dir, "upper"),
    });

  // nsenter --net, not `ip netns exec`: that one mounts a fresh /sys, without the cgroup
  // hierarchies the machine's engine needs.
  const log = path.join(dir, "boot.log");
  const proc: Proc = startProc(
    "nsenter",
    [
      `--net=/run/netns/${netns}`,
      "unshare",
      "--mount",
      "--pid",
      "--uts",
      "--ipc",
      "--fork",
      "--kill-child",
      boot,
    ],
    log,
    cleanEnv(),
  );
  /** pid 1 of the machine's pid namespace: unshare's child. */
  const init = (): number => {
    const pid = proc.child.pid;
    const children =
      pid === undefined ? "" : readFileSync(`/proc/${pid}/task/${pid}/children`, "utf8").trim();
    const first = Number(children.split(" ")[0]);
    if (!Number.isInteger(first) || first <= 0) throw new Error(`machine ${o.name} has no init process`);
    return first;
  };
  const exec = (argv: string[], opts: { input?: string | Buffer; timeoutMs?: number } = {}) =>
    run(
      "nsenter",
      ["-t", String(init()), "-m", "-u", "-i", "-n", "-p", "-r", "-w", ...argv],
      cleanEnv(),
      opts,
    );
  const logs = () =>
    ["var/log/cloud-init-output.log", "var/log/denvd.log", "var/log/dockerd.log"]
      .map((f) => {
        const file = path.join(dir, "upper", f);
        return existsSync(file) ? `== /${f}\n${readFileSync(file, "utf8").slice(-4000)}` : `== /${f}: none`;
      })
      .join("\n");
  await waitUntil(
    `machine ${o.name} booted (cloud-init done)`,
    300_000,
    async () => (await exec(["test", "-e", "/run/booted"])).code === 0,
    { p: proc, log },
  );
  return {
    name: o.name,
    address,
    logs,
    exec,
    async loadImage(image) {
      const tar = path.join(dir, "share", "image.tar");
      await sh("docker", ["save", "-o", tar, image], { env: cleanEnv() });
      try {
        const r = await exec([
          "curl",
          "-fsS",
          "--unix-socket",
          "/var/run/docker.sock",
          "-X",
          "POST",
          "-H",
          "Content-Type: application/x-tar",
          "--data-binary",
          "@/mnt/share/image.tar",
          "http://docker/images/load?quiet=1",
        ]);
        if (r.code !== 0) throw new Error(`loading ${image} into machine ${o.name}: ${r.stderr}`);
      } finally {
        rmSync(tar, { force: true });
      }
    },
    async kill() {
      proc.child.kill("SIGKILL");
    },
  };
}
