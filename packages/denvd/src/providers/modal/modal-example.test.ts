import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { deployPlan } from "../../project-loader.js";
import { noPhases } from "../../runtime/phase-listener.js";
import { execInModal } from "./modal-exec.js";
import { readModalArchive } from "./modal-files.js";
import { buildModalImage } from "./modal-images.js";
import { createEnvironment, type ModalHost } from "./modal-materialize.js";
import { type ModalDouble, startModalDouble } from "./testing/modal-double.js";

/**
 * examples/quickstart-single, a real environment, on Modal as far as the Modal target goes today:
 * its Dockerfile (python3 from Debian's mirrors, COPY of a file and of a directory --chown=user,
 * ENV, USER, WORKDIR) built through Modal's image API by the `modal` SDK, its sandbox made from
 * the image with the shop API started as uid 1000 and healthy, exec and files as the agent. The
 * Modal double's builds get the engine's network here, as Modal's builder has one: the
 * Dockerfile installs python3 (its sandboxes still reach nothing).
 */
const EXAMPLE = fileURLToPath(new URL("../../../../../examples/quickstart-single", import.meta.url));

let double: ModalDouble;
let home: string;
let host: ModalHost;
const saved = { ...process.env };

beforeAll(async () => {
  home = await mkdtemp(join(tmpdir(), "denv-modal-example-"));
  double = await startModalDouble({ buildNetwork: "default" });
  for (const k of Object.keys(process.env)) if (k.startsWith("MODAL_")) delete process.env[k];
  Object.assign(process.env, { HOME: home, MODAL_CONFIG_PATH: join(home, ".modal.toml"), ...double.sdkEnv });
  const modal = await import("modal");
  const client = new modal.ModalClient();
  host = {
    hostId: "h-modal-example",
    client,
    app: await client.apps.fromName("denv-h-modal-example", { createIfMissing: true }),
    canaries: [{ host: double.canary.host, port: double.canary.port }],
    log: () => undefined,
  };
}, 60_000);

afterAll(async () => {
  host?.client.close();
  process.env = saved;
  try {
    await double?.close();
  } finally {
    await rm(home, { recursive: true, force: true });
  }
  expect(double.leftovers()).toEqual([]);
}, 120_000);

describe("examples/quickstart-single through the Modal target's pieces", { timeout: 300_000 }, () => {
  it("builds, starts healthy as uid 1000, and serves exec and files to the agent", async () => {
    const plan = deployPlan("quickstart-single", EXAMPLE, {});
    const service = plan.services[0];
    if (!service?.build) throw new Error("quickstart-single's app has a build");
    const built = await buildModalImage(host.client, host.app, { projectDir: EXAMPLE, service });
    expect(built.user).toBe("user");
    const env = await createEnvironment(
      host,
      {
        id: "quickstart-single/main",
        project: "quickstart-single",
        name: "main",
        plan,
        command: "deploy-1",
        imageId: built.imageId,
        imageUser: built.user,
      },
      undefined,
      noPhases,
    );
    try {
      expect(env.agent).toMatchObject({ name: "user", uid: 1000 });
      expect(env.probe).toMatchObject({ ok: true });
      const health = await execInModal(env.sandbox, env.agent, "/workspace", {
        cmd: [
          "python3",
          "-c",
          "import urllib.request; print(urllib.request.urlopen('http://127.0.0.1:8080/health', timeout=2).status)",
        ],
      });
      expect(health.stdout.toString()).toBe("200\n");
      const who = await execInModal(env.sandbox, env.agent, "/workspace", {
        shell: "id -u; stat -c '%U %G %a' /workspace/app /var/lib/shop/shop.db",
      });
      expect(who.stdout.toString()).toBe("1000\nuser user 755\nroot shop 660\n");
      await using archive = await readModalArchive(env.sandbox, env.agent, "/workspace/app");
      expect(archive.entries).toBeGreaterThan(1);
    } finally {
      await env.sandbox.terminate();
    }
  });
});
