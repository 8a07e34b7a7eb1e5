import { execFileSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { chmod, mkdir, mkdtemp, rm, symlink, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { DenvError, ProviderMessages } from "@denv/spec";
import type { App, ModalClient, Sandbox } from "modal";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { MAX_PACKED_CONTEXT } from "./modal-dockerfile.js";
import { buildModalImage } from "./modal-images.js";
import { type ModalDouble, startModalDouble } from "./testing/modal-double.js";

/**
 * Images of a service built through Modal's image API by the official `modal` SDK (0.11.1), as
 * the Modal double serves it: `docker build` on this machine's engine, its RUN steps on no
 * network, bases never pulled. The SDK is imported once HOME and MODAL_* point only at the double
 * (it reads its profile when imported).
 */
const docker = (...args: string[]) => execFileSync("docker", args, { encoding: "utf8" }).trim();

let double: ModalDouble;
let home: string;
let project: string;
let client: ModalClient;
let app: App;
const saved = { ...process.env };

beforeAll(async () => {
  home = await mkdtemp(join(tmpdir(), "denv-modal-images-"));
  project = join(home, "project");
  double = await startModalDouble();
  for (const k of Object.keys(process.env)) if (k.startsWith("MODAL_")) delete process.env[k];
  Object.assign(process.env, { HOME: home, MODAL_CONFIG_PATH: join(home, ".modal.toml"), ...double.sdkEnv });
  const modal = await import("modal");
  client = new modal.ModalClient();
  app = await client.apps.fromName("denv-modal-images", { createIfMissing: true });
}, 60_000);

afterAll(async () => {
  client?.close();
  process.env = saved;
  try {
    await double?.close();
  } finally {
    await rm(home, { recursive: true, force: true });
  }
  expect(double.leftovers()).toEqual([]);
  expect(docker("images", "-q", "--filter", `label=ai.denv.modal.server=${double.server.id}`)).toBe("");
}, 120_000);

/** A project folder `dir` under the test's home with these files (a name ending in / is a directory). */
async function folder(dir: string, files: Record<string, string>): Promise<string> {
  const root = join(project, dir);
  for (const [name, content] of Object.entries(files)) {
    const path = join(root, name);
    await mkdir(name.endsWith("/") ? path : join(path, ".."), { recursive: true });
    if (!name.endsWith("/")) await writeFile(path, content);
  }
  return root;
}

const service = (dir: string) => ({ name: "app", build: { context: dir, dockerfile: "Dockerfile" } });

async function run(sb: Sandbox, script: string): Promise<string> {
  const p = await sb.exec(["sh", "-c", script]);
  const [out, err] = await Promise.all([p.stdout.readText(), p.stderr.readText()]);
  const code = await p.wait();
  if (code !== 0) throw new Error(`exit ${code}: ${err}`);
  return out;
}

describe("buildModalImage through the modal SDK", { timeout: 120_000 }, () => {
  it("builds a service's Dockerfile with its COPY files, users and modes, on no network; the same files reuse the image", async () => {
    const ctx = await folder("copying", {
      Dockerfile: [
        "# a comment, and a continued RUN",
        "FROM debian:bookworm-slim",
        "RUN useradd --uid 1000 --create-home user \\",
        " && mkdir /srv/data",
        'RUN test "$(ls /sys/class/net)" = lo',
        "ENV TARGET=/opt/target",
        "COPY seed.sql /usr/local/share/shop/seed.sql",
        "USER user",
        "COPY --chown=user workspace/ /workspace/",
        "COPY --chmod=0750 bin/tool $TARGET/",
        "COPY one.txt two.txt /srv/data",
        "WORKDIR /workspace",
      ].join("\n"),
      "seed.sql": "create table t (x int);\n",
      "workspace/app.py": "print('hi')\n",
      "workspace/.hidden": "dot\n",
      "workspace/pkg/mod.py": "x = 1\n",
      "bin/tool": "#!/bin/sh\necho tool\n",
      "one.txt": "1\n",
      "two.txt": "2\n",
    });
    await chmod(join(ctx, "workspace/app.py"), 0o755);
    await symlink("app.py", join(ctx, "workspace/link.py"));
    const built = await buildModalImage(client, app, { projectDir: project, service: service("copying") });
    const id = built.imageId;
    expect(built).toEqual({ imageId: expect.stringMatching(/^im-/), user: "user" });
    expect(double.server.calls).toEqual(expect.arrayContaining(["ImageGetOrCreate", "ImageJoinStreaming"]));

    const sb = await client.sandboxes.create(app, await client.images.fromId(id));
    try {
      // The file's USER is returned for the service; the sandbox's commands run as root.
      expect(await run(sb, "id -un; pwd")).toBe("root\n/workspace\n");
      expect(
        await run(sb, "cat /usr/local/share/shop/seed.sql; stat -c '%U %a' /usr/local/share/shop/seed.sql"),
      ).toBe("create table t (x int);\nroot 644\n");
      expect(
        await run(sb, "cd /workspace && stat -c '%n %U:%G %a %F' . app.py .hidden pkg pkg/mod.py link.py"),
      ).toBe(
        [
          ". user:user 755 directory",
          "app.py user:user 755 regular file",
          ".hidden user:user 644 regular file",
          "pkg user:user 755 directory",
          "pkg/mod.py user:user 644 regular file",
          "link.py user:user 777 symbolic link",
          "",
        ].join("\n"),
      );
      expect(
        await run(sb, "readlink /workspace/link.py; /opt/target/tool; stat -c '%U %a' /opt/target/tool"),
      ).toBe("app.py\ntool\nroot 750\n");
      expect(
        await run(sb, "cat /srv/data/one.txt /srv/data/two.txt; ls -A / | grep -c denv-context || true"),
      ).toBe("1\n2\n0\n");
    } finally {
      await sb.terminate();
    }
    expect(await buildModalImage(client, app, { projectDir: project, service: service("copying") })).toEqual(
      built,
    );
  });

  it("starts an image: from the registry name as it is", async () => {
    const built = await buildModalImage(client, app, {
      projectDir: project,
      service: { name: "app", image: "debian:bookworm-slim" },
    });
    expect(built).toEqual({ imageId: expect.stringMatching(/^im-/) });
  });

  it("fails in one line naming the build and Modal's words", async () => {
    await folder("failing", { Dockerfile: "FROM debian:bookworm-slim\nRUN echo building; exit 3\n" });
    const err = await buildModalImage(client, app, {
      projectDir: project,
      service: service("failing"),
    }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(DenvError);
    const message = (err as Error).message;
    expect(message).toMatch(/^Modal's image build im-\S+ of service 'app' failed: .*non-zero code: 3$/);
    expect(message).not.toContain("\n");

    await folder("unpulled", { Dockerfile: "FROM denv-modal-missing:1\nRUN true\n" });
    const missing = await buildModalImage(client, app, {
      projectDir: project,
      service: service("unpulled"),
    }).catch((e: unknown) => e);
    expect((missing as Error).message).toMatch(
      /^Modal's image build im-\S+ of service 'app' failed: the Modal double has no image denv-modal-missing:1 \(it never pulls\)$/,
    );
  });

  it("refuses what Modal's image API cannot build, before calling it", async () => {
    const refused = async (dir: string, files: Record<string, string>) => {
      await folder(dir, files);
      const before = double.server.calls.length;
      const err = await buildModalImage(client, app, { projectDir: project, service: service(dir) }).catch(
        (e: unknown) => e,
      );
      expect(double.server.calls.slice(before)).toEqual([]);
      return (err as Error).message;
    };
    expect(
      await refused("stages", {
        Dockerfile:
          "FROM debian:bookworm-slim AS venv\nRUN true\nFROM debian:bookworm-slim\nCOPY --from=venv /etc/hostname /x\n",
      }),
    ).toBe(
      ProviderMessages.unbuildableStep(
        "Modal",
        "app",
        "a second FROM",
        "Modal builds one stage: FROM and its commands",
      ),
    );
    expect(
      await refused("adding", { Dockerfile: "FROM debian:bookworm-slim\nADD a.tar /x/\n", "a.tar": "" }),
    ).toBe(
      ProviderMessages.unbuildableStep(
        "Modal",
        "app",
        "ADD",
        "denv carries COPY's files into Modal's build, not ADD's",
      ),
    );
    expect(
      await refused("climbing", { Dockerfile: "FROM debian:bookworm-slim\nCOPY ../copying/one.txt /x\n" }),
    ).toBe(
      ProviderMessages.unbuildableStep(
        "Modal",
        "app",
        "COPY ../copying/one.txt",
        "the source is outside the build context",
      ),
    );
    const big = await folder("big", { Dockerfile: "FROM debian:bookworm-slim\nCOPY blob /blob\n" });
    await writeFile(join(big, "blob"), randomBytes(MAX_PACKED_CONTEXT + 1024));
    expect(await refused("big", {})).toMatch(
      /^refused: the Dockerfile of service 'app' has COPY sources packing to \d+ bytes, which Modal's image API cannot build \(the SDK sends no build context, and Dockerfile commands carry at most 3145728 bytes of files\); /,
    );
  });

  it("stops waiting when aborted, with the signal's reason", async () => {
    await folder("slow", { Dockerfile: "FROM debian:bookworm-slim\nRUN sleep 4\n" });
    const stop = new AbortController();
    const started = Date.now();
    setTimeout(() => stop.abort(new DOMException("stop", "AbortError")), 500);
    const err = await buildModalImage(
      client,
      app,
      { projectDir: project, service: service("slow") },
      { signal: stop.signal },
    ).catch((e: unknown) => e);
    expect((err as Error).name).toBe("AbortError");
    expect(Date.now() - started).toBeLessThan(3_000);
  });
});
