import { randomBytes } from "node:crypto";
import { existsSync } from "node:fs";
import { mkdir, readFile, rm, writeFile } from "node:fs/promises";
import { join } from "node:path";
import type { Deployment, Phase } from "@denv/spec";
import type { FixtureHost, Hosts } from "../../../packages/cli/dist/e2e/hosts-fixture.js";
import { bash, settle, timed } from "../../runtime/dist/host.js";
import { median } from "../../runtime/dist/stats.js";

/**
 * A version moved host to host: deployed on `a`, filled (a volume of many files written by root
 * in `side`, a file committed in the agent's layer), snapshotted; forked locally on `a` (the
 * holder, with room); then the Docker + tar baseline of the same move; then `a` is full and a
 * fork must go to `b`, through the cp's relay (the fork's `transfer` phase).
 */

export const PROJECT = "bench";
const BASE = `${PROJECT}/base`;
const MiB = 1024 ** 2;

/** Two services on the base image only (no build, no network), the volume in both: root writes it in `side`. */
const COMPOSE = `services:
  main:
    image: debian:bookworm-slim
    command: ["sleep", "infinity"]
    init: true
    volumes: [data:/data]
    mem_limit: 512m
  side:
    image: debian:bookworm-slim
    command: ["sleep", "infinity"]
    init: true
    volumes: [data:/data]
    mem_limit: 512m
volumes:
  data: {}
x-denv:
  agent: main
`;

/** What the cp's transfer phase says (packages/cp/src/engine/transfer.ts). */
export interface TransferEvidence {
  version: string;
  from: string;
  to: string;
  attempts: number;
  bytes: number;
  resumed_bytes: number;
  layers_sent: number;
  layers_skipped: number;
  duration_ms: number;
  mib_per_s: number;
  path?: "relay" | "direct";
  path_reason?: string;
}

export interface ForkRun {
  name: string;
  host?: string;
  /** Wall time of `client.fork(..., {wait: true})`. */
  ms: number;
  /** The deployment's own created_at -> finished_at. */
  deploymentMs: number;
  phases: Record<string, number>;
  transfer: Phase["status"] | "absent";
}

export interface TransferResult {
  data: { volumeBytes: number; files: number; layerBytes: number; fillMs: number };
  version: {
    id: string;
    snapshotMs: number;
    layerBytes: number;
    volumeBytes: number;
    images: string[];
    snapshots: string[];
    method: string;
  };
  localForks: ForkRun[];
  transferFork: ForkRun & { evidence: TransferEvidence };
  baseline: {
    order: string;
    saveLoadMs: number;
    tarMs: number;
    totalMs: number;
    /** Bytes of the `docker save` stream and of the volume trees the baseline copied. */
    saveBytes: number;
    tarBytes: number;
    /** b's images after the clean-up equal those before the baseline. */
    cleaned: boolean;
  };
  /** The moved fork's volume has as many files as the parent's. */
  movedFiles: number;
}

export interface TransferOptions {
  scratch: string;
  volumeBytes: number;
  files: number;
  layerBytes: number;
  localForks: number;
  /** The path the cp was configured to take (--transfer-path): the evidence must say it took it. */
  path: "relay" | "direct";
  log: (line: string) => void;
  check: () => void;
}

type Two = Hosts<"a" | "b">;

function ok(d: Deployment, what: string): Deployment {
  if (d.status !== "succeeded") throw new Error(`${what}: ${d.status}: ${d.error?.message ?? ""}`);
  return d;
}

function hostOf(d: Deployment): string | undefined {
  const ev = d.phases.find((p) => p.name === "place")?.evidence as { host?: string } | undefined;
  return ev?.host;
}

function forkRun(name: string, ms: number, d: Deployment): ForkRun {
  const host = hostOf(d);
  return {
    name,
    ...(host ? { host } : {}),
    ms,
    deploymentMs: d.finished_at ? Date.parse(d.finished_at) - Date.parse(d.created_at) : Number.NaN,
    phases: Object.fromEntries(d.phases.map((p) => [p.name, p.duration_ms ?? 0])),
    transfer: d.phases.find((p) => p.name === "transfer")?.status ?? "absent",
  };
}

/** A shell command in a service (root outside the agent, who never is); its stdout. */
async function sh(fx: Two, env: string, service: string, script: string): Promise<string> {
  const user = service === "main" ? [] : ["--user", "0"];
  const r = await fx.denv(
    ["exec", env, "--service", service, ...user, "--timeout", "900", "--", "sh", "-c", script],
    { timeoutMs: 960_000 },
  );
  if (r.code !== 0) throw new Error(`exec in ${env}/${service} exited ${r.code}: ${r.stderr.trim()}`);
  return r.stdout;
}

/** The script that writes `files` files of random data, `bytes` in all, in directories of 100. */
export function fillScript(bytes: number, files: number): string {
  const dirs = Math.max(1, Math.round(files / 100));
  const perDir = Math.ceil(files / dirs);
  const size = Math.floor(bytes / (dirs * perDir));
  return [
    "set -e",
    "mkdir -p /data/f",
    "i=0",
    `while [ $i -lt ${dirs} ]; do mkdir /data/f/$i; head -c ${size * perDir} /dev/urandom | split -a 4 -d -b ${size} - /data/f/$i/x; i=$((i+1)); done`,
    "sync -f /data",
    "find /data/f -type f | wc -l",
  ].join("\n");
}

/** host a's record of the version (its denvd state dir), for the images and snapshots the baseline copies. */
async function versionRecord(
  a: FixtureHost,
  id: string,
): Promise<{ images: string[]; snapshots: string[]; method: string }> {
  const file = join(a.stateDir, "records", "versions", `${id.replace(/[/@]/g, "_")}.json`);
  const r = JSON.parse(await readFile(file, "utf8")) as {
    images: Record<string, { imageId: string }>;
    volumes: Record<string, { snapshot: string }>;
    method: string;
  };
  const images = [...new Set(Object.values(r.images).map((i) => i.imageId))];
  const snapshots = Object.values(r.volumes).map((v) => v.snapshot);
  return { images, snapshots, method: r.method };
}

/** A volume store's root on a host: its btrfs mount (method "btrfs"), else its plain directory. */
function storeRoot(h: FixtureHost, method: string): string {
  return join(h.stateDir, "store", method === "btrfs" ? "btrfs" : "plain");
}

/** The method of the volume store a host's denvd opened (where its received volumes land). */
function storeMethod(h: FixtureHost): string {
  return existsSync(join(h.stateDir, "store", "btrfs", "snap")) ? "btrfs" : "copy";
}

async function images(h: FixtureHost): Promise<string[]> {
  const r = await h.docker(["images", "-aq", "--no-trunc"]);
  if (r.code !== 0) throw new Error(`docker images on ${h.name}: ${r.stderr}`);
  return [...new Set(r.stdout.split("\n").filter(Boolean))].sort();
}

export async function transferBench(fx: Two, o: TransferOptions): Promise<TransferResult> {
  const { a, b } = fx.hosts;
  const dir = join(o.scratch, "project");
  await mkdir(dir, { recursive: true });
  await writeFile(join(dir, "compose.yaml"), COMPOSE);
  const created = await fx.denv(["projects", "create", PROJECT]);
  if (created.code !== 0) throw new Error(`projects create: ${created.stderr}`);

  o.log(`deploying ${BASE} on ${a.id}`);
  const base = ok(
    await fx.json<Deployment>([
      "deploy",
      dir,
      "--project",
      PROJECT,
      "--env",
      "base",
      "--placement",
      "node=a",
    ]),
    "deploy",
  );
  if (hostOf(base) !== a.id) throw new Error(`${BASE} went to ${hostOf(base)}, not ${a.id}`);
  o.check();

  o.log(
    `filling: ${(o.layerBytes / MiB).toFixed(0)} MiB in the agent's layer, ${(o.volumeBytes / MiB).toFixed(0)} MiB in ${o.files} files in the volume`,
  );
  const fill = await timed(async () => {
    await sh(fx, BASE, "main", `head -c ${o.layerBytes} /dev/urandom > /workspace/layer.bin`);
    return Number((await sh(fx, BASE, "side", fillScript(o.volumeBytes, o.files))).trim());
  });
  o.log(`filled in ${(fill.ms / 1000).toFixed(1)} s (${fill.value} files)`);
  o.check();

  await settle();
  const snap = await timed(() => fx.client.snapshot(BASE, { wait: true }));
  ok(snap.value, "snapshot");
  const v = snap.value.result as { id: string; sizes: { layer_bytes: number; volume_bytes: number } };
  const rec = await versionRecord(a, v.id);
  const snapDirs = rec.snapshots.map((s) => join(storeRoot(a, rec.method), "snap", s));
  for (const d of snapDirs) if (!existsSync(d)) throw new Error(`no snapshot directory ${d} on ${a.name}`);
  o.log(
    `${v.id}: ${((v.sizes.layer_bytes + v.sizes.volume_bytes) / MiB).toFixed(0)} MiB (${rec.method}), snapshot in ${snap.ms.toFixed(0)} ms`,
  );

  // Local forks on the holder: it has room for one more environment; all but the last are
  // destroyed, the last one stays and fills it.
  const localForks: ForkRun[] = [];
  for (let i = 0; i < o.localForks; i++) {
    o.check();
    await settle();
    const name = `local${i}`;
    const f = await timed(() => fx.client.fork(BASE, { version: v.id, name }, { wait: true }));
    ok(f.value, `local fork ${name}`);
    const run = forkRun(name, f.ms, f.value);
    if (run.host !== a.id || run.transfer === "succeeded")
      throw new Error(`the local fork ${name} went to ${run.host} (transfer ${run.transfer}), not ${a.id}`);
    localForks.push(run);
    o.log(`local fork ${name} on ${a.id}: ${f.ms.toFixed(0)} ms`);
    if (i < o.localForks - 1)
      ok(await fx.client.destroy(`${PROJECT}/${name}`, { wait: true }), `destroy ${name}`);
  }

  // The baseline, before denv's transfer: what it loads into b is removed again first, so that
  // b's engine has none of the version's layers when denv sends them.
  o.check();
  const before = await images(b);
  // Extracted where b's denvd puts the volumes it receives: its store's filesystem.
  const target = join(storeRoot(b, storeMethod(b)), `bench-baseline-${randomBytes(3).toString("hex")}`);
  await settle();
  const saveLoad = await timed(() =>
    bash(`docker -H "unix://$1" save "\${@:3}" | docker -H "unix://$2" load -q >/dev/null`, [
      a.socket,
      b.socket,
      ...rec.images,
    ]),
  );
  const tar = await timed(async () => {
    for (const [i, d] of snapDirs.entries()) {
      const into = join(target, String(i));
      await mkdir(into, { recursive: true });
      await bash(`tar -C "$1" -cf - . | tar -C "$2" -xf -`, [d, into]);
    }
  });
  o.log(
    `baseline: docker save | load ${saveLoad.ms.toFixed(0)} ms, tar | tar ${tar.ms.toFixed(0)} ms; removing what it loaded into ${b.id}`,
  );
  const removed = await b.docker(["rmi", ...rec.images]);
  await rm(target, { recursive: true, force: true });
  const cleaned = removed.code === 0 && JSON.stringify(await images(b)) === JSON.stringify(before);
  if (!cleaned) throw new Error(`the baseline's images are still on ${b.id}: ${removed.stderr.trim()}`);
  // Not timed: how much the docker save stream carried (the whole images, base layers too).
  const saveBytes = Number(
    (await bash(`docker -H "unix://$1" save "\${@:2}" | wc -c`, [a.socket, ...rec.images])).trim(),
  );

  // Now the holder is full (its last local fork stays): the fork must go to b, and take the version with it.
  o.check();
  await settle();
  const moved = await timed(() => fx.client.fork(BASE, { version: v.id, name: "moved" }, { wait: true }));
  ok(moved.value, "the fork onto b");
  const run = forkRun("moved", moved.ms, moved.value);
  const evidence = moved.value.phases.find((p) => p.name === "transfer")?.evidence as
    | TransferEvidence
    | undefined;
  if (run.host !== b.id || run.transfer !== "succeeded" || !evidence)
    throw new Error(
      `the fork went to ${run.host} with transfer ${run.transfer}, not to ${b.id} after a transfer`,
    );
  if ((evidence.path ?? "relay") !== o.path)
    throw new Error(`the transfer took the ${evidence.path} path, not ${o.path}: ${evidence.path_reason}`);
  o.log(
    `fork onto ${b.id}: ${moved.ms.toFixed(0)} ms, transfer ${evidence.duration_ms} ms (${(evidence.bytes / MiB).toFixed(0)} MiB, ${evidence.mib_per_s} MiB/s)`,
  );
  const movedFiles = Number(
    (await sh(fx, `${PROJECT}/moved`, "side", "find /data/f -type f | wc -l")).trim(),
  );
  if (movedFiles !== fill.value)
    throw new Error(`the moved fork has ${movedFiles} files in its volume, its parent ${fill.value}`);

  return {
    data: { volumeBytes: o.volumeBytes, files: fill.value, layerBytes: o.layerBytes, fillMs: fill.ms },
    version: {
      id: v.id,
      snapshotMs: snap.ms,
      layerBytes: v.sizes.layer_bytes,
      volumeBytes: v.sizes.volume_bytes,
      images: rec.images,
      snapshots: rec.snapshots,
      method: rec.method,
    },
    localForks,
    transferFork: { ...run, evidence },
    baseline: {
      order:
        "before denv's transfer; the images it loaded into b were removed (b's image list as before) and its copy deleted before denv's transfer",
      saveLoadMs: saveLoad.ms,
      tarMs: tar.ms,
      totalMs: saveLoad.ms + tar.ms,
      saveBytes,
      tarBytes: v.sizes.volume_bytes,
      cleaned,
    },
    movedFiles,
  };
}

/** The median local fork's wall time. */
export function localForkMs(r: TransferResult): number {
  return median(r.localForks.map((f) => f.ms));
}
