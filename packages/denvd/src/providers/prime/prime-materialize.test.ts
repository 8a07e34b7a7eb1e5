import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Protection, ProviderMessages } from "@denv/spec";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { deployPlan } from "../../project-loader.js";
import { noPhases } from "../../runtime/phase-listener.js";
import { writeProject } from "../../testing/harness.js";
import { PrimeApi } from "./prime-api.js";
import type { PrimeHost } from "./prime-host.js";
import { PrimeImages } from "./prime-images.js";
import { createEnvironment, primeLabels } from "./prime-materialize.js";
import { PrimeRecords } from "./prime-records.js";
import { captureVersion } from "./prime-versions.js";
import { type PrimeDouble, startPrimeDouble } from "./testing/prime-double.js";

/**
 * An environment's sandbox on Prime (prime-materialize.ts) against the Prime double: images built
 * through Prime's image API (a docker build of debian:bookworm-slim on the local engine, no
 * network), sandboxes as real containers. The hostile images stand for an attacker's: a user
 * named otherwise that is uid 0, and a system directory the agent may write.
 */
const DOCKERFILE = (extra: string) =>
  `FROM debian:bookworm-slim\nRUN useradd -m -u 1000 agent && useradd -m -u 1001 grader${extra}\n`;

const COMPOSE = (agentUser: string) => `
name: pm
services:
  app:
    build: ./app
    user: "1000"
    command: ["sh", "-c", "touch /tmp/ready; exec sleep infinity"]
    healthcheck: { test: ["CMD", "test", "-f", "/tmp/ready"], interval: 1s, retries: 10 }
x-denv:
  kind: rl-environment
  agent: { service: app, user: ${agentUser}, workdir: /home/agent }
  verifier: { build: ./app, user: "1001", command: ["true"], timeout: 60 }
`;

let double: PrimeDouble;
let host: PrimeHost;
let state = "";

/** A project whose app image Prime builds from `extra` Dockerfile lines; its plan and image. */
async function project(name: string, agentUser: string, extra = "") {
  const dir = await writeProject({ "compose.yaml": COMPOSE(agentUser), "app/Dockerfile": DOCKERFILE(extra) });
  const image = await new PrimeImages(host.api).buildImage({ name, tag: "v1", context: join(dir, "app") });
  return { plan: deployPlan("pm", dir, {}), image };
}

const base = (plan: ReturnType<typeof deployPlan>, name: string, image: string) => ({
  id: `pm/${name}`,
  project: "pm",
  name,
  plan,
  command: `deploy-${name}`,
  image,
  testsTar: undefined,
});

/** The sandboxes the double holds for this host, by denv's labels. */
async function sandboxesOfHost(): Promise<string[]> {
  const { sandboxes } = await host.api.listSandboxes({
    labels: primeLabels({ "ai.denv.host": host.hostId }),
    status: "RUNNING",
  });
  return sandboxes.map((s) => s.id);
}

beforeAll(async () => {
  double = await startPrimeDouble();
  state = await mkdtemp(join(tmpdir(), "denv-prime-state-"));
  host = {
    hostId: "h-prime-test",
    api: new PrimeApi(double.connection),
    records: await PrimeRecords.open(state),
    inFlight: new Set(),
    canaries: [{ host: double.canary.host, port: double.canary.port }],
    log: () => undefined,
  };
}, 60_000);

afterAll(async () => {
  await double?.close();
  await rm(state, { recursive: true, force: true });
  expect(double.leftovers()).toEqual([]);
}, 60_000);

describe("an environment's Prime sandbox", { timeout: 120_000 }, () => {
  it("runs the service as its user, resolves the agent's uid from the passwd, probes egress shut", async () => {
    const { plan, image } = await project("pm-good", "agent");
    const { rec } = await createEnvironment(
      host,
      base(plan, "alpha", image),
      { app: { dockerImage: image } },
      undefined,
      noPhases,
    );
    expect(rec).toMatchObject({
      agentName: "agent",
      agentUid: 1000,
      verifierUid: 1001,
      networkAccess: false,
    });
    expect(rec.probe).toMatchObject({ ok: true });
    expect(double.canary.hits()).toBe(0);
    const service = await host.api.runCommand(rec.sandboxId, ["stat", "-c", "%u", "/tmp/ready"], {
      user: "agent",
    });
    expect(service.stdout.toString()).toBe("1000\n");
    const running = await host.api.runCommand(
      rec.sandboxId,
      [
        "sh",
        "-c",
        `for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline | grep -q '^sleep infinity' && stat -c %u $p; done`,
      ],
      { user: "root" },
    );
    // The service's process outlived the command that started it, as its compose user.
    expect(running.stdout.toString()).toBe("1000\n");
    expect(await host.records.getEnvironment("pm/alpha")).toEqual(rec);
    expect(await sandboxesOfHost()).toEqual([rec.sandboxId]);
  });

  it("a version is a checkpoint of the filesystem; a fork of it has the files and runs the service anew", async () => {
    const rec = await host.records.getEnvironment("pm/alpha");
    if (!rec) throw new Error("the first case makes pm/alpha");
    const asAgent = { user: "agent", cwd: "/home/agent" };
    await host.api.runCommand(
      rec.sandboxId,
      ["sh", "-c", "echo work > notes; rm /tmp/ready; sleep 300 &"],
      asAgent,
    );
    const v = await captureVersion(host, rec, { number: 1, command: "snapshot-1" });
    expect(v).toMatchObject({ id: "pm@v1", sourceEnvironment: "pm/alpha" });
    expect((await host.api.getCheckpoint(v.checkpointId)).state).toBe("DURABLE");
    await expect(captureVersion(host, rec, { number: 1, command: "snapshot-2" })).rejects.toThrow(
      "version pm@v1 exists",
    );
    const { rec: fork } = await createEnvironment(
      host,
      { ...base(rec.plan, "fork", v.id), command: "fork-1" },
      { app: { checkpointId: v.checkpointId } },
      v,
      noPhases,
    );
    expect(fork.parentVersion).toBe("pm@v1");
    // cmdline's words are NUL-separated, which grep may read as line ends: joined with spaces first.
    const sleepers = `for f in /proc/[0-9]*/cmdline; do tr '\\0' ' ' < "$f" | grep -q '^sleep 300' && echo; done | wc -l`;
    const parent = await host.api.runCommand(rec.sandboxId, ["sh", "-c", sleepers], asAgent);
    expect(parent.stdout.toString()).toBe("1\n");
    const seen = await host.api.runCommand(
      fork.sandboxId,
      ["sh", "-c", `cat notes; test -f /tmp/ready && echo ready; ${sleepers}`],
      asAgent,
    );
    // The files are the parent's; its processes are not (the service made /tmp/ready again).
    expect(seen.stdout.toString()).toBe("work\nready\n0\n");
  });

  it("refuses an agent user that is uid 0 under another name, and deletes the sandbox it made", async () => {
    const { plan, image } = await project("pm-toor", "toor", " && useradd -o -u 0 -M toor");
    const before = await sandboxesOfHost();
    await expect(
      createEnvironment(
        host,
        base(plan, "toor", image),
        { app: { dockerImage: image } },
        undefined,
        noPhases,
      ),
    ).rejects.toThrow(Protection.agentRoot("app"));
    expect(await sandboxesOfHost()).toEqual(before);
    expect(await host.records.getEnvironment("pm/toor")).toBeUndefined();
  });

  it("refuses an image whose system directories the agent may write, before the agent runs", async () => {
    // /bin is /usr/bin on Debian: the first of the system paths the check names.
    const { plan, image } = await project("pm-open", "agent", " && chmod 777 /usr/bin");
    const before = await sandboxesOfHost();
    await expect(
      createEnvironment(
        host,
        base(plan, "open", image),
        { app: { dockerImage: image } },
        undefined,
        noPhases,
      ),
    ).rejects.toThrow(ProviderMessages.agentWritesSystem("app", "agent", "/bin"));
    expect(await sandboxesOfHost()).toEqual(before);
  });
});
