import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { EgressFindings, Protection, ProviderMessages } from "@denv/spec";
import type { Sandbox } from "modal";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { deployPlan } from "../../project-loader.js";
import { noPhases } from "../../runtime/phase-listener.js";
import { writeProject } from "../../testing/harness.js";
import { probeFromInside } from "../e2b/egress-probe.js";
import { type Canary, gatewayOf, startCanary } from "../testing/double-fixtures.js";
import { execInModal, modalUser } from "./modal-exec.js";
import { buildModalImage } from "./modal-images.js";
import { createEnvironment, type ModalEnvironment, type ModalHost, runAs } from "./modal-materialize.js";
import { type ModalEnvironmentRecord, ModalRecords } from "./modal-records.js";
import { captureVersion } from "./modal-versions.js";
import { type ModalDouble, startModalDouble } from "./testing/modal-double.js";

/**
 * An environment's sandbox on Modal (modal-materialize.ts) against the Modal double, through the
 * official `modal` SDK: images built through Modal's image API (docker builds of
 * debian:bookworm-slim on the local engine, no network), sandboxes as real containers. The hostile
 * images stand for an attacker's: a user named otherwise that is uid 0, and a system directory
 * the agent may write.
 */
const DOCKERFILE = (extra: string) =>
  `FROM debian:bookworm-slim\nRUN useradd -m -u 1000 agent && useradd -m -u 1001 grader${extra}\nUSER agent\n`;

const COMPOSE = (agentUser: string) => `
name: mm
services:
  app:
    build: ./app
    command: ["sh", "-c", "touch /tmp/ready; exec sleep 86401"]
    healthcheck: { test: ["CMD", "test", "-f", "/tmp/ready"], interval: 1s, retries: 10 }
x-denv:
  kind: rl-environment
  agent: { service: app, user: ${agentUser}, workdir: /home/agent }
  verifier: { build: ./app, user: "1001", command: ["true"], timeout: 60 }
`;

/** A listener on the gateway of the double's open network: a sandbox with egress reaches it. */
let gateway: Canary;

let double: ModalDouble;
let home: string;
let host: ModalHost;
const saved = { ...process.env };

/** A project whose app image Modal builds from `extra` Dockerfile lines; its plan and image. */
async function project(agentUser: string, extra = "") {
  const dir = await writeProject({ "compose.yaml": COMPOSE(agentUser), "app/Dockerfile": DOCKERFILE(extra) });
  const built = await buildModalImage(host.client, host.app, {
    projectDir: dir,
    service: { name: "app", build: { context: "app", dockerfile: "Dockerfile" } },
  });
  return { plan: deployPlan("mm", dir, {}), built };
}

const base = (plan: ReturnType<typeof deployPlan>, name: string, imageId: string, imageUser?: string) => ({
  id: `mm/${name}`,
  project: "mm",
  name,
  plan,
  command: `deploy-${name}`,
  imageId,
  imageUser,
});

/** The running sandboxes of this host, found by denv's labels as Modal tags. */
async function sandboxesOfHost(): Promise<string[]> {
  const ids: string[] = [];
  for await (const sb of host.client.sandboxes.list({
    appId: host.app.appId,
    tags: { "ai.denv.host": host.hostId },
  }))
    ids.push(sb.sandboxId);
  return ids;
}

async function asRoot(sb: Sandbox, script: string): Promise<string> {
  const p = await sb.exec(["sh", "-c", script]);
  return p.stdout.readText();
}

beforeAll(async () => {
  home = await mkdtemp(join(tmpdir(), "denv-modal-materialize-"));
  double = await startModalDouble();
  gateway = await startCanary(gatewayOf(`denv-modal-${double.server.id}-open`));
  for (const k of Object.keys(process.env)) if (k.startsWith("MODAL_")) delete process.env[k];
  Object.assign(process.env, { HOME: home, MODAL_CONFIG_PATH: join(home, ".modal.toml"), ...double.sdkEnv });
  const modal = await import("modal");
  const client = new modal.ModalClient();
  host = {
    hostId: "h-modal-test",
    client,
    app: await client.apps.fromName("denv-h-modal-test", { createIfMissing: true }),
    canaries: [{ host: double.canary.host, port: double.canary.port }, gateway],
    log: () => undefined,
  };
}, 60_000);

afterAll(async () => {
  host?.client.close();
  process.env = saved;
  await gateway?.close();
  try {
    await double?.close();
  } finally {
    await rm(home, { recursive: true, force: true });
  }
  expect(double.leftovers()).toEqual([]);
}, 120_000);

describe("an environment's Modal sandbox", { timeout: 120_000 }, () => {
  let alpha: ModalEnvironment;
  let alphaRec: ModalEnvironmentRecord;

  it("runs the service as the Dockerfile's user, resolves the agent's uid from the passwd, probes egress shut", async () => {
    const { plan, built } = await project("agent");
    expect(built.user).toBe("agent");
    alphaRec = {
      id: "mm/alpha",
      project: "mm",
      name: "alpha",
      sandboxId: "",
      imageId: built.imageId,
      imageUser: "agent",
      plan,
      agent: plan.agent,
      // What captureVersion keeps of the environment; the runtime records what createEnvironment found.
      agentUser: { name: "agent", uid: 1000, gid: 1000, home: "/home/agent" },
      networkAccess: false,
      baseline: [],
      probe: { skipped: "not recorded by this test" },
      timings: { create_ms: 0, start_ms: 0, health_ms: 0, probe_ms: 0, total_ms: 0 },
      command: "deploy-alpha",
      createdAt: new Date().toISOString(),
    };
    alpha = await createEnvironment(
      host,
      base(plan, "alpha", built.imageId, built.user),
      undefined,
      noPhases,
    );
    expect(alpha.agent).toEqual({ name: "agent", uid: 1000, gid: 1000, home: "/home/agent" });
    expect(alpha.verifierUid).toBe(1001);
    expect(alpha.probe).toMatchObject({ ok: true });
    expect(alpha.baseline.length).toBeGreaterThan(0);
    expect(double.canary.hits()).toBe(0);
    expect(gateway.hits()).toBe(0);
    const sb = alpha.sandbox;
    alphaRec.sandboxId = sb.sandboxId;
    expect(await asRoot(sb, "stat -c %u /tmp/ready")).toBe("1000\n");
    // The service's process outlived the exec that started it, as the Dockerfile's user.
    expect(
      await asRoot(
        sb,
        `for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline | grep -q "^sleep 86401" && stat -c %u $p; done`,
      ),
    ).toBe("1000\n");
    expect(await sb.getTags()).toMatchObject({
      "ai.denv.host": "h-modal-test",
      "ai.denv.environment": "mm/alpha",
      "ai.denv.service": "app",
    });
    expect(await sandboxesOfHost()).toEqual([sb.sandboxId]);
  });

  it("a version is a filesystem snapshot; a fork of it has the files and runs the service anew", async () => {
    const parent = alpha.sandbox;
    await execInModal(parent, alpha.agent, "/home/agent", {
      shell: "echo work > notes; rm /tmp/ready; sleep 300 > /dev/null 2>&1 &",
    });
    const records = await ModalRecords.open(join(home, "state"));
    const v = await captureVersion(records, parent, alphaRec, { number: 1, command: "snapshot-1" });
    expect(v).toMatchObject({
      id: "mm@v1",
      sourceEnvironment: "mm/alpha",
      imageUser: "agent",
      command: "snapshot-1",
    });
    expect(v.imageId).toMatch(/^im-/);
    expect(await records.getVersion("mm@v1")).toEqual(v);
    await expect(
      captureVersion(records, parent, alphaRec, { number: 1, command: "snapshot-2" }),
    ).rejects.toThrow("version mm@v1 exists");
    const { plan } = await project("agent");
    const fork = await createEnvironment(host, base(plan, "fork", v.imageId, v.imageUser), v.id, noPhases);
    try {
      const sleepers = `for f in /proc/[0-9]*/cmdline; do tr '\\0' ' ' < "$f" | grep -q '^sleep 300' && echo; done | wc -l`;
      expect(await asRoot(parent, sleepers)).toBe("1\n");
      const seen = await execInModal(fork.sandbox, fork.agent, "/home/agent", {
        shell: `cat notes; test -f /tmp/ready && echo ready; ${sleepers}`,
      });
      // The files are the parent's; its processes are not (the service made /tmp/ready again).
      expect(seen.stdout.toString()).toBe("work\nready\n0\n");
    } finally {
      await fork.sandbox.terminate();
      await parent.terminate();
    }
    expect(await sandboxesOfHost()).toEqual([]);
  });

  it("the egress probe is not blind: from a sandbox Modal lets out it reaches the gateway's canary and fails", async () => {
    const { built } = await project("agent");
    const open = await host.client.sandboxes.create(host.app, await host.client.images.fromId(built.imageId));
    try {
      const agent = modalUser(await open.filesystem.readText("/etc/passwd"), "agent");
      const probe = await probeFromInside(
        runAs(open, agent),
        { sandboxId: open.sandboxId, internetAllowed: false, policy: "none" },
        "app",
        [gateway],
      );
      expect(probe.ok).toBe(false);
      expect(probe.findings).toContain(EgressFindings.hostReachable("app"));
      expect(gateway.hits()).toBeGreaterThan(0);
    } finally {
      await open.terminate();
    }
  });

  it("refuses an agent user that is uid 0 under another name, and terminates the sandbox it made", async () => {
    const { plan, built } = await project("toor", " && useradd -o -u 0 -M toor");
    await expect(
      createEnvironment(host, base(plan, "toor", built.imageId, built.user), undefined, noPhases),
    ).rejects.toThrow(Protection.agentRoot("app"));
    expect(await sandboxesOfHost()).toEqual([]);
  });

  it("fails closed on an image without setpriv: the root checks cannot run as the agent", async () => {
    const { plan, built } = await project("agent", " && rm /usr/bin/setpriv");
    await expect(
      createEnvironment(host, base(plan, "nosetpriv", built.imageId, built.user), undefined, noPhases),
    ).rejects.toThrow(/^Modal: a check as user 'agent' exited 12[67]: /);
    expect(await sandboxesOfHost()).toEqual([]);
  });

  it("refuses an image whose system directories the agent may write, before the agent runs", async () => {
    // /bin is /usr/bin on Debian: the first of the system paths the check names.
    const { plan, built } = await project("agent", " && chmod 777 /usr/bin");
    await expect(
      createEnvironment(host, base(plan, "open", built.imageId, built.user), undefined, noPhases),
    ).rejects.toThrow(ProviderMessages.agentWritesSystem("app", "agent", "/bin"));
    expect(await sandboxesOfHost()).toEqual([]);
  });
});
