import { randomBytes } from "node:crypto";
import { existsSync } from "node:fs";
import { mkdir, readFile, rm, statfs, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { EgressFindings, ExitCodes } from "@denv/spec";
import type { DenvdConfig } from "../config.js";
import { DockerClient } from "../docker/docker-client.js";
import { engineLeaksInternalDns, loopbackNameservers } from "../host/dns-leak.js";
import { run } from "../host/run.js";
import type { Output } from "./output.js";

/**
 * `denvd doctor`: checks that this machine can run environments with the five protections, one
 * line per check: ok, warn (works, with less) or fail (with what to do). Exit 1 when a check fails.
 */

type Status = "ok" | "warn" | "fail";
interface Check {
  name: string;
  status: Status;
  detail: string;
  fix?: string;
}

const CGROUP2_MAGIC = 0x63677270;

async function tool(file: string, args: string[]): Promise<{ ok: boolean; text: string }> {
  try {
    const r = await run(file, args, { timeoutMs: 10_000 });
    return { ok: r.code === 0, text: (r.stdout || r.stderr).trim().split("\n")[0] ?? "" };
  } catch (err) {
    return { ok: false, text: (err as Error).message };
  }
}

async function checks(config: DenvdConfig): Promise<Check[]> {
  const out: Check[] = [];
  const uid = process.getuid?.() ?? -1;
  out.push(
    uid === 0
      ? { name: "root", status: "ok", detail: "running as root" }
      : {
          name: "root",
          status: "fail",
          detail: `running as uid ${uid}`,
          fix: "run denvd as root (it drives iptables, nsenter and loop mounts)",
        },
  );

  const docker = new DockerClient(config.dockerSocket);
  try {
    const v = await docker.version();
    out.push({
      name: "docker",
      status: "ok",
      detail: `Docker Engine ${v.version} (API ${v.apiVersion}) at ${config.dockerSocket}`,
    });
    out.push(await dnsCheck(v.version));
  } catch (err) {
    out.push({
      name: "docker",
      status: "fail",
      detail: `no Docker Engine at ${config.dockerSocket}: ${(err as Error).message}`,
      fix: "apt-get install docker.io && systemctl enable --now docker (or set --docker-socket)",
    });
  }

  if (existsSync("/proc/net/if_inet6")) {
    out.push(
      await firewallCheck(
        "ip6tables",
        "IPv6 is rejected like IPv4",
        "this host has IPv6 and ",
        "it brings ip6tables; protection 5 rejects IPv6 too",
      ),
    );
  }
  out.push(
    await firewallCheck(
      "iptables",
      "(filter table, INPUT chain)",
      "",
      "protection 5 rejects environment -> host traffic with it",
    ),
  );

  const ns = await tool("nsenter", ["--version"]);
  out.push(
    ns.ok
      ? { name: "nsenter", status: "ok", detail: ns.text }
      : {
          name: "nsenter",
          status: "fail",
          detail: "nsenter is missing",
          fix: "apt-get install util-linux (denvd removes default routes inside environments with it)",
        },
  );

  const mkfs = await tool("mkfs.btrfs", ["--version"]);
  const fs = await readFile("/proc/filesystems", "utf8").catch(() => "");
  const btrfsKernel = /\bbtrfs\b/.test(fs) || (await tool("modprobe", ["-n", "btrfs"])).ok;
  out.push(
    mkfs.ok && btrfsKernel
      ? { name: "btrfs", status: "ok", detail: `${mkfs.text}; the kernel has btrfs` }
      : {
          name: "btrfs",
          status: "warn",
          detail: mkfs.ok ? "the kernel has no btrfs" : "mkfs.btrfs is missing",
          fix: "apt-get install btrfs-progs: without it volumes are copied (slower snapshots and forks)",
        },
  );

  const loop = await tool("losetup", ["-f"]);
  out.push(
    loop.ok && existsSync("/dev/loop-control")
      ? { name: "loop devices", status: "ok", detail: `next free: ${loop.text}` }
      : {
          name: "loop devices",
          status: "warn",
          detail: `no free loop device: ${loop.text}`,
          fix: "modprobe loop (the btrfs volume store is a loop-mounted file); else volumes are copied",
        },
  );

  try {
    await mkdir(config.stateDir, { recursive: true, mode: 0o700 });
    const probe = join(config.stateDir, `.doctor-${randomBytes(4).toString("hex")}`);
    await writeFile(probe, "ok");
    await rm(probe);
    const s = await statfs(config.stateDir);
    const free = s.bavail * s.bsize;
    out.push({
      name: "state dir",
      status: "ok",
      detail: `${config.stateDir} is writable; ${(free / 1024 ** 3).toFixed(1)} GiB free`,
    });
  } catch (err) {
    out.push({
      name: "state dir",
      status: "fail",
      detail: `${config.stateDir} is not writable: ${(err as Error).message}`,
      fix: "give denvd a writable --state-dir (or DENVD_STATE_DIR)",
    });
  }

  const cg = await statfs("/sys/fs/cgroup").catch(() => undefined);
  out.push({
    name: "cgroups",
    status: cg ? "ok" : "fail",
    detail: cg ? (cg.type === CGROUP2_MAGIC ? "cgroup v2" : "cgroup v1") : "/sys/fs/cgroup is not mounted",
    fix: cg ? undefined : "mount the cgroup filesystem (memory, pid and cpu caps need it)",
  });

  const major = Number(process.versions.node.split(".")[0]);
  out.push(
    major >= 20
      ? { name: "node", status: "ok", detail: `Node.js ${process.versions.node}` }
      : {
          name: "node",
          status: "fail",
          detail: `Node.js ${process.versions.node}`,
          fix: "install Node.js 20 or later",
        },
  );
  return out;
}

export async function doctor(config: DenvdConfig, out: Output): Promise<number> {
  const list = await checks(config);
  const ok = list.every((c) => c.status !== "fail");
  const text = list
    .map(
      (c) =>
        `${c.status.padEnd(4)} ${c.name.padEnd(12)} ${c.detail}${c.fix ? `\n     ${"".padEnd(12)} -> ${c.fix}` : ""}`,
    )
    .join("\n");
  out.result({ ok, checks: list }, text);
  return ok ? ExitCodes.ok : ExitCodes.failure;
}

/** The engine's embedded DNS and internal networks (CVE-2024-29018): what the egress probe will say. */
async function dnsCheck(engine: string): Promise<Check> {
  if (!engineLeaksInternalDns(engine)) {
    return {
      name: "docker dns",
      status: "ok",
      detail: `Docker Engine ${engine} keeps names on internal networks`,
    };
  }
  const loopback = await loopbackNameservers();
  if (loopback.length === 0) {
    return {
      name: "docker dns",
      status: "warn",
      detail: `Docker Engine ${engine} has CVE-2024-29018 (names leave internal networks through a loopback resolver); this host's resolvers are not on loopback, so it does not apply here`,
      fix: "upgrade the engine to 23.0.11, 25.0.5, 26.0.0 or later",
    };
  }
  return {
    name: "docker dns",
    status: "fail",
    detail: EgressFindings.dnsLeak(engine),
    fix: `point /etc/resolv.conf away from ${loopback.join(", ")} or upgrade the engine; the egress probe refuses every episode until then`,
  };
}

/** iptables or ip6tables: does it list the INPUT chain (where the reject rules go)? */
async function firewallCheck(
  name: "iptables" | "ip6tables",
  okNote: string,
  failContext: string,
  why: string,
): Promise<Check> {
  const r = await tool(name, ["-w", "-L", "INPUT", "-n"]);
  return r.ok
    ? { name, status: "ok", detail: `${name} answers${okNote.startsWith("(") ? " " : ": "}${okNote}` }
    : {
        name,
        status: "fail",
        detail: `${failContext}${name} does not answer: ${r.text}`,
        fix: `apt-get install iptables (${why})`,
      };
}
