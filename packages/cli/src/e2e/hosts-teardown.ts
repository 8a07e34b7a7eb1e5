import { execFile } from "node:child_process";
import { randomInt } from "node:crypto";
import { existsSync, readdirSync, readFileSync, rmdirSync, rmSync } from "node:fs";
import path from "node:path";
import { promisify } from "node:util";
import type { DenvClient } from "@denv/sdk";
import { sleep } from "./fixture-procs.js";

/**
 * What the hosts fixture (hosts-fixture.ts, which describes the layout) makes on this machine and
 * how it is removed: by a fixture's own close(), or by a later run's sweep when the process that
 * made it died.
 */

export const RUN_ROOT = "/run/dvt";
export const LIB_ROOT = "/var/lib/dvt";
/** Every name this fixture gives a link, a namespace or a folder starts with it, then the 4-hex id. */
export const PREFIX = "dvt";
const ID = /^[0-9a-f]{4}$/;

const sh = promisify(execFile);

/** The process's start time in clock ticks since boot (field 22 of /proc/PID/stat): a pid with another start time is another process. */
export function startTime(pid: number): string | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    return fields[0] === "Z" ? undefined : fields[19];
  } catch {
    return undefined;
  }
}

/** Whether the process that wrote fixture `id`'s owner file still runs. */
function ownerAlive(id: string): boolean {
  try {
    const [pid, start] = readFileSync(path.join(RUN_ROOT, id, "owner"), "utf8")
      .trim()
      .split(" ");
    return start !== undefined && startTime(Number(pid)) === start;
  } catch {
    return false;
  }
}

/** pids whose command line names a folder of fixture `id`, with all their descendants (containers under a shim). */
function processesOf(id: string): number[] {
  const marks = [`${RUN_ROOT}/${id}/`, `${LIB_ROOT}/${id}/`];
  const children = new Map<number, number[]>();
  const roots: number[] = [];
  for (const entry of readdirSync("/proc")) {
    const pid = Number(entry);
    if (!Number.isInteger(pid) || pid === process.pid) continue;
    try {
      const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
      const ppid = Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1]);
      children.set(ppid, [...(children.get(ppid) ?? []), pid]);
      const cmdline = readFileSync(`/proc/${pid}/cmdline`, "utf8").replaceAll("\0", " ");
      if (marks.some((m) => cmdline.includes(m))) roots.push(pid);
    } catch {
      // gone meanwhile
    }
  }
  const out = new Set<number>();
  const visit = (pid: number) => {
    if (out.has(pid)) return;
    out.add(pid);
    for (const c of children.get(pid) ?? []) visit(c);
  };
  for (const r of roots) visit(r);
  return [...out];
}

/** Mount points at or below fixture `id`'s folders, deepest first. */
function mountsOf(id: string): string[] {
  const roots = [path.join(RUN_ROOT, id), path.join(LIB_ROOT, id)];
  const points = readFileSync("/proc/mounts", "utf8")
    .split("\n")
    .map((l) =>
      (l.split(" ")[1] ?? "").replace(/\\([0-7]{3})/g, (_, o: string) =>
        String.fromCharCode(Number.parseInt(o, 8)),
      ),
    )
    .filter((mp) => roots.some((r) => mp === r || mp.startsWith(`${r}/`)));
  return [...new Set(points)].sort(
    (a, b) => b.split("/").length - a.split("/").length || b.length - a.length,
  );
}

async function netnsNames(): Promise<string[]> {
  const out = (await sh("ip", ["netns", "list"])).stdout;
  return out
    .split("\n")
    .map((l) => l.split(" ")[0] ?? "")
    .filter(Boolean);
}

async function linkNames(): Promise<string[]> {
  const out = (await sh("ip", ["-o", "link", "show"])).stdout;
  return out
    .split("\n")
    .map((l) => (l.split(": ")[1] ?? "").split("@")[0] ?? "")
    .filter(Boolean);
}

/** FORWARD's rule (without -I/-D) that lets the hosts on fixture `id`'s bridge reach each other. */
export function forwardRule(id: string): string[] {
  const bridge = `${PREFIX}${id}`;
  return ["FORWARD", "-i", bridge, "-o", bridge, "-m", "comment", "--comment", bridge, "-j", "ACCEPT"];
}

/**
 * Removes all of fixture `id`: its processes (SIGKILL, with their descendants), mounts (lazily,
 * deepest first), loop devices, namespaces, links and folders. Every step runs; their failures
 * come back together.
 */
export async function teardown(id: string): Promise<string[]> {
  const errors: string[] = [];
  const step = async (what: string, fn: () => Promise<void>) => {
    try {
      await fn();
    } catch (err) {
      errors.push(`${what}: ${(err as Error).message}`);
    }
  };
  await step("kill processes", async () => {
    for (let round = 0; round < 3; round++) {
      const pids = processesOf(id);
      if (pids.length === 0) return;
      for (const pid of pids) {
        try {
          process.kill(pid, "SIGKILL");
        } catch {
          // gone
        }
      }
      for (let i = 0; i < 50 && pids.some((p) => startTime(p) !== undefined); i++) await sleep(100);
    }
    const left = processesOf(id);
    if (left.length > 0) throw new Error(`still running: ${left.join(", ")}`);
  });
  await step("unmount", async () => {
    for (let round = 0; round < 5; round++) {
      const points = mountsOf(id);
      if (points.length === 0) return;
      for (const mp of points) await sh("umount", ["-l", mp]).catch(() => undefined);
    }
    const left = mountsOf(id);
    if (left.length > 0) throw new Error(`still mounted: ${left.join(", ")}`);
  });
  await step("detach loop devices", async () => {
    const out = (await sh("losetup", ["-l", "-n", "-O", "NAME,BACK-FILE"]).catch(() => ({ stdout: "" })))
      .stdout;
    for (const line of out.split("\n")) {
      const [dev, file] = line.trim().split(/\s+/, 2);
      if (dev && file?.startsWith(`${LIB_ROOT}/${id}/`)) await sh("losetup", ["-d", dev]);
    }
  });
  await step("delete the forwarding rules", async () => {
    // The bridge's own (forwardRule) and a machine's way to its package mirrors (machine-mirrors.ts).
    for (const [table, chain] of [
      ["filter", "FORWARD"],
      ["nat", "POSTROUTING"],
    ] as const) {
      const listed = (await sh("iptables", ["-w", "-t", table, "-S", chain])).stdout;
      for (const line of listed.split("\n")) {
        if (!line.startsWith(`-A ${chain} `) || !line.includes(`--comment ${PREFIX}${id} `)) continue;
        await sh("iptables", ["-w", "-t", table, "-D", ...line.slice(3).trim().split(/\s+/)]);
      }
    }
  });
  await step("delete namespaces", async () => {
    for (const ns of await netnsNames())
      if (ns.startsWith(`${PREFIX}${id}-`)) await sh("ip", ["netns", "del", ns]);
  });
  await step("delete links", async () => {
    for (const link of await linkNames()) {
      if (link === `${PREFIX}${id}` || new RegExp(`^${PREFIX}${id}[vp]\\d+$`).test(link))
        await sh("ip", ["link", "del", link]).catch((err: Error) => {
          // A veth goes with its namespace's end: gone meanwhile is fine.
          if (existsSync(`/sys/class/net/${link}`)) throw err;
        });
    }
  });
  await step("remove folders", async () => {
    rmSync(path.join(RUN_ROOT, id), { recursive: true, force: true });
    rmSync(path.join(LIB_ROOT, id), { recursive: true, force: true });
    for (const root of [RUN_ROOT, LIB_ROOT]) {
      try {
        rmdirSync(root);
      } catch {
        // another fixture's, or already gone
      }
    }
  });
  return errors;
}

/**
 * What earlier runs left behind: every fixture id found in /run/dvt, /var/lib/dvt, `dvt<id>-*`
 * namespaces, `dvt<id>` links or a process's command line, whose owner process is gone. Only
 * names of this fixture's shape are touched: never the machine's engine, never another netns.
 */
export async function sweepStaleHosts(): Promise<string[]> {
  const ids = new Set<string>();
  for (const root of [RUN_ROOT, LIB_ROOT]) {
    if (!existsSync(root)) continue;
    for (const d of readdirSync(root)) if (ID.test(d)) ids.add(d);
  }
  for (const ns of await netnsNames()) {
    const m = new RegExp(`^${PREFIX}([0-9a-f]{4})-`).exec(ns);
    if (m?.[1]) ids.add(m[1]);
  }
  for (const link of await linkNames()) {
    const m = new RegExp(`^${PREFIX}([0-9a-f]{4})([vp]\\d+)?$`).exec(link);
    if (m?.[1]) ids.add(m[1]);
  }
  const forward = (await sh("iptables", ["-w", "-S", "FORWARD"]).catch(() => ({ stdout: "" }))).stdout;
  for (const m of forward.matchAll(new RegExp(`--comment ${PREFIX}([0-9a-f]{4})\\b`, "g")))
    if (m[1]) ids.add(m[1]);
  for (const entry of readdirSync("/proc")) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const cmdline = readFileSync(`/proc/${entry}/cmdline`, "utf8");
      for (const m of cmdline.matchAll(/\/(?:run|var\/lib)\/dvt\/([0-9a-f]{4})\//g)) if (m[1]) ids.add(m[1]);
    } catch {
      // gone meanwhile
    }
  }
  const swept: string[] = [];
  const errors: string[] = [];
  for (const id of ids) {
    if (ownerAlive(id)) continue;
    errors.push(...(await teardown(id)).map((e) => `${id}: ${e}`));
    swept.push(id);
  }
  if (errors.length > 0) throw new Error(`sweeping stale hosts failed:\n${errors.join("\n")}`);
  return swept;
}

/** A /24 in 10.252.0.0/16 no address or route of this machine uses yet. */
export async function freeSubnet(): Promise<number> {
  for (let attempt = 0; attempt < 50; attempt++) {
    const k = randomInt(1, 251);
    const used = `${(await sh("ip", ["-4", "-o", "addr", "show"])).stdout}\n${(await sh("ip", ["-4", "route", "show", "table", "all"])).stdout}`;
    if (!used.includes(`10.252.${k}.`)) return k;
  }
  throw new Error("no free /24 in 10.252.0.0/16");
}

/**
 * Every environment and sandbox, destroyed through the API so that the control plane's records
 * agree. Those on a host that is not online (a test stopped its denvd, or removed the host) are
 * left to the engine's removal: a destroy there would wait for a host that does not answer.
 */
export async function destroyEnvironments(client: DenvClient): Promise<void> {
  const online = new Set((await client.listHosts()).filter((h) => h.status === "online").map((h) => h.id));
  const envs = (
    await Promise.all((await client.listProjects()).map((p) => client.listEnvironments(p.name)))
  ).flat();
  const failures: string[] = [];
  await Promise.all(
    envs.map(async (e) => {
      if (e.host_id !== undefined && !online.has(e.host_id)) return;
      try {
        if (e.sandbox) await client.deleteSandbox(e.id, { wait: true });
        else {
          const d = await client.destroy(e.id, { wait: true, signal: AbortSignal.timeout(120_000) });
          if (d.status !== "succeeded") failures.push(`${e.id}: ${d.error?.message ?? d.status}`);
        }
      } catch (err) {
        failures.push(`${e.id}: ${(err as Error).message}`);
      }
    }),
  );
  if (failures.length > 0) throw new Error(failures.join("; "));
}
