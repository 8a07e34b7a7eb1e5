import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import net from "node:net";
import os from "node:os";
import path from "node:path";
import type { RemovedHostInfo } from "@denv/sdk";
import {
  type Deployment,
  type Environment,
  HostMessages,
  PlacementEvidence,
  PlacementMessages,
  TransferMessages,
} from "@denv/spec";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { runnableLines } from "./doc-blocks.js";
import { type FixtureHost, type Hosts, startHosts } from "./hosts-fixture.js";
import { cli, repo, run } from "./stack.js";

/**
 * Many hosts (issue 11): one control plane and three denvd, each on a Docker engine of its own in
 * a network namespace of its own (hosts-fixture.ts). Placement by label, by capacity, draining and
 * removing hosts, with the environments where placement says they are.
 */

const GiB = 1024 ** 3;
/** a's transfer listener, in a's own network namespace. */
const TRANSFER_PORT = 7421;

/** One line to a host's transfer listener, and what it answers before it closes. */
async function knock(host: string, port: number, line: string): Promise<string> {
  const s = net.connect({ host, port });
  s.write(`${line}\n`);
  let text = "";
  for await (const c of s) text += (c as Buffer).toString("utf8");
  return text;
}

/** A receiver's transfer journal (denvd's state dir), if there is one yet. */
function readJournal(file: string): { bytes: number } | undefined {
  try {
    return JSON.parse(readFileSync(file, "utf8")) as { bytes: number };
  } catch {
    return undefined;
  }
}

/** Two services and a volume on the base image only: no build, no network. */
function compose(opts: { memLimit?: string; placement?: Record<string, string> } = {}): string {
  const limit = opts.memLimit ? `    mem_limit: ${opts.memLimit}\n` : "";
  const placement = opts.placement
    ? `  placement:\n${Object.entries(opts.placement)
        .map(([k, v]) => `    ${k}: ${v}\n`)
        .join("")}`
    : "";
  return `services:
  main:
    image: debian:bookworm-slim
    command: ["sleep", "infinity"]
    init: true
    volumes: [data:/data]
${limit}  side:
    image: debian:bookworm-slim
    command: ["sleep", "infinity"]
    init: true
${limit}volumes:
  data: {}
x-denv:
  agent: main
${placement}`;
}

describe("many hosts: one control plane, three denvd, three engines", () => {
  let fx: Hosts<"a" | "b" | "c">;
  let a: FixtureHost;
  let b: FixtureHost;
  let c: FixtureHost;
  const scratch = mkdtempSync(path.join(os.tmpdir(), "denv-hosts-"));

  /** A project folder holding `files`. */
  function folder(name: string, files: Record<string, string>): string {
    const dir = path.join(scratch, name);
    mkdirSync(dir, { recursive: true });
    for (const [rel, text] of Object.entries(files)) writeFileSync(path.join(dir, rel), text);
    return dir;
  }

  async function project(name: string): Promise<void> {
    const r = await fx.denv(["projects", "create", name]);
    expect(r.code, r.stderr).toBe(0);
  }

  async function deploy(dir: string, project: string, env: string, ...flags: string[]): Promise<Deployment> {
    return fx.json<Deployment>(["deploy", dir, "--project", project, "--env", env, ...flags]);
  }

  function placement(d: Deployment): PlacementEvidence {
    return PlacementEvidence.parse(d.phases.find((p) => p.name === "place")?.evidence);
  }

  const envShow = (id: string) => fx.json<Environment>(["env", "show", id]);

  /** Container ids of a host's engine that carry host id `id`. */
  async function labelled(on: { docker: FixtureHost["docker"] }, id: string): Promise<string[]> {
    const r = await on.docker(["ps", "-aq", "--no-trunc", "--filter", `label=ai.denv.host=${id}`]);
    expect(r.code, r.stderr).toBe(0);
    return r.stdout.split("\n").filter(Boolean);
  }

  /** The machine's own engine (DOCKER_HOST as the test runs with, else /var/run/docker.sock). */
  const machine = { docker: (args: string[]) => run("docker", args, process.env) };

  async function destroy(...ids: string[]): Promise<void> {
    for (const id of ids) {
      const r = await fx.denv(["env", "destroy", id]);
      expect(r.code, `${id}: ${r.stderr}`).toBe(0);
    }
  }

  beforeAll(async () => {
    fx = await startHosts({
      hosts: [
        // a takes versions straight from other hosts (the cp's --transfer-path auto below); b
        // has no listener, so what goes to b takes the relay.
        {
          name: "a",
          labels: { node: "a", gpu: "a100" },
          denvdArgs: ["--transfer-listen", `0.0.0.0:${TRANSFER_PORT}`],
        },
        { name: "b", labels: { node: "b" } },
        // c offers 512 MiB; at the overcommit of 4 below placement commits 2 GiB there: one
        // environment of default caps at most.
        { name: "c", labels: { node: "c" }, denvdArgs: ["--capacity-memory", String(GiB / 2)] },
      ],
      cpArgs: ["--placement-overcommit-memory", "4", "--transfer-path", "auto"],
    });
    ({ a, b, c } = fx.hosts);
    const stages = Object.entries(fx.startStages).map(([k, ms]) => `${k} ${(ms / 1000).toFixed(1)}s`);
    process.stderr.write(
      `hosts fixture ${fx.id} started in ${(fx.startMs / 1000).toFixed(1)}s (${stages.join(", ")})\n`,
    );
  }, 240_000);

  afterAll(async () => {
    rmSync(scratch, { recursive: true, force: true });
    if (!fx) return;
    const ms = await fx.close();
    process.stderr.write(`hosts fixture ${fx.id} closed in ${(ms / 1000).toFixed(1)}s\n`);
  }, 240_000);

  it("joins three hosts, all online, each environment in its own host's engine and nowhere else", async () => {
    const listed = await fx.json<{
      hosts: Array<{
        id: string;
        status: string;
        labels: Record<string, string>;
        capacity?: { memory_bytes: number };
      }>;
    }>(["hosts", "list"]);
    expect(listed.hosts.map((h) => [h.id, h.status]).sort()).toEqual([
      [a.id, "online"],
      [b.id, "online"],
      [c.id, "online"],
    ]);
    expect(listed.hosts.find((h) => h.id === a.id)?.labels).toEqual({ node: "a", gpu: "a100" });
    expect(listed.hosts.find((h) => h.id === c.id)?.capacity?.memory_bytes).toBe(GiB / 2);

    await project("spread");
    const dir = folder("spread", { "compose.yaml": compose({ memLimit: "256m" }) });
    const hosts = [a, b, c];
    const deployed = await Promise.all(
      hosts.map((h) => deploy(dir, "spread", h.name, "--placement", `node=${h.name}`)),
    );
    for (const [i, h] of hosts.entries()) {
      expect(deployed[i]?.status, JSON.stringify(deployed[i]?.error)).toBe("succeeded");
      const env = await envShow(`spread/${h.name}`);
      expect(env.host_id).toBe(h.id);
      const ids = env.services.map((s) => s.container_id);
      expect(ids).toHaveLength(2);
      // Its own engine runs them; the other hosts' engines and the machine's have none of them.
      expect(await labelled(h, h.id)).toEqual(expect.arrayContaining(ids));
      for (const other of hosts.filter((o) => o !== h)) {
        const theirs = await labelled(other, other.id);
        expect(theirs.filter((x) => ids.includes(x))).toEqual([]);
        expect(await labelled(other, h.id)).toEqual([]);
      }
      expect(await labelled(machine, h.id)).toEqual([]);
      for (const kind of ["network", "volume"]) {
        const r = await machine.docker([kind, "ls", "-q", "--filter", `label=ai.denv.host=${h.id}`]);
        expect(r.stdout.trim(), kind).toBe("");
      }
    }
    await destroy("spread/a", "spread/b", "spread/c");
    for (const h of hosts) expect(await labelled(h, h.id)).toEqual([]);
  }, 300_000);

  it("places by label, with every candidate's reason; a label no host has fails in place, creating nothing", async () => {
    await project("lab");
    const dir = folder("lab", { "compose.yaml": compose({ memLimit: "256m", placement: { gpu: "a100" } }) });
    // x-denv.placement of the file.
    const d = await deploy(dir, "lab", "alpha");
    expect(d.status, JSON.stringify(d.error)).toBe("succeeded");
    const ev = placement(d);
    expect(ev.host).toBe(a.id);
    expect(ev.labels).toEqual({ gpu: "a100" });
    const byHost = Object.fromEntries(ev.candidates.map((x) => [x.host, x]));
    expect(byHost[b.id]?.excluded).toBe(PlacementMessages.missingLabel("gpu=a100"));
    expect(byHost[c.id]?.excluded).toBe(PlacementMessages.missingLabel("gpu=a100"));
    expect(byHost[a.id]?.excluded).toBeUndefined();
    expect(byHost[a.id]?.score).toBeGreaterThan(0);
    expect((await envShow("lab/alpha")).host_id).toBe(a.id);

    const before = await Promise.all([a, b, c].map((h) => labelled(h, h.id)));
    // --placement over the file's label.
    const failed = await fx.denv([
      "deploy",
      dir,
      "--project",
      "lab",
      "--env",
      "beta",
      "--placement",
      "gpu=h100",
      "--json",
    ]);
    expect(failed.code).toBe(1);
    const fd = JSON.parse(failed.stdout) as Deployment;
    expect(fd.error?.message).toBe(PlacementMessages.noHostWithLabels("local", "gpu=h100"));
    expect(failed.stderr).toContain(PlacementMessages.noHostWithLabels("local", "gpu=h100"));
    expect(fd.phases.find((p) => p.name === "place")?.status).toBe("failed");
    expect(fd.phases.filter((p) => p.status === "succeeded").map((p) => p.name)).toEqual(["resolve source"]);
    const envs = await fx.json<{ environments: Environment[] }>(["env", "list", "lab"]);
    expect(envs.environments.map((e) => e.id)).toEqual(["lab/alpha"]);
    expect(await Promise.all([a, b, c].map((h) => labelled(h, h.id)))).toEqual(before);
    await destroy("lab/alpha");
  }, 300_000);

  it("skips a full host, saying why, even the one holding the project's newest version", async () => {
    await project("cap");
    // Default caps (2 GiB x 2 services): one such environment fills c's 2 GiB.
    const dir = folder("cap", { "compose.yaml": compose() });
    const first = await deploy(dir, "cap", "alpha", "--placement", "node=c");
    expect(first.status, JSON.stringify(first.error)).toBe("succeeded");
    expect(placement(first).host).toBe(c.id);
    // Without a label c would win: it holds cap@v1 (locality) - but it has no room left.
    const second = await deploy(dir, "cap", "beta");
    expect(second.status, JSON.stringify(second.error)).toBe("succeeded");
    const ev = placement(second);
    expect(ev.need.memory_bytes).toBe(4 * GiB);
    expect(ev.host).not.toBe(c.id);
    expect(ev.candidates.find((x) => x.host === c.id)?.excluded).toBe(
      PlacementMessages.notEnough("memory", "4 GiB", "0 B", "2 GiB"),
    );
    expect((await envShow("cap/beta")).host_id).toBe(ev.host);
    await destroy("cap/alpha", "cap/beta");
  }, 300_000);

  /**
   * The transfer tests' project: the volume is mounted in `side` too, whose root writes it (the
   * agent is never root), and the agent commits a file of its own.
   */
  const shared = (memLimit: string) => `services:
  main:
    image: debian:bookworm-slim
    command: ["sleep", "infinity"]
    init: true
    volumes: [data:/data]
    mem_limit: ${memLimit}
  side:
    image: debian:bookworm-slim
    command: ["sleep", "infinity"]
    init: true
    volumes: [data:/data]
    mem_limit: ${memLimit}
volumes:
  data: {}
x-denv:
  agent: main
`;

  /** Runs a shell command in a service of an environment (as root outside the agent); its stdout. */
  async function sh(env: string, service: string, script: string): Promise<string> {
    const user = service === "main" ? [] : ["--user", "0"];
    const r = await fx.denv(["exec", env, "--service", service, ...user, "--", "sh", "-c", script]);
    expect(r.code, `${env}/${service}: ${r.stderr}`).toBe(0);
    return r.stdout;
  }

  /** What a fork must have of its parent: a committed file, a volume's tree and content, its owner. */
  const content = async (env: string) => ({
    layer: await sh(env, "main", "sha256sum /workspace/layer.bin"),
    volume: await sh(
      env,
      "side",
      "cd /data && find . -printf '%p %y %m %U %G %s %l\\n' | sort && find . -type f | sort | xargs sha256sum",
    ),
  });

  function phase(d: Deployment, name: string) {
    return d.phases.find((p) => p.name === name);
  }

  it("forks a version onto a host without it: the version moves, the fork's data is the parent's", async () => {
    await project("move");
    // 1 GiB per environment: c (2 GiB of commitments) holds two, the parent and a filler.
    const dir = folder("move", { "compose.yaml": shared("512m") });
    const base = await deploy(dir, "move", "alpha", "--placement", "node=c");
    expect(base.status, JSON.stringify(base.error)).toBe("succeeded");
    await sh("move/alpha", "main", "head -c 3000000 /dev/urandom > /workspace/layer.bin");
    await sh(
      "move/alpha",
      "side",
      "head -c 5000000 /dev/urandom > /data/blob && mkdir -p /data/d/e && echo x > /data/d/e/f && ln -s ../blob /data/d/link && chmod 0640 /data/blob && chown 1000:1000 /data/d",
    );
    const snap = await fx.client.snapshot("move/alpha", { wait: true });
    expect(snap.status, JSON.stringify(snap.error)).toBe("succeeded");
    const want = await content("move/alpha");
    const filler = await deploy(dir, "move", "filler", "--placement", "node=c");
    expect(filler.status, JSON.stringify(filler.error)).toBe("succeeded");

    const forked = await fx.client.fork("move/alpha", { version: "move@v2", name: "moved" }, { wait: true });
    expect(forked.status, JSON.stringify(forked.error)).toBe("succeeded");
    const ev = placement(forked);
    expect(ev.host).not.toBe(c.id);
    expect(ev.candidates.find((x) => x.host === c.id)?.excluded).toMatch(/^not enough memory/);
    const t = phase(forked, "transfer");
    expect(t?.status).toBe("succeeded");
    expect(t?.evidence, JSON.stringify(t?.evidence)).toMatchObject({
      version: "move@v2",
      from: c.id,
      to: ev.host,
      attempts: 1,
    });
    const te = t?.evidence as { bytes: number; layers_sent: number; layers_skipped: number };
    // The base image's layer is on every engine: only what the environment added crossed.
    expect(te.layers_skipped).toBeGreaterThanOrEqual(2);
    expect(te.layers_sent).toBeGreaterThanOrEqual(1);
    expect(te.bytes).toBeGreaterThan(8_000_000);
    expect(te.bytes).toBeLessThan(40_000_000);
    const moved = await envShow("move/moved");
    expect(moved.host_id).toBe(ev.host);
    expect(await content("move/moved")).toEqual(want);
    const versions = await fx.client.listVersions("move");
    expect(versions.find((v) => v.id === "move@v2")?.replicas).toEqual([c.id, ev.host]);

    // Now a holder has room: the next fork goes there, with nothing to move.
    const again = await fx.client.fork("move/alpha", { version: "move@v2", name: "again" }, { wait: true });
    expect(again.status, JSON.stringify(again.error)).toBe("succeeded");
    expect(placement(again).host).toBe(ev.host);
    expect(phase(again, "transfer")?.status).toBe("skipped");
    await destroy("move/moved", "move/again", "move/filler", "move/alpha");
  }, 300_000);

  it("a sending denvd killed mid-transfer comes back and the transfer resumes where it was", async () => {
    await project("kill");
    const dir = folder("kill", { "compose.yaml": shared("512m") });
    const base = await deploy(dir, "kill", "alpha", "--placement", "node=c");
    expect(base.status, JSON.stringify(base.error)).toBe("succeeded");
    await sh("kill/alpha", "side", "head -c 400000000 /dev/urandom > /data/big");
    expect((await fx.client.snapshot("kill/alpha", { wait: true })).status).toBe("succeeded");
    const want = await sh("kill/alpha", "main", "sha256sum /data/big");
    const filler = await deploy(dir, "kill", "filler", "--placement", "node=c");
    expect(filler.status).toBe("succeeded");

    const forking = fx.client.fork("kill/alpha", { version: "kill@v2", name: "moved" }, { wait: true });
    // Kill c once a receiver has journalled part of the version.
    const journals = [a, b].map((h) => path.join(h.stateDir, "transfers", "kill_v2", "journal.json"));
    const until = Date.now() + 120_000;
    for (;;) {
      const j = journals.map((f) => readJournal(f)).find((x) => x && x.bytes > 20_000_000);
      if (j) break;
      if (Date.now() > until) throw new Error("no transfer got under way");
      await new Promise((r) => setTimeout(r, 100));
    }
    await c.kill("SIGKILL");
    await c.start();
    const forked = await forking;
    expect(forked.status, JSON.stringify(forked.error)).toBe("succeeded");
    const t = phase(forked, "transfer")?.evidence as {
      attempts: number;
      resumed_bytes: number;
      bytes: number;
    };
    expect(t.attempts).toBeGreaterThanOrEqual(2);
    expect(t.resumed_bytes).toBeGreaterThan(20_000_000);
    expect(await sh("kill/moved", "main", "sha256sum /data/big")).toBe(want);
    await destroy("kill/moved", "kill/filler", "kill/alpha");
  }, 300_000);

  it("a fork onto a host with a transfer listener takes the version directly; the listener refuses a connection without the ticket", async () => {
    await project("direct");
    const dir = folder("direct", { "compose.yaml": shared("512m") });
    const base = await deploy(dir, "direct", "alpha", "--placement", "node=c");
    expect(base.status, JSON.stringify(base.error)).toBe("succeeded");
    await sh("direct/alpha", "main", "head -c 2000000 /dev/urandom > /workspace/layer.bin");
    await sh(
      "direct/alpha",
      "side",
      "head -c 4000000 /dev/urandom > /data/blob && mkdir -p /data/d/e && echo x > /data/d/e/f && ln -s ../blob /data/d/link && chown 1000:1000 /data/d",
    );
    expect((await fx.client.snapshot("direct/alpha", { wait: true })).status).toBe("succeeded");
    const want = await content("direct/alpha");
    // c is full with a filler: the fork goes to a (as much room as b, the first by id).
    const filler = await deploy(dir, "direct", "filler", "--placement", "node=c");
    expect(filler.status, JSON.stringify(filler.error)).toBe("succeeded");

    // Someone on the hosts' network, without the ticket: one line, and the connection closes.
    const hello = JSON.stringify({ version: "direct@v2", from: c.id });
    expect(await knock(a.address, TRANSFER_PORT, hello)).toBe(
      `${JSON.stringify({ error: TransferMessages.directRefused(TransferMessages.directNoTicket) })}\n`,
    );
    const guess = JSON.stringify({ version: "direct@v2", from: c.id, ticket: "A".repeat(43) });
    expect(await knock(a.address, TRANSFER_PORT, guess)).toBe(
      `${JSON.stringify({ error: TransferMessages.directRefused(TransferMessages.directWrongTicket) })}\n`,
    );

    const forked = await fx.client.fork(
      "direct/alpha",
      { version: "direct@v2", name: "moved" },
      { wait: true },
    );
    expect(forked.status, JSON.stringify(forked.error)).toBe("succeeded");
    expect(placement(forked).host).toBe(a.id);
    const t = phase(forked, "transfer");
    expect(t?.status).toBe("succeeded");
    expect(t?.evidence).toMatchObject({
      version: "direct@v2",
      from: c.id,
      to: a.id,
      attempts: 1,
      path: "direct",
      path_reason: `auto: ${a.id} takes direct transfers at ${a.address}:${TRANSFER_PORT}`,
    });
    expect(await content("direct/moved")).toEqual(want);
    expect((await fx.client.listVersions("direct")).find((v) => v.id === "direct@v2")?.replicas).toEqual([
      c.id,
      a.id,
    ]);
    await destroy("direct/moved", "direct/filler", "direct/alpha");
  }, 300_000);

  it("count: 12 sandboxes of one version spread over three hosts as their room says", async () => {
    await project("many");
    const dir = folder("many", { "compose.yaml": shared("256m") });
    // c holds the version and has room for 3 more environments of 512 MiB (2 GiB in all).
    const base = await deploy(dir, "many", "alpha", "--placement", "node=c");
    expect(base.status, JSON.stringify(base.error)).toBe("succeeded");
    const boxes = await fx.client.createSandboxes({
      project: "many",
      version: "many@v1",
      name: "s",
      count: 12,
    });
    expect(boxes).toHaveLength(12);
    const on = (h: FixtureHost) => boxes.filter((x) => x.host_id === h.id).length;
    expect(on(c)).toBe(3);
    expect(on(a)).toBeGreaterThan(0);
    expect(on(b)).toBeGreaterThan(0);
    expect(on(a) + on(b)).toBe(9);
    for (const x of boxes) expect(x.placement.host).toBe(x.host_id);
    // Each host that lacked it got it once, and holds it now.
    const v = (await fx.client.listVersions("many")).find((x) => x.id === "many@v1");
    expect([...(v?.replicas ?? [])].sort()).toEqual([a.id, b.id, c.id].sort());
    for (const x of boxes) await fx.client.deleteSandbox(x.id, { wait: true });
    await destroy("many/alpha");
  }, 300_000);

  it("drains a host (new deploys go elsewhere, what runs stays) and removes it only with --force", async () => {
    await project("drain");
    const dir = folder("drain", { "compose.yaml": compose({ memLimit: "256m" }) });
    const alpha = await deploy(dir, "drain", "alpha", "--placement", "node=b");
    expect(alpha.status, JSON.stringify(alpha.error)).toBe("succeeded");
    const running = (await envShow("drain/alpha")).services.map((s) => s.container_id);

    const drained = await fx.json<{ id: string; draining: boolean }>(["hosts", "drain", b.id]);
    expect(drained).toMatchObject({ id: b.id, draining: true });
    // b holds drain@v1, so locality would pick it; drained, it is skipped.
    const beta = await deploy(dir, "drain", "beta");
    expect(beta.status, JSON.stringify(beta.error)).toBe("succeeded");
    const ev = placement(beta);
    expect(ev.host).not.toBe(b.id);
    expect(ev.candidates.find((x) => x.host === b.id)?.excluded).toBe("draining");
    // What b runs keeps running and answering.
    expect((await envShow("drain/alpha")).status).toBe("running");
    expect((await fx.denv(["exec", "drain/alpha", "--", "true"])).code).toBe(0);
    expect(await labelled(b, b.id)).toEqual(expect.arrayContaining(running));

    const refused = await fx.denv(["hosts", "rm", b.id]);
    expect(refused.code).toBe(1);
    expect(refused.stderr).toContain(HostMessages.holdsEnvironments(b.id, 1));
    // Forced, the answer names what was lost: its environment, and every version whose snapshot
    // lived on b (drain@v1, and the first test's version deployed there).
    const onB: string[] = [];
    for (const p of await fx.client.listProjects())
      for (const v of await fx.client.listVersions(p.name)) if (v.host_id === b.id) onB.push(v.id);
    expect(onB).toContain("drain@v1");
    const removed = await fx.json<RemovedHostInfo>(["hosts", "rm", b.id, "--force"]);
    expect(removed).toMatchObject({ id: b.id, environments: ["drain/alpha"] });
    expect([...removed.versions].sort()).toEqual(onB.sort());
    expect((await envShow("drain/alpha")).status).toBe("failed");
    const versions = await fx.json<{ versions: Array<{ id: string }> }>(["versions", "list", "drain"]);
    expect(versions.versions.map((v) => v.id)).toEqual(["drain@v2"]);
    const left = await fx.json<{ hosts: Array<{ id: string }> }>(["hosts", "list"]);
    expect(left.hosts.map((h) => h.id).sort()).toEqual([a.id, c.id]);
    await destroy("drain/alpha", "drain/beta");
  }, 300_000);

  it("how-to/connect-a-target.md's hosts block runs as written (after the drain: a and c are left)", async () => {
    let transcript = "";
    for (const { line, code } of runnableLines("how-to/connect-a-target.md", "hosts")) {
      const r = await run(
        "bash",
        ["-c", `denv() { node ${JSON.stringify(cli)} "$@"; }\ncd ${JSON.stringify(repo)}\n${line}`],
        { ...fx.env, HOST: c.id },
      );
      transcript += `$ ${line}\n${r.stdout}${r.stderr}`;
      expect(r.code, `${line}\n${r.stdout}\n${r.stderr}`).toBe(code);
    }
    // c holds the parent and the first rollout; the second had to go to a, with the version.
    expect((await envShow("demo/rollout-2")).host_id).toBe(a.id);
    expect(transcript).toMatch(new RegExp(`demo@v1 .*${c.id},${a.id}`));
    expect(transcript).toContain(HostMessages.holdsEnvironments(c.id, 2));
    expect(transcript).toContain("versions still held elsewhere: demo@v1");
    // Forked again after c is gone: a still holds the version.
    const f = await fx.client.fork("demo/rollout-2", { version: "demo@v1", name: "after" }, { wait: true });
    expect(f.status, JSON.stringify(f.error)).toBe("succeeded");
    expect(placement(f).host).toBe(a.id);
  }, 300_000);
});
