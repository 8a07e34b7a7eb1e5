import { execFileSync } from "node:child_process";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { App, Image, ModalClient, Sandbox, SandboxExecParams } from "modal";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type ModalDouble, startModalDouble } from "./modal-double.js";

/**
 * The Modal double driven by the official `modal` JS SDK (0.11.1), nothing mocked: sandboxes are
 * containers of debian:bookworm-slim on this machine's engine (local; never pulled). The SDK can
 * reach only the double: it reads its profile when imported, so the module is imported after
 * HOME and MODAL_CONFIG_PATH point into an empty temp dir and every MODAL_* variable but the
 * double's is gone.
 */
const docker = (...args: string[]) => execFileSync("docker", args, { encoding: "utf8" }).trim();

let double: ModalDouble;
let home: string;
let modal: typeof import("modal");
let client: ModalClient;
let app: App;
let image: Image;
/** An open sandbox, shared by the cases. */
let open: Sandbox;
const saved = { ...process.env };

beforeAll(async () => {
  home = await mkdtemp(join(tmpdir(), "denv-modal-sdk-"));
  double = await startModalDouble();
  for (const k of Object.keys(process.env)) if (k.startsWith("MODAL_")) delete process.env[k];
  Object.assign(process.env, { HOME: home, MODAL_CONFIG_PATH: join(home, ".modal.toml"), ...double.sdkEnv });
  modal = await import("modal");
  client = new modal.ModalClient();
  app = await client.apps.fromName("denv-modal-test", { createIfMissing: true });
  image = client.images.fromRegistry("debian:bookworm-slim");
  open = await client.sandboxes.create(app, image, {
    env: { FROM_CREATE: "sandbox-wide" },
    workdir: "/srv",
    tags: { suite: "modal-server", role: "open" },
  });
}, 120_000);

afterAll(async () => {
  client?.close();
  process.env = saved;
  try {
    await double?.close();
  } finally {
    await rm(home, { recursive: true, force: true });
  }
  expect(double.leftovers()).toEqual([]);
  expect(docker("ps", "-a", "-q", "--filter", "label=ai.denv.test=modal-server")).toBe("");
}, 120_000);

/** Runs argv in the sandbox; its output and exit code. */
async function run(sb: Sandbox, argv: string[], params?: SandboxExecParams & { mode?: "text" }) {
  const p = await sb.exec(argv, params);
  const [stdout, stderr] = await Promise.all([p.stdout.readText(), p.stderr.readText()]);
  return { stdout, stderr, code: await p.wait() };
}

describe("ModalServer with the modal SDK", { timeout: 90_000 }, () => {
  it("runs commands with output, exit codes, env, workdir and stdin, as the image's user", async () => {
    expect(open.sandboxId).toMatch(/^sb2-/);
    expect(await run(open, ["sh", "-c", "echo out; echo err >&2; exit 3"])).toEqual({
      stdout: "out\n",
      stderr: "err\n",
      code: 3,
    });
    const r = await run(open, ["sh", "-c", 'echo "$(pwd) $(id -u) $GREETING $FROM_CREATE"'], {
      workdir: "/tmp",
      env: { GREETING: "hello" },
    });
    expect(r.stdout).toBe("/tmp 0 hello sandbox-wide\n");
    expect((await run(open, ["pwd"])).stdout).toBe("/srv\n");

    const cat = await open.exec(["sh", "-c", "tr a-z A-Z; echo done >&2"]);
    await cat.stdin.writeText("piped in\n");
    await cat.stdin.close();
    expect(await cat.stdout.readText()).toBe("PIPED IN\n");
    expect(await cat.stderr.readText()).toBe("done\n");
    expect(await cat.wait()).toBe(0);
  });

  it("reads, writes, stats, lists and removes files through sandbox.filesystem", async () => {
    const fs = open.filesystem;
    const bytes = Uint8Array.from({ length: 256 }, (_, i) => i);
    await fs.writeBytes(bytes, "/srv/data/blob.bin");
    expect(Buffer.from(await fs.readBytes("/srv/data/blob.bin"))).toEqual(Buffer.from(bytes));
    await fs.writeText("héllo\n", "/srv/data/note.txt");
    expect(await fs.readText("/srv/data/note.txt")).toBe("héllo\n");
    expect((await run(open, ["stat", "-c", "%U %s", "/srv/data/note.txt"])).stdout).toBe("root 7\n");

    const info = await fs.stat("/srv/data/blob.bin");
    expect(info).toMatchObject({ name: "blob.bin", path: "/srv/data/blob.bin", type: "file", size: 256 });
    expect(info.permissions).toBe("rw-r--r--");
    const listed = await fs.listFiles("/srv/data");
    expect(listed.map((e) => [e.name, e.type, e.size])).toEqual([
      ["blob.bin", "file", 256],
      ["note.txt", "file", 7],
    ]);
    await fs.makeDirectory("/srv/data/sub/deeper");
    expect((await fs.stat("/srv/data/sub")).type).toBe("directory");

    await expect(fs.readText("/srv/missing")).rejects.toBeInstanceOf(modal.SandboxFilesystemNotFoundError);
    await expect(fs.readText("/srv/data")).rejects.toBeInstanceOf(modal.SandboxFilesystemIsADirectoryError);
    await expect(fs.remove("/srv/data")).rejects.toBeInstanceOf(
      modal.SandboxFilesystemDirectoryNotEmptyError,
    );
    await fs.remove("/srv/data", { recursive: true });
    expect((await run(open, ["ls", "/srv"])).stdout).toBe("");
  });

  it("kills a command at its timeout", async () => {
    const slow = await open.exec(["sleep", "60"], { timeoutMs: 2000 });
    const code = await slow.wait().catch((e: unknown) => e);
    expect(code === 137 || (code instanceof Error && /Deadline exceeded/.test(code.message))).toBe(true);
    const ps = async () => (await run(open, ["sh", "-c", "cat /proc/[0-9]*/cmdline | tr '\\0' ' '"])).stdout;
    await expect.poll(ps, { timeout: 10_000 }).not.toContain("sleep 60");
  });

  it("snapshots the filesystem; a sandbox from the snapshot sees what was written", async () => {
    await run(open, ["sh", "-c", "echo kept > /srv/state.txt"]);
    const snap = await open.snapshotFilesystem();
    expect(snap.imageId).toMatch(/^im-/);
    expect((await client.images.fromId(snap.imageId)).imageId).toBe(snap.imageId);
    const copy = await client.sandboxes.create(app, snap, { tags: { suite: "modal-server", role: "copy" } });
    try {
      expect((await run(copy, ["cat", "/srv/state.txt"])).stdout).toBe("kept\n");
      await run(copy, ["sh", "-c", "echo forked > /srv/state.txt"]);
      expect((await run(open, ["cat", "/srv/state.txt"])).stdout).toBe("kept\n");
    } finally {
      await copy.terminate();
    }
  });

  // The probe is another sandbox's listener, which an open sandbox reaches and a blocked one (on
  // no network) must not; a failed connect ends it, as bash goes on after a failed `exec 3<>`.
  it("blockNetwork: the sandbox cannot reach another sandbox's listener", async () => {
    const ip = (await run(open, ["hostname", "-I"])).stdout.trim().split(" ")[0] ?? "";
    expect(ip).toMatch(/^\d+\.\d+\.\d+\.\d+$/);
    // bash's /dev/tcp is the probe; debian:bookworm-slim has bash and perl but no nc or curl.
    const serve = await open.exec([
      "perl",
      "-MIO::Socket::INET",
      "-e",
      '$s=IO::Socket::INET->new(LocalPort=>8080,Listen=>5,ReuseAddr=>1) or die; while($c=$s->accept){print $c "hi\\n"; close $c}',
    ]);
    const probe = (target: string) =>
      `timeout 5 bash -c 'exec 3<>/dev/tcp/${target} || exit 1; read -r l <&3; echo "$l"' && echo reached || echo blocked`;
    const peer = await client.sandboxes.create(app, image, { tags: { suite: "modal-server", role: "peer" } });
    const blocked = await client.sandboxes.create(app, image, {
      blockNetwork: true,
      tags: { suite: "modal-server", role: "blocked" },
    });
    try {
      await expect
        .poll(async () => (await run(peer, ["bash", "-c", probe(`${ip}/8080`)])).stdout, { timeout: 15_000 })
        .toBe("hi\nreached\n");
      expect((await run(blocked, ["bash", "-c", probe(`${ip}/8080`)])).stdout).toBe("blocked\n");
      expect(double.canary.hits()).toBe(0);
    } finally {
      await serve.stdin.close();
      await Promise.all([peer.terminate(), blocked.terminate()]);
    }
  });

  it("lists sandboxes by tag, looks one up by id, sets tags, terminates", async () => {
    const listed: string[] = [];
    for await (const sb of client.sandboxes.list({ appId: app.appId, tags: { role: "open" } }))
      listed.push(sb.sandboxId);
    expect(listed).toEqual([open.sandboxId]);

    const again = await client.sandboxes.fromId(open.sandboxId);
    expect((await run(again, ["echo", "same"])).stdout).toBe("same\n");
    expect(await again.getTags()).toEqual({ suite: "modal-server", role: "open" });
    await again.setTags({ role: "renamed" });
    expect(await open.getTags()).toEqual({ role: "renamed" });
    expect(await open.poll()).toBeNull();

    // The V1 backend (MODAL_SANDBOX_V2=false) sends create's env as an ephemeral secret.
    process.env.MODAL_SANDBOX_V2 = "false";
    const v1 = new modal.ModalClient();
    delete process.env.MODAL_SANDBOX_V2;
    const short = await v1.sandboxes.create(app, image, {
      command: ["sh", "-c", 'test "$BACKEND" = v1 && exit 5'],
      env: { BACKEND: "v1" },
    });
    expect(short.sandboxId).toMatch(/^sb-[0-9A-Za-z]{22}$/);
    expect(await short.wait()).toBe(5);
    v1.close();
    // A sandbox's own timeout ends it with GENERIC_STATUS_TIMEOUT, which wait() reports as 124.
    const timed = await client.sandboxes.create(app, image, { timeoutMs: 2000 });
    expect(await timed.wait()).toBe(124);

    await open.terminate();
    expect(await open.wait()).toBe(137);
    const left: string[] = [];
    for await (const sb of client.sandboxes.list({ appId: app.appId })) left.push(sb.sandboxId);
    expect(left).toEqual([]);
    expect(docker("ps", "-a", "-q", "--filter", `label=ai.denv.modal.sandbox=${open.sandboxId}`)).toBe("");
  });

  it("was served by the double alone: the V2 control plane and the command router", () => {
    expect(double.server.calls).toEqual(
      expect.arrayContaining([
        "SandboxCreateV2",
        "SandboxCreate",
        "TaskExecStart",
        "TaskExecStdinWriteStream",
      ]),
    );
    expect(double.canary.hits()).toBe(0);
  });

  it("refuses a wrong token with UNAUTHENTICATED", async () => {
    const wrong = new modal.ModalClient({ tokenId: double.connection.tokenId, tokenSecret: "as-wrong" });
    const err = await wrong.apps.fromName("denv-modal-test").catch((e: unknown) => e);
    expect(String(err)).toMatch(/UNAUTHENTICATED|Invalid token/);
    wrong.close();
  });
});
